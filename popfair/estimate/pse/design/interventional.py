"""Interventional path-specific effects: score each sampled applicant's counterfactual resumes.

We own the data-generating process (the PopResume SCM) and can query the screener, so the five
counterfactual means of the PSE estimand

    psi(x_y, x_b, x_r) = E[ Y_{x_y, B_{x_b, R_{x_r}}, R_{x_r}} ]

are measured directly instead of estimated from observational data. The estimator declares the
worlds it needs (`design`: the five worlds psi(x0,x0,x0), psi(x1,x1,x1), psi(x1,x0,x0),
psi(x1,x0,x1), psi(x1,x1,x0) for n sampled applicants, one seed); the population draws them with
common random numbers (Z and every noise term fixed), and the case's renderer and screener treat
them like the factual resumes, in the same pass and through the same response cache (a
counterfactual document equal to a factual one, such as an applicant's own world, costs nothing).
TE, NDE, NIE, BIE and RIE are means of within-applicant contrasts (`popfair.estimate.pse.sfm.CONTRASTS`,
so TE = NDE + NIE and NIE = BIE + RIE hold per applicant) with paired CIs: a t interval on the
per-applicant contrasts (default) or a percentile bootstrap over applicants.

The result is model-free and design-based for the actual black-box screener; `estimator=both`
(`SideBySide`) puts it next to the observational DML-UCA estimate of the same case as a check.

Target population: the applicants whose X is x0 or x1, unweighted, as the observational estimator
uses. With `n` smaller than that, a seeded sample without replacement is drawn, and the CIs (which
ignore the finite-population correction) are slightly conservative for it.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Interval, Options, Rules, validate
from popfair.core.errors import EstimationError
from popfair.core.types import FACTUAL, WORLD, Effects, Plot, Roles, WorldRequest
from popfair.estimate.base import contrast_rows
from popfair.estimate.inference import ALPHA, CI_METHODS, N_BOOTSTRAP, SEED, mean_inference
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS, pattern_labels

log = logging.getLogger("popfair")

MAX_N = 1_000_000
METRIC_PREFIX = "intv"


class Interventional:
    """`estimator=interventional`: TE, NDE, NIE, BIE, RIE measured on counterfactual resumes.

    n: applicants sampled (seeded, without replacement) from the x0/x1 rows; None = all.
    ci: "t" (paired t interval on per-applicant contrasts) or "bootstrap" (percentile, resampling
    applicants). n_bootstrap: resamples for ci="bootstrap". alpha: 1 - CI level."""

    name = "interventional"
    parameter_constraints: ClassVar[Rules] = {
        "n": [None, Interval(int, 2, MAX_N)],
        "ci": Options(CI_METHODS),
        "n_bootstrap": N_BOOTSTRAP,
        "alpha": ALPHA,
        "seed": SEED,
    }

    def __init__(
        self, n: int | None = 2000, ci: str = "t", n_bootstrap: int = 2000, alpha: float = 0.05, seed: int = 0
    ) -> None:
        validate(
            self.parameter_constraints, {"n": n, "ci": ci, "n_bootstrap": n_bootstrap, "alpha": alpha, "seed": seed}
        )
        self.n, self.ci, self.n_bootstrap, self.alpha, self.seed = n, ci, n_bootstrap, alpha, seed
        self.counterfactuals = WorldRequest(worlds=TARGETS, n=n, seed=seed)

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        """Effects from the scored world rows of `data` (column `world` names TARGETS; failed screens
        have a missing `y`); the factual rows (world = FACTUAL) only count the eligible applicants
        and check that each applicant's own world reproduces its factual document."""
        if WORLD not in data.columns or not data[WORLD].isin(list(TARGETS)).any():
            raise EstimationError(
                "interventional estimator: the scored table has no counterfactual world rows (column "
                f"{WORLD!r}); run it through PopulationCase, whose population draws the worlds it declares "
                "(population=popresume)"
            )
        factual = data[data[WORLD] == FACTUAL]
        worlds = data[data[WORLD].isin(list(TARGETS))]
        rows = contrast_rows(factual, roles, y)
        outcomes = (
            worlds.pivot(index="applicant_id", columns=WORLD, values=y)
            .reindex(index=pd.unique(worlds["applicant_id"]), columns=list(TARGETS))
            .astype(float)
        )
        outcomes.index.name = "applicant_id"
        n = len(outcomes)
        values = outcomes.to_numpy()
        failed = int(np.isnan(values).sum())
        complete = ~np.isnan(values).any(axis=1)
        if complete.sum() < 2:
            raise EstimationError(
                f"interventional estimator: {int(complete.sum())} of {n} sampled applicants have all five "
                f"counterfactual documents scored (failures: {failed} of {values.size}); need at least 2"
            )
        table, means = paired_effects(
            values[complete], alpha=self.alpha, ci=self.ci, n_bootstrap=self.n_bootstrap, seed=self.seed
        )
        labels = pattern_labels(table)
        metrics: dict[str, float] = {
            f"{METRIC_PREFIX}.n": float(complete.sum()),
            f"{METRIC_PREFIX}.n_sampled": float(n),
            f"{METRIC_PREFIX}.n_eligible": float(len(rows)),
            f"{METRIC_PREFIX}.n_incomplete": float((~complete).sum()),
            f"{METRIC_PREFIX}.documents": float(len(worlds)),
            f"{METRIC_PREFIX}.failed_screens": float(failed),
        }
        if "document" in worlds.columns:
            metrics[f"{METRIC_PREFIX}.distinct_documents"] = float(len(worlds.drop_duplicates(["job_id", "document"])))
            share = consistency(rows, worlds, roles)
            metrics[f"{METRIC_PREFIX}.consistency"] = share
            if share < 1.0:
                log.warning(
                    "interventional: %.1f%% of applicants' own-world documents differ from their "
                    "factual documents (renderer or counterfactual draws not consistent)",
                    100 * (1 - share),
                )
        title = f"{roles.x}: {roles.x1} vs {roles.x0}, interventional (n={int(complete.sum())})"
        artifacts: dict[str, Any] = {
            "interventional_means.csv": means,
            "interventional_forest.png": Plot("forest", table.copy(), title),
            "interventional_outcomes.parquet": outcomes.reset_index(),
        }
        if "document" in worlds.columns:
            artifacts["interventional_example.txt"] = example_documents(worlds)
        table["pattern"] = "; ".join(labels) if labels else "none"
        return Effects(table=table, labels=labels, metrics=metrics, artifacts=artifacts)


def expected_effects(worlds: pd.DataFrame, expected: np.ndarray) -> pd.Series:
    """Ground truth of the effects from each world row's expected outcome (a structural screener's
    exact `expected(worlds, outcome)`, e.g. the simulated one): per world the mean, then CONTRASTS.
    `worlds` holds every applicant of the target population in each world (column `world`)."""
    means = pd.Series(np.asarray(expected, dtype=float), index=worlds.index).groupby(worlds[WORLD]).mean()
    return pd.Series(CONTRASTS @ means.reindex(list(TARGETS)).to_numpy(), index=list(EFFECTS))


def paired_effects(
    outcomes: np.ndarray, *, alpha: float = 0.05, ci: str = "t", n_bootstrap: int = 2000, seed: int = 0
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Effects and counterfactual means from an applicants x 5 matrix of outcomes (TARGETS order).

    Each applicant's contrast vector is `outcomes @ CONTRASTS.T`; estimates are its column means,
    standard errors sd / sqrt(n), CIs a paired t interval (n - 1 df) or a percentile bootstrap
    resampling applicants, p-values from the one-sample t test. Returns (effects, means) tables
    with columns estimate, se, ci_low, ci_high, p_value, significant, n."""
    outcomes = np.asarray(outcomes, dtype=float)
    if outcomes.ndim != 2 or outcomes.shape[1] != len(TARGETS):
        raise EstimationError(f"outcomes must be an applicants x {len(TARGETS)} matrix, got shape {outcomes.shape}")
    if not np.isfinite(outcomes).all():
        raise EstimationError("outcomes contain missing or infinite values; drop incomplete applicants first")
    n = len(outcomes)
    if n < 2:
        raise EstimationError(f"need at least 2 applicants for a paired CI, got {n}")
    if ci not in CI_METHODS:
        raise EstimationError(f"ci must be one of {list(CI_METHODS)}, got {ci!r}")
    frame, _ = mean_inference(
        np.hstack([outcomes, outcomes @ CONTRASTS.T]),
        list(TARGETS) + list(EFFECTS),
        alpha=alpha,
        n_bootstrap=n_bootstrap,
        rng=np.random.default_rng([seed, 10]),
        ci=ci,
        reference="t",
    )
    frame["n"] = n
    return frame.iloc[len(TARGETS) :].copy(), frame.iloc[: len(TARGETS)].copy()


def consistency(factual: pd.DataFrame, worlds: pd.DataFrame, roles: Roles) -> float:
    """Share of sampled applicants (with a scored factual row) whose own-world document
    (x_y = x_b = x_r = their X) equals the factual document they were scored on."""
    own_world = {roles.x0: "E[Y_x0]", roles.x1: "E[Y_x1]"}
    own = factual[["applicant_id", roles.x, "document"]].assign(**{WORLD: factual[roles.x].map(own_world)})
    matched = own.merge(
        worlds[["applicant_id", WORLD, "document"]], on=["applicant_id", WORLD], suffixes=("", "_world")
    )
    return float((matched["document"] == matched["document_world"]).mean()) if len(matched) else 1.0


def example_documents(worlds: pd.DataFrame) -> str:
    """The first sampled applicant's five counterfactual documents, for a reader of the run."""
    first = worlds[worlds["applicant_id"] == worlds["applicant_id"].iloc[0]]
    return "\n".join(
        f"===== {row[WORLD]} (applicant {row['applicant_id']}) =====\n{row['document']}\n"
        for _, row in first.iterrows()
    )
