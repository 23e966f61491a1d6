"""On-disk cache for fitted population models, name tables and drawn samples (they take seconds;
loading takes ms).

An entry's key hashes its inputs: the data files' fingerprints, the arguments, and the source code
of the modules that build it, so editing the code or the data invalidates it. Location:
$POPFAIR_CACHE_DIR, else ~/.cache/popfair; POPFAIR_CACHE_DIR=off disables the disk cache. An entry
read is marked used (its modification time), so `prune` (`popfair-data cache --unused-days N`) can
remove the entries no run has read for N days: an edit of the code or data leaves its old entries
behind, and nothing else removes them."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")


def cache_dir() -> Path | None:
    setting = os.environ.get("POPFAIR_CACHE_DIR", "")
    if setting.lower() == "off":
        return None
    return Path(setting) if setting else Path.home() / ".cache" / "popfair"


def file_fingerprint(path: str | Path) -> str:
    """Content hash for files up to 64 MB, else size + modification time (national PUMS is GBs).
    A file's hash is kept in this process while its size, modification time and inode stay the
    same (the cases of a sweep fingerprint the same name and PUMS files for every sample)."""
    path = Path(path)
    stat = path.stat()
    if stat.st_size <= 64 * 2**20:
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_dev)
        if key not in _HASHED:
            _HASHED[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        return _HASHED[key]
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


_HASHED: dict[tuple[Any, ...], str] = {}  # (file, size, mtime, inode, device) -> its content hash


def cached_path(name: str, parts: Iterable[Any], modules: Iterable[ModuleType], suffix: str = ".pkl") -> Path | None:
    """Where `disk_cached` keeps the entry for these parts and module sources (None: no disk cache)."""
    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode())
    for module in modules:
        digest.update(Path(str(module.__file__)).read_bytes())
    return root / f"{name}-{digest.hexdigest()[:24]}{suffix}"


def frame_digest(table: pd.DataFrame) -> str:
    """A digest of a frame's rows, index, column names and types (a part of an entry's key)."""
    import pandas as pd

    digest = hashlib.sha256(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    digest.update(repr([(str(name), str(dtype)) for name, dtype in table.dtypes.items()]).encode())
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """`data` into `path` whole or not at all (concurrent runs never read half a file); a read-only
    cache folder is left as it is."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as out:
            out.write(data)
        os.replace(out.name, path)
    except OSError:
        pass


def disk_cached(name: str, parts: Iterable[Any], modules: Iterable[ModuleType], build: Callable[[], T]) -> T:
    """build(), or its pickled result from an earlier call with the same parts and module sources."""
    path = cached_path(name, parts, modules)
    if path is None:
        return build()
    if path.exists():
        try:
            with path.open("rb") as handle:
                value = pickle.load(handle)
            mark_used(path)
            return value
        except Exception:  # a truncated or foreign file: rebuild it
            path.unlink(missing_ok=True)
    value = build()
    write_atomically(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))  # read-only home: still returned
    return value


def disk_cached_frame(
    name: str, parts: Iterable[Any], modules: Iterable[ModuleType], build: Callable[[], pd.DataFrame]
) -> pd.DataFrame:
    """build(), or the frame an earlier call with the same parts and module sources kept as Parquet:
    a twentieth of a pickled frame's size for tables of strings (a paired audit's 48,048 candidates:
    1.2 MB against 24 MB), read in about the same time. Columns of Python objects (Parquet reads
    strings back as pandas' string type) are put back as objects. A frame that does not read back
    exactly equal (a type Parquet cannot hold) is not kept: every call builds it."""
    path = cached_path(name, parts, modules, suffix=".parquet")
    kept = read_kept_frame(path)
    if kept is not None:
        return kept
    frame = build()
    if path is not None:
        keep_frame(path, frame)
    return frame


def read_kept_frame(path: Path | None) -> pd.DataFrame | None:
    """The frame `keep_frame` kept at `path` (a `cached_path(..., suffix=".parquet")`), marked used;
    None where there is none (or no disk cache). A damaged file is removed."""
    if path is None or not path.exists():
        return None
    try:
        frame = _read_frame(path.read_bytes())
    except Exception:  # noqa: BLE001 - a truncated or foreign file: rebuilt by the caller
        path.unlink(missing_ok=True)
        return None
    mark_used(path)
    return frame


def keep_frame(path: Path, frame: pd.DataFrame) -> bool:
    """Keep `frame` at `path` as Parquet if it reads back exactly equal (`_same_frame`); whether it
    was kept. Never raises: a frame that cannot be kept is only built again next time."""
    import pandas as pd

    data = io.BytesIO()
    try:
        kept = frame.copy(deep=False)
        objects = [str(c) for c, dtype in frame.dtypes.items() if pd.api.types.is_object_dtype(dtype)]
        kept.attrs = {_OBJECT_COLUMNS: objects}
        kept.to_parquet(data)
        if not _same_frame(_read_frame(data.getvalue()), frame):
            return False
    except Exception:  # noqa: BLE001 - not representable as it is: not kept
        return False
    write_atomically(path, data.getvalue())
    return True


_OBJECT_COLUMNS = "popfair.object_columns"  # a kept frame's columns of Python objects (its Parquet metadata)


def _same_frame(back: pd.DataFrame, frame: pd.DataFrame) -> bool:
    """Whether a frame read back is the frame written: the same column labels, dtypes and index type,
    and every value equal (`DataFrame.equals`: missing values in the same places). As strict as
    `assert_frame_equal(check_exact=True)` and a twentieth of its time on columns of strings (a
    plan's 19,000 resume texts: 5 ms instead of 95)."""
    return (
        list(back.columns) == list(frame.columns)
        and back.dtypes.tolist() == frame.dtypes.tolist()
        and type(back.index) is type(frame.index)
        and back.index.dtype == frame.index.dtype
        and back.equals(frame)
    )


def _read_frame(data: bytes) -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_parquet(io.BytesIO(data))
    objects = frame.attrs.pop(_OBJECT_COLUMNS, [])
    for column in objects:
        frame[column] = frame[column].astype(object)
    frame.attrs = {}
    return frame


# what `cached_path` names: <name>-<24 hex digits><suffix>; nothing else in the folder is an entry
# (the PUMS downloads under pums/, a user's own files)
_ENTRY = re.compile(r"^[A-Za-z0-9_.]+-[0-9a-f]{24}\.(pkl|parquet|png)$")
_STALE_WRITE_S = 3600  # a .tmp file this old is a write that was killed halfway (`write_atomically`)


def mark_used(path: Path) -> None:
    """An entry was read: its modification time says so (`prune` keeps what runs still read)."""
    try:
        os.utime(path)
    except OSError:  # a read-only cache folder: it is only never pruned
        pass


def cache_entries(root: Path | None = None) -> list[tuple[Path, os.stat_result]]:
    """The disk cache's entries (and writes killed halfway) with their stat, oldest use first."""
    root = cache_dir() if root is None else root
    if root is None or not root.is_dir():
        return []
    now, found = time.time(), []
    for path in root.iterdir():
        try:
            stat = path.stat()
        except FileNotFoundError:  # removed meanwhile (another prune)
            continue
        stale_write = path.suffix == ".tmp" and now - stat.st_mtime > _STALE_WRITE_S
        if path.is_file() and (_ENTRY.match(path.name) or stale_write):
            found.append((path, stat))
    return sorted(found, key=lambda entry: entry[1].st_mtime)


def prune(unused_days: float | None, root: Path | None = None, *, dry_run: bool = False) -> list[tuple[Path, int]]:
    """Remove the entries no run has read or written for `unused_days` days (None: every entry);
    returns (path, bytes) of each one removed (with `dry_run`, that would be). A run that needs one
    again builds it again."""
    cutoff = time.time() - unused_days * 86_400 if unused_days is not None else float("inf")
    removed = []
    for path, stat in cache_entries(root):
        if stat.st_mtime < cutoff:
            if not dry_run:
                path.unlink(missing_ok=True)
            removed.append((path, stat.st_size))
    return removed
