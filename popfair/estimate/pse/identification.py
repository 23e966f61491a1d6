"""Whether the data identify each path-specific effect at this n: weight diagnostics, the stated rule, the gate.

DML-UCA estimates each counterfactual mean psi(x_y, x_b, x_r) (`popfair.estimate.pse.sfm.TARGETS`) by
reweighting the rows of group x_y to look like group x_b in B and like group x_r in R
(`popfair.estimate.pse.dml.scores`). A mean that mixes groups rests on the "crossing" applicants: rows of x_y
whose covariates look like the other group (for nurse x gender, men with female-typical names).
When there are few of them, propensities are clipped, the weights lose their mass and the outcome
model extrapolates; the estimate and its CI then describe the model, not the screener.

The rule (docs/concepts/identification.md), per counterfactual mean, on the cross-fitted weights
pi3 (the weight of each row's residual) and pi2 (the middle term), worst over fold assignments:

1. weight mass: |mean(pi3) - 1| and |mean(pi2) - 1| at most `max_mass_error` (0.1). Correct weights
   average 1; clipping or extrapolation moves the mass away, and that share of the estimate is the
   outcome model's guess. A mean within one group (E[Y_x0], E[Y_x1]) is held to it only where more
   than 1% of its rows used a clipped propensity.
2. for a mean that mixes groups, the effective sample size of pi3, (sum w)^2 / sum w^2, at least
   `min_ess` (200); a mean within one group (E[Y_x0], E[Y_x1]) rests on that group's own rows.
3. crossing applicants, for a mean that mixes groups, at least `min_crossing` (50): rows of x_y whose
   held-out propensity gives the other group a higher probability than its share of all rows (given
   B, R, Z when x_b differs from x_y; given R, Z when only x_r does): the applicants whose covariates
   are more typical of the other group than average, on whom the mean rests.

An effect is identified when every mean it contrasts (nonzero coefficient in `CONTRASTS`) passes.
An unidentified effect keeps no estimate, CI, p-value or significance (NaN / False), and no case
label that depends on it is given (`LABEL_DEPENDS`); `reason` says why in plain words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS

NUMBER_COLUMNS = ("estimate", "se", "ci_low", "ci_high", "p_value")


@dataclass(frozen=True)
class IdentificationRule:
    """Thresholds of the rule above (config `estimator.identification`)."""

    max_mass_error: float = 0.1
    min_ess: float = 200.0
    min_crossing: int = 50

    @classmethod
    def build(cls, values: object) -> IdentificationRule:
        if values is None:
            return cls()
        if isinstance(values, IdentificationRule):
            return values
        return cls(**dict(values))  # type: ignore[call-overload]


def mean_diagnostics(
    a: np.ndarray, pi2: np.ndarray, pi3: np.ndarray, crossing: np.ndarray, clipped: np.ndarray
) -> pd.DataFrame:
    """Per counterfactual mean (rows: TARGETS) from one cross-fit: weight masses, ESS of pi3, crossing
    applicants (NaN for a mean within one group) and the share of x_y rows whose weight used a clipped
    propensity. `pi2`, `pi3`, `crossing`, `clipped`: n x len(TARGETS); `a`: 0/1 group per row."""
    rows = []
    for j, (target, (v, w, u)) in enumerate(TARGETS.items()):
        weight = pi3[:, j]
        ess = float(np.square(weight.sum())) / max(float(np.square(weight).sum()), 1e-300)
        own = a == v
        rows.append(
            {
                "mean": target,
                "mass_pi3": float(weight.mean()),
                "mass_pi2": float(pi2[:, j].mean()),
                "ess": ess,
                "crossing": float(crossing[own, j].sum()) if (v != w or w != u) else np.nan,
                "share_clipped": float(clipped[own, j].mean()) if own.any() else np.nan,
            }
        )
    return pd.DataFrame(rows).set_index("mean")


def worst(diagnostics: list[pd.DataFrame]) -> pd.DataFrame:
    """The least favourable value of each diagnostic over fold assignments."""
    stacked = pd.concat(diagnostics, keys=range(len(diagnostics)))
    grouped = stacked.groupby(level=1, sort=False)
    out = pd.DataFrame(
        {
            "mass_pi3": grouped["mass_pi3"].agg(lambda s: s.loc[(s - 1).abs().idxmax()]),
            "mass_pi2": grouped["mass_pi2"].agg(lambda s: s.loc[(s - 1).abs().idxmax()]),
            "ess": grouped["ess"].min(),
            "crossing": grouped["crossing"].min(),
            "share_clipped": grouped["share_clipped"].max(),
        }
    )
    return out.reindex(list(TARGETS))


def mean_problems(diagnostics: pd.DataFrame, rule: IdentificationRule, groups: tuple[str, str]) -> dict[str, str]:
    """Target mean -> plain-words reason it fails the rule (absent when it passes)."""
    problems: dict[str, str] = {}
    for target, row in diagnostics.iterrows():
        v = TARGETS[str(target)][0]
        reasons = []
        if np.isfinite(row["crossing"]) and row["crossing"] < rule.min_crossing:
            reasons.append(
                f"only {int(row['crossing'])} {groups[v]} applicants have covariates more typical of "
                f"{groups[1 - v]} than average (need {rule.min_crossing})"
            )
        mixing = np.isfinite(row["crossing"])
        for term in ("pi3", "pi2"):
            mass = row[f"mass_{term}"]
            # a mean within one group is gated on mass only where clipping touched its rows
            if abs(mass - 1) > rule.max_mass_error and (mixing or row["share_clipped"] > 0.01):
                reasons.append(
                    f"its weights ({term}) average {mass:.2f} instead of 1, so about "
                    f"{min(abs(1 - mass), 1):.0%} of it is the outcome model extrapolating"
                )
                break
        if mixing and row["ess"] < rule.min_ess:  # a mean within one group rests on its own rows
            reasons.append(f"effective sample size {row['ess']:.0f} (need {rule.min_ess:.0f})")
        if reasons:
            problems[str(target)] = f"{target}: " + "; ".join(reasons)
    return problems


NOT_IDENTIFIED_AT, PROBLEM_SEPARATOR = "not identified at n=", " | "
HINT = " (estimator=counterfactual, the default of population cases, measures it on counterfactual resumes)"


def reason_problems(reason: str) -> list[str]:
    """The failing means named in a `gate` reason, each as "<mean>: <why>" (empty when identified),
    so a reader can say once what several effects share."""
    if not reason.startswith(NOT_IDENTIFIED_AT):
        return []
    body = reason.split(": ", 1)[1].removesuffix(HINT)
    return body.split(PROBLEM_SEPARATOR)


def gate(
    table: pd.DataFrame,
    problems: dict[str, str],
    n: int,
    effects: tuple[str, ...] = EFFECTS,
    contrasts: np.ndarray = CONTRASTS,
) -> pd.DataFrame:
    """The effects table with `identified` and `reason`; unidentified effects lose their numbers.
    `effects` / `contrasts`: the rows and their coefficients on TARGETS (default the five effects;
    `sfm.COARSE_EFFECTS` / `COARSE_CONTRASTS` for the coarser split)."""
    table = table.copy()
    identified, reasons = [], []
    for i in range(len(effects)):
        needed = [t for t, c in zip(TARGETS, contrasts[i]) if c != 0 and t in problems]
        identified.append(not needed)
        reasons.append(
            ""
            if not needed
            else f"{NOT_IDENTIFIED_AT}{n}: " + PROBLEM_SEPARATOR.join(problems[t] for t in needed) + HINT
        )
    table["identified"] = pd.Series(identified, index=list(effects)).reindex(table.index).fillna(True).astype(bool)
    table["reason"] = pd.Series(reasons, index=list(effects)).reindex(table.index).fillna("")
    hidden = ~table["identified"]
    for column in NUMBER_COLUMNS:
        if column in table:
            table.loc[hidden, column] = np.nan
    if "significant" in table:
        table["significant"] = table["significant"].astype(bool) & table["identified"]
    return table
