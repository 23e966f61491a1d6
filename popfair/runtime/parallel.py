"""Spread a CPU-bound, deterministic loop over forked worker processes (both cores of a laptop).

`forked_spans(work, n, chunk)` cuts range(n) into spans, runs `work(start, stop)` for each in a
forked worker and yields `(start, result)` in span order, so joining the results gives exactly what
one process would compute. The work function and its data are inherited through the fork (set in a
module global just before it), so nothing but span bounds and results is pickled. It falls back to
spans of `chunk` in this process when there is one CPU, the loop is under two chunks, or the
platform has no fork."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from typing import Any

_WORK: Callable[[int, int], Any] | None = None  # what forked workers run (set just before the fork)
_CALL: tuple[Callable[..., Any], tuple[Any, ...]] | None = None  # what forked_call's worker runs


def cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _worker_signals() -> None:
    """In a forked worker: SIGTERM kills, as multiprocessing's `Pool.terminate` expects. A case turns
    SIGTERM into KeyboardInterrupt (`popfair.runtime.interrupts`); a worker inheriting that handler raised it
    wherever terminate found it (a traceback per worker) and could be left holding the pool's queue
    lock, so that terminate waited on it forever."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
        # spans of `chunk` in this process: a caller that keeps each span as it arrives (the
        # document store) loses no finished span to a kill on one CPU either
        for start in range(0, n, chunk):
            yield start, work(start, min(start + chunk, n))
        return
    step = max(1, min(chunk, -(-n // (4 * processes))))  # a few spans per worker: they finish together
    spans = [(start, min(start + step, n)) for start in range(0, n, step)]
    _WORK = work
    outer = gc.get_freeze_count() > 0  # frozen_heap holds: leave its freeze in place
    gc.freeze()  # the workers' garbage collector then leaves inherited objects (and their pages) alone
    try:
        with mp.get_context("fork").Pool(min(processes, len(spans)), initializer=_worker_signals) as pool:
            if not outer:
                gc.unfreeze()
            for (start, _), result in zip(spans, pool.imap(_run, spans)):
                yield start, result
    finally:
        if not outer:
            gc.unfreeze()
        _WORK = None


def _run_call() -> tuple[bool, Any]:
    """In the forked worker: (True, result) or (False, the exception, or a RuntimeError naming it
    when the exception itself would not survive the trip back)."""
    assert _CALL is not None
    fn, args = _CALL
    try:
        return True, fn(*args)
    except Exception as exc:  # noqa: BLE001 - raised again in the parent
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # noqa: BLE001
            return False, RuntimeError(f"{type(exc).__name__}: {exc}")
        return False, exc


def forked_call(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """Start `fn(*args)` now in one forked worker process (inherited through the fork, as
    `forked_spans` does; only the result is pickled) and return a function that waits for it and
    returns its result or raises its exception. With one CPU or without fork, `fn` runs in this
    process when the returned function is called. For work beside a stage that keeps threads busy
    outside the GIL: a thread would contend for the GIL and share process-wide state such as the
    warning filters."""
    global _CALL
    if cpu_count() < 2 or "fork" not in mp.get_all_start_methods():
        return lambda: fn(*args)
    _CALL = (fn, args)
    outer = gc.get_freeze_count() > 0  # frozen_heap holds: leave its freeze in place
    gc.freeze()
    try:
        pool = mp.get_context("fork").Pool(1, initializer=_worker_signals)  # the worker is forked here
    finally:
        if not outer:
            gc.unfreeze()
        _CALL = None
    pending = pool.apply_async(_run_call)
    pool.close()

    def wait() -> Any:
        try:
            ok, value = pending.get()
        finally:
            pool.join()
        if not ok:
            raise value
        return value

    return wait


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects that exist now (modules, the composed config, the built components) out of
    garbage collection until the block ends (`gc.freeze`): a full collection then walks only what
    the block allocates. In the default case that is 7 full collections, 0.8 s of the main thread
    (each walking ~430,000 objects), otherwise. Garbage that already exists is collected after the
    block. Nested blocks, and the forks above, keep the outermost freeze."""
    if gc.get_freeze_count() > 0:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
