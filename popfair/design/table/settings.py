"""What a table case reads and how its columns and values map to popfair's (config group `table`).

Validated when the case is built, before anything is read: every error names its config key
(`table.columns.outcome`, `table.values.race.Latinx`, ...)."""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popfair.core.errors import ConfigError, require
from popfair.core.race_coding import LL144_DISPLAY

UNKNOWN = "unknown"
# popfair's categories: the population's sex and race codes and LL144's race/ethnicity categories
# (popfair/core/race_coding.py). A mapping to anything else is a typo until proven otherwise.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "sex": ("female", "male"),
    "race": ("hispanic", "white", "black", "api", "other", *LL144_DISPLAY),
}
FORMATS = ("auto", "csv", "parquet", "excel", "jsonl")
SUFFIX_FORMATS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".xlsx": "excel",
    ".xlsm": "excel",
    ".xls": "excel",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
OUTCOME_KINDS = ("auto", "binary", "label", "score", "rank")
KINDS = ("historical", "test")
ON_BAD_ROWS = ("error", "drop")
ON_UNMAPPED = ("error", "unknown")
PERIODS = ("month", "quarter", "year")  # table.period: rates, ratios and the change test by period
WATCH_FORMATS = ("csv", "jsonl")  # files a watch reads from a byte offset (rows appended at the end)
ON_DUPLICATES = ("warn", "error", "drop", "keep")  # exact duplicate rows, where no applicant id tells them apart
# Single-column roles (frame column name = the role's name) and the list-valued PSE roles.
SINGLE_COLUMNS = ("outcome", "sex", "race", "applicant_id", "cluster", "date", "pair_id", "posting_id")
ROLE_LISTS = ("z", "b", "r")


def closest(name: str, options: list[str] | tuple[str, ...], n: int = 3) -> list[str]:
    """The options most like `name` (difflib), for "did you mean" in errors."""
    found = difflib.get_close_matches(name, list(options), n=n, cutoff=0.5)
    lowered = {o.lower(): o for o in options}
    if name.lower() in lowered and lowered[name.lower()] not in found:
        found.insert(0, lowered[name.lower()])
    return found


def value_key(value: Any) -> str:
    """How a raw category or label value is compared: its text, trimmed, case-folded."""
    return str(value).strip().casefold()


@dataclass(frozen=True)
class Columns:
    """Source column names for each role (None = not in the table)."""

    outcome: str
    sex: str | None = None
    race: str | None = None
    applicant_id: str | None = None
    cluster: str | None = None
    date: str | None = None
    pair_id: str | None = None
    posting_id: str | None = None
    z: tuple[str, ...] = ()
    b: tuple[str, ...] = ()
    r: tuple[str, ...] = ()

    def of(self, role: str) -> Any:
        """The source column of a single-column role (None: not in the table, or no such role), or the
        columns of z, b or r (a tuple)."""
        return vars(self).get(role)

    def single(self) -> dict[str, str]:
        """role -> source column, for the single-column roles that are mapped."""
        return {role: self.of(role) for role in SINGLE_COLUMNS if self.of(role) is not None}

    def source_columns(self) -> list[str]:
        """Every source column the case reads, once each, in a stable order."""
        names = [*self.single().values(), *self.z, *self.b, *self.r]
        return list(dict.fromkeys(names))


@dataclass(frozen=True)
class OutcomeCoding:
    """How recorded outcomes become selected (1) / not selected (0) or a score."""

    kind: str = "auto"
    selected: tuple[str, ...] = ()  # labels meaning selected (compared trimmed, case-insensitively)
    not_selected: tuple[str, ...] = ()
    k: int | None = None  # rank outcomes: rank <= k is selected

    def label_of(self) -> dict[str, int]:
        """Trimmed, case-folded label -> 1 / 0."""
        return {**{value_key(v): 0 for v in self.not_selected}, **{value_key(v): 1 for v in self.selected}}


@dataclass(frozen=True)
class ToolFacts:
    """What published LL144 summaries state about the tool and the audit besides the numbers (the
    `table.tool` node); None where the config does not say."""

    name: str | None = None  # the automated employment decision tool's name
    vendor: str | None = None  # who makes or distributes it
    distribution_date: str | None = None  # YYYY-MM-DD: when the employer began using it
    auditor: str | None = None  # the independent auditor

    @classmethod
    def from_config(cls, node: Mapping[str, Any]) -> ToolFacts:
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(node) - allowed)
        require(not unknown, "table.tool", f"unknown keys {unknown}; allowed: {sorted(allowed)}")
        facts = {key: None if node.get(key) is None else str(node[key]).strip() or None for key in allowed}
        if facts["distribution_date"] is not None:
            try:
                facts["distribution_date"] = dt.date.fromisoformat(facts["distribution_date"]).isoformat()
            except ValueError:
                raise ConfigError(
                    f"table.tool.distribution_date: must be a date YYYY-MM-DD, got {node['distribution_date']!r}"
                ) from None
        return cls(**facts)


@dataclass(frozen=True)
class TestDataStatement:
    """What the LL144 rules (6 RCNY 5-301, 5-303) ask of a bias audit that uses test data: why
    historical data were not used, and how the test data were made (the `table.test_data` node)."""

    __test__ = False  # not a pytest class

    why_not_historical: str | None = None
    how_made: str | None = None

    @classmethod
    def from_config(cls, node: Mapping[str, Any], kind: str, tool: ToolFacts) -> TestDataStatement:
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(node) - allowed)
        require(not unknown, "table.test_data", f"unknown keys {unknown}; allowed: {sorted(allowed)}")
        facts = {key: None if node.get(key) is None else str(node[key]).strip() or None for key in allowed}
        statement = cls(**facts)
        if kind != "test":
            require(
                statement == cls(),
                "table.test_data",
                "explains test data; this audit's table.kind is historical (set table.kind=test, or drop it)",
            )
        elif any(value is not None for value in vars(tool).values()):  # a published summary
            for key, what in (
                ("why_not_historical", "why historical data were not used"),
                ("how_made", "how the test data were made"),
            ):
                require(
                    facts[key] is not None,
                    f"table.test_data.{key}",
                    f"table.kind=test: the LL144 rules (6 RCNY 5-301) ask a bias audit on test data to explain "
                    f"{what}; set table.test_data.{key}='...' (it is printed in the report)",
                )
        return statement


@dataclass(frozen=True)
class TableSettings:
    """The `table` config node: where the table is, which columns play which role, and how values map.

    Exactly one source: `path` (CSV, Parquet, Excel sheet, JSON lines) or `url` with `name` or `query`
    (a SQLAlchemy database; the password only from the environment)."""

    columns: Columns
    path: str | None = None
    format: str = "auto"
    sheet: str | int | None = None
    read_options: dict[str, Any] = field(default_factory=dict)
    url: str | None = None
    name: str | None = None
    query: str | None = None
    where: str | None = None
    date_from: str | None = None
    date_to: str | None = None
    outcome: OutcomeCoding = field(default_factory=OutcomeCoding)
    values: dict[str, dict[str, str]] = field(default_factory=dict)  # role -> trimmed casefolded raw -> category
    unknown_labels: tuple[str, ...] = ("", UNKNOWN)
    unmapped: str = "error"
    bad_rows: str = "error"
    dedupe: str = "warn"
    kind: str = "historical"
    tool: ToolFacts = field(default_factory=ToolFacts)
    test_data: TestDataStatement = field(default_factory=TestDataStatement)  # table.kind=test: LL144's explanation
    period: str | None = None  # month | quarter | year: by-period rates, ratios, change test (needs columns.date)
    watch: bool = False  # read only the rows added since the last look (popfair.design.table.watermark)
    watch_state: str | None = None  # the watch's state file (None: outputs/watch/<source>.json)
    watch_column: str | None = None  # database watch: the growing column (id / timestamp); rows > watermark

    @property
    def file_format(self) -> str:
        """The file's format: `format`, or from the file's suffix when auto."""
        if self.format != "auto":
            return self.format
        assert self.path is not None
        suffix = Path(self.path).suffix.lower()
        if suffix == ".gz":
            suffix = Path(Path(self.path).stem).suffix.lower()
        if suffix not in SUFFIX_FORMATS:
            raise ConfigError(
                f"table.format: cannot tell the format of {self.path!r} from its suffix; set table.format "
                f"to one of {list(FORMATS[1:])}"
            )
        return SUFFIX_FORMATS[suffix]

    def read_columns(self, available: list[str]) -> list[str]:
        """The source columns to read: the mapped ones, and any the `where` filter names."""
        mapped = self.columns.source_columns()
        if self.watch_column is not None and self.watch_column not in mapped:
            mapped = [*mapped, self.watch_column]  # its largest value read is the watch's next watermark
        if not self.where:
            return mapped
        named = [c for c in available if c not in mapped and re.search(rf"(?<![\w]){re.escape(c)}(?![\w])", self.where)]
        return mapped + named

    def category(self, role: str, raw: Any) -> str | None:
        """The popfair category of a raw value of the sex or race column (None = no mapping covers it)."""
        key = value_key(raw)
        if key in {value_key(u) for u in self.unknown_labels}:
            return UNKNOWN
        if key in self.values.get(role, {}):
            return self.values[role][key]
        return key if key in CATEGORIES[role] else None  # popfair's own names map to themselves

    @classmethod
    def from_config(cls, node: Mapping[str, Any]) -> TableSettings:
        """Checked settings from the resolved `table` node; errors name the key."""
        node = dict(node)
        allowed = set(cls.__dataclass_fields__)
        unknown = sorted(set(node) - allowed)
        require(not unknown, "table", f"unknown keys {unknown}; allowed: {sorted(allowed)}")
        path, url, name, query = (node.get(k) for k in ("path", "url", "name", "query"))
        require(
            (path is None) != (url is None),
            "table.path",
            "set exactly one source: table.path=FILE (CSV, Parquet, Excel, JSON lines) or table.url=DATABASE_URL "
            "with table.name or table.query",
        )
        if url is not None:
            require(
                (name is None) != (query is None),
                "table.name",
                "with table.url set exactly one of table.name (a table) or table.query (a SELECT)",
            )
        else:
            require(name is None and query is None, "table.url", "table.name / table.query need table.url")
        fmt = node.get("format", "auto")
        require(fmt in FORMATS, "table.format", f"must be one of {list(FORMATS)}, got {fmt!r}")
        for key, options in (
            ("unmapped", ON_UNMAPPED),
            ("bad_rows", ON_BAD_ROWS),
            ("dedupe", ON_DUPLICATES),
            ("kind", KINDS),
        ):
            value = node.get(key, options[0])
            require(value in options, f"table.{key}", f"must be one of {list(options)}, got {value!r}")
        read_options = node.get("read_options") or {}
        require(isinstance(read_options, Mapping), "table.read_options", "must be a mapping of reader options")
        columns = _columns(node.get("columns") or {})
        unknown_labels = node.get("unknown_labels", ["", UNKNOWN])
        require(
            isinstance(unknown_labels, (list, tuple)),
            "table.unknown_labels",
            "must be a list of labels meaning unknown",
        )
        period, watch = _period_and_watch(node, columns, path, fmt)
        tool = ToolFacts.from_config(node.get("tool") or {})
        return cls(
            period=period,
            watch=watch,
            watch_state=None if node.get("watch_state") is None else str(node["watch_state"]),
            watch_column=None if node.get("watch_column") is None else str(node["watch_column"]),
            columns=columns,
            path=None if path is None else str(path),
            format=fmt,
            sheet=node.get("sheet"),
            read_options=dict(read_options),
            url=None if url is None else str(url),
            name=name,
            query=query,
            where=node.get("where"),
            date_from=None if node.get("date_from") is None else str(node["date_from"]),
            date_to=None if node.get("date_to") is None else str(node["date_to"]),
            outcome=_outcome(node.get("outcome") or {}),
            values=_values(node.get("values") or {}),
            unknown_labels=tuple(str(u) for u in unknown_labels),
            unmapped=node.get("unmapped", "error"),
            bad_rows=node.get("bad_rows", "error"),
            dedupe=node.get("dedupe", "warn"),
            kind=node.get("kind", "historical"),
            tool=tool,
            test_data=TestDataStatement.from_config(node.get("test_data") or {}, node.get("kind", "historical"), tool),
        )


def _period_and_watch(node: Mapping[str, Any], columns: Columns, path: Any, fmt: str) -> tuple[str | None, bool]:
    """table.period (needs the date column) and table.watch (a growing CSV / JSON lines file, or a
    database query with table.watch_column), checked before anything is read."""
    period = node.get("period")
    if period is not None:
        hint = closest(str(period), PERIODS)
        require(
            period in PERIODS,
            "table.period",
            f"must be one of {list(PERIODS)} (or null), got {period!r}"
            + (f" (did you mean {hint[0]}?)" if hint else ""),
        )
        require(
            columns.date is not None,
            "table.period",
            f"period={period} needs table.columns.date (the column holding each decision's date)",
        )
    watch = node.get("watch", False)
    require(isinstance(watch, bool), "table.watch", f"must be true or false, got {watch!r}")
    if watch and path is not None:
        suffixes = Path(str(path)).suffixes
        wanted = fmt if fmt != "auto" else SUFFIX_FORMATS.get(suffixes[-1].lower() if suffixes else "", "")
        require(
            wanted in WATCH_FORMATS and not str(path).lower().endswith(".gz"),
            "table.watch",
            f"reads the rows appended to an uncompressed CSV or JSON lines file, or a database table "
            f"(table.url with table.watch_column); {path!r} is not one",
        )
        require(
            node.get("watch_column") is None,
            "table.watch_column",
            "is for databases; a file's new rows are its appended lines",
        )
    if watch and path is None:
        require(
            node.get("watch_column") is not None,
            "table.watch_column",
            "table.watch on a database needs the column that grows with each new row (an id or a timestamp): "
            "each look reads the rows whose value is above the largest one read before",
        )
    if not watch:
        for key in ("watch_state", "watch_column"):
            require(node.get(key) is None, f"table.{key}", "is used only with table.watch=true")
    return period, watch


def _columns(node: Mapping[str, Any]) -> Columns:
    allowed = (*SINGLE_COLUMNS, *ROLE_LISTS)
    for key in node:
        if key not in allowed:
            raise ConfigError(
                f"table.columns.{key}: not a column role; roles: {list(allowed)}"
                + (f" (did you mean {closest(key, allowed)[0]}?)" if closest(key, allowed) else "")
            )
    require(
        node.get("outcome") not in (None, "???"),
        "table.columns.outcome",
        "is required: the column holding each applicant's outcome (0/1, yes/no, a score or a rank)",
    )
    values: dict[str, Any] = {}
    for role in SINGLE_COLUMNS:
        value = node.get(role)
        require(
            value is None or isinstance(value, (str, int)),
            f"table.columns.{role}",
            f"must be a column name, got {value!r}",
        )
        values[role] = None if value is None else str(value)
    for role in ROLE_LISTS:
        value = node.get(role) or []
        require(
            isinstance(value, (list, tuple)), f"table.columns.{role}", f"must be a list of column names, got {value!r}"
        )
        values[role] = tuple(str(v) for v in value)
    return Columns(**values)


def _outcome(node: Mapping[str, Any]) -> OutcomeCoding:
    allowed = ("kind", "selected", "not_selected", "k")
    unknown = sorted(set(node) - set(allowed))
    require(not unknown, "table.outcome", f"unknown keys {unknown}; allowed: {list(allowed)}")
    kind = node.get("kind", "auto")
    require(kind in OUTCOME_KINDS, "table.outcome.kind", f"must be one of {list(OUTCOME_KINDS)}, got {kind!r}")
    k = node.get("k")
    require(
        k is None or (isinstance(k, int) and not isinstance(k, bool) and k >= 0),
        "table.outcome.k",
        f"must be a whole number >= 0 (rank <= k counts as selected; 1 = the top of 1-based ranks), got {k!r}",
    )
    require(kind != "rank" or k is not None, "table.outcome.k", "outcome.kind=rank needs k (rank <= k is selected)")
    selected, not_selected = tuple(node.get("selected") or ()), tuple(node.get("not_selected") or ())
    both = {value_key(v) for v in selected} & {value_key(v) for v in not_selected}
    require(not both, "table.outcome.selected", f"labels {sorted(both)} are also in table.outcome.not_selected")
    return OutcomeCoding(kind=kind, selected=selected, not_selected=not_selected, k=k)


def _values(node: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for role, mapping in node.items():
        require(role in CATEGORIES, f"table.values.{role}", f"category mappings exist for {list(CATEGORIES)}")
        require(isinstance(mapping, Mapping), f"table.values.{role}", "must map raw values to popfair categories")
        out[role] = {}
        for raw, category in (mapping or {}).items():
            target = value_key(category)
            if target != UNKNOWN and target not in CATEGORIES[role]:
                hint = closest(target, CATEGORIES[role])
                raise ConfigError(
                    f"table.values.{role}.{raw}: {category!r} is not a popfair {role} category; "
                    f"use one of {[*CATEGORIES[role], UNKNOWN]}" + (f" (did you mean {hint[0]}?)" if hint else "")
                )
            out[role][value_key(raw)] = target
    return out
