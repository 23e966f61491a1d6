"""Coverage of the ranking estimates against known truth, and the balanced null.

A: rankings from a Plackett-Luce ranker with known group strengths and a known first-position
bonus (8 groups, Latin-square orders, 1,000 trials per simulation, 10% of trials ranking only their
top 3): how often the rank-ordered logit's 95% CIs (trial-clustered SEs) cover the true group and
position effects, and the top-1 rates' and impact ratios' CIs their true values (exact: P(group
first) averaged over the Latin square's orders). Target: 93-97%.

B: a balanced null (no group effect) with a strong first-position bonus: how often "no group
differs" is rejected at 5% (logit Wald test; the impact ratios' permutation test) and how often the
position effect is found.

Run: python benchmarks/coverage_ranking.py [simulations]   (default 200 each)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script lives in

import numpy as np  # noqa: E402

from popfair.design.ranking.trials import williams_square  # noqa: E402
from popfair.estimate.ranking.estimator import ranking_effects  # noqa: E402
from popfair.estimate.ranking.top1_power import simulate_rankings  # noqa: E402

K, TRIALS, REFERENCE = 8, 1000, "g1"
STRENGTHS = np.array([0.2, 0.0, -0.3, -0.1, 0.1, 0.0, -0.2, 0.3])
BONUS = np.array([0.5, 0, 0, 0, 0, 0, 0, 0.0])  # first position; the logit's reference is the last


def true_top1(strengths: np.ndarray, bonus: np.ndarray) -> np.ndarray:
    """P(group first) averaged over the Latin square's orders (each used equally often)."""
    square = williams_square(len(strengths))
    rates = np.zeros(len(strengths))
    for order in square:  # order[p] = group at position p + 1
        worth = np.exp(strengths[order] + bonus)
        rates[order] += worth / worth.sum()
    return rates / len(square)


def coverage(simulations: int, rng: np.random.Generator) -> None:
    truth_logit = {f"logit.group.g{g}": STRENGTHS[g] - STRENGTHS[1] for g in range(K) if g != 1}
    truth_logit.update({f"logit.position.{p + 1}": BONUS[p] - BONUS[-1] for p in range(K - 1)})
    rates = true_top1(STRENGTHS, BONUS)
    truth_rate = {f"top1.g{g}": rates[g] for g in range(K)}
    truth_ratio = {f"impact_ratio.g{g}": rates[g] / rates.max() for g in range(K)}
    covered: dict[str, list[bool]] = {}
    for _ in range(simulations):
        trials = simulate_rankings(TRIALS, STRENGTHS, BONUS, rng, top=3, top_share=0.1)
        table = ranking_effects(
            trials, reference=REFERENCE, reference_position=K, n_bootstrap=1000, seed=int(rng.integers(1 << 30))
        ).table
        for name, truth in {**truth_logit, **truth_rate, **truth_ratio}.items():
            covered.setdefault(name, []).append(bool(table.loc[name, "ci_low"] <= truth <= table.loc[name, "ci_high"]))
    print(f"A. coverage of 95% CIs over {simulations} simulations of {TRIALS} trials x {K} (target 93-97%)")
    for label, prefix in (
        ("logit group effects", "logit.group"),
        ("logit position effects", "logit.position"),
        ("top-1 rates", "top1.g"),
        ("impact ratios", "impact_ratio."),
    ):
        rows = {name: np.mean(hits) for name, hits in covered.items() if name.startswith(prefix)}
        pooled = np.mean([h for name, hits in covered.items() if name.startswith(prefix) for h in hits])
        print(
            f"  {label:24s} pooled {100 * pooled:5.1f}%  range {100 * min(rows.values()):.1f}-{100 * max(rows.values()):.1f}%"
        )
    first = np.mean(covered["logit.position.1"])
    print(f"  first-position bonus (true {BONUS[0]}): {100 * first:.1f}%")


def balanced_null(simulations: int, rng: np.random.Generator) -> None:
    strong = np.r_[1.0, np.zeros(K - 1)]
    logit = ratio = position = 0
    for _ in range(simulations):
        trials = simulate_rankings(TRIALS, np.zeros(K), strong, rng)
        metrics = ranking_effects(
            trials, reference=REFERENCE, reference_position=K, n_bootstrap=1000, seed=int(rng.integers(1 << 30))
        ).metrics
        logit += metrics["ranking.no_group_differs_logit_p"] < 0.05
        ratio += metrics["ranking.no_group_differs_top1_p"] < 0.05
        position += metrics["ranking.no_position_effect_logit_p"] < 0.05
    print(f"B. balanced null, first-position bonus 1.0, {simulations} simulations (level 5%)")
    print(
        f"  'no group differs' rejected: logit Wald {100 * logit / simulations:.1f}%, impact-ratio test {100 * ratio / simulations:.1f}%"
    )
    print(f"  position effect found: {100 * position / simulations:.1f}%")


def main() -> None:
    simulations = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    start = time.perf_counter()
    rng = np.random.default_rng(2024)
    coverage(simulations, rng)
    balanced_null(simulations, rng)
    print(f"{time.perf_counter() - start:.0f} s, load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
