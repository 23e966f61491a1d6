"""A content-addressed store of computed results (fitted nuisances, rendered documents), on disk
beside the response cache so that it serves every process of a sweep and every rerun.

An entry's key is a hash of everything its value depends on (`content_key`): the caller names the
data, the settings and the library versions. Nothing is ever updated in place, so there is no
invalidation: changed inputs give a new key. Writes are atomic (a temporary file in the entry's
folder renamed over the entry), so a process killed mid-write leaves the old entry or none, never
half of one. Files are not synced one by one (the response cache's guarantee: safe across process
kills, not necessarily across a power cut); instead each entry carries a checksum of its payload,
so a file torn or damaged any other way reads as a miss (and is removed), never as wrong data. Concurrent writers of
one key write the same bytes; the last rename wins.

Layout: ``<root>/<namespace>/<key[:2]>/<key>``. With ``root=None`` entries live in this process's
memory only (the most recent `MEMORY_ENTRIES` per namespace)."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger("popfair")

MAGIC = b"popfair-blob-1\n"
DIGEST_SIZE = 16
MEMORY_ENTRIES = 256
_MEMORY: dict[str, OrderedDict[str, bytes]] = {}


def content_key(*parts: Any) -> str:
    """A 32-hex-digit hash of `parts`: bytes and str as they are, numpy arrays by dtype, shape and
    contents, DataFrames by columns, dtypes and values, anything else by its JSON form (keys
    sorted). Each part is framed by its kind and length, so ("ab", "c") and ("a", "bc") differ."""
    digest = hashlib.blake2b(digest_size=DIGEST_SIZE)

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


class BlobStore:
    """Immutable entries (bytes) by content key; see the module docstring.

    Parameters
    ----------
    root : str, Path or None
        The folder (created on first write); None keeps entries in memory.
    namespace : str
        Sub-folder that keeps one kind of entry apart from the others.

    Examples
    --------
    >>> store = BlobStore(None, "example")
    >>> key = content_key("settings", {"seed": 0})
    >>> store.put(key, b"value")
    >>> store.get(key)
    b'value'
    """

    def __init__(self, root: str | Path | None, namespace: str) -> None:
        self.root = None if root is None else Path(root) / namespace
        self.namespace = namespace
        self._warned = False

    def path(self, key: str) -> Path | None:
        """The entry's file (None for a memory store)."""
        return None if self.root is None else self.root / key[:2] / key

    def get(self, key: str) -> bytes | None:
        """The entry's bytes, or None when it is absent or damaged (a damaged file is removed)."""
        path = self.path(key)
        if path is None:
            memory = _MEMORY.get(self.namespace)
            if memory is None or key not in memory:
                return None
            memory.move_to_end(key)
            return memory[key]
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("store %s: cannot read %s: %s", self.namespace, path, exc)
            return None
        head = len(MAGIC) + DIGEST_SIZE
        payload = blob[head:]
        if blob[: len(MAGIC)] != MAGIC or blob[len(MAGIC) : head] != _checksum(payload):
            log.warning("store %s: removing damaged entry %s", self.namespace, path)
            path.unlink(missing_ok=True)
            return None
        return payload

    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key` atomically. A folder that cannot be written is reported once
        and skipped: the caller has its value, only the reuse is lost."""
        path = self.path(key)
        if path is None:
            memory = _MEMORY.setdefault(self.namespace, OrderedDict())
            memory[key] = data
            memory.move_to_end(key)
            while len(memory) > MEMORY_ENTRIES:
                memory.popitem(last=False)
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{key}.", suffix=".tmp", delete=False) as out:
                try:
                    out.write(MAGIC + _checksum(data) + data)
                except BaseException:
                    os.unlink(out.name)
                    raise
            os.replace(out.name, path)
        except OSError as exc:
            if not self._warned:
                log.warning(
                    "store %s: cannot write under %s (%s); results are not reused", self.namespace, self.root, exc
                )
                self._warned = True

    def get_json(self, key: str) -> Any:
        """A JSON entry's value, or None."""
        blob = self.get(key)
        return None if blob is None else json.loads(blob)

    def put_json(self, key: str, value: Any) -> None:
        self.put(key, json.dumps(value).encode())

    def get_arrays(self, key: str) -> dict[str, np.ndarray] | None:
        """An entry of named numpy arrays (exact dtypes and bytes), or None."""
        blob = self.get(key)
        if blob is None:
            return None
        with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
            return {name: arrays[name] for name in arrays.files}

    def put_arrays(self, key: str, arrays: Mapping[str, np.ndarray]) -> None:
        buffer = io.BytesIO()
        np.savez(buffer, allow_pickle=False, **arrays)
        self.put(key, buffer.getvalue())


def _checksum(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest()


def clear_memory(namespace: str | None = None) -> None:
    """Forget the in-memory entries of one namespace (or of all); files on disk are left alone."""
    if namespace is None:
        _MEMORY.clear()
    else:
        _MEMORY.pop(namespace, None)
