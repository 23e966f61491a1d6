"""Speed of the PSE estimator on one PopResume-sized case, serial and threaded side by side.

17,632 applicants (the paper's nurse count) from the simulated SFM with PopResume's column types
(strings for gender, race, edu_group, name typicalities, region; integers for age, exp_year; a
0-100 score), L = 5 folds, the paper's full tuning grid (5 depths x 4 lambdas x 5 tree counts for
each of 9 nuisances) and 500 bootstrap resamples, cold (no tuning cache). The same case runs with
n_jobs=1 and with n_jobs=2 (grid points of all searches and the cross-fitting folds spread over two
threads); both must select the same hyperparameters and give the same table. Then a rerun with the
tuned hyperparameters from the cache. Target (issue 18): cold, 2 threads, at most 8 s on 2 cores. Wall and CPU
seconds are printed with the load average: on a shared machine wall time includes waiting for a core.

    python benchmarks/bench_pse.py [--n 17632] [--jobs 1 2]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import pandas as pd

from popfair.estimate.pse import PseOverlapWarning, clear_tuning_cache, estimate_pse
from popfair.estimate.sfm_sim import SimulatedSFM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=17_632)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    sim = SimulatedSFM()
    data = sim.sample(args.n, seed=2026)
    truth = sim.truth()
    print(f"cpu cores visible: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f} (machine shared)")

    def run(n_jobs: int, label: str):
        start, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PseOverlapWarning)
            result = estimate_pse(
                data,
                **sim.role_kwargs,
                folds=5,
                n_bootstrap=500,
                seed=0,
                n_jobs=n_jobs,
            )
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        stages = "  ".join(f"{k}={v:.2f}s" for k, v in result.timings.items())
        verdict = f"  target <= 8 s: {'PASS' if wall <= 8 else 'FAIL'}" if n_jobs >= 2 and "cold" in label else ""
        print(
            f"{label}, n_jobs={n_jobs}: n={result.n} wall={wall:.2f}s cpu={cpu:.2f}s  {stages}{verdict}  "
            f"(load {os.getloadavg()[0]:.2f})"
        )
        if caught:
            print("  overlap warning:", caught[0].message)
        return result

    results = {}
    for n_jobs in args.jobs:
        clear_tuning_cache()
        results[n_jobs] = run(n_jobs, "cold")
    run(args.jobs[-1], "cached tuning")
    first, *others = results.values()
    for other in others:
        same = first.tuning.drop(columns="from_cache").equals(other.tuning.drop(columns="from_cache"))
        pd.testing.assert_frame_equal(first.table, other.table)
        print(f"same hyperparameters and table across n_jobs: {'yes' if same else 'NO'}")
    table = first.table[["estimate", "se", "ci_low", "ci_high", "significant"]].assign(truth=truth)
    print(table.round(3).to_string())
    print("case:", first.case)
    print(first.tuning.drop(columns="from_cache").to_string())


if __name__ == "__main__":
    main()
