"""Content-addressed blob stores: bytes kept under a key the caller derives from what produced them
(a digest of settings and inputs), so anything computed once is found again by every later case,
sweep and rerun that would compute the same thing.

Two backends behind one interface, chosen like the response cache's (`cache_dir` / `cache_url`):

- a folder: one SQLite file `<name>.sqlite` per store (WAL, so a crash or `kill -9` loses only the
  batch being written), for one machine;
- a database URL (PostgreSQL through SQLAlchemy): one table `<name>`, for sweeps over machines.

Blobs are immutable: a key always names the same bytes, so a put of a key already stored keeps the
stored row, and two processes that compute the same blob at once both succeed.

Why SQLite rather than one file per blob: a rendered nurse page set is 18,963 PNGs of ~51 KB. With
16 KiB database pages, reading all of them takes 0.4 s as 22 `IN (...)` queries, writing 5.5 s (files
sharded by hash: 0.45-0.6 s and 5.5 s); one file is one thing to copy or delete, commits are atomic
without temporary files, and the lookup is batched."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import sqlite3
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from sqlalchemy import Column, Float, LargeBinary, MetaData, Table, Text, create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from popfair.core.errors import ConfigError
from popfair.runtime.secrets import safe_url
from popfair.store.owners import owner_is_dead

log = logging.getLogger("popfair")
_Store = TypeVar("_Store", bound="BlobStore")
_SQLITE_CHUNK = 900  # stay under SQLite's bound-parameter limit
_SERVER_CHUNK = 2_000  # keys per `= ANY(array)` query (~100 MB of page images at most per round trip)
_SCHEMA_LOCK = 0x706F7066  # advisory lock id held while tables are created ("popf")
# The blob stores popfair keeps beside the response cache, by name (tables `blobs_<name>` of a server
# cache; `<name>.sqlite` in a cache folder): one list, so the cache CLI copies every one of them.
DOCUMENTS, NUISANCES, EMBEDDINGS, TFIDF_SCORES = "documents", "nuisances", "embeddings", "tfidf_scores"
GENERATIONS = "generations"  # hf_local's answers, each with the batch, dtype, device and versions that made it
BLOB_STORES = (DOCUMENTS, NUISANCES, EMBEDDINGS, TFIDF_SCORES, GENERATIONS)
MEMORY_BLOBS = 256  # blobs a memory store keeps (the most recently used)
SQLITE_PAGE_SIZE = 16_384  # 16 KiB pages: ~50 KB blobs read 1.7x and write 2x faster than with 4 KiB


# a claim row is (re)taken unless another owner's lease still runs; named parameters: SQLite and PostgreSQL
_UPSERT_CLAIM = (
    "INSERT INTO {table} (key, owner, expires) VALUES (:key, :owner, :expires) ON CONFLICT (key) DO UPDATE "
    "SET owner = excluded.owner, expires = excluded.expires WHERE {table}.expires < :now OR {table}.owner = excluded.owner"
)

# what a store's backend raises when it fails mid-run (disk full, database gone, file locked too long)
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, SQLAlchemyError)


def is_url(location: str | Path) -> bool:
    """A database URL (`postgresql+psycopg://user@host/db`) rather than a folder."""
    return "://" in str(location)


def server_engine(url: str, metadata: MetaData, what: str) -> tuple[Engine, str]:
    """An engine on a PostgreSQL `url` with `metadata`'s tables created (under an advisory lock:
    the workers of a sweep open a fresh database at once, and concurrent CREATE TABLE IF NOT EXISTS
    can still collide in PostgreSQL's catalog), and the URL to show (password hidden). `what` names
    the store in errors. Refuses a URL that holds a password: credentials come from the environment
    (PGPASSWORD, ~/.pgpass), never from a config that is logged."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"cache_url: not a database URL: {safe_url(url)!r} (expected postgresql+psycopg://user@host:5432/dbname)"
        ) from None
    location = parsed.render_as_string(hide_password=True)
    if parsed.password is not None:
        raise ConfigError(
            f"cache_url: {location} holds a password; remove it and set PGPASSWORD "
            "(or ~/.pgpass) in the environment instead, so it never reaches a config or log"
        )
    if parsed.get_backend_name() != "postgresql":
        raise ConfigError(
            f"cache_url: {location}: only postgresql URLs are supported for a server "
            "cache (for SQLite, set cache_dir to a local folder and cache_url=null)"
        )
    try:
        engine = create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=4)
        with engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
            metadata.create_all(conn, checkfirst=True)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise ConfigError(f"cache_url: no driver for {location} ({exc}); pip install 'popfair[postgres]'") from None
    except SQLAlchemyError as exc:
        raise ConfigError(
            f"cache_url: cannot open the {what} at {location}: {str(getattr(exc, 'orig', exc)).strip()}"
        ) from None
    return engine, location


class BlobStore(ABC):
    """Immutable bytes by key, shared by every process (and, on a server, machine) that opens the
    same location and name."""

    #: where the store lives, safe to print (no password)
    location: str

    @abstractmethod
    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The stored blobs of the given keys, in bulk (missing keys are absent from the result)."""

    @abstractmethod
    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Store (key, blob) pairs in one commit; keys already stored keep their blob."""

    @abstractmethod
    def count(self) -> int:
        """Number of stored blobs."""

    @abstractmethod
    def items(self, chunk: int = 500) -> Iterator[list[tuple[str, bytes]]]:
        """Every (key, blob), in key order, `chunk` at a time (to copy a store)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    # --- claims: one process computes what a key names while the others wait for it ---------

    def claim(self, keys: Sequence[str], owner: str, lease_s: float) -> dict[str, str]:
        """Take the claims on `keys` for `owner` (`popfair.store.owners.new_owner`), in one transaction:
        free claims, expired ones, those of a process of this host that has died, and `owner`'s own
        (renewed). Returns the keys held by another live owner: key -> that owner."""
        keys = list(dict.fromkeys(keys))
        now = time.time()
        others = {k: holder for k, holder in self._claim(keys, owner, now + lease_s, now).items() if holder != owner}
        dead = {k: holder for k, holder in others.items() if owner_is_dead(holder)}
        if dead:  # claims of killed processes of this host: taken over at once
            for holder in set(dead.values()):
                self.release([k for k, h in dead.items() if h == holder], holder)
            now = time.time()
            retaken = self._claim(list(dead), owner, now + lease_s, now)
            others = {k: h for k, h in others.items() if k not in dead}
            others.update({k: h for k, h in retaken.items() if h != owner})
        return others

    @abstractmethod
    def _claim(self, keys: Sequence[str], owner: str, expires: float, now: float) -> dict[str, str]:
        """Set each key's claim to (owner, expires) unless a live lease of another owner holds it
        (expires >= now); return each key's holder afterwards, in one transaction."""

    @abstractmethod
    def release(self, keys: Sequence[str], owner: str) -> None:
        """Drop `owner`'s claims on `keys` (keys another owner holds are left alone)."""

    def __enter__(self: _Store) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


class SqliteBlobStore(BlobStore):
    """`<folder>/<name>.sqlite`; safe for several processes on one machine (WAL, busy timeout)."""

    def __init__(self, folder: str | Path, name: str) -> None:
        directory = Path(folder)
        self.path = directory / f"{name}.sqlite"
        self.location = str(self.path)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._db.execute(f"PRAGMA page_size={SQLITE_PAGE_SIZE}")  # takes effect on a new file only
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self._db.execute("CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT, expires REAL)")
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cache_dir: cannot open the {name} store {self.path}: {exc}") from None

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, bytes] = {}
        for start in range(0, len(unique), _SQLITE_CHUNK):
            chunk = unique[start : start + _SQLITE_CHUNK]
            marks = ",".join("?" * len(chunk))
            found.update(self._db.execute(f"SELECT key, value FROM blobs WHERE key IN ({marks})", chunk).fetchall())
        return found

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        try:
            self._db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", items)
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM blobs").fetchone()[0])

    def items(self, chunk: int = 500) -> Iterator[list[tuple[str, bytes]]]:
        after = ""
        while rows := self._db.execute(
            "SELECT key, value FROM blobs WHERE key > ? ORDER BY key LIMIT ?", (after, chunk)
        ).fetchall():
            yield rows
            after = rows[-1][0]

    def _claim(self, keys: Sequence[str], owner: str, expires: float, now: float) -> dict[str, str]:
        params = [{"key": key, "owner": owner, "expires": expires, "now": now} for key in keys]
        holders: dict[str, str] = {}
        try:
            self._db.executemany(_UPSERT_CLAIM.format(table="claims"), params)
            for start in range(0, len(keys), _SQLITE_CHUNK):
                chunk = list(keys[start : start + _SQLITE_CHUNK])
                marks = ",".join("?" * len(chunk))
                holders.update(self._db.execute(f"SELECT key, owner FROM claims WHERE key IN ({marks})", chunk))
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise
        return holders

    def release(self, keys: Sequence[str], owner: str) -> None:
        self._db.executemany("DELETE FROM claims WHERE key = ? AND owner = ?", [(key, owner) for key in keys])
        self._db.commit()

    def close(self) -> None:
        self._db.close()


class ServerBlobStore(BlobStore):
    """Table `<name>` (key text primary key, value bytea) in a PostgreSQL database."""

    def __init__(self, url: str, name: str) -> None:
        metadata = MetaData()
        self._table = Table(
            name, metadata, Column("key", Text, primary_key=True), Column("value", LargeBinary, nullable=False)
        )
        claims = Table(
            f"{name}_claims",
            metadata,
            Column("key", Text, primary_key=True),
            Column("owner", Text),
            Column("expires", Float),
        )
        self._engine, self.location = server_engine(url, metadata, f"{name} store")
        self._select = text(f"SELECT key, value FROM {name} WHERE key = ANY(:keys)")
        self._insert = text(f"INSERT INTO {name} (key, value) VALUES (:key, :value) ON CONFLICT (key) DO NOTHING")
        self._upsert_claim = text(_UPSERT_CLAIM.format(table=claims.name))
        self._claim_owners = text(f"SELECT key, owner FROM {claims.name} WHERE key = ANY(:keys)")
        self._release = text(f"DELETE FROM {claims.name} WHERE key = :key AND owner = :owner")

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        unique = list(dict.fromkeys(keys))
        found: dict[str, bytes] = {}
        with self._engine.connect() as conn:
            for start in range(0, len(unique), _SERVER_CHUNK):
                found.update(
                    (key, bytes(value))
                    for key, value in conn.execute(self._select, {"keys": unique[start : start + _SERVER_CHUNK]})
                )
        return found

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        if items:
            with self._engine.begin() as conn:
                conn.execute(self._insert, [{"key": key, "value": value} for key, value in sorted(items)])

    def count(self) -> int:
        with self._engine.connect() as conn:
            return int(conn.execute(text(f"SELECT COUNT(*) FROM {self._table.name}")).scalar_one())

    def items(self, chunk: int = 500) -> Iterator[list[tuple[str, bytes]]]:
        page = text(f"SELECT key, value FROM {self._table.name} WHERE key > :after ORDER BY key LIMIT :n")
        after = ""
        while True:
            with self._engine.connect() as conn:
                rows = [(key, bytes(value)) for key, value in conn.execute(page, {"after": after, "n": chunk})]
            if not rows:
                return
            yield rows
            after = rows[-1][0]

    def _claim(self, keys: Sequence[str], owner: str, expires: float, now: float) -> dict[str, str]:
        with self._engine.begin() as conn:
            # sorted: two owners claiming overlapping keys lock their rows in the same order (no deadlock)
            params = [{"key": key, "owner": owner, "expires": expires, "now": now} for key in sorted(keys)]
            conn.execute(self._upsert_claim, params)
            return {key: str(holder) for key, holder in conn.execute(self._claim_owners, {"keys": list(keys)})}

    def release(self, keys: Sequence[str], owner: str) -> None:
        if keys:
            with self._engine.begin() as conn:
                conn.execute(self._release, [{"key": key, "owner": owner} for key in sorted(keys)])

    def close(self) -> None:
        self._engine.dispose()


class MemoryBlobStore(BlobStore):
    """Blobs in this process's memory (`open_blob_store(None, name)`): for callers without a cache
    folder, e.g. `estimate_pse` called from Python. Every store of one name shares its blobs, the
    `MEMORY_BLOBS` most recently used are kept."""

    _shared: dict[str, OrderedDict[str, bytes]] = {}
    _shared_claims: dict[str, dict[str, tuple[str, float]]] = {}

    def __init__(self, name: str) -> None:
        self.location = f"memory:{name}"
        self._blobs = self._shared.setdefault(name, OrderedDict())
        self._claims = self._shared_claims.setdefault(name, {})

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        found = {}
        for key in dict.fromkeys(keys):
            if key in self._blobs:
                self._blobs.move_to_end(key)
                found[key] = self._blobs[key]
        return found

    def put_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        for key, value in items:
            self._blobs.setdefault(key, value)
            self._blobs.move_to_end(key)
        while len(self._blobs) > MEMORY_BLOBS:
            self._blobs.popitem(last=False)

    def count(self) -> int:
        return len(self._blobs)

    def items(self, chunk: int = 500) -> Iterator[list[tuple[str, bytes]]]:
        pairs = sorted(self._blobs.items())
        for start in range(0, len(pairs), chunk):
            yield pairs[start : start + chunk]

    def _claim(self, keys: Sequence[str], owner: str, expires: float, now: float) -> dict[str, str]:
        for key in keys:
            holder, until = self._claims.get(key, (owner, now - 1))
            if until < now or holder == owner:
                self._claims[key] = (owner, expires)
        return {key: self._claims[key][0] for key in keys}

    def release(self, keys: Sequence[str], owner: str) -> None:
        for key in keys:
            if self._claims.get(key, ("", 0.0))[0] == owner:
                del self._claims[key]

    def close(self) -> None:
        pass

    @classmethod
    def clear(cls, name: str) -> None:
        """Forget the blobs of store `name` in this process."""
        cls._shared.get(name, OrderedDict()).clear()


def content_key(*parts: Any) -> str:
    """A hex digest of `parts`: bytes and str as they are, numpy arrays by dtype, shape and contents,
    DataFrames by columns, dtypes and values, anything else by its JSON form (keys sorted). Each
    part is framed by its kind and length, so ("ab", "c") and ("a", "bc") differ."""
    digest = hashlib.sha256()

    def feed(kind: str, payload: bytes) -> None:
        digest.update(f"{kind}:{len(payload)}:".encode())
        digest.update(payload)

    for part in parts:
        if isinstance(part, bytes):
            feed("bytes", part)
        elif isinstance(part, str):
            feed("str", part.encode())
        elif isinstance(part, np.ndarray):
            feed("array", f"{part.dtype.str}{part.shape}".encode())
            feed("data", np.ascontiguousarray(part).tobytes())
        elif isinstance(part, pd.DataFrame):
            feed("frame", json.dumps([list(map(str, part.columns)), list(map(str, part.dtypes))]).encode())
            feed("data", pd.util.hash_pandas_object(part, index=True).to_numpy().tobytes())
        else:
            feed("json", json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()


@functools.cache
def installed_versions(*names: str) -> dict[str, str]:
    """Installed versions of the distributions `names` ("absent" where one is not installed): part
    of the key of anything those libraries computed."""
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


def pack_arrays(arrays: Mapping[str, np.ndarray]) -> bytes:
    """Named numpy arrays as one blob (npz: exact dtypes and bytes, no pickle)."""
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    return buffer.getvalue()


def unpack_arrays(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}


def open_blob_store(location: str | Path | None, name: str) -> BlobStore:
    """The store `name` at `location`: a folder (SQLite file `<name>.sqlite` in it), a database URL
    (table `<name>`), or None (this process's memory). `name` is an identifier chosen by the code
    (documents, nuisances, ...), never user input."""
    if not name.isidentifier():
        raise ValueError(f"blob store name must be an identifier, got {name!r}")
    if location is None:
        return MemoryBlobStore(name)
    if is_url(location):
        return ServerBlobStore(str(location), name)
    return SqliteBlobStore(location, name)


def open_blob_store_or_memory(location: str | Path | None, name: str, who: str, instead: str) -> BlobStore:
    """`open_blob_store`, or this process's memory when the store cannot be opened: a store that only
    saves time must not stop a case. The warning names `who` lost it and what it does `instead`."""
    try:
        return open_blob_store(location, name)
    except ConfigError as exc:
        log.warning("%s: %s store off, %s: %s", who, name, instead, exc)
        return MemoryBlobStore(name)
