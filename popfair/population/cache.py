"""On-disk cache for fitted population models, name tables and drawn samples (they take seconds;
loading takes ms).

An entry's key hashes its inputs: the data files' fingerprints, the arguments, and the source code
of the modules that build it, so editing the code or the data invalidates it. Location:
$POPFAIR_CACHE_DIR, else ~/.cache/popfair; POPFAIR_CACHE_DIR=off disables the disk cache."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tempfile
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
                return pickle.load(handle)
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
    if path is None:
        return build()
    if path.exists():
        try:
            return _read_frame(path.read_bytes())
        except Exception:  # noqa: BLE001 - a truncated or foreign file: rebuild it
            path.unlink(missing_ok=True)
    frame = build()
    import pandas as pd

    data = io.BytesIO()
    try:
        kept = frame.copy(deep=False)
        objects = [str(c) for c, dtype in frame.dtypes.items() if pd.api.types.is_object_dtype(dtype)]
        kept.attrs = {_OBJECT_COLUMNS: objects}
        kept.to_parquet(data)
        pd.testing.assert_frame_equal(_read_frame(data.getvalue()), frame, check_exact=True)
    except Exception:  # noqa: BLE001 - not representable as it is: not kept
        return frame
    write_atomically(path, data.getvalue())
    return frame


_OBJECT_COLUMNS = "popfair.object_columns"  # a kept frame's columns of Python objects (its Parquet metadata)


def _read_frame(data: bytes) -> pd.DataFrame:
    import pandas as pd

    frame = pd.read_parquet(io.BytesIO(data))
    objects = frame.attrs.pop(_OBJECT_COLUMNS, [])
    for column in objects:
        frame[column] = frame[column].astype(object)
    frame.attrs = {}
    return frame
