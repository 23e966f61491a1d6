"""The table design's planning: its power line (one category's selection rate below the reference's,
two proportions over the rows; with more categories the lowest impact ratio's test, simulated)."""

from __future__ import annotations

import math

import pandas as pd

from popfair.design.base import PreviousRun
from popfair.estimate import power as pw
from popfair.estimate.power import PowerPlan, PowerSettings

POWER_IMPORTS = ("statsmodels.stats.power", "statsmodels.stats.proportion", "scipy.stats")


def table_power(categories: pd.DataFrame, settings: PowerSettings, previous: PreviousRun | None) -> PowerPlan | None:
    """`categories`: one row per category of the protected attribute (index), columns n and selected
    (None with fewer than two categories: nothing to compare)."""
    attribute = str(categories.index.name or "category")
    counts = categories[categories["n"] > 0].sort_values("n")
    k, total = len(counts), int(counts["n"].sum())
    if k < 2:
        return None
    observed = float(counts["selected"].sum() / total) if total else pw.DEFAULT_BASE_RATE
    base = settings.base_rate if settings.base_rate is not None else observed
    n_low, n_ref = int(counts["n"].iloc[0]), int(counts["n"].iloc[-1])
    assumptions = [
        f"a reference rate of {base:.1%} ("
        + ("plan.base_rate" if settings.base_rate is not None else "the table's overall selection rate")
        + ")",
        f"the smallest {attribute} category ({counts.index[0]}, {n_low:,} rows) below the others"
        + (
            f" (the largest: {counts.index[-1]}, {n_ref:,})" if k == 2 else f", the other {k - 1} at the reference rate"
        ),
        "rows independent (the permutation test runs within clusters, which costs no power when clusters differ "
        "in rates; the cluster bootstrap CI can be wider)",
    ]
    if previous is not None:
        assumptions.append(f"{previous.source} is not used: the table itself gives the rates")
    if k <= 2:
        test = "two-sided test of two proportions"
        mde: float | None = pw.two_rates_mde(n_low, n_ref, base, settings.alpha, settings.power)
        share = n_low / (n_low + n_ref)
        needed = (
            None
            if settings.effect is None
            else pw.two_rates_n(settings.effect, share, base, settings.alpha, settings.power)
        )
    else:
        test = f"the test of the lowest of {k} impact ratios, simulated ({pw.LOWEST_RATIO_DRAWS:,} draws)"
        simulated = pw.LowestRatioTest(counts["n"].to_numpy(), base, 0, settings.alpha)
        mde = simulated.mde(settings.power)
        needed = None if settings.effect is None else simulated.rows_needed(settings.effect, settings.power)
    if needed is not None and k <= 2:
        needed = int(math.ceil(needed * total / (n_low + n_ref)))
    if mde is None:
        detail, extra = "too few rows for any drop below the reference rate", {}
    else:
        detail = f"an impact ratio of {(base - mde) / base:.2f}" if base else ""
        extra = {"mde_impact_ratio": (base - mde) / base if base else float("nan")}
    return PowerPlan(
        f"selection-rate gap of one {attribute} category below the reference", "pp", "rows", total, settings.alpha,
        settings.power, mde, test, tuple(assumptions), settings.effect, needed,
        extra, detail,
    )  # fmt: skip
