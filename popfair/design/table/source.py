"""Open a table case's source as a DuckDB relation holding only the mapped columns.

DuckDB is the engine: it reads CSV, Parquet and JSON lines itself (in parallel, only the columns
asked for, out of core), so a 10-million-row file is aggregated to cluster x category counts in SQL
without ever becoming a pandas frame. Excel sheets (at most about a million rows by the format's own
limit) are read by pandas/openpyxl and handed to DuckDB. Databases are read through SQLAlchemy, so
any database with a driver works (PostgreSQL, SQLite, ...); only the mapped columns travel into a
DuckDB table: from PostgreSQL as CSV written by the server (COPY), from others in batches of rows. Passwords come only from the environment (PGPASSWORD, ~/.pgpass),
never from the URL, and every message shows the URL without one.

Text formats (CSV, JSON lines), Excel and databases are copied once into a DuckDB table (in memory,
spilled to a temporary folder beyond the memory limit), so the several passes a case makes parse the
text once; Parquet is scanned in place.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from popfair.core.errors import ConfigError, DataError
from popfair.design.table.settings import TableSettings, closest

log = logging.getLogger("popfair")

MEMORY_LIMIT = os.environ.get("POPFAIR_TABLE_MEMORY", "1GB")  # DuckDB's buffer; beyond it, it spills to disk
FETCH_BATCH = 100_000  # database rows per batch moved into DuckDB
SOURCE = "source_rows"  # the relation every later query reads
# Roles whose values are labels, read as text from a CSV whatever its sniffer guesses: a sex column of
# only "f" is not a boolean, a race code "01" is not the number 1, a requisition id is not a date.
TEXT_ROLES = ("sex", "race", "applicant_id", "cluster", "pair_id", "posting_id")
ROW_HASH = "__popfair_row_hash"  # a file's whole row, hashed: exact duplicates without an applicant id


@dataclass
class Source:
    """The opened source: a DuckDB connection whose relation `SOURCE` holds the mapped columns.

    `description` is what the run logs as the source (a file path, or the URL without password and
    the table name or query); `fingerprint` is the file's sha256 or, for a database, a checksum over the
    rows read (order-independent)."""

    con: duckdb.DuckDBPyConnection
    description: str
    kind: str  # file format, or "database"
    columns: list[str]  # every column of the source, for "closest names" in errors
    key: str  # the config key that names the source (table.path / table.name / table.query)
    fingerprint: dict[str, str] = field(default_factory=dict)
    _workdir: str | None = None
    _hash: Future[str] | None = None

    def sql(self, query: str, key: str | None = None) -> duckdb.DuckDBPyConnection:
        """Run SQL on the source (its result read with fetchone / fetchall / df); a DuckDB error
        becomes a one-line DataError naming `key` (the config key the query comes from)."""
        try:
            return self.con.execute(query)
        except duckdb.Error as exc:
            raise DataError(f"{key or self.key}: {self.description}: {_first_line(exc)}") from None

    def fetch(self, query: str, key: str | None = None) -> pd.DataFrame:
        return self.sql(query, key).df()

    def finish_fingerprint(self) -> dict[str, str]:
        if self._hash is not None:
            self.fingerprint["sha256"] = self._hash.result()
            self._hash = None
        return self.fingerprint

    def close(self) -> None:
        self.con.close()
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)


def open_source(settings: TableSettings, *, shown_as: str | None = None) -> Source:
    """Open the configured file or database; the relation `SOURCE` has the mapped columns only.
    `shown_as`: how messages name the source instead of its path or query (a watch's new rows)."""
    workdir = tempfile.mkdtemp(prefix="popfair-table-")
    con = duckdb.connect()  # in memory; beyond MEMORY_LIMIT DuckDB spills to the temporary folder
    con.execute(f"SET memory_limit='{MEMORY_LIMIT}'")
    con.execute(f"SET temp_directory='{Path(workdir) / 'spill'}'")
    try:
        source = (
            _open_file(con, settings, shown_as)
            if settings.path is not None
            else _open_database(con, settings, shown_as)
        )
    except BaseException:
        con.close()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    source._workdir = workdir
    return source


def check_columns(settings: TableSettings, available: list[str], description: str) -> None:
    """Every mapped column exists; else a ConfigError naming the role's key and the closest columns."""
    c = settings.columns
    wanted = [(f"table.columns.{role}", name) for role, name in c.single().items()]
    wanted += [(f"table.columns.{role}[{i}]", name) for role in ("z", "b", "r") for i, name in enumerate(c.of(role))]
    if settings.watch_column is not None:
        wanted.append(("table.watch_column", settings.watch_column))
    for key, name in wanted:
        if name not in available:
            hint = closest(name, available)
            raise ConfigError(
                f"{key}: no column {name!r} in {description}"
                + (f"; closest: {hint}" if hint else f"; it has {available[:20]}")
            )


def _open_file(con: duckdb.DuckDBPyConnection, settings: TableSettings, shown_as: str | None = None) -> Source:
    assert settings.path is not None
    path = Path(settings.path).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"table.path: no such file {str(path)!r}"
            + (f" (relative to {os.getcwd()})" if not path.is_absolute() else "")
        )
    fmt = settings.file_format
    description = shown_as or str(path.resolve())
    if fmt in ("csv", "jsonl") and _blank(path):  # DuckDB would read it as one column named column0
        raise DataError(f"table.path: {description} is empty: no column names and no rows")
    hasher: Future[str] = Future()
    threading.Thread(target=_sha256_into, args=(path, hasher), daemon=True).start()  # beside the reading
    options = dict(settings.read_options)
    try:
        if fmt == "excel":
            frame = _read_excel(path, settings)
            con.register("excel_frame", frame)
            relation = con.sql("SELECT * FROM excel_frame")
        elif fmt == "csv":
            relation = con.read_csv(str(path), **options)
            text = _text_types(settings, list(relation.columns), options.get("dtype"))
            if text is not None:  # read again with the category columns as text (the sniff costs milliseconds)
                relation = con.read_csv(str(path), **{**options, "dtype": text})
        elif fmt == "parquet":
            relation = con.read_parquet(str(path), **options)
        else:
            relation = con.read_json(str(path), **{"format": "newline_delimited", **options})
        available = list(relation.columns)
    except duckdb.Error as exc:
        raise DataError(f"table.path: cannot read {description} as {fmt}: {_first_line(exc)}") from None
    except TypeError as exc:  # an unknown reader option
        raise ConfigError(f"table.read_options: {exc}") from None
    check_columns(settings, available, description)
    columns = [quote_identifier(c) for c in settings.read_columns(available)]
    if settings.columns.applicant_id is None and settings.dedupe != "keep":  # exact duplicate rows are counted
        columns.append(f"hash({', '.join(quote_identifier(c) for c in available)}) AS {ROW_HASH}")
    projected = relation.project(", ".join(columns))
    source = Source(con, description, fmt, available, "table.path", {"sha256": ""}, _hash=hasher)
    try:
        if fmt == "parquet":  # columnar: every pass reads only its columns, in place
            projected.create_view(SOURCE)
        else:  # text and sheets: parse once into a table
            projected.create(SOURCE)
    except duckdb.Error as exc:
        raise DataError(f"table.path: cannot read {description} as {fmt}: {_first_line(exc)}") from None
    if fmt == "excel":
        con.unregister("excel_frame")
    return source


def _blank(path: Path) -> bool:
    """Whether a text file holds nothing but white space (0 bytes included); reading stops at the first
    character that is not (at once, for any real table)."""
    with path.open("rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return False
    return True


def _text_types(settings: TableSettings, available: list[str], given: Any) -> dict[str, str] | None:
    """DuckDB's `dtype` for a CSV: the category columns (TEXT_ROLES) as VARCHAR, the types the user
    gave (table.read_options.dtype) kept; None when there is nothing to add or the user gave a list."""
    if given is not None and not isinstance(given, dict):
        return None
    mapped = settings.columns.single()
    text = {mapped[role]: "VARCHAR" for role in TEXT_ROLES if mapped.get(role) in available}
    if not text:
        return None
    return {**text, **(given or {})}


def _read_excel(path: Path, settings: TableSettings) -> pd.DataFrame:
    """The configured sheet's mapped columns (cells kept as written: text stays text)."""
    try:
        book = pd.ExcelFile(path)
    except Exception as exc:  # noqa: BLE001 - openpyxl raises many kinds for a broken workbook
        raise DataError(f"table.path: cannot read {path} as an Excel workbook: {_first_line(exc)}") from None
    with book:
        sheet: str | int = settings.sheet if settings.sheet is not None else 0
        names = [str(n) for n in book.sheet_names]
        if isinstance(sheet, str) and sheet not in names:
            hint = closest(sheet, names)
            raise ConfigError(
                f"table.sheet: no sheet {sheet!r} in {path}; sheets: {names}" + (f"; closest: {hint}" if hint else "")
            )
        if isinstance(sheet, int) and not 0 <= sheet < len(names):
            raise ConfigError(f"table.sheet: {path} has {len(names)} sheets ({names}); sheet {sheet} does not exist")
        header = pd.read_excel(book, sheet_name=sheet, nrows=0)
        available = [str(c) for c in header.columns]
        check_columns(settings, available, f"{path} sheet {sheet!r}")
        frame = pd.read_excel(book, sheet_name=sheet, usecols=settings.read_columns(available), dtype=object)
    frame.columns = [str(c) for c in frame.columns]
    return frame.apply(_uniform_column)


def _uniform_column(column: pd.Series) -> pd.Series:
    """One type per column for DuckDB: numbers when every cell is a number, else text (cells of a
    hand-edited sheet mix both); empty cells stay missing."""
    numeric = pd.to_numeric(column, errors="coerce")
    if numeric.notna().sum() == column.notna().sum():
        return numeric
    return column.astype("string")


def _open_database(con: duckdb.DuckDBPyConnection, settings: TableSettings, shown_as: str | None = None) -> Source:
    from sqlalchemy import create_engine, inspect, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    assert settings.url is not None
    try:
        url = make_url(settings.url)
    except ArgumentError:
        raise ConfigError(
            "table.url: not a database URL (expected e.g. postgresql+psycopg://user@host:5432/db or sqlite:///file.db)"
        ) from None
    shown = url.render_as_string(hide_password=True)
    if url.password is not None:
        raise ConfigError(
            f"table.url: {shown} holds a password; remove it and set PGPASSWORD (or ~/.pgpass) in the "
            "environment instead, so it never reaches a config, MLflow or a log"
        )
    redact = _redactor()
    key = "table.name" if settings.name is not None else "table.query"
    try:
        engine = create_engine(url)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigError(f"table.url: no driver for {shown} ({exc}); pip install 'popfair[postgres]'") from None
    description = f"{shown} " + (
        shown_as or (f"table {settings.name}" if settings.name is not None else f"query: {settings.query}")
    )
    try:
        with engine.connect() as conn:
            preparer = engine.dialect.identifier_preparer
            if settings.name is not None:
                schema, _, name = settings.name.rpartition(".")
                inspector = inspect(conn)
                if not inspector.has_table(name, schema=schema or None):
                    tables = inspector.get_table_names(schema=schema or None) + inspector.get_view_names(
                        schema=schema or None
                    )
                    hint = closest(name, tables)
                    raise ConfigError(
                        f"table.name: no table {settings.name!r} in {shown}"
                        + (f"; closest: {hint}" if hint else f"; tables: {sorted(tables)[:20]}")
                    )
                origin = (preparer.quote_schema(schema) + "." if schema else "") + preparer.quote(name)
            else:
                origin = f"({str(settings.query).strip().rstrip(';')}) AS popfair_query"
            available = list(conn.execute(text(f"SELECT * FROM {origin} WHERE 1 = 0")).keys())
            check_columns(settings, available, description)
            columns = settings.read_columns(available)
            select = f"SELECT {', '.join(preparer.quote(c) for c in columns)} FROM {origin}"
            if url.get_backend_name() == "postgresql" and url.get_driver_name() == "psycopg":
                _copy_postgres(conn.connection.dbapi_connection, select, columns, con)
            else:
                _fetch_batches(conn, text(select), columns, con)
    except (SQLAlchemyError, engine.dialect.loaded_dbapi.Error) as exc:
        raise DataError(
            f"{key}: the database refused it ({shown}): {redact(_first_line(getattr(exc, 'orig', exc)))}"
        ) from None
    finally:
        engine.dispose()
    checksum = con.execute(
        f"SELECT count(*), coalesce(sum(hash(({', '.join(quote_identifier(c) for c in columns)}))::HUGEINT) % 18446744073709551616, 0) FROM {SOURCE}"
    ).fetchone()
    assert checksum is not None
    fingerprint = {
        "row_checksum": f"{int(checksum[1]):016x}",
        "row_checksum_rows": str(checksum[0]),
        "duckdb": duckdb.__version__,
    }
    return Source(con, description, "database", available, key, fingerprint)


def _fetch_batches(conn: Any, select: Any, columns: list[str], con: duckdb.DuckDBPyConnection) -> None:
    """Any database: stream the rows in batches of FETCH_BATCH into the DuckDB table."""
    result = conn.execution_options(stream_results=True, yield_per=FETCH_BATCH).execute(select)
    created = False
    for rows in result.partitions(FETCH_BATCH):
        # plain tuples: pandas probes a Row object attribute by attribute (ten times slower)
        batch = pd.DataFrame.from_records([tuple(row) for row in rows], columns=columns)
        if not created:  # a column with no value in the first batch: text, so any later value fits
            empty = [c for c in columns if batch[c].isna().all()]
            batch = batch.astype({c: "string" for c in empty})
        con.register("fetched_batch", batch)
        con.execute(
            f"INSERT INTO {SOURCE} SELECT * FROM fetched_batch"
            if created
            else f"CREATE TABLE {SOURCE} AS SELECT * FROM fetched_batch"
        )
        con.unregister("fetched_batch")
        created = True
    if not created:
        nulls = ", ".join("NULL AS " + quote_identifier(c) for c in columns)
        con.execute(f"CREATE TABLE {SOURCE} AS SELECT * FROM (SELECT {nulls}) WHERE false")


# PostgreSQL column types -> DuckDB's, for the COPY path (anything else is read as text)
PG_TYPES = {
    "int2": "BIGINT",
    "int4": "BIGINT",
    "int8": "BIGINT",
    "float4": "DOUBLE",
    "float8": "DOUBLE",
    "numeric": "DOUBLE",
    "bool": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP",
    "timestamptz": "TIMESTAMPTZ",
}


def _copy_postgres(raw: Any, select: str, columns: list[str], con: duckdb.DuckDBPyConnection) -> None:
    """PostgreSQL (psycopg): the server writes the rows as CSV (COPY ... TO STDOUT) into a temporary file
    that DuckDB reads with the result's column types: no Python object per value, several times faster
    than fetching rows (1 million rows: seconds)."""
    with raw.cursor() as cursor:
        cursor.execute(f"{select} LIMIT 0")
        names = [raw.adapters.types.get(d.type_code) for d in cursor.description]
    dtype = {c: PG_TYPES.get(getattr(info, "name", ""), "VARCHAR") for c, info in zip(columns, names)}
    with tempfile.TemporaryDirectory(prefix="popfair-copy-") as folder:
        path = Path(folder) / "rows.csv"
        with open(path, "wb") as out, raw.cursor() as cursor:
            with cursor.copy(f"COPY ({select}) TO STDOUT WITH (FORMAT csv, HEADER true)") as copy:
                for block in copy:
                    out.write(block)
        # NULL is an empty field, an empty string a quoted one: kept apart as PostgreSQL had them
        con.read_csv(str(path), header=True, dtype=dtype, allow_quoted_nulls=False).create(SOURCE)


def _redactor() -> Callable[[str], str]:
    """Hide the environment's database password in messages (drivers sometimes echo connection details)."""
    secret = os.environ.get("PGPASSWORD")
    return (lambda text: text.replace(secret, "***")) if secret else (lambda text: text)


def _sha256_into(path: Path, out: Future[str]) -> None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
        out.set_result(digest.hexdigest())
    except OSError as exc:
        out.set_result(f"unreadable: {exc}")


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException | Any) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(lines[:3])[:500] if lines else type(exc).__name__
