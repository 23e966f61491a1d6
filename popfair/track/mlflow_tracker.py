"""MLflow tracking: one run per case with params, metrics, artifacts and tags."""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.errors import require

MAX_PARAM_CHARS = 500  # long values (job descriptions, pools) live in the config artifact instead

log = logging.getLogger("popfair")


# Modules logging a run imports on first use (MLflow's git run context, the PNG writer for figures,
# parquet for the scored table): `prepare` loads them in its thread after opening the store, while
# the estimator computes, instead of in the track stage (about 0.25 s there).
TRACK_IMPORTS = ("git", "matplotlib.backends.backend_agg", "pyarrow.parquet", "pandas.io.formats.csvs")


def _import_quietly(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - optional (GitPython), or imported where it is needed
            log.debug("not preloaded: %s", name)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become their string form."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


class MlflowTracker:
    """Logs to `uri` (default sqlite:///mlruns/mlflow.db) with artifacts under `artifact_root`."""

    def __init__(
        self,
        uri: str = "sqlite:///mlruns/mlflow.db",
        experiment_name: str = "popfair",
        artifact_root: str = "mlruns",
        enabled: bool = True,
    ) -> None:
        require(
            isinstance(uri, str) and "://" in uri,
            "tracking.uri",
            f"must be an MLflow tracking URI such as sqlite:///mlruns/mlflow.db, got {uri!r}",
        )
        require(bool(experiment_name), "tracking.experiment_name", "must be non-empty")
        self.uri, self.experiment_name, self.enabled = uri, experiment_name, enabled
        self.artifact_root = artifact_root
        self._prepared: Future[str] | None = None

    def prepare(self) -> None:
        """Import MLflow, open the tracking store (creating a new SQLite database runs MLflow's
        schema migrations: seconds) and find the experiment in a background thread, so this
        overlaps the pipeline's last stages (the estimate stage runs mostly inside XGBoost,
        outside the GIL). `run` waits for it; if it failed, `run` tries again in the foreground
        and raises the real error there."""
        if not self.enabled or self._prepared is not None:
            return
        self._prepared = Future()
        threading.Thread(target=self._prepare, name="popfair-mlflow-prepare", daemon=True).start()

    def _prepare(self) -> None:
        assert self._prepared is not None
        try:
            self._prepared.set_result(self._open_experiment())
        except BaseException as exc:  # reported by the foreground retry, not here
            self._prepared.set_exception(exc)
            return
        _import_quietly(TRACK_IMPORTS)

    def _experiment_id(self) -> str:
        if self._prepared is not None:
            try:
                return self._prepared.result()
            except Exception:  # noqa: BLE001  (retried below, where the error reaches the user)
                self._prepared = None
        return self._open_experiment()

    def _open_experiment(self) -> str:
        import mlflow

        if self.uri.startswith("sqlite:///"):
            path = Path(self.uri.removeprefix("sqlite:///"))
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                seed_sqlite_store(path)
        mlflow.set_tracking_uri(self.uri)
        found = mlflow.get_experiment_by_name(self.experiment_name)
        if found is not None:
            return found.experiment_id
        location = Path(self.artifact_root).resolve()
        location.mkdir(parents=True, exist_ok=True)
        return mlflow.create_experiment(self.experiment_name, artifact_location=location.as_uri())

    @contextlib.contextmanager
    def run(
        self, run_name: str | None, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None
    ) -> Iterator[RunLogger]:
        """Start a run (nested under `parent_run_id` if given); end it FAILED on an exception."""
        if not self.enabled:
            yield RunLogger(None)
            return
        import mlflow

        experiment_id = self._experiment_id()
        all_tags = dict(tags or {})
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        with mlflow.start_run(experiment_id=experiment_id, run_name=run_name, tags=all_tags) as active:
            yield RunLogger(active.info.run_id)

    def start_parent(self, run_name: str, tags: Mapping[str, Any]) -> str | None:
        """Create a sweep's parent run (not made active, so the sweep's cases can run in this
        process); returns its id, or None when tracking is disabled."""
        if not self.enabled:
            return None
        from mlflow import MlflowClient

        experiment_id = self._experiment_id()
        run = MlflowClient(self.uri).create_run(
            experiment_id, run_name=run_name, tags={k: str(v) for k, v in tags.items()}
        )
        return run.info.run_id

    def finish_parent(
        self,
        run_id: str,
        *,
        status: str,
        tags: Mapping[str, Any],
        metrics: Mapping[str, float],
        artifact_dir: str | Path | None = None,
    ) -> None:
        """Tag, measure and close a parent run; `artifact_dir` is uploaded under `report/`."""
        from mlflow import MlflowClient

        client = MlflowClient(self.uri)
        for key, value in tags.items():
            client.set_tag(run_id, key, str(value))
        for key, value in metrics.items():
            if value is not None and math.isfinite(float(value)):
                client.log_metric(run_id, key, float(value))
        if artifact_dir is not None and Path(artifact_dir).is_dir():
            client.log_artifacts(run_id, str(artifact_dir), artifact_path="report")
        client.set_terminated(run_id, status=status)

    def record_failure(
        self,
        run_name: str,
        tags: Mapping[str, Any],
        params: Mapping[str, Any],
        error: str,
        traceback_text: str = "",
        parent_run_id: str | None = None,
        metrics: Mapping[str, float] | None = None,
        status: str = "FAILED",
    ) -> str | None:
        """A FAILED run for a case that raised before it could log itself (or KILLED, for one
        stopped by Ctrl-C/SIGTERM, with `metrics` saying what was done): tag `error` holds the
        message, artifact error.txt the message and traceback."""
        if not self.enabled:
            return None
        import mlflow

        with self.run(run_name, {**tags, "error": error[:4900]}, parent_run_id) as run:
            run.params(params)
            if metrics:
                run.metrics(metrics)
            run.artifacts({"error.txt": f"{error}\n\n{traceback_text}"})
            run_id = run.run_id
            mlflow.end_run(status=status)
        return run_id


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


class RunLogger:
    """Thin typed wrapper over the active MLflow run (no-op when tracking is disabled)."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id

    def params(self, params: Mapping[str, Any]) -> None:
        if not self.run_id:
            return
        import mlflow

        clean = {}
        for key, value in params.items():
            text = "null" if value is None else str(value)
            clean[key] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
        items = list(clean.items())
        for start in range(0, len(items), 100):  # MLflow caps params per batch call
            mlflow.log_params(dict(items[start : start + 100]))

    def metrics(self, metrics: Mapping[str, float]) -> None:
        if not self.run_id:
            return
        import mlflow

        finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        mlflow.log_metrics(finite)

    def tags(self, tags: Mapping[str, Any]) -> None:
        if not self.run_id:
            return
        import mlflow

        mlflow.set_tags({k: str(v) for k, v in tags.items()})

    def artifacts(self, artifacts: Mapping[str, Any]) -> None:
        """name -> DataFrame (.parquet/.csv by name), matplotlib Figure (.png), str, or bytes."""
        if not self.run_id or not artifacts:
            return
        import mlflow

        with tempfile.TemporaryDirectory() as tmp:
            for name, obj in artifacts.items():
                path = Path(tmp) / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(obj, pd.DataFrame):
                    obj.to_parquet(path) if path.suffix == ".parquet" else obj.to_csv(path)
                elif hasattr(obj, "savefig"):
                    obj.savefig(path, dpi=120, bbox_inches="tight")
                elif isinstance(obj, bytes):
                    path.write_bytes(obj)
                else:
                    path.write_text(str(obj))
            mlflow.log_artifacts(tmp)
