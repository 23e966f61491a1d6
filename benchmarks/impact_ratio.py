"""Impact-ratio table: speed at the designs' sizes, and CI coverage with and without posting clusters.

    python benchmarks/impact_ratio.py              # speed (2,000 resamples) + coverage (200 datasets)
    python benchmarks/impact_ratio.py --reps 500   # tighter coverage figures

Speed targets (this 2-core machine, shared): PopResume nurse-size scores (15,500 applicants) and the
paired gender design (96,096 callbacks in 6,006 postings) in under 5 s each; 60,000 continuous scores
in under 15 s.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import special

from popfair.estimate.impact_ratio.ratios import ImpactRatioSettings, impact_ratios

RACES = ["black", "white", "hispanic", "api", "other"]


def scores(n: int, seed: int, integer: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = pd.DataFrame(
        {"gender": rng.choice(["female", "male"], n), "race": rng.choice(RACES, n, p=[0.12, 0.55, 0.18, 0.1, 0.05])}
    )
    y = np.clip(60 + 3 * (data["gender"] == "male") + 3 * (data["race"] == "white") + rng.normal(0, 12, n), 0, 100)
    data["y"] = np.round(y) if integer else y
    return data


def paired_callbacks(n_postings: int, per_posting: int, spread: float, gap: float, seed: int) -> pd.DataFrame:
    """Every posting sees Black/White x female/male profiles; a posting effect shared by its rows."""
    rng = np.random.default_rng(seed)
    posting = np.repeat(np.arange(n_postings), per_posting)
    race = np.tile(["black", "white"], len(posting) // 2)
    gender = np.tile(np.repeat(["female", "male"], 2), len(posting) // 4)
    logit = -1.0 + rng.normal(0, spread, n_postings)[posting] + gap * (race == "white")
    y = (rng.random(len(posting)) < special.expit(logit)).astype(np.int8)
    return pd.DataFrame({"posting_id": posting, "gender": gender, "race": race, "y": y})


def timed(label: str, data: pd.DataFrame, target_s: float) -> None:
    start = time.perf_counter()
    result = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=2000))
    seconds = time.perf_counter() - start
    print(
        f"{label:<52} {len(data):>7,} rows  {seconds:6.2f} s  (target < {target_s:g} s)  "
        f"{'ok' if seconds < target_s else 'SLOW'}  [{result.outcome}, cluster={result.cluster}]"
    )


def true_rate(spread: float, shift: float) -> float:
    """E[expit(-1 + shift + u)], u ~ N(0, spread^2), by Gauss-Hermite quadrature."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    return float((special.expit(-1 + shift + spread * nodes) * weights).sum() / weights.sum())


def coverage(reps: int, spread: float, gap: float) -> None:
    truth_black, truth_white = true_rate(spread, 0.0), true_rate(spread, gap)
    truth_ratio = truth_black / truth_white
    hits = {("posting", "rate"): 0, ("posting", "ratio"): 0, ("iid", "rate"): 0, ("iid", "ratio"): 0}
    widths = {key: [] for key in hits}
    for rep in range(reps):
        data = paired_callbacks(300, 16, spread, gap, seed=1000 + rep)
        for name, cluster in (("posting", "auto"), ("iid", "none")):
            result = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=500, seed=rep, cluster=cluster))
            t = result.table
            black = t[(t["metric"] == "selection") & (t["dimension"] == "race") & (t["category"] == "black")].iloc[0]
            hits[(name, "rate")] += black["rate_ci_low"] <= truth_black <= black["rate_ci_high"]
            hits[(name, "ratio")] += black["ci_low"] <= truth_ratio <= black["ci_high"]
            widths[(name, "rate")].append(black["rate_ci_high"] - black["rate_ci_low"])
            widths[(name, "ratio")].append(black["ci_high"] - black["ci_low"])
    print(
        f"\ncoverage of nominal 95% CIs, {reps} simulated paired designs (300 postings x 16 rows, "
        f"posting-effect sd {spread} on the logit scale); truth: Black rate {truth_black:.4f}, "
        f"Black/White impact ratio {truth_ratio:.4f}"
    )
    for (name, quantity), hit in hits.items():
        print(
            f"  {name:<8} bootstrap  {quantity:<6} coverage {hit / reps:6.3f}   "
            f"mean width {np.mean(widths[(name, quantity)]):.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=200, help="simulated datasets for the coverage study")
    args = parser.parse_args()
    print("speed, 2,000 bootstrap resamples (scores: median + top-20% rules; callbacks: selection)")
    timed("PopResume-size integer scores (LLM 0-100), iid", scores(15_500, 0, integer=True), 5)
    timed("PopResume-size continuous scores (TF-IDF), iid", scores(15_500, 0, integer=False), 5)
    timed("60k continuous scores, iid", scores(60_000, 1, integer=False), 15)
    timed("paired gender design callbacks, 6,006 postings", paired_callbacks(6006, 16, 1.0, 0.1, 2), 5)
    coverage(args.reps, spread=1.5, gap=0.3)


if __name__ == "__main__":
    main()
