"""A response cache in a server database (PostgreSQL, through SQLAlchemy), shared by every process
and machine of a sweep: `cache_url=postgresql+psycopg://user@host:5432/db`.

Credentials come only from the environment: the URL must not hold a password (it would end up in the
composed config, in MLflow params and in logs); libpq reads PGPASSWORD, PGPASSFILE / ~/.pgpass or a
client certificate. The URL is only ever shown with the password hidden.
Same tables as the SQLite cache (base.py). Claim expiry runs on the database server's clock, so
machines whose clocks disagree still agree on when a lease has run out."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from popfair.store.blobs import server_engine
from popfair.store.responses.base import (
    ANSWER_COLUMNS,
    METADATA,
    TABLES,
    BatchRecord,
    CachedAnswer,
    ResponseCache,
)

log = logging.getLogger("popfair.screen")
T = TypeVar("T")
_CHUNK = 10_000
_NOW = "extract(epoch from clock_timestamp())"
_RETRY_STATES = {"40P01", "40001"}  # deadlock detected, serialization failure: safe to run again


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in _RETRY_STATES


class ServerCache(ResponseCache):
    """PostgreSQL-backed cache for sweeps across machines (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self._engine, self.location = server_engine(url, METADATA, "response cache")
        log.info("response cache: %s", self.location)

    def _write(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one transaction, committed on return (run again after a deadlock)."""
        for attempt in Retrying(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(5),
            wait=wait_random_exponential(0.01, 0.5),
            reraise=True,
        ):
            with attempt, self._engine.begin() as conn:
                return work(conn)
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _read(self, sql: str, **params: Any) -> list[Any]:
        with self._engine.connect() as conn:
            return list(conn.execute(text(sql), params))

    def close(self) -> None:
        self._engine.dispose()

    def _select(self, columns: Sequence[str], keys: Iterable[str]) -> list[Any]:
        """Rows (key, *columns) of the distinct keys that have an answer, one `= ANY(array)` per chunk."""
        unique = list(dict.fromkeys(keys))
        sql = text(f"SELECT key, {', '.join(columns)} FROM responses WHERE key = ANY(:keys)")
        rows: list[Any] = []
        with self._engine.connect() as conn:
            for start in range(0, len(unique), _CHUNK):
                rows += conn.execute(sql, {"keys": unique[start : start + _CHUNK]}).all()
        return rows

    def put(self, key: str, provider: str, model: str, answer: CachedAnswer) -> None:
        self.put_many([(key, provider, model, answer)])

    def put_many(self, items: Sequence[tuple[str, str, str, CachedAnswer]]) -> None:
        columns = ", ".join(f"{c} = EXCLUDED.{c}" for c in ("provider", "model", *ANSWER_COLUMNS))
        rows = [
            {"key": key, "provider": provider, "model": model, **{c: getattr(a, c) for c in ANSWER_COLUMNS}}
            for key, provider, model, a in sorted(items, key=lambda item: item[0])
        ]  # one lock order

        def work(conn: Connection) -> None:
            conn.execute(
                text(
                    "INSERT INTO responses VALUES (:key, :provider, :model, "
                    f"{', '.join(':' + c for c in ANSWER_COLUMNS)}) "
                    f"ON CONFLICT (key) DO UPDATE SET {columns}"
                ),
                rows,
            )
            conn.execute(text("DELETE FROM claims WHERE key = ANY(:keys)"), {"keys": [r["key"] for r in rows]})

        self._write(work)

    def count(self) -> int:
        return int(self._read("SELECT COUNT(*) FROM responses")[0][0])

    def holds(self, provider: str, model: str) -> bool:
        sql = "SELECT 1 FROM responses WHERE provider = :provider AND model = :model LIMIT 1"
        return bool(self._read(sql, provider=provider, model=model))

    # --- claims -------------------------------------------------------------------------------
    def claim(self, keys: Sequence[str], owner: str, lease_s: float) -> tuple[list[str], int]:
        mine: list[str] = []
        taken_over = 0
        for start in range(0, len(keys), _CHUNK):
            chunk = sorted(set(keys[start : start + _CHUNK]))  # one lock order for all workers: no deadlocks

            def work(conn: Connection, chunk: list[str] = chunk) -> tuple[list[str], int]:
                params = {"keys": chunk, "owner": owner, "lease": lease_s}
                expired = conn.execute(
                    text(
                        f"SELECT COUNT(*) FROM claims WHERE key = ANY(:keys) AND owner <> :owner AND expires_at < {_NOW}"
                    ),
                    params,
                ).scalar_one()
                held = [
                    row[0]
                    for row in conn.execute(
                        text(
                            "INSERT INTO claims (key, owner, expires_at) "
                            f"SELECT k, :owner, {_NOW} + :lease FROM unnest(CAST(:keys AS text[])) AS k "
                            "WHERE NOT EXISTS (SELECT 1 FROM responses r WHERE r.key = k) ORDER BY k "
                            "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at "
                            f"WHERE claims.expires_at < {_NOW} OR claims.owner = EXCLUDED.owner RETURNING key"
                        ),
                        params,
                    )
                ]
                # A worker that stored an answer after this statement's snapshot began has its claim row
                # deleted, which the upsert then re-inserted: drop what is answered by now.
                answered = {
                    row[0]
                    for row in conn.execute(
                        text(
                            "DELETE FROM claims c USING responses r WHERE c.key = r.key AND c.key = ANY(:held) "
                            "AND c.owner = :owner RETURNING c.key"
                        ),
                        {"held": held, "owner": owner},
                    )
                }
                return [k for k in held if k not in answered], int(expired)

            held, expired = self._write(work)
            mine += held
            taken_over += expired
        return mine, taken_over

    def claim_owners(self, keys: Sequence[str]) -> dict[str, str]:
        unique = list(dict.fromkeys(keys))
        owners: dict[str, str] = {}
        for start in range(0, len(unique), _CHUNK):
            rows = self._read(
                "SELECT key, owner FROM claims WHERE key = ANY(:keys)", keys=unique[start : start + _CHUNK]
            )
            owners.update({row[0]: row[1] for row in rows})
        return owners

    def renew(self, owner: str, lease_s: float) -> None:
        self._write(
            lambda conn: conn.execute(
                text(f"UPDATE claims SET expires_at = {_NOW} + :lease WHERE owner = :owner"),
                {"lease": lease_s, "owner": owner},
            )
        )

    def release(self, owner: str, keys: Sequence[str] | None = None) -> None:
        if keys is None:
            self._write(lambda conn: conn.execute(text("DELETE FROM claims WHERE owner = :owner"), {"owner": owner}))
        else:
            self._write(
                lambda conn: conn.execute(
                    text("DELETE FROM claims WHERE owner = :owner AND key = ANY(:keys)"),
                    {"owner": owner, "keys": list(keys)},
                )
            )

    # --- provider batches -------------------------------------------------------------------
    def add_batch(self, batch_id: str, provider: str, endpoint: str, model: str, outcome: str, keys: list[str]) -> None:
        params = {
            "batch_id": batch_id,
            "provider": provider,
            "endpoint": endpoint,
            "model": model,
            "outcome": outcome,
            "keys": json.dumps(keys),
            "now": time.time(),
        }
        self._write(
            lambda conn: conn.execute(
                text(
                    "INSERT INTO batches VALUES (:batch_id, :provider, :endpoint, :model, :outcome, 'submitted', :keys,"
                    " :now, NULL) ON CONFLICT (batch_id) DO UPDATE SET provider = EXCLUDED.provider,"
                    " endpoint = EXCLUDED.endpoint, model = EXCLUDED.model, outcome = EXCLUDED.outcome,"
                    " status = EXCLUDED.status, keys = EXCLUDED.keys, submitted_at = EXCLUDED.submitted_at,"
                    " finished_at = NULL"
                ),
                params,
            )
        )

    def open_batches(self, provider: str, endpoint: str, model: str) -> list[BatchRecord]:
        rows = self._read(
            "SELECT batch_id, provider, endpoint, model, outcome, status, keys FROM batches WHERE provider = :p"
            " AND endpoint = :e AND model = :m AND finished_at IS NULL ORDER BY submitted_at",
            p=provider,
            e=endpoint,
            m=model,
        )
        return [
            BatchRecord(batch_id, provider, endpoint, model, outcome, status, json.loads(keys))
            for batch_id, provider, endpoint, model, outcome, status, keys in rows
        ]

    def finish_batch(self, batch_id: str, status: str) -> None:
        self._write(
            lambda conn: conn.execute(
                text("UPDATE batches SET status = :status, finished_at = :now WHERE batch_id = :batch_id"),
                {"status": status, "now": time.time(), "batch_id": batch_id},
            )
        )

    # --- whole-table copy ---------------------------------------------------------------------
    def rows(self, table: str, chunk: int = 10_000) -> Iterator[list[tuple]]:
        with self._engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=chunk).execute(
                TABLES[table].select().order_by(*TABLES[table].primary_key.columns)
            )
            for part in result.partitions(chunk):
                yield [tuple(row) for row in part]

    def insert_rows(self, table: str, rows: Sequence[tuple]) -> int:
        schema = TABLES[table]
        sql = f"INSERT INTO {schema.name} VALUES ({', '.join(['%s'] * len(schema.columns))}) ON CONFLICT DO NOTHING"

        def work(conn: Connection) -> int:
            count = f"SELECT COUNT(*) FROM {schema.name}"
            before = conn.exec_driver_sql(count).scalar_one()
            conn.exec_driver_sql(sql, list(rows))  # the driver pipelines the rows (no round trip each)
            return int(conn.exec_driver_sql(count).scalar_one() - before)

        return self._write(work) if rows else 0
