"""Where a case writes, checked before anything runs: its output folder (`hydra.run.dir`, Hydra's logs
and `table_report.csv`), the MLflow store (`tracking.uri`) and its artifact folder
(`tracking.artifact_root`, where the auditor's report is logged), the cache (`cache_dir` or
`cache_url`: answers, rendered documents, nuisances) and a watch's state file (`table.watch_state`).

A folder that cannot be written used to surface where it was first written: Hydra's output folder as
two dozen lines of chained tracebacks, a read-only artifact folder blamed on `tracking.uri`, a
read-only cache at the estimate stage, after a paid screener had been paid. `first_problem` finds the
first such location before the case is composed into parts, and says which key names it, the folder
that cannot be written and the fix, in one line (`StorageProblem.line`). A sweep's folder
(`hydra.sweep.dir`, its summary and report) is checked the same way before its first case."""

from __future__ import annotations

import base64
import json
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from popfair.core.errors import PopfairError
from popfair.core.types import Check
from popfair.runtime.secrets import safe_url

HTTP_TIMEOUT_S = 15.0  # a tracking server on a busy machine may take seconds to answer
TRACKING_FIX = "tracking.uri=<a writable sqlite:///path/mlflow.db or a running mlflow server>, or tracking=none"


@dataclass(frozen=True)
class StorageProblem:
    """A location the case would write that cannot be written (or a store that cannot be reached)."""

    key: str  # the config key that names the location
    value: str  # its value, as configured (a URL without password)
    detail: str  # what is wrong, with the folder
    fix: str

    def line(self) -> str:
        return f"{self.key}={self.value}: {self.detail}; nothing was run. Fix: {self.fix}"


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest folder that exists (what a case will create lies on that file system)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable(folder: Path) -> None:
    """OSError unless a file can be written in `folder` (or, if missing, in the folder it will be made in)."""
    where = nearest_existing(folder)
    if not where.is_dir():  # a path below a file: nothing can be made there
        raise NotADirectoryError(20, "Not a directory", str(where))
    with tempfile.NamedTemporaryFile(dir=where, prefix=".popfair-preflight-"):
        pass


def folder_problem(key: str, value: Any, folder: Path, fix: str) -> StorageProblem | None:
    """A StorageProblem when `folder` (or where it would be made) cannot be written, naming that folder."""
    try:
        writable(folder)
    except OSError as exc:
        where = nearest_existing(folder)
        if not where.is_dir():
            reason = f"{where} is a file, so no folder can be made below it"
        else:
            here = " (the current folder)" if where == Path.cwd().resolve() else ""
            reason = f"cannot write in {where}{here}: {exc.strerror or exc}"
        return StorageProblem(key, str(value), reason, fix)
    return None


def tracking_store_folder(uri: str) -> Path | None:
    """The folder a local MLflow store writes in (a SQLite file's folder, a file store); None for a
    server or another database."""
    scheme, _, path = uri.partition("://")
    if scheme == "sqlite":  # sqlite:///relative/mlflow.db, sqlite:////absolute/mlflow.db
        return Path(path[1:]).parent
    if scheme == "file":
        return Path(path)
    return None


def tracking_problems(uri: str, artifact_root: Any) -> list[StorageProblem]:
    """The MLflow store's folder (or server) and the artifact folder, each under its own key."""
    problems = []
    folder = tracking_store_folder(uri)
    if folder is not None:
        problem = folder_problem("tracking.uri", uri, folder, TRACKING_FIX)
        if problem is not None:
            problems.append(
                StorageProblem(
                    problem.key, problem.value, f"the MLflow store is not usable: {problem.detail}", problem.fix
                )
            )
    elif uri.startswith(("http://", "https://")):
        try:
            probe_tracking_server(uri.rstrip("/"))
        except Exception as exc:  # noqa: BLE001 - whatever the request met is the reason
            problems.append(
                StorageProblem("tracking.uri", safe_url(uri), f"the MLflow store is not usable: {exc}", TRACKING_FIX)
            )
    if artifact_root is not None and "://" not in str(artifact_root):
        problem = folder_problem(
            "tracking.artifact_root",
            artifact_root,
            Path(str(artifact_root)),
            "tracking.artifact_root=<a folder you can write in>, or tracking=none",
        )
        if problem is not None:
            problems.append(
                StorageProblem(
                    problem.key, problem.value, f"the run's artifacts cannot be written: {problem.detail}", problem.fix
                )
            )
    return problems


def case_cache(task: DictConfig) -> tuple[str, str] | None:
    """(key, location) of the cache the case writes: every generated case keeps its rendered documents,
    answers and nuisances there; a table case only when its estimator keeps nuisances (pse_dml)."""
    if task.get("table") is None:
        node: Any = task
    else:
        node = task.get("estimator") or {}
        if "cache_dir" not in node and "cache_url" not in node:
            return None
    if node.get("cache_url"):
        return "cache_url", str(node.get("cache_url"))
    if node.get("cache_dir"):
        return "cache_dir", str(node.get("cache_dir"))
    return None


def first_problem(config: DictConfig, *, output_dir: Any = None) -> StorageProblem | None:
    """The first location the case of `config` (a composed config, its `hydra` node included for a
    single run) would write that cannot be written: the output folder (`output_dir`, default the run's
    `hydra.run.dir`), the tracking store and artifact folder (not for a dry run, which logs nothing), the
    cache, a watch's state file. None when every one can be written."""
    if output_dir is None and OmegaConf.select(config, "hydra.run.dir") is not None:
        output_dir = config.hydra.run.dir
    if output_dir is not None:
        fix = "hydra.run.dir=<a folder you can write in>" + (
            "" if Path(str(output_dir)).is_absolute() else ", or run from a folder you can write in"
        )
        problem = folder_problem("hydra.run.dir", output_dir, Path(str(output_dir)), fix)
        if problem is not None:
            return problem
    tracking = config.get("tracking") or {}
    if tracking.get("enabled", False) and not config.get("dry_run", False):
        problems = tracking_problems(str(tracking.get("uri")), tracking.get("artifact_root"))
        if problems:
            return problems[0]
    cache = case_cache(config)
    if cache is not None and cache[0] == "cache_dir":  # a cache_url's server is opened when the case is built
        problem = folder_problem("cache_dir", cache[1], Path(cache[1]), "cache_dir=<a folder you can write in>")
        if problem is not None:
            return problem
    table = config.get("table") or {}
    if table.get("watch", False):  # null: outputs/watch/<source>.json below the current folder
        state = table.get("watch_state")
        folder = Path(str(state)).expanduser().parent if state else Path("outputs", "watch")
        fix = "table.watch_state=<a file in a folder you can write in>"
        return folder_problem("table.watch_state", state if state else "null (outputs/watch/)", folder, fix)
    return None


def sweep_problem(config: DictConfig) -> StorageProblem | None:
    """A sweep's folder (`hydra.sweep.dir`: case records, summary, report) that cannot be written."""
    folder = OmegaConf.select(config, "hydra.sweep.dir")
    if folder is None:
        return None
    fix = "hydra.sweep.dir=<a folder you can write in>" + (
        "" if Path(str(folder)).is_absolute() else ", or run from a folder you can write in"
    )
    return folder_problem("hydra.sweep.dir", folder, Path(str(folder)), fix)


def check_cache(location: str) -> Check:
    """The response cache opens: a SQLite folder that can be written, or a reachable database."""
    from popfair.store.responses import is_url, open_cache

    try:
        if is_url(location) or Path(location).is_dir():
            with open_cache(location):
                pass
        else:  # made by the first case: where it will be made must be writable
            writable(Path(location))
    except Exception as exc:  # noqa: BLE001 - reported as the check's result
        fix = "cache_url=<a reachable database>" if is_url(location) else "cache_dir=<a writable folder>"
        message = str(exc) if isinstance(exc, PopfairError) else f"cannot open the response cache: {exc}"
        return Check("cache", False, " ".join(message.split()), fix)
    kind = "server database" if is_url(location) else "SQLite folder, writable"
    return Check("cache", True, f"opens ({kind})")


def probe_tracking_server(base: str) -> None:
    """OSError/URLError unless the server is up and accepts our credentials (if it asks for any)."""
    with urllib.request.urlopen(f"{base}/health", timeout=HTTP_TIMEOUT_S):
        pass
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/experiments/search",
        data=json.dumps({"max_results": 1}).encode(),
        headers={"Content-Type": "application/json", **_mlflow_auth()},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise OSError(
                f"the server refused the credentials (HTTP {exc.code}); set MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN)"
            ) from None
        raise


def _mlflow_auth() -> dict[str, str]:
    """The Authorization header MLflow's client would send, from its environment variables."""

    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}
