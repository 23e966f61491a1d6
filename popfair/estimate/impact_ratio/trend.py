"""Impact ratios by period (`table.period`: month, quarter or year): each period's LL144 tables with
the same reference-aware CIs as the whole table's (`impact_ratios_from_counts` on that period's
counts), the test of change between periods (`popfair.estimate.impact_ratio.change`), what changed in
plain words, the trend chart (a `Plot` of kind "trend") and one MLflow step per period."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import DataError
from popfair.core.types import Plot
from popfair.estimate.impact_ratio.change import TESTED_DIMENSIONS, change_tests
from popfair.estimate.impact_ratio.labels import DIMENSION_TITLES, category_label, markdown_table, metric_key
from popfair.estimate.impact_ratio.ratios import impact_ratios_from_counts
from popfair.estimate.impact_ratio.settings import UNKNOWN, ImpactRatioSettings
from popfair.estimate.impact_ratio.table import ImpactRatios

TREND_COLUMNS = [
    "period",
    "metric",
    "dimension",
    "category",
    "status",
    "is_reference",
    "n_applicants",
    "n_selected",
    "rate",
    "rate_ci_low",
    "rate_ci_high",
    "impact_ratio",
    "ci_low",
    "ci_high",
    "flag",
]


def period_start(label: str) -> dt.date:
    """The first day of a period label: 2024-03 (month), 2024-Q3 (quarter) or 2024 (year)."""
    if "-Q" in label:
        year, quarter = label.split("-Q")
        return dt.date(int(year), 3 * int(quarter) - 2, 1)
    if "-" in label:
        year, month = label.split("-")
        return dt.date(int(year), int(month), 1)
    return dt.date(int(label), 1, 1)


@dataclass
class PeriodRatios:
    """The LL144 tables of each period and the test of change between them.

    by_period: period label -> its `ImpactRatios`; changes: per metric x dimension x period (from
    the second) the test against the earlier periods (statistic, df, p_value, p_holm, flagged, note)
    and, for flagged periods, what moved (`moved`); overall: per metric x dimension the test over
    every period."""

    period: str  # month | quarter | year
    periods: list[str]
    by_period: dict[str, ImpactRatios]
    changes: pd.DataFrame
    overall: pd.DataFrame
    settings: ImpactRatioSettings
    notes: list[str] = field(default_factory=list)

    def table(self) -> pd.DataFrame:
        """One row per period x metric x dimension x category (unknown rows left out)."""
        frames = [r.table.assign(period=p) for p, r in self.by_period.items()]
        table = pd.concat(frames, ignore_index=True)
        return table.loc[table["status"] != "unknown", TREND_COLUMNS].reset_index(drop=True)

    def flagged(self) -> pd.DataFrame:
        return self.changes[self.changes["flagged"].astype(bool)]

    def sentences(self) -> list[str]:
        """What changed, by period, in plain words (the report's and the console's wording)."""
        level = round((1 - self.settings.alpha) * 100)
        lines = []
        metrics = list(dict.fromkeys(self.changes["metric"])) if len(self.changes) else []
        for period in self.periods[1:]:
            rows = self.changes[self.changes["period"] == period]
            moved = [r for r in rows.itertuples() if r.flagged]
            if moved:
                parts = [
                    f"{DIMENSION_TITLES[r.dimension].lower()}: {r.moved} (p = {r.p_holm:.3g}, Holm-adjusted)"
                    for r in moved
                ]
                lines.append(f"{period}: impact ratios changed against the earlier periods; " + "; ".join(parts) + ".")
            elif rows["p_holm"].notna().any():
                lines.append(f"{period}: no change in impact ratios against the earlier periods at the {level}% level.")
            else:
                notes = "; ".join(dict.fromkeys(rows["note"].dropna().astype(str))) or "not tested"
                lines.append(f"{period}: {notes}.")
        for row in self.overall.itertuples():
            if np.isfinite(row.p_value):
                lines.append(
                    f"Over all {len(self.periods)} periods ({row.metric}, {DIMENSION_TITLES[row.dimension].lower()}): "
                    f"likelihood-ratio test of category x period, chi2 = {row.statistic:.2f} on {row.df} df, "
                    f"p = {row.p_value:.3g}."
                )
        if len(metrics) > 1:
            lines.append(f"Tested for each of {', '.join(metrics)}.")
        return lines

    def markdown(self) -> str:
        """The per-period ratios (one table per metric x dimension: categories x periods) and the tests."""
        lines = [f"# Impact ratios by {self.period}", ""]
        lines += [f"- {s}" for s in self.sentences()]
        table = self.table()
        for (metric, dimension), block in table.groupby(["metric", "dimension"], sort=False):
            wide = block.assign(
                cell=[
                    "excluded" if s == "excluded" else (f"{r:.3f} [{lo:.2f}, {hi:.2f}]" if np.isfinite(r) else "")
                    for s, r, lo, hi in zip(block["status"], block["impact_ratio"], block["ci_low"], block["ci_high"])
                ],
                category=[category_label(c) for c in block["category"]],
            ).pivot(index="category", columns="period", values="cell")
            wide = wide.reindex(columns=[p for p in self.periods if p in wide.columns]).fillna("")
            lines += ["", f"## {metric}: {DIMENSION_TITLES[dimension]}", "", markdown_table(wide.reset_index())]
        if len(self.changes):
            shown = self.changes.drop(columns=["moved"], errors="ignore").round(4)
            lines += ["", "## Tests of change against the earlier periods", "", markdown_table(shown)]
        return "\n".join(lines) + "\n"

    def plot(self) -> Plot:
        """Rates and impact ratios by period with their CIs (the first metric), flagged periods shaded."""
        table = self.table()
        metric = table["metric"].iloc[0]
        shown = table[(table["metric"] == metric) & (table["status"] == "included")]
        flagged = self.flagged()
        return Plot(
            "trend",
            shown.assign(category=[category_label(c) for c in shown["category"]]),
            title=f"{metric} by {self.period} with {round((1 - self.settings.alpha) * 100)}% bootstrap CIs",
            options={
                "periods": list(self.periods),
                "dimensions": {d: DIMENSION_TITLES[d] for d in TESTED_DIMENSIONS if (shown["dimension"] == d).any()},
                "flag_below": self.settings.flag_below,
                "flagged": {
                    d: sorted(set(flagged.loc[(flagged["metric"] == metric) & (flagged["dimension"] == d), "period"]))
                    for d in TESTED_DIMENSIONS
                },
            },
        )

    def steps(self) -> list[tuple[int, int, dict[str, float]]]:
        """MLflow steps, one per period: (step, timestamp in ms of the period's first day, metrics)."""
        out = []
        for step, period in enumerate(self.periods):
            ratios = self.by_period[period]
            metrics: dict[str, float] = {"period.n_applicants": float(ratios.n)}
            for (metric, dimension), block in ratios.included().groupby(["metric", "dimension"], sort=False):
                prefix = f"period.{metric}.{dimension}"
                metrics[f"{prefix}.min_ratio"] = float(block["impact_ratio"].min())
                for row in block.itertuples():
                    name = f"{prefix}.{metric_key(row.category)}"
                    for key, value in (
                        ("rate", row.rate),
                        ("ratio", row.impact_ratio),
                        ("ci_low", row.ci_low),
                        ("ci_high", row.ci_high),
                    ):
                        metrics[f"{name}.{key}"] = float(value)
            for row in self.changes[self.changes["period"] == period].itertuples():
                metrics[f"period.{row.metric}.{row.dimension}.change_p_holm"] = float(row.p_holm)
            start = dt.datetime.combine(period_start(period), dt.time(), dt.timezone.utc)
            out.append((step, int(start.timestamp() * 1000), {k: v for k, v in metrics.items() if math.isfinite(v)}))
        return out

    def metrics(self) -> dict[str, float]:
        """Run-level summary: how many periods, how many flagged changes, the overall tests."""
        out = {"periods.n": float(len(self.periods)), "periods.n_changes_flagged": float(len(self.flagged()))}
        for row in self.overall.itertuples():
            out[f"periods.{row.metric}.{row.dimension}.change_p_value"] = float(row.p_value)
        return out

    def tags(self) -> dict[str, str]:
        flagged = self.flagged()
        listed = "; ".join(f"{r.period} {r.dimension} ({r.metric})" for r in flagged.itertuples())
        return {"table.period": self.period, "periods.changes_flagged": listed or "none"}

    def artifacts(self) -> dict[str, Any]:
        return {
            "periods/table.csv": self.table().set_index(["period", "metric", "dimension", "category"]),
            "periods/changes.csv": self.changes.set_index(["metric", "dimension", "period"]),
            "periods/overall.csv": self.overall.set_index(["metric", "dimension"]),
            "periods/summary.md": self.markdown(),
            "periods/trend.png": self.plot(),
        }


def impact_ratios_by_period(
    counts: pd.DataFrame,
    *,
    period: str,
    outcome: str = "callback",
    thresholds: Mapping[str, float] | None = None,
    cluster: str | None = None,
    settings: ImpactRatioSettings | None = None,
) -> PeriodRatios:
    """Each period's LL144 tables and the test of change between periods.

    Parameters
    ----------
    counts : DataFrame
        As `impact_ratios_from_counts` takes them, with a `period` column (labels that sort in time
        order: 2024-03, 2024-Q1, 2024).
    period : {"month", "quarter", "year"}
        What a period is (for the wording and the chart).
    outcome, thresholds, cluster, settings
        As for `impact_ratios_from_counts`; score cutoffs (thresholds) are the whole table's.
    """
    settings = settings or ImpactRatioSettings()
    if "period" not in counts.columns:
        raise DataError(f"counts by period need a period column; they have {sorted(map(str, counts.columns))}")
    periods = sorted(str(p) for p in counts["period"].dropna().unique())
    if not periods:
        raise DataError("table.period: no row has a date, so no period")
    by_period = {
        p: impact_ratios_from_counts(
            counts[counts["period"] == p].drop(columns="period"),
            outcome=outcome,
            thresholds=thresholds,
            cluster=cluster,
            settings=settings,
            require_comparison=False,  # a period of one category says so in its notes; the others still count
        )
        for p in periods
    }
    cells = pd.concat(
        [
            r.table.loc[
                (r.table["status"] == "included") & r.table["dimension"].isin(TESTED_DIMENSIONS),
                ["metric", "dimension", "category", "n_applicants", "n_selected"],
            ].assign(period=p)
            for p, r in by_period.items()
        ],
        ignore_index=True,
    ).rename(columns={"n_applicants": "n", "n_selected": "selected"})
    cells = cells[cells["category"] != UNKNOWN]
    changes, overall = change_tests(cells, periods, settings.alpha)
    changes["moved"] = [
        _moved(cells, r.metric, r.dimension, periods, r.period) if r.flagged else "" for r in changes.itertuples()
    ]
    notes = []
    if len(periods) == 1:
        notes.append(f"table.period={period}: the rows span one {period} ({periods[0]}); nothing to compare")
    return PeriodRatios(period, periods, by_period, changes, overall, settings, notes)


def _moved(cells: pd.DataFrame, metric: str, dimension: str, periods: list[str], period: str) -> str:
    """The categories whose impact ratio moved most in `period` against the earlier periods pooled:
    'Black or African American 0.93 -> 0.61' (point estimates; largest move first, at most three)."""
    block = cells[(cells["metric"] == metric) & (cells["dimension"] == dimension)]
    earlier = block[block["period"].isin(periods[: periods.index(period)])].groupby("category")[["n", "selected"]].sum()
    now = block[block["period"] == period].groupby("category")[["n", "selected"]].sum()
    both = earlier.merge(now, left_index=True, right_index=True, suffixes=("_before", "_now"))
    both = both[(both["n_before"] > 0) & (both["n_now"] > 0)]
    if both.empty:
        return "no category in both"
    before = both["selected_before"] / both["n_before"]
    after = both["selected_now"] / both["n_now"]
    ratio_before = before / before.max() if before.max() > 0 else before * np.nan
    ratio_after = after / after.max() if after.max() > 0 else after * np.nan
    move = (ratio_after - ratio_before).dropna()
    order = move.abs().sort_values(ascending=False).index[:3]
    return (
        ", ".join(
            f"{category_label(c)} {'fell' if move[c] < 0 else 'rose'} {ratio_before[c]:.2f} -> {ratio_after[c]:.2f}"
            for c in order
            if abs(move[c]) >= 0.005
        )
        or "rate ratios moved, impact ratios by less than 0.005"
    )
