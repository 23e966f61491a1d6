"""Trials a ranking audit needs to detect a group effect, from the winner alone or the whole ranking.

The variance of the estimated log-worth difference between two groups is the inverse expected
information of the exploded logit (group and position effects, Latin-square orders), computed at
the alternative (one group `effect` above the others, no position effect) on simulated Plackett-Luce
rankings: stages = 1 is the top-1 choice model, None every stage of the ranking. Trials needed =
(z_{1-alpha/2} + z_power)^2 * variance per trial / effect^2."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import stats

from popfair.design.ranking.estimate import ExplodedLogit, RankTrials, design_matrix
from popfair.design.ranking.trials import williams_square

SIMULATED_TRIALS = 20_000


@lru_cache(maxsize=64)
def trials_needed(effect: float, k: int, *, alpha: float = 0.05, power: float = 0.8, stages: int | None = None) -> int:
    """Trials to detect a log-worth difference `effect` between two of k groups (two-sided Wald test)."""
    rng = np.random.default_rng(0)
    orders = williams_square(k)[np.arange(SIMULATED_TRIALS) % len(williams_square(k))]
    position = np.empty_like(orders)
    np.put_along_axis(position, orders, np.arange(1, k + 1)[None, :], axis=1)  # position of each group
    worth = np.zeros(k)
    worth[0] = effect  # group 0 vs the reference group 1
    utility = worth[None, :] + rng.gumbel(size=(SIMULATED_TRIALS, k))
    rank = np.empty((SIMULATED_TRIALS, k))
    np.put_along_axis(rank, np.argsort(-utility, axis=1), np.arange(1, k + 1, dtype=float)[None, :], axis=1)
    groups = [f"g{i}" for i in range(k)]
    trials = RankTrials(groups, rank, position, np.arange(SIMULATED_TRIALS))
    x, names = design_matrix(trials, reference="g1", reference_position=k)
    likelihood = ExplodedLogit(x, rank, stages)
    params = np.zeros(len(names))
    params[names.index("group[g0]")] = effect
    information = -likelihood.hessian(params) / SIMULATED_TRIALS
    variance = np.linalg.inv(information)[names.index("group[g0]"), names.index("group[g0]")]
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return int(np.ceil(z**2 * variance / effect**2))
