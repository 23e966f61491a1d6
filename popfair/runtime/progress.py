"""A bar for the seconds a step takes, where the step has no bar of its own: no stage (or the
preparation before the first one) longer than CLOCK_AFTER_S is silent on a terminal.

`stage_clock(name)` is a context manager; `Clock(name).start()` / `.stop()` spans code that a `with`
block cannot (the preparation: `python -m popfair` starts it, the case stops it when it starts)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

CLOCK_AFTER_S = 2.0  # a step still running after this long shows a bar of its elapsed seconds


class Clock:
    """Once `after_s` have passed since `start()`, a bar `NAME: 12 s` counting the seconds on standard
    error (or `file`), until `stop()`. Hidden while another bar is open (render's documents, screen's
    rows: they count what is done). A daemon thread, woken twice a second. Only on a terminal, unless
    `file` is given: a log file or a pipe gets no ticks."""

    def __init__(self, name: str, after_s: float = CLOCK_AFTER_S, file: Any = None) -> None:
        self.name, self.after_s = name, after_s
        self.out = file if file is not None else sys.stderr
        self.on = file is not None or self.out.isatty()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Clock:
        if self.on and self._thread is None:
            self._thread = threading.Thread(target=self._tick, name=f"popfair-clock-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _tick(self) -> None:
        from tqdm import tqdm  # the class every popfair bar is made of: its _instances are all of them

        if self._done.wait(self.after_s):
            return
        bar = None
        start = time.perf_counter() - self.after_s
        while True:
            others = [b for b in list(getattr(tqdm, "_instances", ())) if b is not bar]
            if others and bar is not None:  # the step's own bar is showing
                bar.close()
                bar = None
            elif not others:
                if bar is None:
                    bar = tqdm(bar_format="{desc}", leave=False, file=self.out)
                bar.set_description_str(f"{self.name}: {time.perf_counter() - start:.0f} s", refresh=True)
            if self._done.wait(0.5):
                break
        if bar is not None:
            bar.close()


@contextlib.contextmanager
def stage_clock(name: str, after_s: float = CLOCK_AFTER_S, file: Any = None) -> Iterator[None]:
    """A `Clock` named `stage NAME` around the block."""
    clock = Clock(f"stage {name}", after_s, file).start()
    try:
        yield
    finally:
        clock.stop()


_PREPARING: list[Clock] = []


def preparing_started() -> None:
    """`python -m popfair`: the seconds of composing the config and building the case, counted."""
    _PREPARING.append(Clock("preparing the case").start())


def preparing_done() -> None:
    """The case's first stage starts (or it failed): the preparation's bar goes."""
    while _PREPARING:
        _PREPARING.pop().stop()
