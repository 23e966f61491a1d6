"""Anytime-valid rates and impact ratios from counts alone, for a watch that keeps only counts between
looks (`table.watch`: popfair.case.table_watch).

`popfair.estimate.sequential.sequences.GroupRates` feeds each unit, in order, to a betting or empirical-Bernstein
confidence sequence; a watch keeps no rows between its looks, only how many applicants of each
category it has seen and how many were selected. For 0/1 outcomes the beta-binomial mixture
confidence sequence (Robbins 1970; Howard et al. 2021, the `ville.BernoulliCS` of the library
`popfair.estimate.sequential.sequences` uses) depends on nothing else: its interval after n applicants with S
selected is {p : B(a + S, b + n - S) / B(a, b) < p^S (1 - p)^(n - S) / alpha} (Beta(1, 1) mixture), and
it covers the rate at every n at once with probability >= 1 - alpha, so at every look, however the
rows were batched. `CountRates` is `GroupRates` with that interval per category (Bonferroni alpha / G
across categories): its differences, ratios and impact ratios are GroupRates' own, so the impact
ratio's interval holds whichever category truly has the highest rate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from popfair.core.errors import EstimationError
from popfair.estimate.sequential.sequences import AnytimeInterval, GroupRates

METHOD = "beta-binomial mixture"


def count_interval(selected: int, n: int, *, alpha: float) -> AnytimeInterval:
    """The anytime-valid interval of a rate after `n` applicants of whom `selected` were selected
    (`ville.BernoulliCS`, without the running intersection: the interval at n is a function of the
    counts alone)."""
    selected, n = int(selected), int(n)
    if not 0 <= selected <= n:
        raise EstimationError(f"a rate's counts must satisfy 0 <= selected <= n, got {selected} of {n}")
    if n == 0:
        return AnytimeInterval(float("nan"), 0.0, 1.0, 0, alpha, METHOD)
    low, high = _bernoulli_bounds(selected, n, alpha)
    return AnytimeInterval(selected / n, low, high, n, alpha, METHOD)


def _bernoulli_bounds(selected: int, n: int, alpha: float) -> tuple[float, float]:
    """`ville.BernoulliCS`'s interval at (selected, n), computed by the library's own steps for that
    one time (feeding it n units costs seconds per million; tests/test_table_watch.py checks that
    both agree)."""
    from ville._boundaries import bisect
    from ville.proportions import _log_likelihood, _log_marginal

    s, t = np.array([float(selected)]), np.array([float(n)])
    p_hat = s / t
    level = -np.log(alpha) - _log_marginal(s, t, 1.0, 1.0)
    lower = bisect(lambda p: level + _log_likelihood(s, t, p), np.zeros_like(t), p_hat) if selected > 0 else [0.0]
    upper = bisect(lambda p: -_log_likelihood(s, t, p) - level, p_hat, np.ones_like(t)) if selected < n else [1.0]
    return float(lower[0]), float(upper[0])


class CountRates(GroupRates):
    """Anytime-valid rates of several categories from their counts, all holding at once (alpha / G
    each), with GroupRates' differences, ratios and impact ratios."""

    def __init__(self, counts: Mapping[Any, tuple[int, int]], *, alpha: float = 0.05) -> None:
        super().__init__(list(counts), alpha=alpha, method="bernstein")  # the per-unit sequences stay unused
        self.method = METHOD
        self.counts = {g: (int(k), int(n)) for g, (k, n) in counts.items()}

    @property
    def n(self) -> int:
        return sum(n for _, n in self.counts.values())

    def update(self, y: Any, group: Any) -> None:
        raise EstimationError("CountRates is built from counts; make a new one with the new totals")

    def rate(self, g: Any) -> AnytimeInterval:
        if g not in self.counts:
            raise EstimationError(f"CountRates: no group {g!r}; declared: {', '.join(map(str, self.groups))}")
        selected, n = self.counts[g]
        r = count_interval(selected, n, alpha=self.alpha / len(self.groups))
        return AnytimeInterval(r.estimate, r.low, r.high, r.n, self.alpha, self.method)
