"""The population design's planning: its power line (the total effect TE on the screener's score, a
difference of means over the x0 and x1 applicants) and its sequential audit (a unit is an applicant
of the i.i.d. resample, `population.n`; target `gap` is the difference of the x1 and x0 mean
outcomes, target `impact_ratio` the LL144 ratios of selection rates over the categories of X:
callbacks, or a score of at least `sequential.threshold`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import Profiles
from popfair.design.base import PreviousRun, ScoreScale
from popfair.design.sequential import SequentialSettings, Stream, group_rate_values, score_gap_values
from popfair.estimate import power as pw
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.population.base import sample_size

POWER_IMPORTS = ("statsmodels.stats.power",)  # imported beside a sweep's worker (popfair.sweep.in_process)
_GROWS = (
    "sequential: the population design grows an i.i.d. resample; set population.n (the planned number of "
    "applicants). With population.n=null every PUMS record is taken once, in file order, with survey weights, "
    "which a look cannot take a random part of; or sequential.rule=off"
)


def population_power(
    profiles: Profiles, settings: PowerSettings, previous: PreviousRun | None, scale: ScoreScale | None = None
) -> PowerPlan:
    roles = profiles.roles
    column = profiles.table[roles.x]
    n1, n0 = int((column == roles.x1).sum()), int((column == roles.x0).sum())
    n, total = n1 + n0, len(profiles.table)
    estimand = f"total effect TE of {roles.x} ({roles.x1} vs {roles.x0}) on the score"
    se = previous.get("TE.se", "gap.se") if previous is not None else None
    n_prev = previous.get("plan.n", "n_rows") if previous is not None else None
    detail = ""
    mde: float | None
    if previous is not None and se is not None and n_prev:
        # n_prev counts every applicant of that run (plan.n or n_rows), as `total` does here
        unit_sd = se * math.sqrt(n_prev)
        mde = pw.se_mde(unit_sd, total, settings.alpha, settings.power)
        needed = None if settings.effect is None else pw.se_n(settings.effect, unit_sd, settings.alpha, settings.power)
        test = "z test on the estimator's standard error"
        assumptions: tuple[str, ...] = (
            f"the standard error of {previous.source} ({se:.3g} points at n = {n_prev:,.0f}) scaled by sqrt(n_prev / n)",
            "the same screener, population mix and estimator as that run",
        )
    else:
        if settings.sd is not None:
            sd, sd_source = settings.sd, "plan.sd, a pilot's"
        elif scale is not None:
            sd, sd_source = scale.sd, scale.source
        else:
            sd, sd_source = pw.DEFAULT_SCORE_SD, "default for a 0-100 score; set plan.sd from a pilot or plan.from_run"
        testable = min(n1, n0) >= 2  # a t test needs two applicants in each group (a small pilot may draw fewer)
        mde = pw.mean_difference_mde(n1, n0, sd, settings.alpha, settings.power) if testable else None
        needed = (
            None
            if settings.effect is None or not testable
            else pw.mean_difference_n(settings.effect, n1 / n, sd, settings.alpha, settings.power)
        )
        if not testable:
            detail = f"fewer than 2 {roles.x1} or {roles.x0} applicants: no two-sample test"
        if needed is not None and n < total:  # applicants of other levels (race: neither black nor white) are drawn too
            needed = int(math.ceil(needed * total / n))
        test = "two-sample t test"
        assumptions = (
            f"a score SD of {sd:.3g} points ({sd_source})",
            f"{n1:,} {roles.x1} and {n0:,} {roles.x0} applicants",
            "the estimator's adjustment for the confounders neither gains nor loses precision against a "
            "difference of means (confounders that predict the score shrink the MDE; poor overlap grows it)",
        )
    return PowerPlan(
        estimand, "points", "applicants", total, settings.alpha, settings.power, mde, test, assumptions,
        settings.effect, needed, detail=detail,
    )  # fmt: skip


class PopulationLooks:
    """The population design's sequential audit."""

    targets: tuple[str, ...] = ("gap", "impact_ratio")

    def stream(self, population: Any, occupation: Any, profiles: Profiles, seed: int) -> Stream:
        if sample_size(population) is None:
            raise ConfigError(_GROWS)
        n = len(profiles.table)
        return Stream(np.arange(n), n, "applicants", "population.n")

    def check(self, target: str, settings: SequentialSettings, population: Any, outcome: str) -> None:
        if target == "impact_ratio" and outcome == "score" and settings.threshold is None:
            raise ConfigError(
                "sequential.threshold: the impact-ratio target on scores needs a fixed selection threshold "
                "(e.g. sequential.threshold=70); a sample's median or top share is not known before the answers"
            )
        if population is not None and sample_size(population) is None:
            raise ConfigError(_GROWS)

    def unit_values(
        self, target: str, ok: pd.DataFrame, profiles: Profiles, settings: SequentialSettings
    ) -> pd.DataFrame:
        if target == "gap":
            return score_gap_values(ok, profiles)
        return group_rate_values(ok, profiles.roles.x, profiles, settings)

    def groups(self, target: str, profiles: Profiles) -> list[str]:
        roles = profiles.roles
        if target == "gap":
            return [roles.x1, roles.x0]
        return sorted(map(str, pd.unique(profiles.table[roles.x].dropna())))

    def value_bounds(self, target: str, profiles: Profiles) -> tuple[float, float]:
        return (0.0, 100.0) if (target == "gap" and profiles.outcome == "score") else (0.0, 1.0)

    def mean_of_units(self, target: str) -> bool:
        return False

    def prompt_count(self, profiles: Profiles) -> int:
        return len(profiles.table) + (0 if profiles.worlds is None else len(profiles.worlds))
