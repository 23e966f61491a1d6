"""More replicates never cost less (issue 35): the table case at 1M rows (bench_table's decisions:
200,000 requisitions, LL144 sex, race and intersection tables) with 200 and with 2,000 bootstrap
replicates (the permutation test follows), each in a fresh process, interleaved, printing the
estimate stage of both sides, their ratio and the permutation path each took.

Run from the repository root: python benchmarks/bench_replicates.py [--rows 1000000] [--clusters 200000]
[--pairs 2] [--few 200] [--many 2000]"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_table import COLUMNS, generate  # noqa: E402


def one(args: list[str]) -> None:
    """One table case in this process, untracked and without the report: a JSON line of its stages."""
    from popfair.sweep.run_case import case_from_config
    from tests.conftest import compose_config

    case = case_from_config(compose_config(["experiment=table_audit", "tracking=none", "audit_report=false", *args]))
    result = case.run()
    methods = sorted(set(result.ratios.tests["null_method"].str.split(" over ").str[0]))
    print(json.dumps({"timings": result.timings, "methods": methods}))


def measure(args: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--one", *args], capture_output=True, text=True, cwd=ROOT, env=os.environ.copy()
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--few", type=int, default=200)
    parser.add_argument("--many", type=int, default=2000)
    args = parser.parse_args()
    os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
    with tempfile.TemporaryDirectory(prefix="bench-replicates-") as tmp:
        path = Path(tmp) / "decisions.parquet"
        generate(path, args.rows, args.clusters)
        common = [f"table.path={path}", *COLUMNS]
        for pair in range(args.pairs):
            figures = {b: measure([*common, f"estimator.n_bootstrap={b}"]) for b in (args.few, args.many)}
            few, many = (figures[b]["timings"]["estimate"] for b in (args.few, args.many))
            print(
                f"pair {pair + 1}: estimate stage {args.few} replicates {few:.2f} s "
                f"({'/'.join(figures[args.few]['methods'])}), {args.many} replicates {many:.2f} s "
                f"({'/'.join(figures[args.many]['methods'])}): ratio {few / many:.2f} (target <= 1.00: "
                f"{'PASS' if few <= many else 'FAIL'}); load average {os.getloadavg()[0]:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
