"""A table case near its floor (issue 35): the default table case at 1M rows (tracked in MLflow, with
the auditor's report) against the same case with `tracking=none audit_report=false`, each as
`python -m popfair experiment=table_audit ...` in a fresh process and a fresh folder, interleaved,
printing both wall times (interpreter start included) and their ratio. Target: ratio <= 2.

Run from the repository root: python benchmarks/bench_table_floor.py [--rows 1000000] [--clusters 200000]
[--pairs 3] [--bootstrap 2000]"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_table import COLUMNS, generate  # noqa: E402

FLOOR = ["tracking=none", "audit_report=false"]


def case_seconds(args: list[str]) -> float:
    """Wall seconds of one table case from the command line, in a fresh folder."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as cwd:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "popfair", "experiment=table_audit", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": str(ROOT)},
        )
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
    os.environ.setdefault("MPLBACKEND", "Agg")
    with tempfile.TemporaryDirectory(prefix="bench-floor-data-") as tmp:
        path = Path(tmp) / "decisions.parquet"
        generate(path, args.rows, args.clusters)
        common = [f"table.path={path}", *COLUMNS, f"estimator.n_bootstrap={args.bootstrap}"]
        ratios = []
        for pair in range(args.pairs):
            default = case_seconds(common)
            floor = case_seconds([*common, *FLOOR])
            ratios.append(default / floor)
            print(
                f"pair {pair + 1}: default {default:.2f} s, {' '.join(FLOOR)} {floor:.2f} s: ratio "
                f"{default / floor:.2f} (target <= 2.00); load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        median = sorted(ratios)[len(ratios) // 2]
        print(f"median ratio {median:.2f}: {'PASS' if median <= 2.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
