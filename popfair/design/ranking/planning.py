"""The ranking design's planning: its power line (the top-1 rates of two groups, a Wald test of the
winner-only logit, over the trials) and its sequential audit (a unit is a block of trials: one pass
through the Latin square, k trials, 2k for odd k; one trial with `order: random`; so every unit
shows each group in each position equally often and units are i.i.d.; target `top1` is the lowest
impact ratio of the groups' top-1 rates)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import Profiles
from popfair.design.base import PreviousRun, ScoreScale
from popfair.design.ranking.trials import GROUP, TRIAL, RankingTrials
from popfair.design.sequential import SequentialSettings, Stream, group_rate_values
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.estimate.ranking import top1_power as rp

POWER_IMPORTS = ("popfair.estimate.ranking.top1_power",)


def ranking_power(
    profiles: Profiles, settings: PowerSettings, previous: PreviousRun | None, scale: ScoreScale | None = None
) -> PowerPlan:
    k, n = int(profiles.table[GROUP].nunique()), int(profiles.table[TRIAL].nunique())
    worth = rp.top1_mde(n, k, alpha=settings.alpha, power=settings.power)
    assumptions = [
        f"one group at that log-worth against the other {k - 1} equal (Plackett-Luce)",
        "no position effect (the Latin square balances the shown positions)",
    ]
    if previous is not None:
        assumptions.append(f"{previous.source} is not used: the variance follows from k and the effect")
    needed = None
    if settings.effect is not None:
        effect_worth = rp.log_worth_of_gap(settings.effect, k)
        needed = (
            None
            if effect_worth is None
            else rp.top1_trials(effect_worth, k, alpha=settings.alpha, power=settings.power)
        )
    if worth is None:
        return PowerPlan(
            f"top-1 rate gap between two of {k} groups", "pp", "trials", n, settings.alpha, settings.power,
            None, "Wald test of the top-1 logit", tuple(assumptions), settings.effect, needed,
            detail="too few trials",
        )  # fmt: skip
    high, low = rp.top1_rates(worth, k)
    detail = (
        f"one group ranked first in {high:.1%} of trials against {low:.1%} for another, a log-worth difference "
        f"of {worth:.2f}"
    )
    return PowerPlan(
        f"top-1 rate gap between two of {k} groups", "pp", "trials", n, settings.alpha, settings.power, high - low,
        "Wald test of the top-1 logit", tuple(assumptions), settings.effect, needed, {"mde_log_worth": worth}, detail,
    )  # fmt: skip


class RankingLooks:
    """The ranking design's sequential audit."""

    targets: tuple[str, ...] = ("top1",)

    def stream(self, population: Any, occupation: Any, profiles: Profiles, seed: int) -> Stream:
        from popfair.estimate.ranking.model import williams_square

        table = profiles.table
        trials = table[TRIAL].to_numpy(dtype=object)
        ids = pd.unique(trials)
        k = int(table.groupby(TRIAL).size().max())
        order = population.order if isinstance(population, RankingTrials) else "latin_square"
        block = len(williams_square(k)) if order == "latin_square" else 1
        n_units = len(ids) // block
        index = pd.Series(np.arange(len(ids)), index=ids).loc[trials].to_numpy()
        unit = np.where(index < n_units * block, index // block, -1)  # -1: an incomplete last block
        notes: tuple[str, ...] = ()
        if n_units * block < len(ids):
            notes = (
                f"sequential: the last {len(ids) - n_units * block} trials do not fill a block of {block} "
                "(population.n_trials is not a multiple of it) and are not screened",
            )
        if n_units < 1:
            raise ConfigError(f"sequential: population.n_trials must be at least one block of {block} trials")
        what = f"blocks of {block} trials" if block > 1 else "trials"
        return Stream(unit, n_units, what, "population.n_trials", block, notes)

    def check(self, target: str, settings: SequentialSettings, population: Any, outcome: str) -> None:
        return None

    def unit_values(
        self, target: str, ok: pd.DataFrame, profiles: Profiles, settings: SequentialSettings
    ) -> pd.DataFrame:
        return group_rate_values(ok, GROUP, profiles, settings)

    def groups(self, target: str, profiles: Profiles) -> list[str]:
        return sorted(map(str, pd.unique(profiles.table[GROUP])))

    def value_bounds(self, target: str, profiles: Profiles) -> tuple[float, float]:
        return (0.0, 1.0)

    def mean_of_units(self, target: str) -> bool:
        return False

    def prompt_count(self, profiles: Profiles) -> int:
        return int(profiles.table[TRIAL].nunique())
