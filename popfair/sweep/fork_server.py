"""The fork server of a sweep run by `hydra/launcher=joblib` (hydra_plugins/popfair_launcher): a
process that imports what the cases need once, from which every case's process is forked.

It is started as the sweep starts (the sweep callback's on_multirun_start, before the MLflow parent
run and the pre-flight checks, which it runs beside), or by the launcher's setup when no callback
did, and stopped at the sweep's exit."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
from typing import Any

from omegaconf import DictConfig, OmegaConf

from popfair.track.background import WORKER_MODULES

LAUNCHER = "hydra_plugins.popfair_launcher.joblib_launcher.PopfairJoblibLauncher"

# every case's process (and the tracking worker it forks) starts with these loaded
PRELOAD = ("popfair.sweep.run_case", "popfair.case.population", *WORKER_MODULES)

# What a generated case imports on its way, where it is needed (run_case's own imports, the table
# check's DuckDB, the power line's statsmodels): a sweep's fork server imports them once for all its
# cases, which otherwise import them each (1-3 s a case). Not XGBoost: a DML estimator's module
# brings it (its `_target_`), and the occupation model's fit needs it only on a machine's first run
# of an occupation (the fitted model is read from the disk cache without it).
LAZY_CASE_IMPORTS = (
    "popfair.case.table",
    "popfair.sweep.in_process",
    "popfair.sweep.plan",
    "popfair.report.console",
    "statsmodels.stats.power",
)


def case_imports(cfg: DictConfig) -> list[str]:
    """The modules a case of `cfg` imports: LAZY_CASE_IMPORTS, its components' classes (every
    `_target_` outside Hydra's own node: the screener's brings scikit-learn for tfidf) and the SDKs
    of its screener's routes (`Provider.sdk`). Nothing is resolved or built."""
    from popfair.screen.providers import PROVIDERS  # not at import: the launcher's plugin scan imports this module

    config = OmegaConf.to_container(cfg, resolve=False)
    modules = list(LAZY_CASE_IMPORTS)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            target = node.get("_target_")
            if isinstance(target, str) and "." in target and not target.startswith("${"):
                modules.append(target.rsplit(".", 1)[0])
            kind = node.get("provider")
            provider = PROVIDERS.get(kind) if isinstance(kind, str) else None
            if provider is not None and provider.sdk:
                modules.append(provider.sdk)
            for key, value in node.items():
                if key != "hydra":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return list(dict.fromkeys(modules))


def runs_cases_here(config: DictConfig) -> bool:
    """The sweep's cases will run in processes of this machine's fork server: popfair's joblib
    launcher, and neither a dry run nor `popfair doctor`."""
    launcher = config.get("hydra", {}).get("launcher", {}) or {}
    return launcher.get("_target_") == LAUNCHER and not config.get("dry_run", False) and not config.get("check", False)


def start_fork_server(config: DictConfig) -> None:
    """Start the fork server (if it is not running) importing PRELOAD and what the cases of `config`
    import (3-6 s, in its own process, beside what this one does next); stopped at this process's exit."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*PRELOAD, *case_imports(config)])
    multiprocessing.forkserver.ensure_running()
    atexit.unregister(stop_fork_server)  # once, however many sweeps this process runs
    atexit.register(stop_fork_server)


def stop_fork_server() -> None:
    """End the fork server at once. Left to notice this process's exit by itself, it tears down every
    module it imported (1-2 s of garbage collection) while holding the sweep's standard output open,
    so a caller reading to its end waits that long after the sweep is done. Its cases have ended, or
    were abandoned by a second Ctrl-C: they do not depend on it."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)  # CPython's, private: there is no public stop
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
