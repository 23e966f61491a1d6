"""The paired design's planning: its power line (the paired callback gap, McNemar's test over the
pairs) and its sequential audit (a unit is a posting, in draw order, `occupation.n_postings`; its
value is the mean within-pair difference y_x1 - y_x0 over its complete pairs for target `gap`, or
its callback rate per group for target `impact_ratio`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popfair.core.types import Profiles
from popfair.design.base import PreviousRun, ScoreScale
from popfair.design.sequential import UNIT, SequentialSettings, Stream, group_rate_values
from popfair.estimate import power as pw
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.population.postings import EntryLevelPostings

POWER_IMPORTS: tuple[
    str, ...
] = ()  # McNemar from scipy.special (popfair.estimate.light_stats), imported with this module


def paired_power(
    profiles: Profiles, settings: PowerSettings, previous: PreviousRun | None, scale: ScoreScale | None = None
) -> PowerPlan:
    roles = profiles.roles
    n_pairs = int(profiles.table["pair_key"].nunique())
    extra: dict[str, float] = {}
    assumptions = []
    b = c = n_prev = None
    if previous is not None:
        b, c, n_prev = previous.get("gap.b"), previous.get("gap.c"), previous.get("gap.n_pairs")
    if settings.discordant_share is not None:
        psi = settings.discordant_share
        assumptions.append(f"{psi:.1%} of the pairs discordant (one side called back, the other not), from a pilot")
    elif previous is not None and b is not None and c is not None and n_prev:
        psi = (b + c) / n_prev
        assumptions.append(
            f"{psi:.1%} of the pairs discordant, as in {previous.source} ({b + c:,.0f} of {n_prev:,.0f})"
        )
        if psi == 0:
            assumptions.append("a screener that answered both sides of every pair alike shows no gap at any n")
    else:
        rate = settings.base_rate if settings.base_rate is not None else pw.DEFAULT_BASE_RATE
        psi = 2 * rate * (1 - rate)
        assumptions.append(
            f"a callback rate of {rate:.0%} ({'plan.base_rate' if settings.base_rate is not None else 'default'}) "
            f"and the two decisions of a pair independent: {psi:.0%} of the pairs discordant, the most there can be "
            "(a pilot's plan.discordant_share or plan.from_run is usually far smaller, and the MDE with it)"
        )
    assumptions.append("the discordant share stays as the gap grows")
    assumptions.append(
        "pairs independent (McNemar, which labels the case, ignores the postings; the posting-clustered t and "
        "bootstrap CI can be wider)"
    )
    cluster_se = previous.get("gap.cluster_se") if previous is not None else None
    if cluster_se is not None and n_prev and b is not None and c is not None:
        gap = (b - c) / n_prev
        independent = (psi - gap**2) / n_prev
        if independent > 0:
            extra["design_effect"] = (cluster_se / 100) ** 2 / independent
            assumptions.append(
                f"the postings' design effect in that run: {extra['design_effect']:.2f} (the clustered CI needs about "
                "that many times the pairs McNemar does)"
            )
    mde = pw.mcnemar_mde(n_pairs, psi, settings.alpha, settings.power)
    needed = None if settings.effect is None else pw.mcnemar_n(settings.effect, psi, settings.alpha, settings.power)
    return PowerPlan(
        f"paired callback gap ({roles.x1} minus {roles.x0})", "pp", "pairs", n_pairs, settings.alpha, settings.power,
        mde, "McNemar's test with continuity correction", tuple(assumptions), settings.effect,
        needed, extra,
        "" if mde is not None else "no gap is: too few discordant pairs for any gap up to their share",
    )  # fmt: skip


class PairedLooks:
    """The paired design's sequential audit."""

    targets: tuple[str, ...] = ("gap", "impact_ratio")

    def stream(self, population: Any, occupation: Any, profiles: Profiles, seed: int) -> Stream:
        posting = profiles.table["posting_id"].to_numpy(dtype=object)
        ids = pd.unique(posting)
        if not isinstance(occupation, EntryLevelPostings) or occupation.postings_csv is None:
            order = np.argsort([int(str(p)[1:]) for p in ids], kind="stable")  # draw order: p00000, p00001, ...
            notes: tuple[str, ...] = ()
        else:  # a user's file may be sorted (by firm, date): a seeded shuffle, fixed before any answer
            from popfair.population.scm import keyed_uniforms

            order = np.argsort(keyed_uniforms(ids, seed, "sequential_order"), kind="stable")
            notes = ("sequential: the postings of occupation.postings_csv are taken in a seeded random order",)
        rank = pd.Series(np.empty(len(ids), dtype=np.int64), index=ids)
        rank.iloc[order] = np.arange(len(ids))
        return Stream(rank.loc[posting].to_numpy(), len(ids), "postings", "occupation.n_postings", 1, notes)

    def check(self, target: str, settings: SequentialSettings, population: Any, outcome: str) -> None:
        return None

    def unit_values(
        self, target: str, ok: pd.DataFrame, profiles: Profiles, settings: SequentialSettings
    ) -> pd.DataFrame:
        roles = profiles.roles
        if target != "gap":
            return group_rate_values(ok, roles.x, profiles, settings)
        sides = ok.pivot_table(index=[UNIT, "pair_key"], columns=roles.x, values="y", aggfunc="first")
        if roles.x1 not in sides or roles.x0 not in sides:
            return pd.DataFrame({UNIT: [], "value": []})
        per_unit = (sides[roles.x1] - sides[roles.x0]).dropna().groupby(level=0).mean()
        return pd.DataFrame({UNIT: per_unit.index.to_numpy(), "value": per_unit.to_numpy()})

    def groups(self, target: str, profiles: Profiles) -> list[str]:
        return [profiles.roles.x1, profiles.roles.x0]

    def value_bounds(self, target: str, profiles: Profiles) -> tuple[float, float]:
        return (-1.0, 1.0) if target == "gap" else (0.0, 1.0)  # a posting's mean within-pair difference

    def mean_of_units(self, target: str) -> bool:
        return target == "gap"

    def prompt_count(self, profiles: Profiles) -> int:
        return len(profiles.table) + (0 if profiles.worlds is None else len(profiles.worlds))
