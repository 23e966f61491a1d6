"""The tracking worker: one process per popfair process that imports MLflow, opens the tracking
store and logs every case's run (batched params, metrics and tags; artifacts drawn and written
once) while the case computes.

Why a process: importing MLflow and opening its store, drawing the figures and writing the scored
table cost several CPU seconds a case. The population, render and screen stages mostly keep one
core busy, so a forked worker does this on the other one; a thread would hold the GIL against them.
The worker is forked on first use (from the main thread, before any thread of the case starts) and
serves every case of the process in order (`concurrent.futures`, one worker, FIFO), so MLflow is
imported once per sweep process. It ignores Ctrl-C and SIGTERM (the case decides how its run ends) and, if
the popfair process dies, ends the runs it has open as FAILED and exits. Without fork, or with
one CPU, a thread does the same work.

The functions below run in the worker; `popfair.track.mlflow_tracker.RunLogger` submits them."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import multiprocessing.util
import os
import signal
import socket
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from popfair.runtime.entry import on_error_exit
from popfair.runtime.parallel import cpu_count

MAX_PARAMS_PER_BATCH = 100  # MLflow's limits per log_batch call
MAX_METRICS_PER_BATCH = 1000
NICENESS = 10  # after its first run exists, the case's own stages come first; logging fills their gaps
ORPHANED = "the popfair process ended before its run was complete"

_EXECUTOR: Executor | None = None
_EXECUTOR_LOCK = threading.Lock()
_MATTERS: set[Future] = set()  # submitted work whose loss would lose a record (not a warm-up)


def submit(fn: Callable[..., Any], *args: Any) -> Future:
    """Run `fn(*args)` in the tracking worker after everything submitted before it."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        for attempt in (1, 2):
            if _EXECUTOR is None:
                _EXECUTOR = _start()
                on_error_exit(abandon_preparation)
            try:
                if isinstance(_EXECUTOR, ProcessPoolExecutor):  # a worker forked earlier follows this process
                    future = _EXECUTOR.submit(_here, os.getcwd(), dict(os.environ), fn, *args)
                else:
                    future = _EXECUTOR.submit(fn, *args)
                if fn not in PREPARATION:
                    _MATTERS.add(future)
                    future.add_done_callback(_MATTERS.discard)
                return future
            except (BrokenProcessPool, RuntimeError):  # the worker died (killed): start another
                _EXECUTOR.shutdown(wait=False)
                _EXECUTOR = None
                if attempt == 2:
                    raise
    raise AssertionError("unreachable")


def abandon_preparation() -> None:
    """At an error exit (popfair.runtime.entry.on_error_exit): when all the worker has left is
    preparation (importing MLflow, opening the store) for a case that will not log, drop it and end
    the worker now instead of waiting for it; work that records a run (ending it FAILED or KILLED) is
    waited for as before."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        executor = _EXECUTOR
        if executor is None or any(not f.done() for f in list(_MATTERS)):
            return
        _EXECUTOR = None
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:  # the running import is not interruptible otherwise
            process.kill()


def _start() -> Executor:
    if cpu_count() < 2 or "fork" not in mp.get_all_start_methods():
        return ThreadPoolExecutor(1, thread_name_prefix="popfair-tracking")
    executor = ProcessPoolExecutor(
        1, mp_context=mp.get_context("fork"), initializer=_init_worker, initargs=(os.getpid(),)
    )
    # Stop the worker before multiprocessing joins this process's children at exit (a process that
    # is itself a multiprocessing worker, e.g. a joblib launcher's, runs no atexit hooks before that).
    multiprocessing.util.Finalize(None, executor.shutdown, kwargs={"wait": True}, exitpriority=100)
    return executor


def warm_up() -> None:
    """Fork the worker now and have it import MLflow (1.5-2.5 s) while this process composes its
    config and builds the case: `python -m popfair` calls it before Hydra starts, so a case's run no
    longer waits for the import at its end. One CPU: nothing (a thread would hold the GIL)."""
    if cpu_count() >= 2 and "fork" in mp.get_all_start_methods():
        submit(import_worker_modules)


# --------------------------------------------------------------------------------------------
# In the worker


def _here(cwd: str, environ: dict[str, str], fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` in the submitting process's folder and environment: the worker may have been forked
    (warm_up) before Hydra changed either (hydra.job.chdir, hydra.job.env_set), and relative store
    paths and MLFLOW_* variables must mean what they mean there."""
    if os.getcwd() != cwd:
        os.chdir(cwd)
    if environ != os.environ:
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)
    return fn(*args)


# What the worker's logging needs: MLflow, its default store (sqlite:///...), and matplotlib's Agg
# canvas for the figures it draws (together 2-3 s to import). A sweep's fork server imports them too
# (popfair.sweep.fork_server), so that no case process or its worker imports them again.
WORKER_MODULES = (
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.tracking.context.registry",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
)


def import_worker_modules() -> None:
    for name in WORKER_MODULES:
        importlib.import_module(name)


_RUNS: dict[str, tuple[str, str, str]] = {}  # token -> (tracking uri, run id, artifact uri) of the runs open here
_CLIENTS: dict[str, Any] = {}
_NICED = False
_EXPERIMENTS: dict[tuple[str, str], str] = {}


def _init_worker(parent: int) -> None:
    # Ctrl-C, or a SIGTERM sent to the whole process group, reaches the case, which ends its run
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), name="popfair-tracking-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    for token in list(_RUNS):  # a killed case: its run ends FAILED instead of RUNNING forever
        try:
            fail(token, ORPHANED, "")
        except Exception:  # noqa: BLE001, S110 - nothing is left to report to
            pass
    os._exit(0)


def _client(uri: str) -> Any:
    if uri not in _CLIENTS:
        from mlflow import MlflowClient

        _CLIENTS[uri] = MlflowClient(uri)
    return _CLIENTS[uri]


# MLflow 3's UI types an experiment as GenAI or machine learning; popfair's hold model runs
EXPERIMENT_TAGS = {"mlflow.experimentKind": "custom_model_development"}


def open_experiment(uri: str, name: str, artifact_root: str) -> str:
    """The experiment's id, created (artifacts under `artifact_root`) if it does not exist."""
    if (uri, name) not in _EXPERIMENTS:
        client = _client(uri)
        found = client.get_experiment_by_name(name)
        if found is not None:
            _EXPERIMENTS[(uri, name)] = found.experiment_id
            close_orphans(client, found.experiment_id)
        else:
            location = Path(artifact_root).resolve()
            location.mkdir(parents=True, exist_ok=True)
            _EXPERIMENTS[(uri, name)] = client.create_experiment(
                name, artifact_location=location.as_uri(), tags=EXPERIMENT_TAGS
            )
    return _EXPERIMENTS[(uri, name)]


# what `warm_up` and `MlflowTracker.prepare` submit: dropped at an error exit (abandon_preparation)
PREPARATION = (import_worker_modules, open_experiment)


def process_tags(pid: int | None = None) -> dict[str, str]:
    """Tags naming the popfair process that owns a run (host, pid, the pid's start time), so a later
    run can tell a run whose process was killed (kill -9: nothing could close it) from a live one."""
    pid = os.getpid() if pid is None else pid
    return {"popfair.host": socket.gethostname(), "popfair.pid": str(pid), "popfair.pid_start": _started(pid)}


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc); '' where there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(pid: int, started: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that pid now, or ours under another user
        return not started or _started(pid) == started
    return not started or not _started(pid) or _started(pid) == started


def close_orphans(client: Any, experiment_id: str) -> list[str]:
    """Close as FAILED, with the reason as tag `error`, the RUNNING runs of this experiment whose popfair
    process, on this host, is gone (killed with its whole process group, the machine rebooted);
    returns their ids. Runs of live processes and of other hosts are left alone."""
    host = socket.gethostname()
    closed = []
    try:
        runs = client.search_runs(
            [experiment_id], f"attributes.status = 'RUNNING' and tags.`popfair.host` = '{host}'", max_results=1000
        )
    except Exception:  # noqa: BLE001 - a store that cannot search still takes new runs
        return []
    for run in runs:
        tags = run.data.tags
        try:
            pid = int(tags.get("popfair.pid", ""))
        except ValueError:
            continue
        if _alive(pid, tags.get("popfair.pid_start", "")):
            continue
        reason = (
            f"the popfair process (pid {pid} on {host}) ended without closing this run (killed, e.g. kill -9, "
            "or the machine stopped); closed by a later run of the experiment"
        )
        try:
            client.set_tag(run.info.run_id, "error", reason)
            client.set_tag(run.info.run_id, "error_type", "ProcessDied")
            client.set_terminated(run.info.run_id, status="FAILED")
            closed.append(run.info.run_id)
        except Exception:  # noqa: BLE001 - another process closed it first
            continue
    return closed


def start_run(
    token: str, uri: str, experiment: tuple[str, str], run_name: str | None, tags: Mapping[str, str]
) -> tuple[str, str]:
    """Create the run with the tags MLflow's `start_run` adds (source, user, git commit); returns
    (run id, experiment id)."""
    from mlflow.tracking.context.registry import resolve_tags

    experiment_id = open_experiment(uri, *experiment)
    resolved = resolve_tags(dict(tags))
    repo = resolved.get("mlflow.source.git.repoURL", "")
    if repo and "://" not in repo and not repo.startswith("git@"):  # a local clone's path: not public
        resolved.pop("mlflow.source.git.repoURL")
    if "mlflow.source.name" not in tags and resolved.get("mlflow.source.name"):
        resolved["mlflow.source.name"] = shown_source(resolved["mlflow.source.name"])
    run = _client(uri).create_run(experiment_id, run_name=run_name, tags=resolved)
    _RUNS[token] = (uri, run.info.run_id, run.info.artifact_uri)
    global _NICED
    if not _NICED:  # MLflow imported and the run created at full priority: a stopped case has its run
        os.nice(NICENESS)
        _NICED = True
    return run.info.run_id, experiment_id


def shown_source(path: str) -> str:
    """What started the run, without this machine's folders: `python -m popfair` for popfair's own
    entry point, else the script's file name (MLflow logs sys.argv[0], an absolute path)."""
    entry = Path(path)
    return "python -m popfair" if (entry.parent.name, entry.name) == ("popfair", "__main__.py") else entry.name


def _run(token: str) -> tuple[Any, str]:
    if token not in _RUNS:
        raise RuntimeError("the MLflow run was not started (see the first tracking error)")
    uri, run_id, _ = _RUNS[token]
    return _client(uri), run_id


def log_batch(
    token: str, params: Mapping[str, str], metrics: Mapping[str, float], tags: Mapping[str, str], timestamp: int
) -> None:
    """Params, metrics and tags in as few `log_batch` calls as MLflow's limits allow."""
    from mlflow.entities import Metric, Param, RunTag

    client, run_id = _run(token)
    param_list = [Param(k, v) for k, v in params.items()]
    tag_list = [RunTag(k, v) for k, v in tags.items()]
    metric_list = [Metric(k, v, timestamp, 0) for k, v in metrics.items()]
    while param_list or tag_list or metric_list:
        p, param_list = param_list[:MAX_PARAMS_PER_BATCH], param_list[MAX_PARAMS_PER_BATCH:]
        t, tag_list = tag_list[: MAX_PARAMS_PER_BATCH - len(p)], tag_list[MAX_PARAMS_PER_BATCH - len(p) :]
        m, metric_list = metric_list[:MAX_METRICS_PER_BATCH], metric_list[MAX_METRICS_PER_BATCH:]
        client.log_batch(run_id, metrics=m, params=p, tags=t)


def log_steps(token: str, steps: Sequence[tuple[int, int, Mapping[str, float]]]) -> None:
    """Metrics at several steps (each with its own timestamp), in batches of MLflow's limit."""
    from mlflow.entities import Metric

    client, run_id = _run(token)
    metric_list = [Metric(k, v, stamp, step) for step, stamp, values in steps for k, v in values.items()]
    for start in range(0, len(metric_list), MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metric_list[start : start + MAX_METRICS_PER_BATCH])


def annotate(uri: str, run_id: str, metrics: Mapping[str, float], tags: Mapping[str, str], timestamp: int) -> None:
    """Add metrics and tags to a run that has ended (what a stopped case did, a sweep's tags)."""
    from mlflow.entities import Metric, RunTag

    metric_list = [Metric(k, v, timestamp, 0) for k, v in metrics.items()]
    _client(uri).log_batch(run_id, metrics=metric_list, tags=[RunTag(k, v) for k, v in tags.items()])


def table_json(table: Any) -> str:
    """A DataFrame as MLflow's table JSON (pandas' "split" layout without the index, as
    `MlflowClient.log_table` writes it) with every float exact: `log_table` rounds to 10 decimals
    (pandas' default), which shows a p-value of 1.9e-12 as 0 and an SE of 0.0091155862 short."""
    import datetime as dt
    import json
    import math

    import numpy as np

    def cell(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, np.generic):
            value = value.item()  # numpy scalars
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, (dt.date, dt.time)):  # pandas' Timestamp too
            return value.isoformat()
        try:
            if value != value:  # pandas' NA and NaT
                return None
        except (TypeError, ValueError):
            pass
        return str(value)

    rows = [[cell(v) for v in row] for row in table.itertuples(index=False, name=None)]
    return json.dumps({"columns": [str(c) for c in table.columns], "data": rows})


def log_table(token: str, artifact_file: str, table: Any) -> None:
    """A DataFrame as an MLflow table artifact (JSON the run page, the compare view and
    `mlflow.load_table` read; the run's `mlflow.loggedArtifacts` tag lists it, as `log_table` does),
    its numbers exact (`table_json`)."""
    client, run_id = _run(token)
    write_table(client, run_id, artifact_file, table)


def write_table(client: Any, run_id: str, artifact_file: str, table: Any) -> None:
    """`log_table`'s work with a client and run id (a sweep's parent run logs its tables so too)."""
    import json
    import posixpath

    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    folder, name = posixpath.split(posixpath.normpath(artifact_file))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(table_json(table))
        client.log_artifact(run_id, str(path), folder or None)
    if run_id not in _TABLES:  # the run's list as logged so far, read once per run in this process
        _TABLES[run_id] = json.loads(client.get_run(run_id).data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
    listed, entry = _TABLES[run_id], {"path": artifact_file, "type": "table"}
    if entry not in listed:
        listed.append(entry)
        client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps(listed))


_TABLES: dict[str, list[dict[str, str]]] = {}  # run id -> its `mlflow.loggedArtifacts` entries


def log_dataset(
    token: str,
    name: str,
    digest: str,
    sample: Any,
    source: Mapping[str, str],
    profile: Mapping[str, Any],
    context: str,
) -> None:
    """The case's data as the run's dataset input (`mlflow.data.from_pandas`, `log_inputs`): its
    name, `digest`, a source described by `source` (names and hashes, no local path), the schema of
    `sample` (a few rows of it) and `profile` (the row count and the full hash) in place of the
    sample's own."""
    import json

    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.pandas_dataset import from_pandas
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.exceptions import MlflowException

    client, run_id = _run(token)
    with warnings.catch_warnings():  # MLflow's hint on integer columns is about model signatures
        warnings.simplefilter("ignore", UserWarning)
        found = from_pandas(sample, source=CodeDatasetSource(dict(source)), name=name, digest=digest)
        fields = found.to_dict()
    entity = Dataset(
        name=fields["name"],
        digest=fields["digest"],
        source_type=fields["source_type"],
        source=fields["source"],
        schema=fields.get("schema"),
        profile=json.dumps(dict(profile)),
    )
    inputs = [DatasetInput(entity, tags=[InputTag("mlflow.data.context", context)])]
    for attempt in range(3):
        try:
            client.log_inputs(run_id, datasets=inputs)
            return
        except MlflowException as exc:
            # cases of a parallel sweep logging the same population at once: the store checks for the
            # dataset, then inserts it, and the second insert breaks the unique key. The dataset exists
            # now, so the next attempt only links it to this run.
            if "UNIQUE constraint failed: datasets" not in str(exc) and "duplicate key" not in str(exc):
                raise
            if attempt == 2:
                raise
            time.sleep(0.05 * (attempt + 1))


def log_artifacts(token: str, artifacts: Mapping[str, Any]) -> None:
    """Write each artifact once: straight into the run's artifact folder when it is local, else
    into a temporary folder that MLflow uploads."""
    client, run_id = _run(token)
    location = urllib.parse.urlparse(_RUNS[token][2])
    if location.scheme == "file":
        write_artifacts(Path(urllib.request.url2pathname(location.path)), artifacts)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write_artifacts(Path(tmp), artifacts)
        client.log_artifacts(run_id, tmp)


def write_artifacts(folder: Path, artifacts: Mapping[str, Any]) -> None:
    """name -> DataFrame (.parquet/.csv by name), Plot or matplotlib Figure (.png), bytes, or text."""
    # here, not at module level: the joblib launcher imports this module at Hydra's start
    import pandas as pd

    from popfair.core.types import Plot
    from popfair.track.figures import png

    for name, obj in artifacts.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(obj, Plot) or hasattr(obj, "savefig"):
            obj = png(obj)
        if isinstance(obj, pd.DataFrame):
            obj.to_parquet(path) if path.suffix == ".parquet" else obj.to_csv(path)
        elif isinstance(obj, bytes):
            path.write_bytes(obj)
        else:
            path.write_text(str(obj))


def end_run(token: str, status: str) -> None:
    client, run_id = _run(token)
    client.set_terminated(run_id, status=status)
    del _RUNS[token]


def fail(token: str, error: str, traceback_text: str, status: str = "FAILED") -> None:
    """End a run that could not complete: tag `error`, artifact error.txt, the given status."""
    if token not in _RUNS:
        return
    log_batch(token, {}, {}, {"error": error[:4900]}, int(time.time() * 1000))
    log_artifacts(token, {"error.txt": f"{error}\n\n{traceback_text}"})
    end_run(token, status)
