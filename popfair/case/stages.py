"""A case's stages: each one logged and timed, and the outcome audit that runs in a forked process
beside the estimate, its artifacts logged the moment it ends."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from popfair.core.types import Effects
from popfair.estimate.pse.settings import PseOverlapWarning
from popfair.runtime.progress import preparing_done, stage_clock
from popfair.track.mlflow_tracker import RunLogger

log = logging.getLogger("popfair")


def untimed(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """A stage run without timing it (the run passes its timed `stage`)."""
    return fn(*args)


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """fn(*args) and its wall seconds."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def logged_when_done(
    run: RunLogger, pending: Callable[[], tuple[Effects, Any]], report: bool = False
) -> Callable[[], tuple[Effects, Any]]:
    """Wait for the outcome audit (forked beside the estimate) in a thread and queue its artifacts
    for the tracking worker the moment it ends: its figures (the impact ratio chart) are then drawn
    while the estimate still runs, not at the end of the case, and by the worker, which has
    matplotlib imported already (a fork drawing them would import it every case). With `report`
    (the case writes the auditor's report), the worker draws the report's chart too, so this
    process need not import matplotlib. Returns the function that waits for the audit's result."""

    def wait_and_log() -> tuple[Effects, Any]:
        audit, seconds = pending()
        if report:  # first: the report waits for it, the run's artifacts only for the run's end
            from popfair.report.audit import impact_ratios_of
            from popfair.report.ll144 import FIGURE_DPI

            ratios = impact_ratios_of(audit)
            if ratios is not None:
                run.draw(ratios.plot(), FIGURE_DPI)
        run.artifacts(audit.artifacts)
        return audit, seconds

    pool = ThreadPoolExecutor(1, thread_name_prefix="popfair-outcome-audit")
    future = pool.submit(wait_and_log)
    pool.shutdown(wait=False)
    return future.result


class Stages:
    """A case's stages, each logged and timed (`timings`); a PseOverlapWarning becomes a log line
    pointing to the identification check instead of a Python warning."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        preparing_done()
        log.info("stage %s ...", name)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught, stage_clock(name):  # a log line, not a traceback
            warnings.simplefilter("always", PseOverlapWarning)
            out = fn(*args)
        for warning in caught:
            if issubclass(warning.category, PseOverlapWarning):
                log.warning("stage %s: %s (the identification check below says what it means)", name, warning.message)
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        self.timings[name] = time.perf_counter() - start
        log.info("stage %s done in %.2fs", name, self.timings[name])
        return out
