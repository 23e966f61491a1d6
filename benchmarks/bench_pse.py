"""Speed of the PSE estimator on one PopResume-sized case.

17,632 applicants (the paper's nurse count) from the simulated SFM with PopResume's column types
(strings for gender, race, edu_group, name typicalities, region; integers for age, exp_year; a
0-100 score), L = 5 folds, the paper's full tuning grid (5 x 4 fits x 9 nuisances) and 500 bootstrap
resamples. Run 1 tunes; run 2 repeats the same case with tuned hyperparameters from the cache
(on disk, so a fresh process would hit it too). Targets: run 1 < 30 s, run 2 < 10 s.

    python benchmarks/bench_pse.py [--n 17632] [--n-jobs 1]
"""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings

from popfair.estimate.pse import PseOverlapWarning, clear_tuning_cache, estimate_pse
from popfair.estimate.sfm_sim import SimulatedSFM


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=17_632)
    parser.add_argument("--n-jobs", type=int, default=1)
    args = parser.parse_args()
    sim = SimulatedSFM()
    data = sim.sample(args.n, seed=2026)
    truth = sim.truth()
    clear_tuning_cache()
    with tempfile.TemporaryDirectory() as cache_dir:
        for label, target in (("run 1 (tuning)", 30.0), ("run 2 (cached tuning)", 10.0)):
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", PseOverlapWarning)
                result = estimate_pse(data, x="gender", x0=sim.x0, x1=sim.x1, z=sim.roles["z"], b=sim.roles["b"],
                                      r=sim.roles["r"], y="y", folds=5, n_bootstrap=500, seed=0,
                                      cache_dir=cache_dir, n_jobs=args.n_jobs)
            total = time.perf_counter() - start
            stages = "  ".join(f"{k}={v:.2f}s" for k, v in result.timings.items())
            verdict = "OK" if total < target else "SLOW"
            print(f"{label}: n={result.n} total={total:.2f}s (target < {target:.0f}s: {verdict})  {stages}")
            if caught:
                print("  overlap warning:", caught[0].message)
    table = result.table[["estimate", "se", "ci_low", "ci_high", "significant"]].assign(truth=truth)
    print(table.round(3).to_string())
    print("case:", result.case)
    print(result.tuning.drop(columns="from_cache").to_string())


if __name__ == "__main__":
    main()
