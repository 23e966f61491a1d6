"""Response caches behind one interface (`ResponseCache`): SQLite in a folder for one machine (the
default), a server database (PostgreSQL through SQLAlchemy) for sweeps spread over machines.
`open_cache` picks the backend from where the cache lives."""

from __future__ import annotations

from pathlib import Path

from popfair.store.blobs import is_url
from popfair.store.responses.base import TABLES, BatchRecord, CachedAnswer, ResponseCache, StoredReply
from popfair.store.responses.sqlite import CACHE_FILE, SqliteCache

__all__ = [
    "CACHE_FILE",
    "TABLES",
    "BatchRecord",
    "CachedAnswer",
    "ResponseCache",
    "SqliteCache",
    "StoredReply",
    "is_url",
    "open_cache",
]


def open_cache(location: str | Path) -> ResponseCache:
    """Open the cache at `location`: a folder (SQLite file inside it) or a database URL."""
    if is_url(location):
        from popfair.store.responses.server import ServerCache

        return ServerCache(str(location))
    return SqliteCache(location)
