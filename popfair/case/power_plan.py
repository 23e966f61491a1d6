"""A case's power plan: the `plan.*` settings, the previous run they may name (`plan.from_run`), and
the design's power line (popfair.design.base.plan_power, the design's planning.py) for the case's sample or the table's categories, as
the dry run, doctor, the MLflow run and the reports show it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from popfair.core.errors import PopfairError
from popfair.design import design_named
from popfair.design.base import PreviousRun, ScoreScale, plan_power
from popfair.estimate.base import Estimator, PlansPower
from popfair.estimate.power import PowerPlan, PowerSettings, with_answers

log = logging.getLogger("popfair")


@dataclass(frozen=True)
class CasePower:
    """The case's `plan` settings and the previous run they name (read when the case is built, so an
    unknown run id stops the case before any work)."""

    settings: PowerSettings
    previous: PreviousRun | None = None

    @classmethod
    def of(cls, plan: Mapping[str, Any] | None = None, tracking: Mapping[str, Any] | None = None) -> CasePower:
        """The settings of config `plan` (resolved), and the run `plan.from_run` names in the tracking
        store of config `tracking` (read now: an unknown run id stops the case before any work)."""
        settings = PowerSettings.from_config(plan)
        if settings.from_run is None or not settings.enabled:
            return cls(settings)
        from popfair.track.previous import previous_run

        tracking = tracking or {}
        uri = str(tracking.get("uri")) if tracking.get("enabled", False) and tracking.get("uri") else None
        return cls(settings, previous_run(str(settings.from_run), uri))

    def plan(
        self,
        design: str,
        sample: Any,
        scale: ScoreScale | None = None,
        estimator: Estimator | None = None,
        samples: int = 1,
    ) -> PowerPlan | None:
        """The design's power line for `sample` (Profiles, or the table's categories); `scale`: the
        screener's score scale (its scores in this run, or its declared range before any). An
        estimator that plans its own sample (`PlansPower`: the counterfactual design's world budget)
        gives it instead. `samples`: answers per prompt (screener.samples), with the noise share
        (`noise`) they shrink the MDE and the units needed by (popfair.estimate.power.with_answers)."""
        if isinstance(estimator, PlansPower) and self.settings.enabled:
            plan = estimator.power_plan(sample, self.settings, self.previous, scale)
        else:
            plan = plan_power(design_named(design), sample, self.settings, self.previous, scale)
        return None if plan is None else with_answers(plan, samples, *self.noise())

    def noise(self) -> tuple[float | None, str]:
        """The screener's noise share and where it comes from: plan.noise_share (a pilot), else the
        previous run's screen.noise_share (plan.from_run), else unknown."""
        if self.settings.noise_share is not None:
            return float(self.settings.noise_share), "plan.noise_share, a pilot"
        found = None if self.previous is None else self.previous.get("screen.noise_share")
        return (found, f"as in {self.previous.source}") if found is not None and self.previous else (None, "")

    def quietly(
        self,
        design: str,
        sample: Any,
        scale: ScoreScale | None = None,
        estimator: Estimator | None = None,
        samples: int = 1,
    ) -> PowerPlan | None:
        """`plan`, with a failure logged instead of raised (a run's results come first)."""
        try:
            return self.plan(design, sample, scale, estimator, samples)
        except (PopfairError, ValueError, ArithmeticError) as exc:
            log.warning("power plan skipped: %s", exc)
            return None


def table_categories(counts: Any, protected: str) -> pd.DataFrame:
    """Rows and selected rows per category of the table's sex (protected gender) or race column
    (`TableCounts`), index named after the attribute; unknown categories left out."""
    frame = counts.counts
    attribute = "sex" if protected == "gender" else "race"
    if frame[attribute].nunique() < 2 and frame["sex" if attribute == "race" else "race"].nunique() >= 2:
        attribute = "sex" if attribute == "race" else "race"  # the table has the other column only
    metric = next(c for c in frame.columns if c not in ("cluster", "sex", "race", "n"))
    table = frame.groupby(attribute)[["n", metric]].sum().rename(columns={metric: "selected"})
    table = table.drop(index="unknown", errors="ignore")
    table.index.name = attribute
    return table


def answers_note(screener: Any, power: Any, total: Any) -> str:
    """Whether, for the same money, more answers per prompt or more units buy more precision: only
    where the noise share is known (plan.noise_share, plan.from_run) and the screener prices its
    answers (`Screener.answer_costs` of the plan's `total`)."""
    from popfair.estimate.power import answers_or_units

    noise = None if power is None else power.extra.get("noise_share")
    costs = screener.answer_costs(total)
    if noise is None or costs is None or costs[0] <= 0:
        return ""
    return answers_or_units(noise, screener.samples, costs[0], costs[1], power.units)
