"""The default response cache: one SQLite file (WAL mode) in a local folder, for one machine.

SQLite's WAL mode needs shared memory, so it does not work over a network file system: a sweep
spread over machines uses a server cache (`cache_url`, see server.py) instead."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from popfair.core.errors import ConfigError
from popfair.store.responses.base import (
    METADATA,
    TABLES,
    BatchRecord,
    CachedAnswer,
    ResponseCache,
)

CACHE_FILE = "responses.sqlite"
_CHUNK = 900  # stay under SQLite's bound-parameter limit
_SCHEMA = ";\n".join(
    [
        str(CreateTable(table, if_not_exists=True).compile(dialect=sqlite_dialect.dialect()))
        for table in METADATA.sorted_tables
    ]
    + [
        str(CreateIndex(index, if_not_exists=True).compile(dialect=sqlite_dialect.dialect()))
        for table in METADATA.sorted_tables
        for index in table.indexes
    ]
)


class SqliteCache(ResponseCache):
    """SQLite-backed cache; safe for several processes on one machine (WAL, busy timeout)."""

    def __init__(self, cache_dir: str | Path) -> None:
        directory = Path(cache_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / CACHE_FILE
            self.location = str(self.path)
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self._db.execute("PRAGMA mmap_size=268435456")  # bulk reads from the mapped file (about 10% faster)
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cache_dir: cannot open the response cache in {directory}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def _select(self, columns: Sequence[str], keys: Iterable[str]) -> list[Any]:
        """`... WHERE key IN (...)` in chunks of bound parameters (measured faster than one json_each()
        parameter or a temporary table joined)."""
        select = f"SELECT key, {', '.join(columns)} FROM responses WHERE key IN "
        unique = list(dict.fromkeys(keys))
        rows: list[Any] = []
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            rows += self._db.execute(select + f"({','.join('?' * len(chunk))})", chunk).fetchall()
        return rows

    def put(self, key: str, provider: str, model: str, answer: CachedAnswer) -> None:
        self.put_many([(key, provider, model, answer)])

    def put_many(self, items: Sequence[tuple[str, str, str, CachedAnswer]]) -> None:
        try:
            self._db.executemany(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        key,
                        provider,
                        model,
                        a.raw,
                        a.value,
                        a.parse_error,
                        a.input_tokens,
                        a.output_tokens,
                        a.cost_usd,
                        a.latency_s,
                        a.created_at,
                    )
                    for key, provider, model, a in items
                ],
            )
            self._db.executemany("DELETE FROM claims WHERE key=?", [(item[0],) for item in items])
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise

    # --- claims -------------------------------------------------------------------------------
    def claim(self, keys: Sequence[str], owner: str, lease_s: float) -> tuple[list[str], int]:
        mine: list[str] = []
        taken_over = 0
        for start in range(0, len(keys), _CHUNK):
            chunk = sorted(set(keys[start : start + _CHUNK]))
            marks = ",".join("?" * len(chunk))
            self._db.execute("BEGIN IMMEDIATE")  # one writer at a time: read-then-claim is atomic
            try:
                now = time.time()
                taken_over += self._db.execute(
                    f"SELECT COUNT(*) FROM claims WHERE key IN ({marks}) AND owner<>? AND expires_at<?",
                    [*chunk, owner, now],
                ).fetchone()[0]
                self._db.executemany(
                    "INSERT INTO claims (key, owner, expires_at) SELECT ?1, ?2, ?3"
                    " WHERE NOT EXISTS (SELECT 1 FROM responses WHERE key=?1)"
                    " ON CONFLICT(key) DO UPDATE SET owner=excluded.owner, expires_at=excluded.expires_at"
                    " WHERE claims.expires_at<?4 OR claims.owner=excluded.owner",
                    [(key, owner, now + lease_s, now) for key in chunk],
                )
                mine += [
                    row[0]
                    for row in self._db.execute(
                        f"SELECT key FROM claims WHERE key IN ({marks}) AND owner=?", [*chunk, owner]
                    )
                ]
                self._db.commit()
            except BaseException:
                self._db.rollback()
                raise
        return mine, taken_over

    def claim_owners(self, keys: Sequence[str]) -> dict[str, str]:
        owners: dict[str, str] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            sql = f"SELECT key, owner FROM claims WHERE key IN ({','.join('?' * len(chunk))})"
            owners.update(self._db.execute(sql, chunk).fetchall())
        return owners

    def renew(self, owner: str, lease_s: float) -> None:
        self._db.execute("UPDATE claims SET expires_at=? WHERE owner=?", (time.time() + lease_s, owner))
        self._db.commit()

    def release(self, owner: str, keys: Sequence[str] | None = None) -> None:
        if keys is None:
            self._db.execute("DELETE FROM claims WHERE owner=?", (owner,))
        else:
            self._db.executemany("DELETE FROM claims WHERE owner=? AND key=?", [(owner, k) for k in keys])
        self._db.commit()

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def holds(self, provider: str, model: str) -> bool:
        sql = "SELECT 1 FROM responses WHERE provider=? AND model=? LIMIT 1"
        return self._db.execute(sql, (provider, model)).fetchone() is not None

    # --- provider batches -------------------------------------------------------------------
    def add_batch(self, batch_id: str, provider: str, endpoint: str, model: str, outcome: str, keys: list[str]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO batches VALUES (?,?,?,?,?,?,?,?,NULL)",
            (batch_id, provider, endpoint, model, outcome, "submitted", json.dumps(keys), time.time()),
        )
        self._db.commit()

    def open_batches(self, provider: str, endpoint: str, model: str) -> list[BatchRecord]:
        rows = self._db.execute(
            "SELECT batch_id, provider, endpoint, model, outcome, status, keys FROM batches"
            " WHERE provider=? AND endpoint=? AND model=? AND finished_at IS NULL ORDER BY submitted_at",
            (provider, endpoint, model),
        ).fetchall()
        return [
            BatchRecord(batch_id, provider, endpoint, model, outcome, status, json.loads(keys))
            for batch_id, provider, endpoint, model, outcome, status, keys in rows
        ]

    def finish_batch(self, batch_id: str, status: str) -> None:
        self._db.execute("UPDATE batches SET status=?, finished_at=? WHERE batch_id=?", (status, time.time(), batch_id))
        self._db.commit()

    # --- whole-table copy ---------------------------------------------------------------------
    def rows(self, table: str, chunk: int = 10_000) -> Iterator[list[tuple]]:
        cursor = self._db.execute(f"SELECT * FROM {TABLES[table].name}")
        while batch := cursor.fetchmany(chunk):
            yield batch

    def insert_rows(self, table: str, rows: Sequence[tuple]) -> int:
        width = len(TABLES[table].columns)
        before = self._db.total_changes
        self._db.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({','.join('?' * width)})", rows)
        self._db.commit()
        return self._db.total_changes - before
