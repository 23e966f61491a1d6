"""Spread a CPU-bound, deterministic loop over forked worker processes (both cores of a laptop).

`forked_spans(work, n, chunk)` cuts range(n) into spans, runs `work(start, stop)` for each in a
forked worker and yields `(start, result)` in span order, so joining the results gives exactly what
one process would compute. The work function and its data are inherited through the fork (set in a
module global just before it), so nothing but span bounds and results is pickled. It falls back to
one span in this process when there is one CPU, the loop is under two chunks, or the platform has
no fork."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from typing import Any

_WORK: Callable[[int, int], Any] | None = None  # what forked workers run (set just before the fork)


def cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _run(span: tuple[int, int]) -> Any:
    assert _WORK is not None
    return _WORK(*span)


def forked_spans(
    work: Callable[[int, int], Any], n: int, chunk: int, processes: int | None = None
) -> Iterator[tuple[int, Any]]:
    """(start, work(start, stop)) for consecutive spans covering range(n), in order; spans run in
    `processes` forked workers (default: every CPU) when n is at least two `chunk`s."""
    global _WORK
    processes = cpu_count() if processes is None else processes
    if processes < 2 or n < 2 * chunk or "fork" not in mp.get_all_start_methods():
        yield 0, work(0, n)
        return
    step = max(1, min(chunk, -(-n // (4 * processes))))  # a few spans per worker: they finish together
    spans = [(start, min(start + step, n)) for start in range(0, n, step)]
    _WORK = work
    gc.freeze()  # the workers' garbage collector then leaves inherited objects (and their pages) alone
    try:
        with mp.get_context("fork").Pool(min(processes, len(spans))) as pool:
            gc.unfreeze()
            for (start, _), result in zip(spans, pool.imap(_run, spans)):
                yield start, result
    finally:
        gc.unfreeze()
        _WORK = None
