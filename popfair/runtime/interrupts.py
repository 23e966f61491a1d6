"""Ctrl-C and SIGTERM stop a case cleanly. SIGTERM (what schedulers and `kill` send) is turned into the
same KeyboardInterrupt as Ctrl-C while a case runs, so both take one path: answers received are
committed, claims released, the MLflow run is marked KILLED with what was done. While the screening
engine runs, the first signal stops it (nothing new is sent; the requests in flight get a grace period
to arrive and be committed) and a second one exits at once: committed answers are on disk either way."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_INTERRUPTED = 130  # the shell's code for a process stopped by SIGINT


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt as Ctrl-C does (main thread only; the
    previous handler is restored after)."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def engine_signals(loop: Any, first: Callable[[str], None]) -> Iterator[None]:
    """While the engine's event loop runs: the first SIGINT/SIGTERM calls `first(name)` (which stops
    the run cleanly), a second one exits the process at once. Main thread only; handlers restored after."""
    if not _in_main_thread():
        yield
        return
    received: list[str] = []

    def handle(signum: int) -> None:
        name = signal.Signals(signum).name
        if received:
            sys.stderr.write(
                f"\npopfair: second {name}: exiting at once; answers committed so far are kept, requests in flight are "
                "lost (rerun to resume)\n"
            )
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        received.append(name)
        sys.stderr.write(f"\npopfair: {name}: stopping; no new requests are sent, the answers received are saved\n")
        sys.stderr.flush()
        first(name)

    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        loop.add_signal_handler(sig, handle, sig)
    try:
        yield
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig])
