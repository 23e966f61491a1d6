"""The LL144 computation on counts at the issue's scale: 10 million applicants in 200,000 clusters,
sex (2 + unknown) x race (7 + unknown) cells, 2,000 bootstrap replicates, the permutation test for
each of the three tables (issue 23, item 5; the reading side is t23a's benchmarks/bench_table.py).

Prints the time and the peak memory of the computation (the counts are drawn per cluster, so the
process never holds 10 million rows), the load average, and the same run with 10x fewer clusters for
the ratio (cost should grow about linearly with clusters).

    python benchmarks/bench_ratio_scale.py [--clusters 200000] [--per-cluster 50] [--replicates 2000]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import pandas as pd

from popfair.estimate.impact_ratio.ratios import ImpactRatioSettings, impact_ratios_from_counts

SEXES = ["female", "male", "unknown"]
RACES = ["white", "black", "hispanic", "asian", "aian", "nhpi", "two_or_more", "unknown"]
SEX_SHARE = np.array([0.49, 0.49, 0.02])
RACE_SHARE = np.array([0.40, 0.20, 0.20, 0.10, 0.03, 0.015, 0.045, 0.01])
LIFT = np.where(np.array(RACES) == "black", 0.9, 1.0)  # a real 10% gap for one category


def counts(clusters: int, per_cluster: int, seed: int) -> pd.DataFrame:
    """Cluster x sex x race counts of applicants and of those selected (chance Beta(2, 6) per cluster)."""
    rng = np.random.default_rng(seed)
    cells = np.outer(SEX_SHARE, RACE_SHARE).ravel()
    n = rng.multinomial(rng.poisson(per_cluster, clusters), cells)  # clusters x cells
    chance = rng.beta(2, 6, clusters)[:, None] * np.tile(LIFT, len(SEXES))[None, :]
    selected = rng.binomial(n, chance)
    cluster, cell = np.nonzero(n)
    return pd.DataFrame(
        {
            "cluster": cluster,
            "sex": np.array(SEXES)[cell // len(RACES)],
            "race": np.array(RACES)[cell % len(RACES)],
            "n": n[cluster, cell],
            "selection": selected[cluster, cell],
        }
    )


def timed(frame: pd.DataFrame, replicates: int) -> tuple[float, float, object]:
    """Wall and CPU seconds (all threads: on a shared machine the CPU figure is the steadier one)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = impact_ratios_from_counts(frame, cluster="cluster", settings=ImpactRatioSettings(n_bootstrap=replicates))
    return time.perf_counter() - start, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=200_000)
    parser.add_argument("--per-cluster", type=int, default=50)
    parser.add_argument("--replicates", type=int, default=2000)
    args = parser.parse_args()
    timed(counts(1000, 10, seed=0), 100)  # imports (scipy) and first-call costs out of the figures
    small_frame = counts(args.clusters // 10, args.per_cluster, seed=1)
    small, small_cpu, _ = timed(small_frame, args.replicates)
    frame = counts(args.clusters, args.per_cluster, seed=1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds, cpu, result = timed(frame, args.replicates)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"{int(frame['n'].sum()):,} applicants in {args.clusters:,} clusters ({len(frame):,} count rows), "
        f"{args.replicates} replicates: {seconds:.1f} s wall, {cpu:.1f} s CPU (target well under 20 s), "
        f"peak RSS {peak / 1e6:.2f} GB "
        f"(target <= 2 GB; {before / 1e6:.2f} GB before the call); load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{args.clusters // 10:,} clusters: {small:.1f} s wall, {small_cpu:.1f} s CPU; CPU ratio "
        f"{cpu / small_cpu:.1f}x for 10x the clusters"
    )
    tests = result.tests  # type: ignore[attr-defined]
    print(tests[["dimension", "p_value", "n_flagged", "n_flags_surviving", "null_method"]].to_string(index=False))


if __name__ == "__main__":
    main()
