"""A table's rows in popfair's terms: outcomes coded, categories mapped, problems found, in SQL.

`MappedTable(settings, source)` profiles the filtered rows (distinct sex and race values with their
counts, the outcome column's values), maps every raw category value (a value no mapping covers is
an error listing each such value with its count, or, with `table.unmapped=unknown`, counted as
unknown and reported), codes the outcome, and finds row-level problems (outcome values that are not
what the column holds, duplicate applicant ids, missing clusters), which go to a by-row
`table_report.csv`. Then `counts()` reduces the rows to cluster x sex x race counts for the LL144
inference, and `frame()` gives the row-level frame the other estimators take.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.core.errors import ConfigError, DataError
from popfair.design.table.coding import FILTERED, TableCoding, sql_literal
from popfair.design.table.settings import UNKNOWN, TableSettings
from popfair.design.table.source import ROW_HASH, SOURCE, Source, quote_identifier

log = logging.getLogger("popfair")

MAPPED = "mapped_rows"
REPORT_NAME = "table_report.csv"
# The frame's column for each single-column role: popfair's own names, so every estimator's defaults
# (sex_column gender, race_column race, paired_gap's pair_key and posting_id) fit a table as they fit
# a generated case.
FRAME_NAMES = {
    "outcome": "y",
    "sex": "gender",
    "race": "race",
    "applicant_id": "applicant_id",
    "cluster": "cluster",
    "date": "date",
    "pair_id": "pair_key",
    "posting_id": "posting_id",
}
DATE_PROBLEM = "date is missing or not a date (table.period needs one per row: YYYY-MM-DD or a timestamp)"
# table.period -> the DuckDB expression of a row's period label (sorts in time order as text)
PERIOD_SQL = {
    "month": "strftime(TRY_CAST(date AS DATE), '%Y-%m')",
    "quarter": "CAST(year(TRY_CAST(date AS DATE)) AS VARCHAR) || '-Q' || CAST(quarter(TRY_CAST(date AS DATE)) AS VARCHAR)",
    "year": "CAST(year(TRY_CAST(date AS DATE)) AS VARCHAR)",
}
CODE = {"sex": "sex_code__", "race": "race_code__"}  # integer category columns of the mapped view (counts only)


@dataclass
class TableSource:
    """Where a table case's data came from and what was done to it; logged with the run and shown
    in the auditor's report.

    kind: "historical" (an employer's or vendor's records) or "test" (generated data);
    description: the file path, or the database URL without password and the table or query;
    fingerprint: the file's sha256, or a checksum over the rows read from a database;
    rows_read / rows_after_filters / rows_dropped / rows_used: the denominators at each step;
    date_min / date_max: the date column's range over the rows used (None without one)."""

    kind: str
    description: str
    format: str
    fingerprint: dict[str, str]
    rows_read: int
    rows_after_filters: int
    rows_dropped: int
    rows_used: int
    filters: list[str] = field(default_factory=list)
    date_column: str | None = None
    date_min: str | None = None
    date_max: str | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "description": self.description,
            "format": self.format,
            **{f"fingerprint.{k}": v for k, v in self.fingerprint.items()},
            "rows_read": self.rows_read,
            "rows_after_filters": self.rows_after_filters,
            "rows_dropped": self.rows_dropped,
            "rows_used": self.rows_used,
            "filters": "; ".join(self.filters),
            "date_column": self.date_column,
            "date_min": self.date_min,
            "date_max": self.date_max,
        }


@dataclass
class TableCounts:
    """A table reduced for the LL144 inference: one row per cluster x sex x race cell present.

    counts: columns cluster (text; "all" without a cluster column), sex, race (popfair categories
    or "unknown"), n, and one count column per metric (`selection`, or for scores
    `scoring_median` and the top-share / minimum-score rules), named as `ImpactRatios` names them.
    thresholds: metric -> the cutoff used on this sample (nan for selection)."""

    counts: pd.DataFrame
    outcome: str  # callback | score
    thresholds: dict[str, float]
    cluster: str | None
    source: TableSource


class MappedTable(TableCoding):
    """The filtered, mapped rows of a table source (see the module docstring).

    Parameters
    ----------
    settings : TableSettings
        The `table` config node, checked.
    source : Source
        The opened source (`popfair.design.table.source.open_source`).
    report_dir : Path
        Where `table_report.csv` goes when rows have problems.

    Attributes
    ----------
    record : TableSource
        Source, fingerprint, row counts and date range.
    mapping : DataFrame
        Every raw sex / race value seen: role, column, raw, rows, category (logged with the run).
    coding
        How the outcome column is read (kind: binary, label, score or rank).
    report_path : Path or None
        `table_report.csv`, when rows had problems.
    """

    def __init__(self, settings: TableSettings, source: Source, report_dir: Path) -> None:
        self.settings, self.source, self.report_dir = settings, source, report_dir
        self.columns = settings.columns
        self.notes: list[str] = []
        self.report_path: Path | None = None
        described = source.fetch(f"SELECT column_name, column_type FROM (DESCRIBE {SOURCE})")
        self.types = dict(zip(described["column_name"], described["column_type"]))
        rows_read = self._count(SOURCE)
        if rows_read == 0:
            raise DataError(
                f"{source.key}: {source.description} has no rows"
                + (f" (only column names: {_listed(source.columns)})" if source.kind != "database" else "")
            )
        self.filters = self._filters()
        where = " AND ".join(f"({f})" for f in self.filters) or "true"
        source.sql(f"CREATE VIEW {FILTERED} AS SELECT * FROM {SOURCE} WHERE {where}", "table.where")
        rows_after = self._count(FILTERED, "table.where")
        if rows_after == 0:
            raise ConfigError(
                f"table.where: no rows left after the filters ({'; '.join(self.filters)}); {rows_read:,} rows read"
            )
        rows_after = self._duplicates(where, rows_after)
        self.mapping = self._map_categories()
        # each dimension's categories (unknown last): the codes of the counts' cells
        self.levels = {
            role: [*sorted(set(self.mapping.loc[self.mapping["role"] == role, "category"]) - {UNKNOWN}), UNKNOWN]
            for role in ("sex", "race")
        }
        self.coding = self._outcome_coding()
        problems = self._problem_rows()
        self.rows_dropped = 0
        if len(problems):
            self.report_path = self._write_report(problems)
            what = "; ".join(f"{n:,} {p}" for p, n in problems.groupby("problem").size().items())
            if settings.bad_rows == "error":
                raise DataError(
                    f"table.bad_rows: {problems['source_row'].nunique():,} rows have problems ({what}); "
                    f"each is listed in {self.report_path}; fix the table, or set table.bad_rows=drop "
                    "to leave them out (they are counted and reported)"
                )
            self.rows_dropped = int(problems["source_row"].nunique())
            self.notes.append(f"{self.rows_dropped:,} rows left out for problems ({what}); see {REPORT_NAME}")
        self._create_mapped(drop=self.rows_dropped > 0)
        rows_used = self._count(MAPPED)
        if rows_used == 0:
            raise DataError(
                f"table.bad_rows: no rows left: every one of {rows_after:,} rows has a problem ({self.report_path})"
            )
        date_min, date_max = self._date_range()
        self.record = TableSource(
            kind=settings.kind,
            description=source.description,
            format=source.kind,
            fingerprint=source.finish_fingerprint(),
            rows_read=rows_read,
            rows_after_filters=rows_after,
            rows_dropped=self.rows_dropped,
            rows_used=rows_used,
            filters=self.filters,
            date_column=self.columns.date,
            date_min=date_min,
            date_max=date_max,
            notes=self.notes,
        )

    def _duplicates(self, where: str, rows: int) -> int:
        """Exact duplicate rows, where no applicant id column tells applicants apart: counted, then by
        table.dedupe warned about (a note), stopped on, dropped (one of each kept) or kept. The rows left."""
        if ROW_HASH not in self.types:  # an applicant id column, table.dedupe=keep, or a database source
            return rows
        distinct = self._count(f"(SELECT DISTINCT {ROW_HASH} FROM {FILTERED})", "table.dedupe")
        duplicates = rows - distinct
        if duplicates == 0:
            return rows
        what = (
            f"{duplicates:,} of {rows:,} rows are exact copies of another row, and no applicant id column "
            "(table.columns.applicant_id) tells whether they are different applicants"
        )
        if self.settings.dedupe == "error":
            raise DataError(
                f"table.dedupe: {what}; set table.dedupe=drop to keep one of each, table.dedupe=keep to count "
                "them as separate applicants, or name the applicant id column"
            )
        if self.settings.dedupe == "drop":
            self.source.sql(
                f"CREATE OR REPLACE VIEW {FILTERED} AS SELECT * FROM {SOURCE} WHERE {where} "
                f"QUALIFY row_number() OVER (PARTITION BY {ROW_HASH}) = 1",
                "table.dedupe",
            )
            self.notes.append(f"{duplicates:,} exact duplicate rows left out (table.dedupe=drop): one of each kept")
            return distinct
        note = f"{what}: all counted (table.dedupe=drop keeps one of each, table.dedupe=error stops)"
        log.warning("table: %s", note)
        self.notes.append(note)
        return rows

    # ---- outputs -------------------------------------------------------------------------------

    def counts(self, metrics: list[Any] | None = None, *, by_period: bool = False) -> TableCounts:
        """Cluster x sex x race counts with one selected-count column per metric (`metrics`: the
        impact-ratio metrics, `popfair.estimate.impact_ratio.settings.Metric`; default: selection, or the
        LL144 scoring rate for scores). With `by_period` (table.period set) the cells are also split
        by a `period` column (2024-03, 2024-Q1 or 2024); score cutoffs stay the whole table's, so
        the periods' rates are comparable."""
        from popfair.estimate.impact_ratio.settings import Metric

        if self.columns.sex is None and self.columns.race is None:
            raise ConfigError(
                "table.columns.sex: impact ratios need a sex or race/ethnicity column (table.columns.sex, table.columns.race)"
            )
        outcome = self.coding.outcome
        if metrics is None:
            metrics = (
                [Metric("selection", "selected")]
                if outcome == "callback"
                else [Metric("scoring_median", "above_median")]
            )
        thresholds: dict[str, float] = {}
        sums = []
        for metric in metrics:
            if metric.rule == "selected":
                thresholds[metric.name], condition = math.nan, "y = 1"
            else:
                cutoff, strict = self._cutoff(metric)
                thresholds[metric.name] = cutoff
                condition = f"y {'>' if strict else '>='} {cutoff!r}"
            sums.append(f"count(*) FILTER (WHERE {condition})::BIGINT AS {quote_identifier(metric.name)}")
        cluster_column = self.columns.cluster or self.columns.posting_id
        if cluster_column is None:
            cluster = "'all'"
        else:
            cluster = f"CAST({'cluster' if self.columns.cluster is not None else 'posting_id'} AS VARCHAR)"
        # one integer per sex x race cell (category codes), named after the aggregation: cheaper to
        # group 10 million rows by than two text columns
        n_race = len(self.levels["race"])
        sex = CODE["sex"] if self.columns.sex is not None else "0"
        race = CODE["race"] if self.columns.race is not None else "0"
        period = f"{PERIOD_SQL[str(self.settings.period)]} AS period, " if by_period else ""
        counts = self.source.fetch(
            f"SELECT {period}{cluster} AS cluster, ({sex}) * {n_race} + ({race}) AS cell, count(*)::BIGINT AS n, "
            f"{', '.join(sums)} FROM {MAPPED} GROUP BY ALL"  # unordered: the inference sorts clusters and categories
        )
        cell = counts.pop("cell").to_numpy()
        at = 1 + by_period
        counts.insert(at, "sex", pd.Categorical.from_codes(cell // n_race, self.levels["sex"]))
        counts.insert(at + 1, "race", pd.Categorical.from_codes(cell % n_race, self.levels["race"]))
        return TableCounts(counts, outcome, thresholds, cluster_column, self.record)

    def frame(self) -> pd.DataFrame:
        """One row per applicant used, in source order: y, gender, race, cluster, posting_id, pair_key,
        applicant_id, date (those mapped) and the PSE role columns under their own names."""
        codes = [CODE[r] for r in ("sex", "race") if self.columns.of(r) is not None]
        exclude = f"EXCLUDE ({', '.join(codes)})" if codes else ""
        frame = self.source.fetch(f"SELECT * {exclude} FROM {MAPPED}")
        if "y" in frame:
            frame["y"] = frame["y"].astype(float)
        return frame

    # ---- steps -----------------------------------------------------------------------------------

    def _count(self, relation: str, key: str | None = None) -> int:
        row = self.source.sql(f"SELECT count(*) FROM {relation}", key).fetchone()
        return int(row[0]) if row else 0

    def _filters(self) -> list[str]:
        s, filters = self.settings, []
        if s.where:
            filters.append(s.where)
        for key, value, op in (("date_from", s.date_from, ">="), ("date_to", s.date_to, "<=")):
            if value is None:
                continue
            if self.columns.date is None:
                raise ConfigError(f"table.{key}: needs table.columns.date (the column holding each decision's date)")
            try:
                day = pd.Timestamp(value).date().isoformat()
            except ValueError:
                raise ConfigError(f"table.{key}: {value!r} is not a date (use YYYY-MM-DD)") from None
            filters.append(f"TRY_CAST({quote_identifier(self.columns.date)} AS DATE) {op} DATE '{day}'")
        return filters

    def _problem_checks(self) -> list[tuple[str, str]]:
        """(SQL predicate on a source row, problem wording) for each row-level check."""
        checks = [(self.coding.bad, self.coding.problem)]
        for role in ("cluster", "posting_id", "pair_id"):
            column = self.columns.of(role)
            if column is not None:
                checks.append((f"{quote_identifier(column)} IS NULL", f"{role} is missing"))
        if self.settings.period is not None:  # every row needs its period
            date = quote_identifier(str(self.columns.date))
            checks.append((f"TRY_CAST({date} AS DATE) IS NULL", DATE_PROBLEM))
        return checks

    def _problem_rows(self) -> pd.DataFrame:
        """Rows with a problem, numbered as in the source (1 = first data row); empty when none."""
        checks = self._problem_checks()
        any_bad = " OR ".join(f"({c})" for c, _ in checks)
        counts = self.source.fetch(f"SELECT count(*) FILTER (WHERE {any_bad})::BIGINT AS bad FROM {FILTERED}")
        n_bad = int(counts["bad"].iloc[0])
        duplicates = 0
        ident = self.columns.applicant_id
        if ident is not None:
            dup = self.source.fetch(
                f"SELECT count(*)::BIGINT AS ids FROM (SELECT 1 FROM {FILTERED} GROUP BY {quote_identifier(ident)} HAVING count(*) > 1)",
                "table.columns.applicant_id",
            )
            duplicates = int(dup["ids"].iloc[0])
        if n_bad == 0 and duplicates == 0:
            return pd.DataFrame(columns=["source_row", "applicant_id", "column", "value", "problem"])
        # number the source rows (only on this path: it costs a pass), then list each problem row
        self.source.sql(f"CREATE TEMP TABLE numbered AS SELECT row_number() OVER () AS source_row, * FROM {SOURCE}")
        where = " AND ".join(f"({f})" for f in self.filters) or "true"
        ident_sql = f"CAST({quote_identifier(ident)} AS VARCHAR)" if ident else "NULL"
        parts = [
            f"SELECT source_row, {ident_sql} AS applicant_id, {sql_literal(self._column_of(problem))} AS column, "
            f"CAST({quote_identifier(self._column_of(problem))} AS VARCHAR) AS value, {sql_literal(problem)} AS problem "
            f"FROM numbered WHERE ({where}) AND ({condition})"
            for condition, problem in checks
        ]
        if ident is not None and duplicates:
            key = quote_identifier(ident)
            signature = f"({quote_identifier(self.columns.outcome)}, {', '.join(quote_identifier(c) for c in (self.columns.sex, self.columns.race) if c)})"
            parts.append(
                f"SELECT source_row, CAST({key} AS VARCHAR), {sql_literal(ident)}, CAST({key} AS VARCHAR), "
                "CASE WHEN count(DISTINCT " + signature + f") OVER (PARTITION BY {key}) > 1 "
                "THEN 'duplicate applicant id, rows disagree (all left out)' "
                "ELSE 'duplicate applicant id, same values (one kept)' END "
                f"FROM numbered WHERE ({where}) QUALIFY count(*) OVER (PARTITION BY {key}) > 1 "
                f"AND (count(DISTINCT {signature}) OVER (PARTITION BY {key}) > 1 "
                f"OR row_number() OVER (PARTITION BY {key} ORDER BY source_row) > 1)"
            )
        return self.source.fetch(" UNION ALL ".join(parts) + " ORDER BY source_row", "table.columns")

    def _column_of(self, problem: str) -> str:
        if problem == DATE_PROBLEM:
            return str(self.columns.date)
        for role in ("cluster", "posting_id", "pair_id"):
            if problem.startswith(role):
                return str(self.columns.of(role))
        return self.columns.outcome

    def _write_report(self, problems: pd.DataFrame) -> Path:
        self.report_dir.mkdir(parents=True, exist_ok=True)
        path = (self.report_dir / REPORT_NAME).resolve()
        problems.to_csv(path, index=False)
        return path

    def _create_mapped(self, drop: bool) -> None:
        """The view every output reads: coded outcome, mapped categories, role columns renamed."""
        select = [f"{self.coding.y} AS y"]
        for role in ("sex", "race"):
            column = self.columns.of(role)
            if column is None:
                continue
            rows = self.mapping[(self.mapping["role"] == role) & self.mapping["raw"].notna()]
            cases = " ".join(
                f"WHEN {sql_literal(raw)} THEN {sql_literal(cat)}" for raw, cat in zip(rows["raw"], rows["category"])
            )
            select.append(
                f"coalesce(CASE CAST({quote_identifier(column)} AS VARCHAR) {cases} END, '{UNKNOWN}') AS {FRAME_NAMES[role]}"
            )
            # the category's index in self.levels[role], for counts: grouping by one small integer is cheaper
            levels = self.levels[role]
            codes = " ".join(
                f"WHEN {sql_literal(raw)} THEN {levels.index(cat)}" for raw, cat in zip(rows["raw"], rows["category"])
            )
            select.append(
                f"coalesce(CASE CAST({quote_identifier(column)} AS VARCHAR) {codes} END, {levels.index(UNKNOWN)}) AS {CODE[role]}"
            )
        taken = {FRAME_NAMES[r] for r in ("outcome", "sex", "race")}
        for role in ("applicant_id", "cluster", "date", "pair_id", "posting_id"):
            column = self.columns.of(role)
            if column is not None:
                select.append(f"{quote_identifier(column)} AS {FRAME_NAMES[role]}")
                taken.add(FRAME_NAMES[role])
        if self.columns.posting_id is None and self.columns.cluster is not None:
            select.append(f"{quote_identifier(self.columns.cluster)} AS posting_id")  # paired_gap's default cluster
            taken.add("posting_id")
        mapped_names = {self.columns.of(r): FRAME_NAMES[r] for r in ("sex", "race") if self.columns.of(r)}
        for role in ("z", "b", "r"):
            for column in self.columns.of(role):
                if column in mapped_names or column in [self.columns.of(r) for r in FRAME_NAMES]:
                    continue  # a mapped column serves the role under popfair's name (roles() says which)
                if column in taken:
                    raise ConfigError(
                        f"table.columns.{role}: column {column!r} has the name popfair gives a mapped column; "
                        "rename it in the source (or in table.query)"
                    )
                select.append(quote_identifier(column))
                taken.add(column)
        where = ""
        if drop:
            checks = " OR ".join(f"({c})" for c, _ in self._problem_checks())
            where = f"WHERE NOT ({checks})"
            ident = self.columns.applicant_id
            if ident is not None:
                key = quote_identifier(ident)
                signature = f"({quote_identifier(self.columns.outcome)}, {', '.join(quote_identifier(c) for c in (self.columns.sex, self.columns.race) if c)})"
                where += (
                    f" QUALIFY count(DISTINCT {signature}) OVER (PARTITION BY {key}) = 1 "
                    f"AND row_number() OVER (PARTITION BY {key}) = 1"
                )
        self.source.sql(f"CREATE VIEW {MAPPED} AS SELECT {', '.join(select)} FROM {FILTERED} {where}", "table.columns")

    def role_column(self, name: str) -> str:
        """The frame's name for a source column named in a PSE role (a mapped one keeps popfair's name)."""
        for role in FRAME_NAMES:
            if self.columns.of(role) == name:
                return FRAME_NAMES[role]
        return name

    def _date_range(self) -> tuple[str | None, str | None]:
        if self.columns.date is None:
            return None, None
        row = self.source.sql(
            f"SELECT min(TRY_CAST(date AS DATE)), max(TRY_CAST(date AS DATE)), "
            f"count(*) FILTER (WHERE date IS NOT NULL AND TRY_CAST(date AS DATE) IS NULL) FROM {MAPPED}",
            "table.columns.date",
        ).fetchone()
        assert row is not None
        if row[2]:
            self.notes.append(
                f"date: {row[2]:,} values of {self.columns.date!r} are not dates; the range leaves them out"
            )
        return (None if row[0] is None else str(row[0])), (None if row[1] is None else str(row[1]))

    def _cutoff(self, metric: Any) -> tuple[float, bool]:
        """A score rule's cutoff on the rows used, as `popfair.estimate.impact_ratio.ratios` defines it:
        median (strictly above), top share (the ceil(share n)-th best score, ties in), minimum score."""
        if metric.rule == "min_score":
            return float(metric.value), False
        if metric.rule == "above_median":
            row = self.source.sql(f"SELECT median(y) FROM {MAPPED}").fetchone()
            assert row is not None
            return float(row[0]), True
        n = self._count(MAPPED)
        k = max(1, math.ceil(float(metric.value) * n - 1e-9))
        row = self.source.sql(f"SELECT y FROM {MAPPED} ORDER BY y DESC LIMIT 1 OFFSET {k - 1}").fetchone()
        assert row is not None
        return float(row[0]), False


def _listed(names: list[str], at_most: int = 10) -> str:
    """Names joined with commas, the first `at_most` of them and how many more."""
    more = f", ... ({len(names) - at_most} more)" if len(names) > at_most else ""
    return ", ".join(names[:at_most]) + more
