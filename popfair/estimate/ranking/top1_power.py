"""Trials a ranking audit needs to detect a group effect, from the winner alone or the whole ranking.

The variance of the estimated log-worth difference between two groups is the inverse expected
information of the exploded logit (group and position effects, Latin-square orders), computed at
the alternative (one group `effect` above the others, no position effect) on simulated Plackett-Luce
rankings: stages = 1 is the top-1 choice model, None every stage of the ranking. Trials needed =
(z_{1-alpha/2} + z_power)^2 * variance per trial / effect^2.

Top-1 rates (`top1_power`, the plan's power line): with no position effect (the Latin square balances
the positions) the winner of a trial is one multinomial draw, and the maximum-likelihood log-worth
difference of two groups is the log ratio of their top-1 rates, whose variance per trial is
1 / p_a + 1 / p_b (delta method): the minimum detectable difference solves
effect = z * sqrt((1 / p_a + 1 / p_b) / n) for one group at log-worth `effect` against k - 1 at 0."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from popfair.estimate.ranking.model import ExplodedLogit, RankTrials, design_matrix, williams_square

SIMULATED_TRIALS = 20_000


def simulate_rankings(
    n: int,
    strengths: Sequence[float] | np.ndarray,
    position_bonus: Sequence[float] | np.ndarray,
    rng: np.random.Generator,
    *,
    top: int | None = None,
    top_share: float = 0.0,
) -> RankTrials:
    """n Plackett-Luce rankings of k groups shown in Latin-square orders: candidate utility =
    strengths[group] + position_bonus[shown position - 1] + Gumbel noise. `top_share` of the trials
    keep only their `top` ranks (partial rankings)."""
    k = len(strengths)
    square = williams_square(k)
    orders = square[np.arange(n) % len(square)]  # orders[t, p] = the group shown at position p + 1
    position = np.empty_like(orders)
    np.put_along_axis(position, orders, np.arange(1, k + 1)[None, :], axis=1)
    bonus = np.asarray(position_bonus, dtype=float)
    utility = np.asarray(strengths, dtype=float)[None, :] + bonus[position - 1] + rng.gumbel(size=(n, k))
    rank = np.empty((n, k))
    np.put_along_axis(rank, np.argsort(-utility, axis=1), np.arange(1, k + 1, dtype=float)[None, :], axis=1)
    if top is not None and top_share > 0:
        cut = rng.random(n) < top_share
        rank[cut] = np.where(rank[cut] <= top, rank[cut], np.nan)
    return RankTrials([f"g{i}" for i in range(k)], rank, position, np.arange(n))


@lru_cache(maxsize=64)
def trials_needed(effect: float, k: int, *, alpha: float = 0.05, power: float = 0.8, stages: int | None = None) -> int:
    """Trials to detect a log-worth difference `effect` between two of k groups (two-sided Wald test)."""
    worth = np.zeros(k)
    worth[0] = effect  # group 0 vs the reference group 1
    trials = simulate_rankings(SIMULATED_TRIALS, worth, np.zeros(k), np.random.default_rng(0))
    x, names = design_matrix(trials, reference="g1", reference_position=k)
    likelihood = ExplodedLogit(x, trials.rank, stages)
    params = np.zeros(len(names))
    params[names.index("group.g0")] = effect
    information = -likelihood.hessian(params) / SIMULATED_TRIALS
    variance = np.linalg.inv(information)[names.index("group.g0"), names.index("group.g0")]
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return int(np.ceil(z**2 * variance / effect**2))


def top1_rates(effect: float, k: int) -> tuple[float, float]:
    """Top-1 rates of a group at log-worth `effect` and of each of the k - 1 others at 0."""
    total = math.exp(effect) + k - 1
    return math.exp(effect) / total, 1 / total


def top1_variance(effect: float, k: int) -> float:
    """Variance per trial of the estimated log-worth difference from the winner alone: 1/p_a + 1/p_b."""
    high, low = top1_rates(effect, k)
    return 1 / high + 1 / low


def log_worth_of_gap(gap: float, k: int) -> float | None:
    """The log-worth whose top-1 rate exceeds the others' by `gap` (None when no log-worth does)."""
    if not 0 < gap < 1:
        return None
    return math.log((1 + gap * (k - 1)) / (1 - gap))


def top1_mde(n: int, k: int, *, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """Smallest log-worth difference between two of k groups the top-1 Wald test detects in n trials
    (None when none up to 10 is: the other group's wins grow too rare)."""
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)

    def short(b: float) -> float:
        return b - z * math.sqrt(top1_variance(b, k) / n)

    grid = np.linspace(1e-3, 10.0, 1000)
    reached = np.flatnonzero([short(b) > 0 for b in grid])
    if not len(reached):
        return None
    first = int(reached[0])
    return float(optimize.brentq(short, grid[first - 1] if first else 1e-9, grid[first]))


def top1_trials(effect: float, k: int, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Trials the top-1 Wald test needs for a log-worth difference `effect` (closed form of
    `trials_needed(..., stages=1)`, which reads the same variance off the simulated information)."""
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return int(math.ceil(z**2 * top1_variance(effect, k) / effect**2))
