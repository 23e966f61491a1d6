"""How a table's columns are read: every raw sex / race value mapped to popfair's categories, and
the outcome column's coding (binary, label, score or rank) detected or taken from `table.outcome`,
as SQL over the filtered rows (the base of `popfair.design.table.mapped.MappedTable`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from popfair.core.errors import ConfigError
from popfair.design.table.settings import UNKNOWN, TableSettings, value_key
from popfair.design.table.source import Source, quote_identifier

FILTERED = "filtered_rows"
NUMERIC_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER")
MAX_LISTED = 8  # values named in a one-line error
MAX_CATEGORY_VALUES = 1000  # distinct raw values a sex or race column may hold (more: the wrong column)


@dataclass(frozen=True)
class _Coding:
    """The outcome column's coding: the SQL for y, the SQL predicate of a bad value, and its wording."""

    kind: str  # binary | label | score | rank
    y: str
    bad: str
    problem: str
    outcome: str  # callback | score


class TableCoding:
    """Category mapping and outcome coding of the filtered rows; `MappedTable` sets the attributes."""

    settings: TableSettings
    source: Source
    columns: Any
    types: dict[str, str]
    filters: list[str]
    notes: list[str]

    def _map_categories(self) -> pd.DataFrame:
        """Raw value -> category for every sex / race value present; unmapped values named with counts."""
        tables = []
        for role in ("sex", "race"):
            column = self.columns.of(role)
            if column is None:
                continue
            seen = self.source.fetch(
                f"SELECT CAST({quote_identifier(column)} AS VARCHAR) AS raw, count(*)::BIGINT AS rows "
                f"FROM {FILTERED} GROUP BY ALL ORDER BY rows DESC, raw",
                f"table.columns.{role}",
            )
            if len(seen) > MAX_CATEGORY_VALUES:
                raise ConfigError(
                    f"table.columns.{role}: column {column!r} has {len(seen):,} distinct values (e.g. "
                    f"{seen['raw'].head(3).tolist()}); a {role} column holds a few categories: is it the right column?"
                )
            seen["category"] = [UNKNOWN if pd.isna(v) else self.settings.category(role, v) for v in seen["raw"]]
            unmapped = seen[seen["category"].isna()]
            if len(unmapped):
                listed = ", ".join(
                    f"{v!r} ({n:,} rows)" for v, n in zip(unmapped["raw"][:MAX_LISTED], unmapped["rows"])
                )
                more = f" and {len(unmapped) - MAX_LISTED} more" if len(unmapped) > MAX_LISTED else ""
                if self.settings.unmapped == "error":
                    example = unmapped["raw"].iloc[0]
                    raise ConfigError(
                        f"table.values.{role}: no mapping covers {listed}{more} in column {column!r}; map each "
                        f"(+table.values.{role}.{value_key(example)}=<category>, or a config file for values with spaces), list it in "
                        "table.unknown_labels, or set table.unmapped=unknown to count such values as unknown"
                    )
                self.notes.append(f"{role}: values no mapping covers, counted as unknown: {listed}{more}")
                seen.loc[seen["category"].isna(), "category"] = UNKNOWN
            if (seen["category"] == UNKNOWN).all():
                raise ConfigError(
                    f"table.columns.{role}: no row of column {column!r} has a known {role} (all {int(seen['rows'].sum()):,} "
                    f"blank, unknown or unmapped); map its values in table.values.{role}, or leave table.columns.{role} unset"
                )
            seen.insert(0, "column", column)
            seen.insert(0, "role", role)
            tables.append(seen)
        return (
            pd.concat(tables, ignore_index=True)
            if tables
            else pd.DataFrame(columns=["role", "column", "raw", "rows", "category"])
        )

    def _outcome_coding(self) -> _Coding:
        column = self.columns.outcome
        o = quote_identifier(column)
        kind = self.settings.outcome.kind
        column_type = str(self.types[column]).upper()
        numeric = (
            column_type in NUMERIC_TYPES or column_type in ("FLOAT", "DOUBLE") or column_type.startswith("DECIMAL")
        )
        as_number = o if numeric else f"TRY_CAST(trim(CAST({o} AS VARCHAR)) AS DOUBLE)"
        labels = self.settings.outcome.label_of()
        if kind == "auto":
            kind = self._detect_kind(column_type, numeric, as_number, labels)
        if kind == "binary":
            if column_type == "BOOLEAN":
                return _Coding("binary", f"CAST({o} AS INTEGER)", f"{o} IS NULL", "outcome is missing", "callback")
            return _Coding(
                "binary",
                f"CAST({as_number} AS INTEGER)",
                f"({as_number}) IS NULL OR ({as_number}) NOT IN (0, 1)",
                "outcome is not 0 or 1",
                "callback",
            )
        if kind == "label":
            cases = " ".join(f"WHEN {sql_literal(k)} THEN {v}" for k, v in labels.items())
            y = f"CASE lower(trim(CAST({o} AS VARCHAR))) {cases} END"
            return _Coding(
                "label",
                y,
                f"({y}) IS NULL",
                "outcome label is in neither table.outcome.selected nor table.outcome.not_selected",
                "callback",
            )
        if kind == "score":
            return _Coding(
                "score",
                f"CAST({as_number} AS DOUBLE)",
                f"({as_number}) IS NULL OR NOT isfinite(CAST({as_number} AS DOUBLE))",
                "outcome is not a number",
                "score",
            )
        k = self.settings.outcome.k
        return _Coding(
            "rank",
            f"CAST(({as_number}) <= {k} AS INTEGER)",
            f"({as_number}) IS NULL OR ({as_number}) < 0 OR ({as_number}) <> floor({as_number})",
            "rank is not a whole number >= 0",
            "callback",
        )

    def _refuse_rank_as_score(self) -> None:
        """An outcome holding 1..k once per cluster looks like a rank (1 = best); read as a score
        (higher = better) it would invert the audit, so auto does not guess: ConfigError."""
        cluster = self.columns.cluster
        found = _rank_like(self.source, self.columns.outcome, cluster)
        if found is None:
            return
        groups, k = found
        where = f"in each of its {groups:,} clusters ({cluster})" if cluster else "over the table"
        raise ConfigError(
            f"table.columns.outcome: column {self.columns.outcome!r} holds the whole numbers 1..k once each {where} "
            f"(k up to {k}), as a rank does; read as a score (higher is better) it would invert the audit. "
            "Set table.outcome.kind=rank with table.outcome.k=<how many ranks count as selected>, or "
            "table.outcome.kind=score if higher values are better"
        )

    def _detect_kind(self, column_type: str, numeric: bool, as_number: str, labels: dict[str, int]) -> str:
        """auto: booleans and 0/1 are binary, other numbers scores, text labels when labels match."""
        column = self.columns.outcome
        if column_type == "BOOLEAN":
            return "binary"
        if numeric:  # one cheap pass instead of grouping every distinct score
            row = self.source.sql(
                f"SELECT count(*) FILTER (WHERE {quote_identifier(column)} NOT IN (0, 1)) FROM {FILTERED}",
                "table.columns.outcome",
            ).fetchone()
            if row is not None and row[0] == 0:
                return "binary"
            self._refuse_rank_as_score()
            return "score"
        values = self.source.fetch(
            f"SELECT lower(trim(CAST({quote_identifier(column)} AS VARCHAR))) AS value, ({as_number}) AS number, count(*)::BIGINT AS rows "
            f"FROM {FILTERED} GROUP BY ALL ORDER BY rows DESC LIMIT 100000",
            "table.columns.outcome",
        )
        present = values[values["value"].notna() & (values["value"] != "")]
        is_number = present["number"].notna()
        if len(present) and is_number.all():
            return "binary" if present["number"].isin([0, 1]).all() else "score"
        is_label = present["value"].isin(list(labels))
        if is_label.any():
            return "label"
        if is_number.sum() > len(present) / 2:  # mostly numbers: the rest are row-level problems
            return "binary" if present.loc[is_number, "number"].isin([0, 1]).all() else "score"
        odd = ", ".join(f"{v!r} ({n:,} rows)" for v, n in zip(present["value"][:MAX_LISTED], present["rows"]))
        raise ConfigError(
            f"table.columns.outcome: column {column!r} holds {odd}: not 0/1, a known label, numbers or ranks; "
            "name its labels in table.outcome.selected / table.outcome.not_selected, or set table.outcome.kind"
        )


def _rank_like(source: Any, column: str, cluster: str | None) -> tuple[int, int] | None:
    """(groups, largest k) when every value is a whole number and each cluster's (or, without one, the
    table's) values are exactly 1..k, each once, as ranks are; None otherwise."""
    o = quote_identifier(column)
    group = f"GROUP BY {quote_identifier(cluster)}" if cluster else ""
    row = source.sql(
        f"SELECT count(*), max(n), count(*) FILTER (WHERE NOT (lo = 1 AND hi = n AND distinct_values = n AND whole)) "
        f"FROM (SELECT min({o}) AS lo, max({o}) AS hi, count({o}) AS n, count(DISTINCT {o}) AS distinct_values, "
        f"bool_and({o} = floor({o})) AS whole FROM {FILTERED} WHERE {o} IS NOT NULL {group})",
        "table.columns.outcome",
    ).fetchone()
    if row is None or not row[0] or row[1] is None or row[1] < 3 or row[2]:
        return None
    return int(row[0]), int(row[1])


def sql_literal(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"
