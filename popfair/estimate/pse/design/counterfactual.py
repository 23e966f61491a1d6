"""`estimator=counterfactual`, the default of generated populations: the five path-specific effects by design.

popfair owns the population model and can ask the screener again, so the counterfactual means of the
effects are measured, not reweighted from factual data. A simple random sample of the applicants
(the world budget: `n` applicants, a `fraction` of them, or the sample `target_mde` needs) is rendered
and screened in the five worlds psi(x_y, x_b, x_r) (`sfm.TARGETS`), through the case's renderer,
screener and response cache; the estimate combines those answers with the factual answers of every
applicant (`design_based.combine`), so its CIs are narrower than the sample's alone, which are
reported beside them (`se_sample`). Three estimands (`inference`, docs/concepts/counterfactual_design.md):
the effects on the applicants drawn, averaged over the worlds' random redraws (`applicants`, the
default: a second, independent set of worlds for a keyed subsample of at least `redraw` sampled
applicants per group measures the redraw noise, which does not vanish when every applicant is
sampled); on the applicants drawn in these worlds only (`worlds`, this seed's redraw); or under
the population model, averaged over draws of the applicants (`superpopulation`, wider). The effects
hold by design: no overlap, no outcome model to extrapolate. They are the screener's effects under
popfair's population model. An effect is printed as exactly 0 only where the case declares it
(`declare_documents`: the two worlds show the same document to a screener that reads only the
document, NDE on text resumes).

DML-UCA on the factual data (`estimator=pse_dml`, the paper's estimator; its settings are this
estimator's other keys) runs beside it (`compare`): where DML identifies an effect, the table shows
its estimate, and for the effects whose estimand the two share (TE, BIE) the difference and whether
they agree (the difference's CI covers 0); where they disagree the case says so, with the
difference's p-value (`side_by_side`)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Boolean, Interval, Options, Rules, validate
from popfair.core.errors import EstimationError
from popfair.core.types import REDRAW_SUFFIX, WORLD, Effects, Plot, Roles, WorldRequest, redraw_world
from popfair.estimate.base import (
    DeclaresDocuments,
    DeclaresEstimand,
    PlansPower,
    SizesWorlds,
    contrast_rows,
    factual_rows,
)
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.estimate.pse.design import budget
from popfair.estimate.pse.design.design_based import INFERENCE, combine
from popfair.estimate.pse.design.interventional import MAX_N, consistency, example_documents, paired_effects
from popfair.estimate.pse.design.side_by_side import beside
from popfair.estimate.pse.dml.estimator import PseDml
from popfair.estimate.pse.estimand import OBSERVED_PREFIX, comparison_notes
from popfair.estimate.pse.settings import PSE_CONSTRAINTS
from popfair.estimate.pse.sfm import EFFECTS, TARGETS, pattern_labels
from popfair.runtime.parallel import forked_call

log = logging.getLogger("popfair")

METRIC = budget.METRIC
T = TypeVar("T")


class Counterfactual(SizesWorlds, PlansPower, DeclaresEstimand, DeclaresDocuments):
    """`estimator=counterfactual`: TE, NDE, NIE, BIE, RIE from every factual answer and a world sample.

    n: "auto" (`fraction` of the x0/x1 applicants), "all", or a number of applicants whose five
    worlds are screened. target_mde: instead of n, the smallest sample whose planned MDE of every
    effect is at most this many points (the case's plan.* assumptions). model_folds: cross-fitting
    folds of the working model. inference: "applicants" (the effects on the applicants drawn, averaged
    over the worlds' redraws), "worlds" (on the applicants drawn, these worlds only) or
    "superpopulation" (under the population model; `design_based`). redraw: applicants per group (at
    least; `popfair.population.worlds.redraw_sizes`) whose worlds are drawn a second time, independently,
    to measure the redraw noise ("applicants" only). compare: run DML-UCA beside it
    (its settings: the other keywords, those of `PseDml`). alpha: 1 - CI level. seed: the sample,
    the worlds' noise and DML's folds.

    Its capabilities (popfair.estimate.base): it sizes its world sample by the case's plan (`sized`),
    plans that sample's power (`power_plan`) and measures its effects on worlds (`estimand_design`)."""

    name = "counterfactual"
    estimand_design = "worlds"  # the effects are measured on counterfactual worlds (popfair.estimate.pse.estimand)
    parameter_constraints: ClassVar[Rules] = {
        **PSE_CONSTRAINTS,
        "n": [Options(("auto", "all")), Interval(int, 2, MAX_N)],
        "fraction": Interval(float, 0, 1, closed="right"),
        "target_mde": [None, Interval(float, 0, None, closed="neither")],
        "model_folds": Interval(int, 2, 20),
        "inference": Options(INFERENCE),
        "redraw": Interval(int, 2, None),
        "compare": Boolean(),
    }

    def __init__(
        self,
        n: int | str = "auto",
        fraction: float = 0.1,
        target_mde: float | None = None,
        model_folds: int = 5,
        inference: str = "applicants",
        redraw: int = 30,
        compare: bool = True,
        alpha: float = 0.05,
        seed: int = 0,
        **observational: Any,
    ) -> None:
        own = {
            "n": n,
            "fraction": fraction,
            "target_mde": target_mde,
            "model_folds": model_folds,
            "inference": inference,
            "redraw": redraw,
            "compare": compare,
        }
        validate(self.parameter_constraints, {**own, "alpha": alpha, "seed": seed})
        self.n, self.fraction, self.target_mde, self.model_folds = n, fraction, target_mde, model_folds
        self.inference, self.redraw, self.compare = inference, redraw, compare
        self.shows: frozenset[str] | None = None  # what the documents display and the screener reads
        self.reads: frozenset[str] | None = None  # (`declare_documents`): nothing is exact until declared
        self.declared = False
        self.alpha, self.seed = alpha, seed
        self.observational = PseDml(alpha=alpha, seed=seed, **observational) if compare else None
        self.counterfactuals = WorldRequest(
            worlds=TARGETS,
            n=n if isinstance(n, int) else None,
            seed=seed,
            fraction=fraction if n == "auto" else None,
            redraw=redraw if inference == "applicants" else 0,
        )

    def declare_documents(self, shows: frozenset[str] | None, reads: frozenset[str] | None) -> None:
        """What the case's documents display (`shows`: the renderer's declared attributes, None when
        undeclared) and which profile columns the screener's answer depends on (`reads`: None, it reads
        the document). The effects whose two worlds then show the same document to a screener that
        reads only the document are exact by design (`exact_effects`)."""
        self.shows, self.reads, self.declared = shows, reads, True

    def exact_effects(self, roles: Roles) -> frozenset[str]:
        """NDE, where the documents never display X and the screener reads the document (or profile
        columns other than X): its two worlds, (x1, x0, x0) and (x0, x0, x0), differ only in X."""
        if not self.declared or self.shows is None or roles.x in self.shows:
            return frozenset()
        if self.reads is not None and roles.x in self.reads:
            return frozenset()
        return frozenset({"NDE"})

    # --- the budget -------------------------------------------------------------------------------

    def sized(
        self, request: WorldRequest, eligible: int, settings: PowerSettings, previous: Any, scale: Any = None
    ) -> WorldRequest:
        """The world request for a population of `eligible` x0/x1 applicants: with `target_mde`, the
        sample the plan says detects it for every effect (nested, as any n: a larger sample contains
        a smaller one)."""
        if self.target_mde is None:
            return request
        n, why = budget.budget_for(self.target_mde, eligible, settings, previous, scale, self.inference)
        log.info("counterfactual design: %s", why)
        return WorldRequest(worlds=request.worlds, n=n, seed=request.seed, redraw=request.redraw)

    def power_plan(self, profiles: Any, settings: PowerSettings, previous: Any, scale: Any = None) -> PowerPlan | None:
        """What the world sample of `profiles` can detect, per effect (`budget.world_plan`), on the
        screener's score `scale` where no pilot or previous run says more."""
        roles = profiles.roles
        eligible = int(profiles.table[roles.x].isin([roles.x0, roles.x1]).sum())
        if profiles.worlds is None or eligible < 2:
            return None
        worlds = profiles.worlds
        again = worlds[WORLD].str.endswith(REDRAW_SUFFIX)
        n = int(worlds.loc[~again, "applicant_id"].nunique())
        redrawn = int(worlds.loc[again, "applicant_id"].nunique())
        return budget.world_plan(n, eligible, settings, previous, scale, self.inference, redrawn)

    @property
    def finite(self) -> bool:
        """Whether the effects are those over the applicants drawn (the finite population correction)."""
        return self.inference != "superpopulation"

    # --- the estimate -----------------------------------------------------------------------------

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        """Effects from the factual rows (world = FACTUAL: every scored applicant) and the world rows
        of the sample (failed screens have a missing `y`; an applicant missing any world is left out)."""
        if WORLD not in data.columns or not data[WORLD].isin(list(TARGETS)).any():
            raise EstimationError(
                "counterfactual estimator: the scored table has no counterfactual world rows (column "
                f"{WORLD!r}); run it through PopulationCase, whose population draws the worlds it declares "
                "(population=popresume)"
            )
        factual = factual_rows(data)
        rows = contrast_rows(factual, roles, y)
        worlds = data[data[WORLD].isin(list(TARGETS))]
        outcomes = _outcomes(worlds, y)
        sampled = len(outcomes)
        # a hash lookup: Index.isin on pandas' Arrow strings boxes every one of the ~19,000 ids (0.1 s)
        scored = pd.Index(rows["applicant_id"].unique()).get_indexer(outcomes.index) >= 0
        outcomes = outcomes[outcomes.notna().all(axis=1) & scored]
        again = data[data[WORLD].isin([redraw_world(w) for w in TARGETS])]
        redraw = None
        if len(again):
            redraw = _outcomes(again.assign(**{WORLD: again[WORLD].str.removesuffix(REDRAW_SUFFIX)}), y)
        if self.inference == "applicants" and redraw is None:
            raise EstimationError(
                "counterfactual estimator: estimator.inference=applicants needs the second set of worlds "
                "(estimator.redraw) and the scored table has none; run it through PopulationCase"
            )
        exact = self.exact_effects(roles)
        combining = partial(
            combine,
            rows,
            outcomes,
            roles,
            y,
            alpha=self.alpha,
            folds=self.model_folds,
            seed=self.seed,
            inference=self.inference,
            redraw=redraw,
            exact=exact,
        )
        if self.observational is None:
            combined, observed = combining(), None
        else:  # the working model's cross-fitting in a forked process while DML-UCA runs here
            pending = forked_call(_with_warnings, combining)
            try:
                observed = self.observational.estimate(rows, roles, y)
            finally:  # waited for even when DML fails: no process is left behind
                combined = _warned(*pending())
        alone, _ = paired_effects(outcomes.to_numpy(), alpha=self.alpha, seed=self.seed)
        table = combined.table.copy()
        # the sample alone on the same footing: over the N applicants its SE has the same correction,
        # and for the applicants averaged over redraws the same redraw term
        correction = (1 - combined.n / combined.n_eligible) if self.finite else 1.0
        added = 0.0
        if self.inference == "applicants" and combined.redraw_variance is not None:
            added = combined.redraw_variance.to_numpy() / combined.n_eligible
        variance = alone["se"].to_numpy() ** 2 * correction + added
        # a sample without spread gets the combined estimate's floor (0 only where exact by design)
        floor = 0.0 if combined.floor is None else combined.floor.to_numpy()
        table["se_sample"] = np.where(variance < floor, floor, variance) ** 0.5
        for effect in combined.exact:
            table.loc[effect, "se_sample"] = 0.0
        if observed is not None:
            table = beside(table, observed.table)
        labels = pattern_labels(table)
        table["pattern"] = "; ".join(labels) if labels else "none"
        metrics = self._metrics(combined, sampled, len(worlds) + len(again), worlds, observed)
        notes = [_precision_line(combined, table)]
        if observed is not None:
            notes += comparison_notes(table)
        title = f"{roles.x}: {roles.x1} vs {roles.x0} (positive favours {roles.x1})"
        artifacts: dict[str, Any] = {
            **({} if observed is None else _kept_artifacts(observed.artifacts)),
            "counterfactual_means.csv": combined.means,
            "counterfactual_sample_only.csv": alone,
            "counterfactual_model_r2.csv": combined.r2,
            "counterfactual_outcomes.parquet": outcomes.reset_index(),
            "counterfactual_forest.png": forest(table, title),
        }
        if "document" in worlds.columns:
            metrics[f"{METRIC}.consistency"] = consistency(rows, worlds, roles)
            artifacts["counterfactual_example.txt"] = example_documents(worlds)
        return Effects(table=table, labels=labels, metrics=metrics, artifacts=artifacts, notes=notes)

    def _metrics(
        self, combined: Any, sampled: int, documents: int, worlds: pd.DataFrame, observed: Effects | None
    ) -> dict[str, float]:
        metrics: dict[str, float] = {
            f"{METRIC}.n": float(combined.n),
            f"{METRIC}.n_sampled": float(sampled),
            f"{METRIC}.n_eligible": float(combined.n_eligible),
            f"{METRIC}.documents": float(documents),
            f"{METRIC}.failed_screens": float(worlds["error"].notna().sum()) if "error" in worlds else 0.0,
        }
        for group, n in combined.n_by_group.items():
            metrics[f"{METRIC}.n.{group}"] = float(n)
        for group, n in (combined.n_redraw or {}).items():
            metrics[f"{METRIC}.n_redraw.{group}"] = float(n)
        for effect in EFFECTS:
            metrics[f"{METRIC}.var_world.{effect}"] = float(combined.world_variance[effect])
            metrics[f"{METRIC}.var_fixed.{effect}"] = float(combined.fixed_variance[effect])
            if combined.redraw_variance is not None:
                metrics[f"{METRIC}.var_redraw.{effect}"] = float(combined.redraw_variance[effect])
            metrics[f"{METRIC}.exact.{effect}"] = float(effect in combined.exact)
        if "document" in worlds.columns:
            metrics[f"{METRIC}.distinct_documents"] = float(len(worlds.drop_duplicates(["job_id", "document"])))
        if observed is not None:  # DML's own diagnostics; its coarser split stays in its artifact
            metrics.update({k: v for k, v in observed.metrics.items() if not k.startswith("coarse.")})
        return metrics


Caught = list[tuple[Warning | str, type[Warning], str, int]]


def _with_warnings(fn: Callable[[], T]) -> tuple[T, Caught]:
    """fn() and the warnings it raised, to be raised again by `_warned` (in a forked process,
    which would otherwise print them, or record them in its own copy of the caller's list)."""
    with warnings.catch_warnings(record=True) as caught:
        value = fn()
    return value, [(w.message, w.category, w.filename, w.lineno) for w in caught]


def _warned(value: T, caught: Caught) -> T:
    """`value`, after raising again the warnings `_with_warnings` recorded."""
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)
    return value


ESTIMANDS = {
    "applicants": "the effects on these {N} applicants, averaged over the worlds' random redraws (names, states "
    "and qualifications drawn within each factual value's interval): the SE adds the redraw noise, which does not "
    "vanish when every applicant is sampled, measured on a second, independent set of worlds for {redrawn}",
    "worlds": "the effects on these {N} applicants in these worlds only (this seed's redraw of names, states and "
    "qualifications): what screening every one of them in these worlds would give",
    "superpopulation": "the effects under the population model, averaged over draws of the applicants and their worlds",
}


def _outcomes(worlds: pd.DataFrame, y: str) -> pd.DataFrame:
    """One row per applicant, one column per world (TARGETS), the score; missing where not scored."""
    return (
        worlds.pivot(index="applicant_id", columns=WORLD, values=y)
        .reindex(index=pd.unique(worlds["applicant_id"]), columns=list(TARGETS))
        .astype(float)
    )


def _precision_line(combined: Any, table: pd.DataFrame) -> str:
    groups = ", ".join(f"{n:,} of {combined.eligible_by_group[g]:,} {g}" for g, n in combined.n_by_group.items())
    ses = "; ".join(f"{e} {table.loc[e, 'se']:.3g} vs {table.loc[e, 'se_sample']:.3g}" for e in EFFECTS)
    redrawn = " and ".join(f"{n:,} {g}" for g, n in (combined.n_redraw or {}).items()) + " applicants"
    estimand = ESTIMANDS[combined.inference].format(N=f"{combined.n_eligible:,}", redrawn=redrawn)
    others = ", ".join(f"estimator.inference={k}" for k in ESTIMANDS if k != combined.inference)
    exact = (
        f" {', '.join(combined.exact)} is 0, exact by design: its two worlds show every applicant the same document "
        "and the screener reads only the document."
        if combined.exact
        else ""
    )
    return (
        f"Counterfactual design: {combined.n:,} of {combined.n_eligible:,} applicants screened in all five worlds "
        f"({groups}), combined with every applicant's factual answer. SE combined vs world sample alone: {ses}. "
        f"The CIs are for {estimand} (estimator.inference={combined.inference}; the others: {others})." + exact
    )


def _kept_artifacts(artifacts: dict[str, Any]) -> dict[str, Any]:
    """DML's artifacts, its forest plot left out (the design's plot draws both)."""
    return {k: v for k, v in artifacts.items() if k != "pse_forest.png"}


def forest(table: pd.DataFrame, title: str) -> Plot:
    """Forest plot: the design's effects, and DML-UCA's beside them where it identifies them."""
    series: tuple[tuple[str, str, str], ...] = (("", "counterfactual design", "C3"),)
    if OBSERVED_PREFIX + "estimate" in table:
        series += ((OBSERVED_PREFIX, "DML-UCA (factual data)", "C0"),)
    return Plot("forest", table, title, {"series": series})
