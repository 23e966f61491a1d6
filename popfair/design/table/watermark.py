"""What a watch has read so far (`table.watch=true`): the watermark and the counts, kept in a small JSON
state file between looks, and the rows added since the last look.

- A file that grows (CSV or JSON lines): the watermark is a byte offset just past the last complete
  line read. Each look first checks that the part already read is unchanged (its sha256, kept in the
  state), then reads only the bytes after the offset up to the last complete line (a line being
  written is left for the next look). A CSV's header line is put in front of the new lines.
- A database table or query: the watermark is the largest value of `table.watch_column` (an id or a
  timestamp that grows with each row) read so far; each look reads the rows above it.

The state is written only after a look has read, mapped and counted its rows (atomically: a temporary
file renamed over the old one), so a look that fails (a bad row, a changed file, an unreadable state)
leaves the watermark where it was and the same rows are read again once the problem is fixed."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.core.errors import ConfigError, DataError
from popfair.design.table.settings import TableSettings

STATE_VERSION = 1
CHUNK = 1 << 20  # bytes hashed at a time
# the settings that decide what a row counts as: a state made with others would mix counts
STATE_SETTINGS = (
    "path",
    "url",
    "name",
    "query",
    "where",
    "date_from",
    "date_to",
    "period",
    "watch_column",
    "unknown_labels",
    "unmapped",
    "bad_rows",
    "dedupe",
)


def settings_record(settings: TableSettings) -> dict[str, Any]:
    """The settings a watch's counts depend on, as JSON values (compared at every look)."""
    record = {key: vars(settings)[key] for key in STATE_SETTINGS}
    record["path"] = None if settings.path is None else str(Path(settings.path).expanduser().resolve())
    record["unknown_labels"] = list(settings.unknown_labels)
    record["columns"] = dataclasses.asdict(settings.columns)
    record["columns"] = {k: list(v) if isinstance(v, tuple) else v for k, v in record["columns"].items()}
    record["outcome"] = {
        "kind": settings.outcome.kind,
        "selected": [str(v) for v in settings.outcome.selected],
        "not_selected": [str(v) for v in settings.outcome.not_selected],
        "k": settings.outcome.k,
    }
    record["values"] = settings.values
    return json.loads(json.dumps(record, default=str))


def default_state_path(settings: TableSettings, root: Path) -> Path:
    """outputs/watch/<source name>-<8 hex of the source>.json under `root` (the folder popfair runs in)."""
    source = settings.path or f"{settings.url}|{settings.name}|{settings.query}"
    stem = Path(settings.path).stem if settings.path else (settings.name or "query")
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:8]
    return root / "outputs" / "watch" / f"{stem}-{digest}.json"


@dataclass
class WatchState:
    """The watch's state: watermark, counts per window x sex x race and every look so far.

    windows are periods (table.period) or "all"; `counts` columns: window, sex, race, n, selected."""

    path: Path
    settings: dict[str, Any]
    offset: int = 0  # files: bytes read (just past the last complete line)
    prefix_sha256: str = hashlib.sha256(b"").hexdigest()
    header: str | None = None  # CSV: the header line, put in front of each look's new lines
    watermark: Any = None  # databases: the largest watch_column value read
    outcome_kind: str | None = None
    counts: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["window", "sex", "race", "n", "selected"])
    )
    looks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path, settings: TableSettings) -> WatchState:
        """The state at `path`, or a new one when there is none; a DataError naming the file when it
        is not a popfair watch state or was made with other table settings (nothing is changed)."""
        record = settings_record(settings)
        if not path.exists():
            return cls(path, record)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("popfair_watch") != STATE_VERSION:
                raise ValueError(f"popfair_watch is {data.get('popfair_watch')!r}, expected {STATE_VERSION}")
            counts = pd.DataFrame(data["counts"], columns=["window", "sex", "race", "n", "selected"])
            counts = counts.astype({"window": str, "sex": str, "race": str, "n": "int64", "selected": "int64"})
            state = cls(
                path,
                data["settings"],
                offset=int(data["offset"]),
                prefix_sha256=str(data["prefix_sha256"]),
                header=data["header"],
                watermark=data["watermark"],
                outcome_kind=data["outcome_kind"],
                counts=counts,
                looks=list(data["looks"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise DataError(
                f"table.watch_state: {path} is not a popfair watch state ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'}); nothing was read and the file is "
                "untouched: restore it, or move it away to start a new watch"
            ) from None
        changed = sorted(
            k for k in set(record) | set(state.settings) if k != "values" and record.get(k) != state.settings.get(k)
        )
        old_values, new_values = state.settings.get("values") or {}, record.get("values") or {}
        for role, mapping in old_values.items():  # a new value may be mapped; one mapped before may not move
            if any(new_values.get(role, {}).get(raw) != category for raw, category in mapping.items()):
                changed.append(f"values.{role}")
        if changed:
            raise DataError(
                f"table.watch_state: {path} was made by a watch with other table settings (changed: {changed}); "
                "its counts would mix rows read two ways: restore those settings (mapping a value not mapped "
                "before is fine), or point table.watch_state at a new file to start a new watch"
            )
        state.settings = record  # values mapped since are kept with the next save
        return state

    def save(self) -> None:
        """Write the state atomically (a temporary file in the same folder, renamed over the old one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "popfair_watch": STATE_VERSION,
            "settings": self.settings,
            "offset": self.offset,
            "prefix_sha256": self.prefix_sha256,
            "header": self.header,
            "watermark": self.watermark,
            "outcome_kind": self.outcome_kind,
            "counts": self.counts.astype({"n": "int64", "selected": "int64"}).to_dict(orient="records"),
            "looks": self.looks,
        }
        handle, temporary = tempfile.mkstemp(prefix=".watch-", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, default=str)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def add(self, counts: pd.DataFrame) -> None:
        """Add a look's counts (window, sex, race, n, selected) to the totals."""
        both = pd.concat([self.counts, counts[["window", "sex", "race", "n", "selected"]]], ignore_index=True)
        both = both.astype({"window": str, "sex": str, "race": str})
        self.counts = both.groupby(["window", "sex", "race"], as_index=False)[["n", "selected"]].sum()


@dataclass
class NewRows:
    """The rows added since the last look: `settings` reads them (a file of the new lines, or the
    query above the watermark), `shown` is how messages name them; `folder` is removed by `close`."""

    settings: TableSettings
    shown: str
    offset: int = 0  # files: the offset after these rows
    prefix_sha256: str = ""
    header: str | None = None
    folder: str | None = None

    def close(self) -> None:
        if self.folder:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)


def new_rows(settings: TableSettings, state: WatchState) -> NewRows | None:
    """The rows added since the state's watermark; None when the file has no new complete line."""
    if settings.path is not None:
        return _new_lines(settings, state)
    return _above_watermark(settings, state)


def _new_lines(settings: TableSettings, state: WatchState) -> NewRows | None:
    path = Path(settings.path or "").expanduser()
    if not path.is_file():
        raise ConfigError(f"table.path: no such file {str(path)!r}")
    size = path.stat().st_size
    shown = str(path.resolve())
    if size < state.offset:
        raise DataError(
            f"table.path: {shown} is shorter ({size:,} bytes) than the {state.offset:,} bytes already read; a watched "
            "file may only grow: point table.watch_state at a new file to watch it afresh"
        )
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        left = state.offset
        while left:
            block = handle.read(min(CHUNK, left))
            if not block:
                break
            hasher.update(block)
            left -= len(block)
        if hasher.hexdigest() != state.prefix_sha256:
            raise DataError(
                f"table.path: the first {state.offset:,} bytes of {shown} (the rows already read) changed since the "
                f"last look; a watch reads rows appended at the end only: point table.watch_state at a new file to "
                "watch it afresh"
            )
        tail = handle.read()
    end = tail.rfind(b"\n") + 1  # up to the last complete line
    fresh = tail[:end]
    if not fresh.strip():
        return None
    header = state.header
    body = fresh
    if settings.file_format == "csv" and state.offset == 0:
        first = fresh.find(b"\n") + 1
        header, body = fresh[:first].decode("utf-8", errors="replace"), fresh[first:]
        if not body.strip():
            return None  # a header alone: nothing to count yet (it is read again with the first rows)
    hasher.update(fresh)
    folder = tempfile.mkdtemp(prefix="popfair-watch-")
    chunk = Path(folder) / f"new_rows{path.suffix}"
    chunk.write_bytes((header or "").encode("utf-8") + body if settings.file_format == "csv" else body)
    return NewRows(
        dataclasses.replace(settings, path=str(chunk), format=settings.file_format),
        f"{shown} (bytes {state.offset:,} to {state.offset + len(fresh):,}: the rows added since the last look)",
        offset=state.offset + len(fresh),
        prefix_sha256=hasher.hexdigest(),
        header=header,
        folder=folder,
    )


def _literal(value: Any) -> str:
    """A watermark as a SQL literal: numbers as they are, anything else a quoted string."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _above_watermark(settings: TableSettings, state: WatchState) -> NewRows:
    column = '"' + str(settings.watch_column).replace('"', '""') + '"'
    if settings.name is not None:
        origin = ".".join('"' + part.replace('"', '""') + '"' for part in settings.name.split("."))
    else:
        origin = f"({str(settings.query).strip().rstrip(';')}) AS popfair_watched"
    where = "" if state.watermark is None else f" WHERE {column} > {_literal(state.watermark)}"
    query = f"SELECT * FROM {origin}{where}"
    above = "every row" if state.watermark is None else f"rows with {settings.watch_column} > {state.watermark}"
    what = f"table {settings.name}" if settings.name is not None else f"query: {settings.query}"
    return NewRows(dataclasses.replace(settings, name=None, query=query), f"{what} ({above})")


def watermark_value(value: Any) -> Any:
    """A database value as it is kept in the state (JSON): numbers as numbers, times as ISO text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (dt.date, dt.datetime, pd.Timestamp)):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    return str(value)
