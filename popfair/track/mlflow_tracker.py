"""MLflow tracking: one run per case with params, metrics, artifacts and tags.

A case's run is logged in the background (`popfair.track.background`): `MlflowTracker.run` opens
it and every `RunLogger` call returns at once, while the tracking worker logs params, metrics and
tags in batches and writes the artifacts; the run ends (FINISHED, or FAILED on an exception) when
everything has been logged, and only then does the `with` block return."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import subprocess
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popfair.core.errors import TrackingFailed, require
from popfair.runtime.secrets import safe_url
from popfair.track import background, headline
from popfair.track.store_template import seed_sqlite_store

if TYPE_CHECKING:
    from popfair.core.types import Plot

EXPERIMENT_OF: dict[str, str] = {}  # run id -> experiment id of the runs this process logged (links)
MAX_PARAM_CHARS = 500  # long values (job descriptions, pools) live in the config artifact instead

log = logging.getLogger("popfair")


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


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of popfair's checkout ("unknown" outside a git checkout, e.g. an installed wheel)."""
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


def absolute_sqlite_uri(uri: str) -> str:
    """A relative sqlite URI (sqlite:///mlruns/mlflow.db) made absolute against this folder. MLflow
    caches a store per URI string, and so does the tracking worker: without this, a second run in the
    same process from another folder (the Python API, a notebook) would log into the first one's file."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////") and ":memory:" not in uri:
        path, query = uri.removeprefix("sqlite:///").partition("?")[::2]
        return f"sqlite:///{Path(path).resolve()}" + (f"?{query}" if query else "")
    return uri


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
        self.uri, self.experiment_name, self.enabled = absolute_sqlite_uri(uri), experiment_name, enabled
        self.artifact_root = artifact_root
        self.failed_run_id: str | None = None  # the last run of this tracker that ended FAILED

    def _open_experiment(self) -> str:
        """In this process (sweep parent runs): the experiment's id, created if needed."""
        import mlflow

        self._seed_store()
        mlflow.set_tracking_uri(self.uri)
        found = mlflow.get_experiment_by_name(self.experiment_name)
        if found is not None:
            return found.experiment_id
        location = Path(self.artifact_root).resolve()
        location.mkdir(parents=True, exist_ok=True)
        return mlflow.create_experiment(
            self.experiment_name, artifact_location=location.as_uri(), tags=background.EXPERIMENT_TAGS
        )

    def _keep_dir(self, run_name: str | None) -> Path:
        """Where a run's artifacts are kept when the tracking store fails before they are logged:
        <artifact_root>/unlogged/<run name>-<time> (./popfair_unlogged/... for a remote artifact root)."""
        root = Path(self.artifact_root) if "://" not in str(self.artifact_root) else Path("popfair_unlogged")
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in (run_name or "run"))
        return (root / "unlogged" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()

    def _seed_store(self) -> None:
        if self.uri.startswith("sqlite:///"):
            path = Path(self.uri.removeprefix("sqlite:///"))
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                seed_sqlite_store(path)

    def prepare(self) -> None:
        """Start the tracking worker importing MLflow and opening the store now, without waiting: a
        case that opens its run only at the end (the table case) calls this first, so the import
        (1.5-2 s) overlaps its reading and estimating instead of following them. A store that cannot
        be opened says so when the run starts, as without this."""
        if self.enabled:
            self._seed_store()
            background.submit(background.open_experiment, self.uri, self.experiment_name, self.artifact_root)

    @contextlib.contextmanager
    def run(
        self, run_name: str | None, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None
    ) -> Iterator[RunLogger]:
        """Start a run (nested under `parent_run_id` if given) in the background and yield its
        logger. Leaving the block waits until everything is logged, then ends the run FINISHED; an
        exception (in the block or in logging) ends it FAILED with tag `error` and artifact
        error.txt (`failed_run_id` then names it) and is raised."""
        if not self.enabled:
            yield RunLogger(None)
            return
        self._seed_store()  # here, in the foreground: a fast file copy that needs this process's settings
        all_tags = {**background.process_tags(), **{k: str(v) for k, v in (tags or {}).items()}}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        logger = RunLogger(uuid.uuid4().hex, self.uri, self._keep_dir(run_name))
        logger._submit(
            background.start_run,
            self.uri,
            (self.experiment_name, self.artifact_root),
            run_name,
            all_tags,
            wanted=True,
        )
        try:
            yield logger
        except BaseException as exc:
            self.failed_run_id = logger.end(_status_for(exc), exc)
            raise
        else:
            try:
                logger.end("FINISHED")
            except BaseException:
                self.failed_run_id = logger.run_id
                raise

    def start_parent(self, run_name: str, tags: Mapping[str, Any]) -> str | None:
        """Create a sweep's parent run (not made active, so the sweep's cases can run in this
        process); returns its id, or None when tracking is disabled."""
        if not self.enabled:
            return None
        from mlflow import MlflowClient

        experiment_id = self._open_experiment()
        client = MlflowClient(self.uri)
        background.close_orphans(client, experiment_id)  # runs of killed sweeps left RUNNING
        run = client.create_run(
            experiment_id, run_name=run_name, tags={**background.process_tags(), **{k: str(v) for k, v in tags.items()}}
        )
        EXPERIMENT_OF[run.info.run_id] = experiment_id  # the links the sweep prints
        return run.info.run_id

    def finish_parent(
        self,
        run_id: str,
        *,
        status: str,
        tags: Mapping[str, Any],
        metrics: Mapping[str, float],
        artifact_dir: str | Path | None = None,
        tables: Mapping[str, Any] | None = None,
    ) -> None:
        """Tag, measure and close a parent run; `artifact_dir` is uploaded under `report/`, `tables`
        (artifact file -> DataFrame) are logged as MLflow table artifacts."""
        from mlflow import MlflowClient

        client = MlflowClient(self.uri)
        for key, value in tags.items():
            client.set_tag(run_id, key, str(value))
        for key, value in metrics.items():
            if value is not None and math.isfinite(float(value)):
                client.log_metric(run_id, key, float(value))
        if artifact_dir is not None and Path(artifact_dir).is_dir():
            client.log_artifacts(run_id, str(artifact_dir), artifact_path="report")
        for name, table in (tables or {}).items():
            background.write_table(client, run_id, name, table)
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
        """The FAILED run of a case that raised (KILLED for one stopped by Ctrl-C/SIGTERM, with
        `metrics` saying what was done). When the case had started its own run, that run already
        ended so, with tag `error` and error.txt: `tags` and `metrics` are added to it. Otherwise a
        new run holds tag `error`, the params and artifact error.txt (message and traceback)."""
        if not self.enabled:
            return None
        if self.failed_run_id is not None:
            failed, self.failed_run_id = self.failed_run_id, None
            finite = {k: float(v) for k, v in (metrics or {}).items() if v is not None and math.isfinite(float(v))}
            annotations = {**{k: str(v) for k, v in tags.items()}, "error": error[:4900]}
            background.submit(background.annotate, self.uri, failed, finite, annotations, _now()).result()
            return failed
        with self.run(run_name, {**tags, "error": error[:4900]}, parent_run_id) as run:
            run.params(params)
            if metrics:
                run.metrics(metrics)
            run.artifacts({"error.txt": f"{error}\n\n{traceback_text}"})
            return run.end(status)


def _status_for(exc: BaseException) -> str:
    """How a run ends when its case raised `exc`: KILLED when it was stopped (Ctrl-C, SIGTERM: a
    KeyboardInterrupt), else FAILED."""
    return "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"


@dataclass(frozen=True)
class DatasetInput:
    """What a run logs as its dataset input: a name, a digest (at most 36 characters, MLflow's limit),
    a few rows whose columns are the schema, the source described without a local path, the profile
    (row count, full hash) and the context (population, table)."""

    name: str
    digest: str
    sample: Any
    source: Mapping[str, str]
    profile: Mapping[str, Any]
    context: str


def frame_digest(frame: Any) -> str:
    """sha256 over a DataFrame's rows (pandas' row hashes, index left out), as hex."""
    import hashlib

    import pandas as pd

    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()


class RunLogger:
    """Logs one run in the background (no-op when tracking is disabled): each call queues its
    work for the tracking worker and returns; `end` waits for all of it and ends the run.

    `run_id` is the MLflow run's id once the worker has created it (`end` waits for that)."""

    def __init__(self, token: str | None, uri: str = "", keep_dir: Path | None = None) -> None:
        self.token, self.uri, self.keep_dir = token, uri, keep_dir
        self._kept: dict[str, Any] = {}  # what was queued, written to keep_dir if the store fails
        self._logged: dict[str, dict[str, Any]] = {"params": {}, "metrics": {}, "tags": {}}
        self._run_id: str | None = None
        self._pending: list[Future] = []
        self._started: Future | None = None
        self._ended = False
        # metrics are held until `end` and split there (popfair.track.headline): the headline as
        # metrics, the rest as tables; `effects` are the effects table's rows and columns
        self._metrics: dict[str, float] = {}
        self._steps: list[tuple[int, int, dict[str, float]]] = []
        self._effects: dict[str, set[str]] = {}
        self._opened = time.perf_counter()

    @property
    def run_id(self) -> str | None:
        if self._run_id is None and self._started is not None:
            with contextlib.suppress(Exception):  # the error is raised by `end`
                self._run_id, experiment_id = self._started.result()
                EXPERIMENT_OF[self._run_id] = experiment_id
        return self._run_id

    def _submit(self, fn: Any, *args: Any, wanted: bool = False) -> None:
        if self.token is None:
            return
        if self._ended:
            raise RuntimeError("this MLflow run has ended; nothing more can be logged to it")
        future = background.submit(fn, self.token, *args)
        self._pending.append(future)
        if wanted:
            self._started = future

    def log(
        self,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Params (values cut to MAX_PARAM_CHARS) and tags, in one batch; finite metrics are kept for
        `end`, which logs the headline ones as metrics and the others as tables (popfair.track.headline)."""
        clean = {}
        for key, value in (params or {}).items():
            text = "null" if value is None else str(value)
            clean[key] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
        finite = {k: float(v) for k, v in (metrics or {}).items() if v is not None and math.isfinite(float(v))}
        tag_text = {k: str(v) for k, v in (tags or {}).items()}
        for kind, values in (("params", clean), ("metrics", finite), ("tags", tag_text)):
            self._logged[kind].update(values)
        if self.token is not None:
            self._metrics.update(finite)
        if clean or tag_text:
            self._submit(background.log_batch, clean, {}, tag_text, _now())

    def params(self, params: Mapping[str, Any]) -> None:
        self.log(params=params)

    def steps(self, steps: Sequence[tuple[int, int, Mapping[str, float]]]) -> None:
        """Metrics with a history: (step, timestamp in ms, metrics) per step, e.g. one step per
        period of a table (the MLflow UI draws each metric's trend over the steps)."""
        rows = [
            (
                int(step),
                int(stamp),
                {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))},
            )
            for step, stamp, values in steps
        ]
        for _, _, values in rows:
            self._logged["metrics"].update(values)
        if self.token is not None:
            self._steps += rows

    def metrics(self, metrics: Mapping[str, float]) -> None:
        self.log(metrics=metrics)

    def tags(self, tags: Mapping[str, Any]) -> None:
        self.log(tags=tags)

    def artifacts(self, artifacts: Mapping[str, Any]) -> None:
        """name -> DataFrame (.parquet/.csv by name), `Plot` or matplotlib Figure (.png), str, or
        bytes; Plots are drawn by the worker. The objects are copied (pickled) when queued."""
        if artifacts:
            if self.token is not None:
                self._kept.update(artifacts)
            self._submit(background.log_artifacts, dict(artifacts))

    def draw(self, figure: Plot, dpi: int) -> None:
        """Have the tracking worker draw `figure` now, for this process to use later (a report's
        chart: `popfair.track.figures.draw_beside`); nothing when tracking is off."""
        if self.token is not None:
            from popfair.track.figures import draw_beside

            draw_beside(figure, dpi, background.submit)

    def table(self, artifact_file: str, table: Any) -> None:
        """A DataFrame logged as an MLflow table artifact (JSON, shown by the run page and compare view).
        One with an `effect` column is the run's effects table: its cells are not logged again."""
        if "effect" in table.columns:
            for effect in table["effect"]:
                self._effects.setdefault(str(effect), set()).update(str(c) for c in table.columns if c != "effect")
        self._submit(background.log_table, artifact_file, table)  # effects.csv holds the same, kept on failure

    def dataset(self, dataset: DatasetInput) -> None:
        """The case's population or table as the run's dataset input, with its digest."""
        self._submit(
            background.log_dataset,
            dataset.name,
            dataset.digest,
            dataset.sample,
            dict(dataset.source),
            dict(dataset.profile),
            dataset.context,
        )

    def end(self, status: str = "FINISHED", exc: BaseException | None = None) -> str | None:
        """Wait until everything queued is logged, then end the run with `status` (FAILED when
        logging failed: that error is raised). With `exc` (the case raised it): tag `error` and
        artifact error.txt first. Returns the run id; a second call does nothing."""
        if self.token is None or self._ended:
            return self.run_id
        with contextlib.suppress(RuntimeError):
            self._log_held()
        error: BaseException | None = None
        for future in self._pending:
            try:
                future.result()
            except BaseException as failed:  # noqa: BLE001 - the first one is raised below
                error = error or failed
        self._ended = True
        if exc is not None or error is not None:
            cause = exc if exc is not None else error
            assert cause is not None
            text = f"{type(cause).__name__}: {cause}"
            trace = "".join(traceback.format_exception(cause))
            with contextlib.suppress(Exception):  # the run may not exist (the store was unusable)
                background.submit(
                    background.fail, self.token, text, trace, "FAILED" if exc is None else status
                ).result()
            if exc is None and error is not None:
                raise self._kept_locally(error) from error
            return self.run_id
        background.submit(background.end_run, self.token, status).result()
        return self.run_id

    def _log_held(self) -> None:
        """The held metrics, split (popfair.track.headline): at most MAX_METRICS as metrics, with the
        run's total time (`time.total_s`, from its start to here), the rest as tables."""
        metrics = {"time.total_s": time.perf_counter() - self._opened, **self._metrics}
        self._logged["metrics"]["time.total_s"] = metrics["time.total_s"]
        top, tables = headline.split(metrics, self._effects)
        charted, tabled = headline.split_steps(self._steps, headline.MAX_METRICS - len(top))
        if charted:
            self._submit(background.log_steps, charted)
        if tabled:
            tables[headline.STEPS_TABLE] = headline.steps_table(tabled)
        self._submit(background.log_batch, {}, top, {}, _now())
        for name, frame in tables.items():
            self._submit(background.log_table, name, frame)
        self._metrics, self._steps = {}, []

    def _kept_locally(self, error: BaseException) -> BaseException:
        """The tracking store failed: write what was queued (artifacts, params, metrics, tags) to
        keep_dir and return a TrackingFailed naming the server and the folder (the error itself when
        nothing could be kept)."""
        if self.keep_dir is None:
            return error
        import json

        try:
            background.write_artifacts(self.keep_dir, self._kept)
            for kind, values in self._logged.items():
                (self.keep_dir / f"{kind}.json").write_text(json.dumps(values, indent=1, sort_keys=True))
        except Exception as write_error:  # noqa: BLE001 - the store's error is the news
            log.error("could not keep the run's artifacts in %s: %s", self.keep_dir, write_error)
            return error
        cause = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        return TrackingFailed(
            f"the MLflow tracking store {safe_url(self.uri)} failed while the case was logged "
            f"({type(error).__name__}: {cause}); its results were kept in {self.keep_dir}",
            self.uri,
            str(self.keep_dir),
        )


def _now() -> int:
    return int(time.time() * 1000)
