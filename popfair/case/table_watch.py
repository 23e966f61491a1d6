"""One look of a watch over a table of decisions that grows (`table.watch=true`), and the by-period
analysis of a table case (`table.period`).

A scheduler (cron, Airflow, a CI job) runs the same command again and again:

    python -m popfair experiment=table_audit table.path=decisions.csv table.columns.outcome=hired \\
        table.columns.sex=gender table.columns.race=ethnicity table.columns.date=decided \\
        table.period=quarter table.watch=true

Each run is one look. It reads only the rows added since the last look (`popfair.design.table.
watermark`), maps and checks them as any table case does, adds their counts to the state file, and
then asks, for each window (each period when table.period is set, else every row watched) and each
of sex and race/ethnicity, whether some category's impact ratio lies below table audit's four-fifths
line (estimator.flag_below) with anytime-valid confidence: the upper end of its confidence sequence
(`popfair.estimate.sequential.counts.CountRates`, at estimator.alpha split over the two dimensions)
is below the line. A confidence sequence holds at every look at once, so however often the
scheduler looks, a window whose impact ratios are all at or above the line raises the alert with
probability at most alpha.

The look prints one line, logs an MLflow run (tag `watch.alert`, the look's counts, the interval's
bounds at every look as steps) and exits with status EXIT_ALERT when a boundary is crossed (0: no
alert; 2: an error, nothing advanced). A look without new rows prints its line, logs nothing and
exits with the state's last status."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.core.errors import ConfigError
from popfair.design.table.mapped import MappedTable, TableCounts, TableSource
from popfair.design.table.source import SOURCE, open_source, quote_identifier
from popfair.design.table.watermark import WatchState, default_state_path, new_rows, watermark_value
from popfair.estimate.impact_ratio.labels import DIMENSION_TITLES, category_label
from popfair.estimate.impact_ratio.settings import UNKNOWN, ImpactRatioSettings, Metric
from popfair.estimate.impact_ratio.trend import PeriodRatios, impact_ratios_by_period
from popfair.estimate.sequential.counts import METHOD, CountRates

EXIT_ALERT = 3  # a boundary is crossed (0: no alert; 2: an error: nothing read is lost, the watermark stays)
ALL = "all"  # the window of a watch without table.period
WATCHED_DIMENSIONS = ("sex", "race")


def periods_of(counts: TableCounts, period: str, settings: ImpactRatioSettings) -> PeriodRatios:
    """The by-period LL144 tables and the test of change of a table case's counts by period."""
    return impact_ratios_by_period(
        counts.counts,
        period=period,
        outcome=counts.outcome,
        thresholds=counts.thresholds,
        cluster=None if counts.cluster is None else "cluster",
        settings=settings,
    )


def boundaries(counts: pd.DataFrame, settings: ImpactRatioSettings) -> pd.DataFrame:
    """Per window x dimension x category: the anytime-valid interval of the impact ratio and whether
    its upper end is below settings.flag_below (`crossed`). Categories under min_category_share of the
    window's applicants, and unknown ones, are left out (as LL144 leaves them out of the ratios)."""
    rows = []
    for window, block in counts.groupby("window", sort=True):
        dimensions = [d for d in WATCHED_DIMENSIONS if (block[d] != UNKNOWN).any()]
        total = float(block["n"].sum())
        for dimension in dimensions:
            cells = block[block[dimension] != UNKNOWN].groupby(dimension)[["n", "selected"]].sum()
            cells = cells[(cells["n"] > 0) & (cells["n"] / total >= settings.min_category_share)]
            if len(cells) < 2:
                continue
            rates = CountRates(
                {c: (int(r.selected), int(r.n)) for c, r in cells.iterrows()}, alpha=settings.alpha / len(dimensions)
            )
            for category, interval in rates.impact_ratios().items():
                rows.append(
                    {
                        "window": window,
                        "dimension": dimension,
                        "category": category,
                        "n": int(cells.loc[category, "n"]),
                        "selected": int(cells.loc[category, "selected"]),
                        "impact_ratio": interval.estimate,
                        "low": interval.low,
                        "high": interval.high,
                        "crossed": bool(interval.high < settings.flag_below),
                    }
                )
    columns = ["window", "dimension", "category", "n", "selected", "impact_ratio", "low", "high", "crossed"]
    return pd.DataFrame(rows, columns=columns)


@dataclass
class WatchLook:
    """What one look read and found (printed, logged, and written in the auditor's report)."""

    state_path: Path
    look: int  # 1 = the first look that read rows
    shown: str  # the rows read, in words
    rows_read: int
    rows_used: int
    rows_total: int  # every row counted since the watch began
    bounds: pd.DataFrame  # `boundaries` of every window after this look
    history: list[dict[str, Any]]  # every look's record (the state's `looks`)
    settings: ImpactRatioSettings
    period: str | None = None  # table.period: each period is a window of its own
    windows: list[str] = field(default_factory=list)  # the windows this look added rows to

    @property
    def crossed(self) -> pd.DataFrame:
        return self.bounds[self.bounds["crossed"]]

    @property
    def alert(self) -> bool:
        return bool(len(self.crossed))

    def first_crossed(self, key: str) -> int:
        return min((r["look"] for r in self.history if key in r.get("crossed", [])), default=self.look)

    def alert_lines(self) -> list[str]:
        level = round((1 - self.settings.alpha) * 100)
        return [
            f"{'' if r.window == ALL else r.window + ' '}{DIMENSION_TITLES[r.dimension].lower()}: "
            f"{category_label(r.category)} impact ratio {r.impact_ratio:.2f}, anytime-valid {level}% interval "
            f"[{r.low:.2f}, {r.high:.2f}] below {self.settings.flag_below:g} "
            f"(first crossed at look {self.first_crossed(_key(r))})"
            for r in self.crossed.itertuples()
        ]

    def line(self) -> str:
        """The one line a scheduler's log shows."""
        if self.rows_read:
            head = f"popfair watch: look {self.look}, {self.shown}: {self.rows_read:,} new rows read"
            head += f" ({self.rows_used:,} used; {self.rows_total:,} counted in all)"
        else:
            head = f"popfair watch: no rows added since look {self.look} ({self.rows_total:,} counted in all)"
        if self.alert:
            return f"{head}; ALERT (exit {EXIT_ALERT}): " + "; ".join(self.alert_lines())
        smallest = self.bounds["high"].min() if len(self.bounds) else float("nan")
        margin = f"; the lowest interval's upper end is {smallest:.2f}" if pd.notna(smallest) else ""
        return f"{head}; no alert: no impact ratio is below {self.settings.flag_below:g} with anytime-valid confidence{margin}"

    def sentences(self) -> list[str]:
        """The report's wording."""
        level = round((1 - self.settings.alpha) * 100)
        lines = [
            f"This is look {self.look} of a watch over the table (state file {self.state_path}): {self.rows_read:,} "
            f"rows were added since the previous look ({self.rows_used:,} used), {self.rows_total:,} counted since "
            "the watch began.",
            f"Alert rule: a category's impact ratio is below {self.settings.flag_below:g} with anytime-valid "
            f"{level}% confidence (the upper end of its confidence sequence, {METHOD}, is below the line), within "
            + (f"each {self.period} on its own" if self.period else "every row watched")
            + f"; a window whose ratios are all at or above the line raises it with probability at most "
            f"{self.settings.alpha:g}, however often the table is looked at.",
        ]
        if self.alert:
            lines.append("The alert fired: " + "; ".join(self.alert_lines()) + ".")
        else:
            lines.append("No alert fired at this look.")
        earlier = [r["look"] for r in self.history if r.get("alert") and r["look"] != self.look]
        if earlier:
            lines.append(f"Earlier looks with an alert: {', '.join(map(str, earlier))}.")
        return lines

    def metrics(self) -> dict[str, float]:
        """This look's own figures (rows counted, the alert and the lowest upper end are steps: one
        per look, the last one this look's)."""
        return {
            "watch.look": float(self.look),
            "watch.rows_new": float(self.rows_read),
            "watch.n_crossed": float(len(self.crossed)),
        }

    def tags(self) -> dict[str, str]:
        tags = {
            "watch.alert": str(self.alert).lower(),
            "watch.look": str(self.look),
            "watch.state": str(self.state_path),
        }
        if self.alert:
            tags["watch.alert_text"] = "; ".join(self.alert_lines())[:4900]
        return tags

    def steps(self) -> list[tuple[int, int, dict[str, float]]]:
        """One step per look so far: rows counted, the lowest upper end of the intervals, the alert."""
        out = []
        for record in self.history:
            stamp = int(dt.datetime.fromisoformat(record["at"]).timestamp() * 1000)
            values = {"watch.rows_total": float(record["rows_total"]), "watch.alert": float(record["alert"])}
            if record.get("min_upper") is not None:
                values["watch.min_ratio_upper"] = float(record["min_upper"])
            out.append((int(record["look"]), stamp, values))
        return out

    def artifacts(self) -> dict[str, Any]:
        return {
            "watch/bounds.csv": self.bounds.set_index(["window", "dimension", "category"]),
            "watch/state.json": self.state_path.read_text(encoding="utf-8"),
        }


def _key(row: Any) -> str:
    return f"{row.window}|{row.dimension}|{row.category}"


@dataclass
class WatchOutcome:
    """What a look gives the table case: the look, the rows it read, and the tables over every row
    counted so far (None when the look found no new rows: nothing is logged then)."""

    look: WatchLook
    source: TableSource
    ratios: Any = None  # ImpactRatios
    periods: PeriodRatios | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def watch_look(case: Any) -> WatchOutcome:
    """One look (see the module docstring); `case` is the TableCase."""
    settings = case.table
    if case.estimator.name != "impact_ratio":
        raise ConfigError(
            f"table.watch: watches impact ratios; use estimator=impact_ratio (experiment=table_audit), not {case.estimator.name}"
        )
    ratio_settings = case.estimator.settings
    path = Path(settings.watch_state).expanduser() if settings.watch_state else default_state_path(settings, Path.cwd())
    state = WatchState.load(path, settings)
    case.tracker.prepare()
    batch = new_rows(settings, state)
    read = _read(case, batch, state) if batch is not None else None
    looks = list(state.looks)
    if read is None:  # nothing new: the state's last word stands
        last = looks[-1] if looks else None
        look = WatchLook(
            path,
            int(last["look"]) if last else 0,
            "no rows added since the last look",
            0,
            0,
            int(state.counts["n"].sum()),
            boundaries(state.counts, ratio_settings),
            looks,
            ratio_settings,
            settings.period,
        )
        return WatchOutcome(look, _no_rows(settings))
    assert batch is not None
    mapped_record, counts, advance = read
    state.add(counts)
    bounds = boundaries(state.counts, ratio_settings)
    number = (int(looks[-1]["look"]) if looks else 0) + 1
    touched = sorted(set(counts["window"]))
    now = bounds[bounds["window"].isin(touched)]
    record = {
        "look": number,
        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "rows_read": mapped_record.rows_read,
        "rows_used": mapped_record.rows_used,
        "rows_dropped": mapped_record.rows_dropped,
        "rows_total": int(state.counts["n"].sum()),
        "windows": touched,
        "min_upper": None if now.empty else float(now["high"].min()),
        "crossed": [_key(r) for r in bounds[bounds["crossed"]].itertuples()],
        "alert": bool(bounds["crossed"].any()),
        **advance,
    }
    for key, value in advance.items():
        setattr(state, key, value)
    state.looks.append(record)
    state.save()  # the rows are counted: the next look starts after them
    look = WatchLook(
        path,
        number,
        batch.shown,
        mapped_record.rows_read,
        mapped_record.rows_used,
        record["rows_total"],
        bounds,
        state.looks,
        ratio_settings,
        settings.period,
        windows=touched,
    )
    return _cumulative(case, state, mapped_record, look)


def _read(case: Any, batch: Any, state: WatchState) -> tuple[TableSource, pd.DataFrame, dict[str, Any]] | None:
    """Map and count the new rows; None when there are none. What the state advances to comes back too."""
    settings = case.table
    try:
        source = open_source(batch.settings, shown_as=batch.shown)
        try:
            row = source.sql(f"SELECT count(*) FROM {SOURCE}").fetchone()
            if not row or not row[0]:
                return None
            mapped = MappedTable(batch.settings, source, case.report_dir)
            if mapped.coding.outcome != "callback":
                raise ConfigError(
                    f"table.watch: needs selected / not selected outcomes (binary, label or rank); "
                    f"{settings.columns.outcome!r} holds scores, whose median cutoff moves as rows arrive"
                )
            if state.outcome_kind is not None and mapped.coding.kind != state.outcome_kind:
                raise ConfigError(
                    f"table.outcome.kind: the new rows read as {mapped.coding.kind}, earlier looks' as "
                    f"{state.outcome_kind}; set table.outcome.kind={state.outcome_kind} so every look codes alike"
                )
            counts = mapped.counts([Metric("selection", "selected")], by_period=settings.period is not None).counts
            advance: dict[str, Any] = {"outcome_kind": mapped.coding.kind}
            if settings.path is not None:
                advance |= {"offset": batch.offset, "prefix_sha256": batch.prefix_sha256, "header": batch.header}
            else:
                top = source.sql(f"SELECT max({quote_identifier(str(settings.watch_column))}) FROM {SOURCE}").fetchone()
                advance["watermark"] = watermark_value(top[0] if top else None)
            record = mapped.record
        finally:
            source.close()
    finally:
        batch.close()
    window = counts["period"].astype(str) if "period" in counts else ALL
    counts = counts.assign(window=window).rename(columns={"selection": "selected"})
    counts = (
        counts.astype({"sex": str, "race": str})
        .groupby(["window", "sex", "race"], as_index=False)[["n", "selected"]]
        .sum()
    )
    return record, counts, advance


def _no_rows(settings: Any) -> TableSource:
    return TableSource(settings.kind, str(settings.path or settings.name or "query"), "watch", {}, 0, 0, 0, 0)


def _cumulative(case: Any, state: WatchState, record: TableSource, look: WatchLook) -> WatchOutcome:
    """The tables over every row counted so far: LL144 (applicants independent: the state keeps no
    clusters) and, with table.period, by period."""
    import time

    from popfair.estimate.impact_ratio.ratios import impact_ratios_from_counts

    start = time.perf_counter()
    counts = state.counts.rename(columns={"selected": "selection"})
    total = counts.groupby(["sex", "race"], as_index=False)[["n", "selection"]].sum()
    settings = case.estimator.settings
    # the first looks may hold one category: the notes say so, and the watch goes on
    ratios = impact_ratios_from_counts(total, outcome="callback", settings=settings, require_comparison=False)
    outcome = WatchOutcome(look, record, ratios)
    outcome.notes.append(
        "watch: the tables cover every row counted since the watch began; applicants are treated as independent "
        "(the watch's state keeps counts per category, not per cluster)"
    )
    if case.table.period is not None:
        by_period = counts.rename(columns={"window": "period"})
        outcome.periods = impact_ratios_by_period(
            by_period, period=case.table.period, outcome="callback", settings=settings
        )
    outcome.seconds = time.perf_counter() - start
    return outcome
