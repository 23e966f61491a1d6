"""Persistent response cache: one SQLite file (WAL mode) shared by every screener and case.

key   = sha256 of provider, endpoint and the full request (model, every generation parameter, the
        messages including image bytes): see Provider.cache_key.
value = raw text, parsed value (or parse failure), token usage, dollars, latency, time.
Each answer is committed as it arrives, so a crash or `kill -9` loses nothing already answered.
API errors are never stored: a rerun asks again only what is missing. The same file keeps the ids
of submitted provider batches, so a batch run resumes instead of paying twice."""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from popfair.errors import ConfigError

CACHE_FILE = "responses.sqlite"
_CHUNK = 900  # stay under SQLite's bound-parameter limit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT NOT NULL, raw TEXT NOT NULL,
    value REAL, parse_error TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    cost_usd REAL NOT NULL, latency_s REAL NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    batch_id TEXT PRIMARY KEY, provider TEXT NOT NULL, endpoint TEXT NOT NULL, model TEXT NOT NULL,
    outcome TEXT NOT NULL, status TEXT NOT NULL, keys TEXT NOT NULL, submitted_at REAL NOT NULL,
    finished_at REAL);
"""


@dataclass(slots=True)
class CachedAnswer:
    raw: str
    value: float | None
    parse_error: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_s: float
    created_at: float


@dataclass(frozen=True)
class BatchRecord:
    batch_id: str
    provider: str
    endpoint: str
    model: str
    outcome: str
    status: str
    keys: list[str]


class ResponseCache:
    """SQLite-backed cache; safe for several processes (WAL, busy timeout) and one thread each."""

    def __init__(self, cache_dir: str | Path) -> None:
        directory = Path(cache_dir)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self.path = directory / CACHE_FILE
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cache_dir: cannot open the response cache in {directory}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedAnswer]:
        """Cached answers for the given keys (missing keys are absent from the result)."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, CachedAnswer] = {}
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                "SELECT key, raw, value, parse_error, input_tokens, output_tokens, cost_usd, latency_s,"
                f" created_at FROM responses WHERE key IN ({marks})", chunk)
            found.update((row[0], CachedAnswer(*row[1:])) for row in rows)
        return found

    def put(self, key: str, provider: str, model: str, answer: CachedAnswer) -> None:
        """Store one answer and commit at once (a kill after this line loses nothing)."""
        self._db.execute(
            "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (key, provider, model, answer.raw, answer.value, answer.parse_error, answer.input_tokens,
             answer.output_tokens, answer.cost_usd, answer.latency_s, answer.created_at))
        self._db.commit()

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    # --- provider batches -------------------------------------------------------------------
    def add_batch(self, batch_id: str, provider: str, endpoint: str, model: str, outcome: str,
                  keys: list[str]) -> None:
        self._db.execute("INSERT OR REPLACE INTO batches VALUES (?,?,?,?,?,?,?,?,NULL)",
                         (batch_id, provider, endpoint, model, outcome, "submitted", json.dumps(keys),
                          time.time()))
        self._db.commit()

    def open_batches(self, provider: str, endpoint: str, model: str) -> list[BatchRecord]:
        """Batches submitted for this provider/endpoint/model and not yet collected."""
        rows = self._db.execute(
            "SELECT batch_id, provider, endpoint, model, outcome, status, keys FROM batches"
            " WHERE provider=? AND endpoint=? AND model=? AND finished_at IS NULL ORDER BY submitted_at",
            (provider, endpoint, model)).fetchall()
        return [BatchRecord(*row[:6], keys=json.loads(row[6])) for row in rows]

    def finish_batch(self, batch_id: str, status: str) -> None:
        self._db.execute("UPDATE batches SET status=?, finished_at=? WHERE batch_id=?",
                         (status, time.time(), batch_id))
        self._db.commit()
