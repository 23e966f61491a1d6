"""Each design's power line: which units its main test counts, what it compares and what the variance
rests on (a base rate, a pilot's figures, or a previous run's results), computed by popfair.estimate.power.

- population: the total effect TE of the protected attribute on the 0-100 score (pse_dml's TE; a
  difference of means for the plan), over the x0 and x1 applicants;
- paired: the paired callback gap and McNemar's test, over the pairs;
- ranking: the top-1 rates of two groups (Wald test of the winner-only logit), over the trials;
- table: one category's selection rate below the reference's (two proportions), over the rows.

`plan_power(design, sample, settings, previous)` is the seam: `sample` is the case's Profiles (a
design that screens) or the table's category counts (`table`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from popfair.core.types import Profiles
from popfair.estimate import power as pw
from popfair.estimate.power import PowerPlan, PowerSettings


@dataclass(frozen=True)
class PreviousRun:
    """A previous run's logged numbers (`plan.from_run`): its metrics as MLflow holds them
    (`<effect>.<column>`, n_rows, plan.n, ...) and where they were read."""

    source: str
    metrics: Mapping[str, float]

    def get(self, *names: str) -> float | None:
        for name in names:
            value = self.metrics.get(name)
            if value is not None and math.isfinite(value):
                return float(value)
        return None


@dataclass(frozen=True)
class ScoreScale:
    """The screener's own score scale, for a power line that needs a score SD and has no pilot's
    (plan.sd) or previous run's (plan.from_run): the SD of this run's scores, or, before any score
    exists (a dry run), a quarter of the range the screener declares (`Screener.score_range`)."""

    sd: float
    source: str

    @classmethod
    def of_scores(cls, scores: Any) -> ScoreScale | None:
        """The SD of a run's scores (None with fewer than two, or all equal)."""
        values = pd.to_numeric(pd.Series(scores), errors="coerce").dropna()
        sd = float(values.std(ddof=1)) if len(values) >= 2 else float("nan")
        if not math.isfinite(sd) or sd <= 0:
            return None
        return cls(sd, f"the SD of this run's {len(values):,} scores ({values.min():.3g} to {values.max():.3g})")

    @classmethod
    def of_range(cls, low: float, high: float) -> ScoreScale:
        return cls(
            (high - low) / 4,
            f"a quarter of the screener's declared score range {low:g}-{high:g} (no scores yet: "
            "set plan.sd from a pilot or plan.from_run for the screener's real spread)",
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


def paired_power(profiles: Profiles, settings: PowerSettings, previous: PreviousRun | None) -> PowerPlan:
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


def ranking_power(profiles: Profiles, settings: PowerSettings, previous: PreviousRun | None) -> PowerPlan:
    from popfair.design.ranking.trials import GROUP, TRIAL
    from popfair.estimate.ranking import power as rp

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


POWER: dict[str, Callable[[Any, PowerSettings, PreviousRun | None], PowerPlan | None]] = {
    "population": population_power,
    "paired": paired_power,
    "ranking": ranking_power,
    "table": table_power,
}


# what each design's power line imports at its first use: a sweep imports it beside the worker that
# composes its cases (popfair.sweep.in_process.warm_up), not alone after composing
POWER_IMPORTS: dict[str, tuple[str, ...]] = {
    "population": ("statsmodels.stats.power",),
    "paired": (),  # McNemar from scipy.special (popfair.estimate.light_stats), imported with this module
    "ranking": ("popfair.estimate.ranking.power",),
    "table": ("statsmodels.stats.power", "statsmodels.stats.proportion", "scipy.stats"),
}


def plan_power(
    design: str,
    sample: Any,
    settings: PowerSettings,
    previous: PreviousRun | None = None,
    scale: ScoreScale | None = None,
) -> PowerPlan | None:
    """The power line of a case of `design` (None when the design has none, or plan.enabled is false);
    `scale`: the screener's score scale, for the population design's score SD."""
    if not settings.enabled or design not in POWER:
        return None
    if design == "population":
        return population_power(sample, settings, previous, scale)
    return POWER[design](sample, settings, previous)
