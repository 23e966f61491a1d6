"""popfair.estimate.light_stats gives scipy.stats' and scipy.optimize's very floats, and the power lines with it are unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from popfair.estimate import light_stats as ls
from popfair.estimate import power as pw


def _same(a: object, b: object) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_quantiles_equal_scipy_stats() -> None:
    for q in (1e-12, 0.001, 0.025, 0.05, 0.2, 0.5, 0.8, 0.9, 0.975, 0.995, 1 - 1e-12):
        assert ls.norm_ppf(q) == stats.norm.ppf(q)
        assert type(ls.norm_ppf(q)) is type(stats.norm.ppf(q))
        for df in (1, 2, 5):
            assert ls.chi2_ppf(q, df) == float(stats.chi2.ppf(q, df))


@pytest.mark.parametrize(
    "n,p", [(1, 0.5), (7, 0.3), (24_024, 0.5), (48_048, 0.21), (1000, 0.999), (50, 1.0), (30, 0.0)]
)
def test_binomial_functions_equal_scipy_stats(n: int, p: float) -> None:
    k = np.arange(-3, n + 4)
    _same(ls.binom_pmf(k, n, p), stats.binom.pmf(k, n, p))
    x = np.concatenate([k - 0.5, k.astype(float)])
    _same(ls.binom_cdf(x, n, p), stats.binom.cdf(x, n, p))
    _same(ls.binom_sf(x, n, p), stats.binom.sf(x, n, p))
    q = [1e-12, 0.01, 0.3, 0.5, 0.77, 1 - 1e-12]
    _same(ls.binom_ppf(q, n, p), stats.binom.ppf(q, n, p))
    m = np.arange(1, n + 1)  # a shape parameter per element, as McNemar's sums use it
    _same(ls.binom_sf(np.floor(m / 2 + 1.3), m, p), stats.binom.sf(np.floor(m / 2 + 1.3), m, p))
    _same(ls.binom_cdf(np.ceil(m / 2 - 1.3) - 1, m, p), stats.binom.cdf(np.ceil(m / 2 - 1.3) - 1, m, p))


def test_outside_the_parameter_space_scipy_answers() -> None:
    _same(ls.binom_pmf(np.arange(3), 2, 1.5), stats.binom.pmf(np.arange(3), 2, 1.5))  # nan, as scipy
    _same(ls.binom_ppf([0.0, 1.0], 10, 0.5), stats.binom.ppf([0.0, 1.0], 10, 0.5))


def test_brentq_equals_scipy_step_for_step() -> None:
    functions = [
        (lambda x: x**3 + 2 * x**2 - 5, -5.0, 5.0),
        (lambda x: math.cos(x) - x, 0.0, 1.0),
        (lambda x: math.exp(x) - 1e3, 0.0, 20.0),
        (lambda x: (x - 0.3) ** 5, -1.0, 2.0),
        (lambda x: math.tanh(50 * (x - 0.123)), -3.0, 1.0),
        (lambda x: x - 1.0, 1.0, 3.0),  # a root at an end
    ]
    for f, a, b in functions:
        for xtol in (2e-12, 1e-7, 1e-3):
            assert ls.brentq(f, a, b, xtol=xtol) == optimize.brentq(f, a, b, xtol=xtol)
    with pytest.raises(ValueError):
        ls.brentq(lambda x: x * x + 1, -1.0, 1.0)


def _mcnemar_power_scipy(n_pairs: int, psi: float, delta: float, alpha: float) -> float:
    """mcnemar_power as it was written with scipy.stats."""
    if n_pairs <= 0 or psi <= 0:
        return 0.0
    delta = min(abs(delta), psi)
    crit = float(stats.chi2.ppf(1 - alpha, 1))
    counts = stats.binom(n_pairs, psi)
    low, high = (int(v) for v in counts.ppf([1e-12, 1 - 1e-12]))
    m = np.arange(max(low, 1), max(high, 1) + 1)
    weight = counts.pmf(m)
    bound = (1 + np.sqrt(m * crit)) / 2
    favoured = (psi + delta) / (2 * psi)
    upper = stats.binom.sf(np.floor(m / 2 + bound), m, favoured)
    lower = stats.binom.cdf(np.ceil(m / 2 - bound) - 1, m, favoured)
    return float(np.sum(weight * (upper + lower)))


@pytest.mark.parametrize(
    "n_pairs,psi,alpha,power",
    [(24_024, 0.5, 0.05, 0.8), (48_048, 0.5, 0.05, 0.8), (300, 0.2, 0.01, 0.9), (40, 0.6, 0.05, 0.8)],
)
def test_mcnemar_plan_unchanged(n_pairs: int, psi: float, alpha: float, power: float) -> None:
    for delta in (0.0, 0.01, psi / 3, psi):
        assert pw.mcnemar_power(n_pairs, psi, delta, alpha) == _mcnemar_power_scipy(n_pairs, psi, delta, alpha)
    expected = None
    if _mcnemar_power_scipy(n_pairs, psi, psi, alpha) >= power:
        expected = float(
            optimize.brentq(lambda d: _mcnemar_power_scipy(n_pairs, psi, d, alpha) - power, 1e-9, psi, xtol=1e-7)
        )
    assert pw.mcnemar_mde(n_pairs, psi, alpha, power) == expected
    za, zb = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    assert pw._z(alpha, power) == float(za + zb)
