"""What every response-cache backend shares: the stored records, the schema, and the interface.

key   = sha256 of provider, endpoint and the full request (model, every generation parameter, the
        messages including image bytes): see Provider.cache_key.
value = raw text, parsed value (or parse failure), token usage, dollars, latency, time.
Each answer is committed as it arrives, so a crash or `kill -9` loses no answer received; only the
requests in flight at that moment (up to the engine's concurrency) are asked again by the rerun.
API errors are never stored: a rerun asks again only what is missing. The same database keeps the ids
of submitted provider batches, so a batch run resumes instead of paying twice.

The schema is written once, as SQLAlchemy tables, and every backend creates exactly these tables
(SQLite from the compiled DDL, a server database through SQLAlchemy), so a cache copies between
backends row for row."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Column, Float, Index, Integer, MetaData, Table, Text

_Cache = TypeVar("_Cache", bound="ResponseCache")
METADATA = MetaData()

RESPONSES = Table(
    "responses",
    METADATA,
    Column("key", Text, primary_key=True),
    Column("provider", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("raw", Text, nullable=False),
    Column("value", Float),
    Column("parse_error", Text),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("latency_s", Float, nullable=False),
    Column("created_at", Float, nullable=False),
)

# "does the cache hold any answer of this model?" (a dry run skips the key lookups when not)
Index("responses_by_model", RESPONSES.c.provider, RESPONSES.c.model)

BATCHES = Table(
    "batches",
    METADATA,
    Column("batch_id", Text, primary_key=True),
    Column("provider", Text, nullable=False),
    Column("endpoint", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("keys", Text, nullable=False),
    Column("submitted_at", Float, nullable=False),
    Column("finished_at", Float),
)

# Claims: who is asking for a key right now, until when. Not copied between caches (they are live state).
CLAIMS = Table(
    "claims",
    METADATA,
    Column("key", Text, primary_key=True),
    Column("owner", Text, nullable=False),
    Column("expires_at", Float, nullable=False),
)

TABLES = {table.name: table for table in (RESPONSES, BATCHES)}  # what a copy/migration carries
ANSWER_COLUMNS = ("raw", "value", "parse_error", "input_tokens", "output_tokens", "cost_usd", "latency_s", "created_at")
REPLY_COLUMNS = ANSWER_COLUMNS[:5]  # what a rerun reuses of a stored answer (StoredReply)


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


class StoredReply(NamedTuple):
    """What a rerun reuses of a stored answer (the dollars were paid by the run that stored it).
    A plain tuple: bulk reads of 60,000 rows make no heavier object per row."""

    raw: str
    value: float | None
    parse_error: str | None
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class BatchRecord:
    batch_id: str
    provider: str
    endpoint: str
    model: str
    outcome: str
    status: str
    keys: list[str]


class ResponseCache(ABC):
    """One response store shared by every screener, case and process that opens the same location.
    Implementations: SqliteCache (a folder, one machine), ServerCache (a database URL, many machines)."""

    #: where the cache lives, safe to print (no password)
    location: str

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedAnswer]:
        """Cached answers for the given keys, in bulk (missing keys are absent from the result)."""
        return {row[0]: CachedAnswer(*row[1:]) for row in self._select(ANSWER_COLUMNS, keys)}

    def get_replies(self, keys: Iterable[str]) -> dict[str, StoredReply]:
        """The reusable part of the cached answers for `keys`, in bulk (the fully cached rerun's read:
        a narrower query than get_many)."""
        new = tuple.__new__  # StoredReply is a tuple: no per-row constructor call
        return {row[0]: new(StoredReply, row[1:]) for row in self._select(REPLY_COLUMNS, keys)}

    @abstractmethod
    def _select(self, columns: Sequence[str], keys: Iterable[str]) -> list[Any]:
        """Rows (key, *columns) of the distinct given keys that have an answer, in bulk."""

    @abstractmethod
    def put(self, key: str, provider: str, model: str, answer: CachedAnswer) -> None:
        """Store one answer and drop its claim, in one commit (a kill after this returns loses nothing)."""

    def put_many(self, items: Sequence[tuple[str, str, str, CachedAnswer]]) -> None:
        """Store several (key, provider, model, answer) and drop their claims, in one commit (group
        commit of answers that arrived together; backends override it with one transaction)."""
        for item in items:
            self.put(*item)

    @abstractmethod
    def count(self) -> int:
        """Number of stored answers."""

    @abstractmethod
    def holds(self, provider: str, model: str) -> bool:
        """Whether any answer of this provider's model is stored (indexed: instant on a large cache)."""

    # --- claims: no answer paid twice across processes and machines ------------------------
    @abstractmethod
    def claim(self, keys: Sequence[str], owner: str, lease_s: float) -> tuple[list[str], int]:
        """Claim the keys that have no answer and no live claim of another owner (an expired claim,
        left by a worker that died, is taken over). Committed at once. Returns the keys `owner` now
        holds (lease renewed) and how many of them were taken over from an expired claim."""

    @abstractmethod
    def claim_owners(self, keys: Sequence[str]) -> dict[str, str]:
        """key -> owner of the claims held on `keys` (keys nobody claims are absent)."""

    @abstractmethod
    def renew(self, owner: str, lease_s: float) -> None:
        """Extend every claim of `owner` to lease_s from now (the owner's heartbeat)."""

    @abstractmethod
    def release(self, owner: str, keys: Sequence[str] | None = None) -> None:
        """Drop claims of `owner` (all of them when keys is None) so that others may ask."""

    # --- provider batches -------------------------------------------------------------------
    @abstractmethod
    def add_batch(self, batch_id: str, provider: str, endpoint: str, model: str, outcome: str, keys: list[str]) -> None:
        """Record a submitted provider batch (committed at once) so a rerun collects it."""

    @abstractmethod
    def open_batches(self, provider: str, endpoint: str, model: str) -> list[BatchRecord]:
        """Batches submitted for this provider/endpoint/model and not yet collected, oldest first."""

    @abstractmethod
    def finish_batch(self, batch_id: str, status: str) -> None:
        """Mark a batch collected (or failed/expired) with its final status."""

    # --- whole-table copy (migration between backends) ----------------------------------------
    @abstractmethod
    def rows(self, table: str, chunk: int = 10_000) -> Iterator[list[tuple]]:
        """Every row of `table` ("responses" or "batches") in schema column order, in chunks."""

    @abstractmethod
    def insert_rows(self, table: str, rows: Sequence[tuple]) -> int:
        """Insert rows (schema column order), keeping rows already present; returns how many were new."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self: _Cache) -> _Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"
