"""A new SQLite tracking store seeded from an empty one already at this MLflow version's schema
(popfair.track.mlflow_tracker opens its stores through `seed_sqlite_store`)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("popfair")


def _template_dir() -> Path | None:
    """The folder of popfair's on-disk caches (as popfair.population.cache: $POPFAIR_CACHE_DIR,
    else ~/.cache/popfair; POPFAIR_CACHE_DIR=off: none)."""
    setting = os.environ.get("POPFAIR_CACHE_DIR", "")
    if setting.lower() == "off":
        return None
    return Path(setting) if setting else Path.home() / ".cache" / "popfair"


def seed_sqlite_store(path: Path) -> bool:
    """Start a new SQLite tracking store at `path` as a copy of an empty store that this MLflow
    version has already brought to its schema (kept in popfair's cache folder and built on first
    use), so a new folder does not run MLflow's few dozen schema migrations again: about 3 CPU
    seconds and, with every migration committed and synced to disk, 2-5 s of waiting on this
    machine. MLflow then opens the copy as its own (the schema version matches) and adds its
    Default experiment, as for a store it created. Never replaces an existing file; False (and
    MLflow creates the store as usual) when there is no cache folder or anything fails."""
    root = _template_dir()
    if root is None or path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        from importlib.metadata import version

        template = root / f"mlflow-{version('mlflow')}-empty-store.db"
        if not template.is_file():
            _build_store_template(template)
        shutil.copyfile(template, tmp)
        os.link(tmp, path)  # fails if another process created the store meanwhile: theirs is kept
        return True
    except Exception as exc:  # noqa: BLE001 - MLflow creates the store itself, as before
        log.debug("new MLflow store not seeded from a template: %s", exc)
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _build_store_template(template: Path) -> None:
    """An empty SQLite store at MLflow's current schema: its own table creation and migrations
    (mlflow.store.db.utils._initialize_tables), without a sync to disk after each migration's
    commit (PRAGMA synchronous=OFF on this engine only); the finished file is synced once and
    moved into place atomically."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    template.parent.mkdir(parents=True, exist_ok=True)
    building = template.with_name(f".{template.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    engine = sqlalchemy.create_engine(f"sqlite:///{building}")

    def no_sync_per_commit(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.close()

    sqlalchemy.event.listen(engine, "connect", no_sync_per_commit)
    try:
        _initialize_tables(engine)
        engine.dispose()
        with building.open("rb") as handle:
            os.fsync(handle.fileno())
        os.replace(building, template)
    finally:
        engine.dispose()
        building.unlink(missing_ok=True)
