"""Coverage study of the PSE estimator's 95% CIs on a simulated SFM with known effects.

Each replication draws a fresh sample, runs `estimate_pse` with the paper's full tuning grid,
L = 5 folds, 500 bootstrap resamples and the estimator's default fold assignments (n_splits="auto":
one for scores, as the paper, five for 0/1 callbacks; `--n-splits` sets them), and records whether each effect's CI covers the truth
(computed by simulating counterfactuals). Prints coverage per effect with its Monte Carlo SE
(target 0.93-0.97), the mean bias and the ratio of the mean SE to the empirical SD of the estimates.
`--csv` keeps one row per replication x effect and skips replications already in it, so a long
study can be stopped and resumed (or split across machines and the files concatenated).

    python benchmarks/coverage_pse.py --reps 200 --n 3000 --outcome callback --jobs 2 --csv cb.csv
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from popfair.estimate.pse.dml.estimator import PseOverlapWarning, estimate_pse
from popfair.estimate.pse.sfm import EFFECTS
from popfair.estimate.pse.simulate import SimulatedSFM


def one_replication(args: tuple[int, int, str, dict]) -> pd.DataFrame:
    rep, n, outcome, settings = args
    sim = SimulatedSFM(outcome=outcome)
    data = sim.sample(n, seed=1000 + rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        result = estimate_pse(
            data,
            **sim.role_kwargs,
            folds=5,
            n_bootstrap=500,
            seed=rep,
            **settings,
        )
    return result.table[["estimate", "se", "ci_low", "ci_high"]].assign(rep=rep).reset_index()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--outcome", choices=["score", "callback"], default="score")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--n-splits", type=int, default=None, help="estimate_pse n_splits (default: the estimator's, auto)"
    )
    parser.add_argument("--first", type=int, default=0, help="first replication number")
    parser.add_argument("--csv", type=Path, default=None, help="per-replication rows; resumes from it")
    args = parser.parse_args()
    sim = SimulatedSFM(outcome=args.outcome)
    truth = sim.truth(n=1_000_000)
    start = time.perf_counter()
    settings = {} if args.n_splits is None else {"n_splits": args.n_splits}
    done = pd.read_csv(args.csv) if args.csv is not None and args.csv.is_file() else pd.DataFrame()
    todo = sorted(set(range(args.first, args.first + args.reps)) - set(done.get("rep", [])))
    tasks = [(rep, args.n, args.outcome, settings) for rep in todo]
    frames = [done] if len(done) else []
    with ProcessPoolExecutor(max(args.jobs, 1)) as pool:
        for frame in pool.map(one_replication, tasks):
            frames.append(frame)
            if args.csv is not None:  # after every replication: a stopped study resumes here
                pd.concat(frames).to_csv(args.csv, index=False)
    runs = pd.concat(frames)
    runs = runs[runs["rep"].between(args.first, args.first + args.reps - 1)].reset_index(drop=True)
    runs["truth"] = runs["effect"].map(truth)
    runs["covered"] = (runs["ci_low"] <= runs["truth"]) & (runs["truth"] <= runs["ci_high"])
    summary = (
        runs.groupby("effect")
        .agg(
            truth=("truth", "first"),
            mean_estimate=("estimate", "mean"),
            sd_estimate=("estimate", "std"),
            mean_se=("se", "mean"),
            coverage=("covered", "mean"),
        )
        .loc[list(EFFECTS)]
    )
    summary["mc_se"] = np.sqrt(summary["coverage"] * (1 - summary["coverage"]) / len(runs["rep"].unique()))
    summary["bias"] = summary["mean_estimate"] - summary["truth"]
    summary["se_over_sd"] = summary["mean_se"] / summary["sd_estimate"]
    pd.set_option("display.width", 140)
    print(
        f"coverage study: outcome={args.outcome} n={args.n} reps={runs['rep'].nunique()} folds=5 "
        f"bootstrap=500 full grid {settings or '(estimator defaults)'}; {time.perf_counter() - start:.0f}s"
    )
    print(summary.round(4).to_string())
    inside = summary["coverage"].between(0.93, 0.97)
    print("all effects within [0.93, 0.97]:", bool(inside.all()))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
