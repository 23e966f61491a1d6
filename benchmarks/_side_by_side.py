"""What the side-by-side benchmarks share: CPU seconds of finished child processes, the load average
as printed beside every figure, and a baseline source tree (a path, or a detached git worktree of a
commit, removed afterwards) to run against this one in the same sitting."""

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
