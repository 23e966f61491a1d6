"""What every command-line entry point shares (popfair, popfair-report, popfair-export, popfair-data):
a reader that stops reading (`popfair --help | head`) ends the command quietly, as it ends `ls` or
`git log`, instead of with a BrokenPipeError traceback.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError wherever the write
happens: in our own prints, but also inside Hydra, which catches every Exception of the code it
runs (`--cfg job`, the task function) and prints its traceback. So standard output is wrapped:
a closed pipe met on the main thread raises `StdoutClosed`, a SystemExit, which nothing between
the write and this module catches. SIGPIPE itself stays ignored: restoring its default action would
also kill the process silently when a network peer (an API, the MLflow server) closes a socket."""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

CLOSED_PIPE_STATUS = 141  # what a shell reports for a program ended by SIGPIPE (128 + 13)


class StdoutClosed(SystemExit):
    """Standard output's reader went away; the command ends quietly."""


class _ClosedPipeGuard:
    """Standard output, with BrokenPipeError on the main thread turned into StdoutClosed (other
    threads get the BrokenPipeError as before: ending a thread silently could hang the process)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _guarded(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            if threading.current_thread() is threading.main_thread():
                raise StdoutClosed(CLOSED_PIPE_STATUS) from None
            raise

    def write(self, text: str) -> int:
        return self._guarded(self._stream.write, text)

    def writelines(self, lines: Any) -> None:
        self._guarded(self._stream.writelines, lines)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's last flush of what is still buffered
    does not print 'Exception ignored ... BrokenPipeError' (the recipe in Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except (OSError, ValueError):
        pass


def entry_point(main: F) -> F:
    """Decorator for a console-script `main`: ends with status 141 and no traceback when standard
    output is a pipe whose reader has gone."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        guarded = not isinstance(sys.stdout, _ClosedPipeGuard) and sys.stdout is not None
        original = sys.stdout
        if guarded:
            sys.stdout = _ClosedPipeGuard(sys.stdout)
        try:
            result = main(*args, **kwargs)
            sys.stdout.flush()
            return result
        except (BrokenPipeError, StdoutClosed):
            _silence_stdout()
            sys.exit(CLOSED_PIPE_STATUS)
        finally:
            if guarded:
                sys.stdout = original

    return run  # type: ignore[return-value]


_ON_ERROR_EXIT: list[Callable[[], None]] = []


def on_error_exit(hook: Callable[[], None]) -> None:
    """Run `hook` when a command ends with an error status (not 0), before the interpreter's shutdown
    joins background pools: a hook drops work whose result no one will read (a worker still importing
    MLflow for a case that failed before its run began), so the error line is the command's last act."""
    if hook not in _ON_ERROR_EXIT:
        _ON_ERROR_EXIT.append(hook)


def _abandon_work() -> None:
    for hook in _ON_ERROR_EXIT:
        try:
            hook()
        except Exception:  # noqa: BLE001, S110 - the command is ending with its error already printed
            pass


def exit_without_teardown(status: int | str | None = 0) -> None:
    """End a command as the interpreter would, less its teardown: what the interpreter does first still
    runs (`threading._shutdown`: concurrent.futures stops its executors, such as the tracking worker's,
    and non-daemon threads are joined; then the atexit hooks: logging flushes and closes its files,
    multiprocessing joins its children, temporary folders go), the standard streams are flushed, and
    the process exits with `status` (a SystemExit's code: None is 0, a message is printed to standard
    error with status 1, as the interpreter does) without the final garbage collection and the
    freeing of every module's objects, which the OS does at once (0.3-0.8 s after the default case
    printed its last line, 1.2 s after a sweep). Where this Python lacks those hooks, the usual exit.
    With an error status the `on_error_exit` hooks run first: background work that only prepared the
    case (the tracking worker importing MLflow) is dropped instead of waited for (10-19 s at load)."""
    if status not in (None, 0):
        _abandon_work()
    shutdown = getattr(threading, "_shutdown", None)
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if shutdown is None or run_exitfuncs is None:
        sys.exit(status)
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    try:
        shutdown()
    except OSError:  # an executor abandoned above: its wake-up pipe is closed, nothing is left to wait for
        pass
    run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader went away: nothing left to deliver
            pass
    os._exit(status)
