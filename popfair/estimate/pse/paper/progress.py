"""`estimator=pse_paper`'s price and progress: what its bootstrap will cost on this machine (the dry
run, `popfair doctor` and the estimate stage's first lines say it), from the last measured iteration
kept in cache_dir, and its progress from the first iteration on, with the time left."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("popfair.pse")
FITS_PER_ITERATION = 12  # XGBoost fits per cross-fitting fold of one iteration (paper._fold)


TIMING_FILE = "pse_paper_timing.json"  # in cache_dir: the last measured seconds of an iteration
# the config's figure: about 0.25 s an iteration on one core for 19,000 rows (0.20-0.22 CPU s measured on the
# default nurse case and its simulated screener, benchmarks/bench_paper_estimator.py --side-by-side)
CONFIG_SECONDS = (0.25, 19000)


def _timing_path(settings: Any) -> Path | None:
    return Path(settings.cache_dir) / TIMING_FILE if settings.cache_dir and not settings.cache_url else None


def _workers(settings: Any) -> int:
    if settings.n_jobs is not None:
        return settings.n_jobs
    from popfair.runtime.parallel import cpu_count

    return cpu_count()


def price(settings: Any, n_rows: int) -> str:
    """One line: the iterations, the fits, and the expected minutes on this machine, from the last
    measured iteration kept in cache_dir (scaled by rows and by the iterations run side by side), or
    the config's figure where nothing was measured here yet."""
    workers, seconds, source = _workers(settings), None, ""
    path = _timing_path(settings)
    if path is not None and path.exists():
        try:
            kept = json.loads(path.read_text())
            seconds = float(kept["core_seconds"]) * n_rows / float(kept["rows"])
            source = (
                f"measured here: {float(kept['core_seconds']):.1f} core-seconds an iteration at {kept['rows']:,} rows"
            )
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            seconds = None
    if seconds is None:
        seconds = CONFIG_SECONDS[0] * n_rows / CONFIG_SECONDS[1]
        source = (
            f"not measured here yet: the config's {CONFIG_SECONDS[0]:g} s an iteration per core for "
            f"{CONFIG_SECONDS[1]:,} rows; the run measures it"
        )
    side = min(workers, settings.n_bootstrap)
    minutes = seconds * settings.n_bootstrap / side / 60
    return (
        f"pse_paper: {settings.n_bootstrap} resample-and-refit iterations of {FITS_PER_ITERATION * settings.folds} "
        f"XGBoost fits on {n_rows:,} rows, {side} side by side: about {minutes:.0f} min ({source})"
    )


def keep_timing(settings: Any, n_rows: int, seconds: float, iterations: int, workers: int) -> None:
    """The bootstrap's measured core-seconds per iteration, kept for the next price (dry run, doctor)."""
    path = _timing_path(settings)
    if path is None or iterations == 0:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        core = seconds * min(workers, iterations) / iterations
        path.write_text(json.dumps({"core_seconds": core, "rows": n_rows, "workers": workers}))
    except OSError:  # a read-only cache: the next price uses the config's figure
        pass


class IterationProgress:
    """The bootstrap's progress from its first iteration: a log line with the measured seconds of an
    iteration and the expected minutes for all of them, then one every tenth with the time left, and
    a bar (tqdm: its own rate and ETA) on standard error. Iterations run `workers` side by side, so
    the expected time is the elapsed time per completed iteration times those left."""

    def __init__(self, total: int, workers: int) -> None:
        from tqdm.auto import tqdm

        self.total, self.workers, self.done = total, workers, 0
        self.start = time.perf_counter()
        self.bar = tqdm(total=total, desc="pse_paper iterations", unit="it", leave=False, mininterval=1.0)

    def step(self) -> None:
        self.done += 1
        self.bar.update(1)
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        if self.done == 1:
            log.info(
                "pse_paper: iteration 1 of %d took %.1f s (%d side by side): about %.1f min for all %d",
                self.total,
                elapsed,
                self.workers,
                elapsed * self.total / min(self.workers, self.total) / 60,
                self.total,
            )
        elif self.done % max(1, self.total // 10) == 0 and self.done < self.total:
            log.info(
                "pse_paper: %d of %d bootstrap iterations in %.1f min; about %.1f min left",
                self.done,
                self.total,
                elapsed / 60,
                left / 60,
            )

    def close(self) -> None:
        self.bar.close()
