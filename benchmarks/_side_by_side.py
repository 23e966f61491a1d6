"""What the side-by-side benchmarks share: CPU seconds of finished child processes, the load average
and the speed of a core as printed beside every figure, a baseline source tree (a path, or a
detached git worktree of a commit, removed afterwards) to run against this one in the same sitting,
and what a measured ratio to that baseline means on the machine a target was set on."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_cpu() -> float:
    """User + system CPU seconds of every child process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    """The 1, 5 and 15 minute load averages, as '1.23/0.98/0.75'."""
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


def core_speed() -> float:
    """CPU seconds of a fixed pure-Python loop (2M additions), best of three: how fast one core of this
    machine runs Python now (lower is faster). The load average does not show a host whose cores are
    slowed by work outside this machine; this does: on the same 2-core machine it read 0.09-0.14 s
    within ten minutes. Read figures taken at different core speeds as different machines."""
    import time

    best = float("inf")
    for _ in range(3):
        start, total = time.process_time(), 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.process_time() - start)
    return best


def on_target_machine(
    ours: list[float], base: list[float], there: tuple[float, float], target: float
) -> tuple[float, float, str]:
    """This tree's time on the machine a target was set on: its ratio to the baseline measured here
    (best to best, median to median), times the baseline's time there (`there`: the lowest and
    highest figure given for it). (low, high, verdict): PASS when even the high end meets `target`,
    "PASS at best" when only the low end does, else FAIL."""
    import statistics

    ratios = (min(ours) / min(base), statistics.median(ours) / statistics.median(base))
    low, high = min(ratios) * there[0], max(ratios) * there[1]
    return low, high, "PASS" if high <= target else "PASS at best" if low <= target else "FAIL"


@contextmanager
def baseline_tree(path: str | None, commit: str, prefix: str = "popfair-baseline-") -> Iterator[Path]:
    """The baseline source tree: `path`, or a detached worktree of `commit` removed afterwards."""
    if path:
        yield Path(path).resolve()
        return
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    tree = folder / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT, check=True, capture_output=True)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
