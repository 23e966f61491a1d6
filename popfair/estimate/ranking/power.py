"""Trials a ranking audit needs to detect a group effect, from the winner alone or the whole ranking.

The variance of the estimated log-worth difference between two groups is the inverse expected
information of the exploded logit (group and position effects, Latin-square orders), computed at
the alternative (one group `effect` above the others, no position effect) on simulated Plackett-Luce
rankings: stages = 1 is the top-1 choice model, None every stage of the ranking. Trials needed =
(z_{1-alpha/2} + z_power)^2 * variance per trial / effect^2."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import stats

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
