"""Path-specific effects (TE, NDE, NIE, BIE, RIE) by the cross-fitted, doubly robust DML-UCA estimator.

Standard fairness model: protected X (levels x0, x1), confounders Z, business-necessity mediators B,
redlining proxies R, outcome Y (a 0-100 score or a 0/1 callback). Every effect is a contrast
(`popfair.estimate.pse.sfm.CONTRASTS`) of five counterfactual means

    psi(x_y, x_b, x_r) = E[ Y_{x_y, B_{x_b, R_{x_r}}, R_{x_r}} ]

each estimated as the mean of a cross-fitted doubly robust score (`popfair.estimate.pse.dml.scores`).

Inference (`popfair.estimate.inference.mean_inference`): influence-function standard errors (std of
the per-row scores / sqrt(n), cluster-robust with `cluster`), and percentile CIs from bootstrap
resamples of the cross-fitted score rows (or of whole clusters); the nuisances are not refit inside
the bootstrap. `n_splits` > 1 repeats the cross-fitting on that many fold assignments and averages
them, with Chernozhukov et al.'s (2018) mean-aggregation variance; "auto" (the default) is 1 split
for scores, as the paper, and 5 for 0/1 outcomes. An effect whose CI excludes 0 is significant; the significance pattern gives the
paper's section 5.2 pattern labels (`popfair.estimate.pse.sfm.pattern_labels`).

This module is the entry point (`estimate_pse`) and the `estimator=pse_dml` adapter.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.constraints import ParameterError
from popfair.core.errors import EstimationError
from popfair.core.types import Effects, Plot, Roles
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.inference import mean_inference
from popfair.estimate.pse.dml.scores import clear_tuning_cache, dml_scores
from popfair.estimate.pse.estimand import coarse_metrics, coarse_notes
from popfair.estimate.pse.identification import IdentificationRule, gate, mean_problems
from popfair.estimate.pse.settings import PSE_CONSTRAINTS, PseOverlapWarning, PseSettings, TuningGrid
from popfair.estimate.pse.sfm import COARSE_CONTRASTS, COARSE_EFFECTS, CONTRASTS, EFFECTS, TARGETS, pattern_labels

__all__ = [
    "PseDml",
    "PseOverlapWarning",
    "PseResult",
    "PseSettings",
    "TuningGrid",
    "clear_tuning_cache",
    "estimate_pse",
]


@dataclass
class PseResult:
    """Output of `estimate_pse`.

    Parameters
    ----------
    table : DataFrame
        Effects (TE, NDE, NIE, BIE, RIE) x estimate, se, ci_low, ci_high, p_value, significant.
    means : DataFrame
        The five counterfactual means psi with the same columns.
    labels : list of str
        The section 5.2 discrimination patterns that hold (several may); `case` joins them.
    overlap : DataFrame
        Per propensity model and per target, clipped counts and largest weights.
    tuning : DataFrame
        Chosen hyperparameters and validation loss per nuisance (and whether from the cache).
    scores : DataFrame
        The cross-fitted per-row scores phi (one column per counterfactual mean).
    timings : dict
        Seconds per step (encoding, tuning, cross-fitting, bootstrap).
    n : int
        Rows used.
    n_excluded : int
        Rows left out (missing outcome or role values).
    n_clusters : int, optional
        Clusters resampled, with `cluster` set.
    notes : list of str, optional
        Caveats (poor overlap, pooled categories, ...).
    n_splits : int, default 1
        Fold assignments cross-fit and averaged (n_splits="auto": 5 for 0/1 outcomes, else 1).
    identification : DataFrame, optional
        Per counterfactual mean: weight masses, effective sample size, crossing applicants, clipped
        share, `identified` and `reason` (`popfair.estimate.pse.identification`).
    sensitivity : DataFrame, optional
        Per clipping bound and effect: estimate and SE from the same nuisances, identified or not.
    coarse : DataFrame, optional
        The coarser split (`popfair.estimate.pse.sfm.COARSE_EFFECTS`: the qualification path BIE_coarse
        and everything else, TE_minus_BIE) with the effects' columns, from the same bootstrap and
        gated by the same rule; it needs one mixing mean, psi(x1, x0, x1), instead of three.
    """

    table: pd.DataFrame
    means: pd.DataFrame
    labels: list[str]
    overlap: pd.DataFrame
    tuning: pd.DataFrame
    scores: pd.DataFrame
    timings: dict[str, float]
    n: int
    n_excluded: int
    n_clusters: int | None = None
    notes: list[str] = field(default_factory=list)
    n_splits: int = 1  # fold assignments cross-fit and averaged (n_splits="auto": 5 for 0/1 outcomes, else 1)
    identification: pd.DataFrame | None = None  # per counterfactual mean: masses, ESS, crossing, identified, reason
    sensitivity: pd.DataFrame | None = None  # clip x effect: estimate, se, identified at that bound
    coarse: pd.DataFrame | None = None  # the coarser split (sfm.COARSE_EFFECTS), gated by the same rule

    @property
    def pattern(self) -> str:
        """The PopResume discrimination patterns (section 5.2) the effects show, or "none"."""
        return "; ".join(self.labels) if self.labels else "none"

    def plot(self, title: str = "Path-specific effects") -> Plot:
        """The five effects with their CIs (`popfair.track.figures.draw` makes the Figure).

        Parameters
        ----------
        title : str, default "Path-specific effects"
            The figure's title.

        Returns
        -------
        Plot
            A forest plot as data.
        """
        return Plot("forest", self.table, title)


# --------------------------------------------------------------------------------------------
# Public entry point


def estimate_pse(
    data: pd.DataFrame,
    *,
    x: str,
    x0: str,
    x1: str,
    z: Sequence[str],
    b: Sequence[str],
    r: Sequence[str],
    y: str,
    **settings: Any,
) -> PseResult:
    """Estimate TE, NDE, NIE, BIE, RIE of X on Y (positive favours x1) with DML-UCA.

    Parameters
    ----------
    data : DataFrame
        Raw columns, one row per applicant. String/categorical/bool columns are one-hot encoded
        (the `max_categories - 1` most frequent levels, the rest pooled as "other"), numeric
        columns kept. Rows whose X is neither x0 nor x1, or whose Y is missing, are excluded
        (counted in `n_excluded`).
    x, x0, x1 : str
        The protected attribute's column and its two contrasted levels.
    z, b, r : sequence of str
        Confounders Z, business-necessity mediators B and redlining proxies R (B and R non-empty).
    y : str
        Outcome column (a 0-100 score or a 0/1 callback).
    **settings
        Fields of `PseSettings`: folds=5, n_bootstrap=500, seed=0, alpha=0.05, clip=0.01, grid
        (the paper's C.5 grid), validation_fraction=0.2, max_categories=32, max_bin=64, n_jobs=1 (threads;
        None = every CPU; results do not depend on it), cluster=None (a column: cluster bootstrap and cluster-robust SEs), cache_dir=None.

    Returns
    -------
    PseResult
        `table`: effects TE, NDE, NIE, BIE, RIE x estimate, se, ci_low, ci_high, p_value,
        significant, case; `means`: the five counterfactual means; `labels` / `case`: the
        section 5.2 discrimination patterns; `overlap`, `tuning`, `scores`, `timings`, `n`.

    Raises
    ------
    EstimationError
        Data that cannot support the estimate (missing columns, absent levels, constant Y, a fold
        without x0 or x1 rows, missing role values) or an invalid setting.

    Examples
    --------
    >>> from popfair import estimate_pse
    >>> from popfair.estimate.pse.simulate import SimulatedSFM
    >>> sim = SimulatedSFM()
    >>> data = sim.sample(3000, seed=1)
    >>> result = estimate_pse(data, x0=sim.x0, x1=sim.x1, y="y", n_bootstrap=200, **sim.roles)  # doctest: +SKIP
    >>> result.table.loc["TE", ["estimate", "ci_low", "ci_high"]]  # doctest: +SKIP
    >>> result.pattern  # doctest: +SKIP
    """
    try:
        checked = PseSettings.build(settings)
    except ParameterError as exc:  # a bad argument of this function, not of a config
        raise EstimationError(str(exc)) from None
    return _estimate(data, Roles(x=x, x0=x0, x1=x1, z=tuple(z), b=tuple(b), r=tuple(r)), y, checked)


def _estimate(data: pd.DataFrame, roles: Roles, y: str, settings: PseSettings) -> PseResult:
    scores = dml_scores(data, roles, y, settings)
    clock = time.perf_counter()
    both, n_clusters = mean_inference(
        np.concatenate(
            [scores.phi_splits, scores.phi_splits @ CONTRASTS.T, scores.phi_splits @ COARSE_CONTRASTS.T], axis=2
        ),
        list(TARGETS) + list(EFFECTS) + list(COARSE_EFFECTS),
        alpha=settings.alpha,
        n_bootstrap=settings.n_bootstrap,
        cluster=scores.cluster,
        rng=np.random.default_rng([settings.seed, 3]),
    )
    means = both.iloc[: len(TARGETS)].copy()
    table = both.iloc[len(TARGETS) : len(TARGETS) + len(EFFECTS)].copy()
    coarse = both.iloc[len(TARGETS) + len(EFFECTS) :].copy()
    timings = {**scores.timings, "bootstrap": time.perf_counter() - clock}
    rule = IdentificationRule(settings.max_mass_error, settings.min_ess, settings.min_crossing)
    groups = (str(roles.x0), str(roles.x1))
    problems = mean_problems(scores.identification, rule, groups)  # judged always, applied with gate=True
    table = gate(table, problems if settings.gate else {}, len(scores.phi))
    coarse = gate(coarse, problems if settings.gate else {}, len(scores.phi), COARSE_EFFECTS, COARSE_CONTRASTS)
    identification = scores.identification.assign(
        identified=[t not in problems for t in scores.identification.index],
        reason=[problems.get(t, "") for t in scores.identification.index],
    )
    sensitivity = _sensitivity_table(scores.sensitivity, rule, groups, settings)
    labels = pattern_labels(table)
    table["pattern"] = "; ".join(labels) if labels else "none"
    return PseResult(
        table=table,
        means=means,
        labels=labels,
        overlap=scores.overlap,
        tuning=scores.tuning,
        scores=pd.DataFrame(scores.phi, columns=list(TARGETS)),
        timings=timings,
        n=len(scores.phi),
        n_excluded=scores.n_excluded,
        n_clusters=n_clusters,
        notes=scores.notes,
        n_splits=len(scores.phi_splits),
        identification=identification,
        sensitivity=sensitivity,
        coarse=coarse,
    )


def _sensitivity_table(
    raw: pd.DataFrame, rule: IdentificationRule, groups: tuple[str, str], settings: PseSettings
) -> pd.DataFrame:
    """clip x effect: estimate and SE with the same nuisances, and whether the rule identifies it
    at that bound (the numbers are shown for every bound: this table is the diagnosis, not the finding)."""
    rows = []
    for clip, block in raw.groupby("clip", sort=True):
        problems = mean_problems(block["diagnostics"].iloc[0], rule, groups)
        judged = gate(block.set_index("effect")[["estimate"]].assign(se=block["se"].to_numpy()), problems, 0)
        for effect, row in block.set_index("effect").iterrows():
            rows.append(
                {
                    "clip": float(clip),
                    "effect": effect,
                    "estimate": float(row["estimate"]),
                    "se": float(row["se"]),
                    "identified": bool(judged.loc[effect, "identified"]),
                    "case_clip": bool(np.isclose(float(clip), settings.clip)),
                }
            )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# Estimator for the `estimator=pse_dml` config group


class PseDml:
    """`estimator=pse_dml`: DML-UCA path-specific effects with bootstrap CIs and pattern labels.
    Takes the `PseSettings` fields as keywords."""

    name = "pse_dml"
    counterfactuals = None  # a function of the factual scored table alone: no counterfactual worlds
    parameter_constraints = PSE_CONSTRAINTS

    def __init__(self, **settings: Any) -> None:
        self.settings = PseSettings.build(settings)

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        result = _estimate(data, roles, y, self.settings)
        metrics = {
            "pse.n": float(result.n),
            "pse.n_excluded": float(result.n_excluded),
            "pse.n_splits": float(result.n_splits),
        }
        metrics.update({f"time.pse_{k}_s": v for k, v in result.timings.items()})
        weights = result.overlap[result.overlap["kind"] == "weight"]
        metrics["pse.max_weight"] = float(weights["max"].max())
        metrics["pse.share_clipped"] = float(
            result.overlap.loc[result.overlap["kind"] == "propensity", "share_clipped"].max()
        )
        title = f"{roles.x}: {roles.x1} vs {roles.x0} (positive favours {roles.x1})"
        artifacts: dict[str, Any] = {
            "pse_forest.png": result.plot(title),
            "pse_means.csv": result.means,
            "pse_overlap.csv": result.overlap,
            "pse_tuning.csv": result.tuning,
        }
        if result.identification is not None:
            artifacts["pse_identification.csv"] = result.identification
            metrics["pse.identified_effects"] = float(result.table["identified"].sum())
            for target, row in result.identification.iterrows():
                key = re.sub(r"[^0-9A-Za-z]+", "_", str(target)).strip("_")
                metrics[f"pse.ess.{key}"] = float(row["ess"])
                metrics[f"pse.mass_pi3.{key}"] = float(row["mass_pi3"])
                if np.isfinite(row["crossing"]):
                    metrics[f"pse.crossing.{key}"] = float(row["crossing"])
        if result.sensitivity is not None:
            artifacts["pse_clip_sensitivity.csv"] = result.sensitivity
        if result.coarse is not None:
            artifacts["pse_coarse.csv"] = result.coarse
            metrics.update(coarse_metrics(result.coarse))
        notes = list(result.notes) + [r for r in result.table["reason"] if r]
        if notes:
            artifacts["pse_notes.txt"] = "\n".join(notes)
        table = result.table[EFFECT_COLUMNS + [c for c in result.table if c not in EFFECT_COLUMNS]]
        offered = coarse_notes(result.table, result.coarse, str(roles.x0), str(roles.x1))
        return Effects(table=table, labels=result.labels, metrics=metrics, artifacts=artifacts, notes=offered)
