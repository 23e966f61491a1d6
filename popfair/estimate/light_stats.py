"""The few scipy.stats and scipy.optimize calls a power line makes, number for number, without importing either.

Importing scipy.stats (which imports scipy.optimize) costs about 1.3 CPU seconds beside numpy and
pandas, a third of a paired panel's dry run; scipy.special, which they compute with, about 0.1 s.
Each function here calls the same scipy.special routine as its scipy.stats counterpart, through
the same handling of the support's edges (`rv_discrete.pmf`, `cdf`, `sf`, `ppf` for valid shape
parameters), and `brentq` is scipy's C `brentq` (scipy/optimize/Zeros/brentq.c) step for step, so
each gives the very same floats (tests/test_light_stats.py compares them with scipy's). Arguments
outside a distribution's parameter space are passed to scipy.stats itself."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import _ufuncs as scu  # the Boost binomial routines scipy.stats.binom calls
from scipy.special import gammaincinv, ndtri


def _binom_ok(n: Any, p: float) -> bool:
    """binom's `_argcheck` (n a non-negative integer, 0 <= p <= 1) holds for every element."""
    n = np.asarray(n)
    return bool(np.all((n >= 0) & (np.floor(n) == n)) and 0 <= p <= 1)


def norm_ppf(q: Any) -> Any:
    """`scipy.stats.norm.ppf(q)` for 0 <= q <= 1."""
    return ndtri(q) * 1 + 0  # rv_continuous.ppf: _ppf * scale + loc


def chi2_ppf(q: float, df: int) -> float:
    """`scipy.stats.chi2.ppf(q, df)` for 0 < q < 1 and df > 0."""
    if not (0 < q < 1 and df > 0):
        from scipy import stats

        return float(stats.chi2.ppf(q, df))
    return float(2 * gammaincinv(np.asarray(df) / 2, q) * 1 + 0)


def binom_pmf(k: np.ndarray, n: Any, p: float) -> np.ndarray:
    """`scipy.stats.binom.pmf(k, n, p)` of integer counts k."""
    if not _binom_ok(n, p):
        from scipy import stats

        return np.asarray(stats.binom.pmf(k, n, p))
    k, n = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    inside = (k >= 0) & (k <= n) & (np.floor(k) == k)
    out = np.zeros(k.shape, "d")
    if np.any(inside):
        out[inside] = np.clip(scu._binom_pmf(k[inside], n[inside], p), 0, 1)
    return out


def binom_cdf(k: np.ndarray, n: Any, p: float) -> np.ndarray:
    """`scipy.stats.binom.cdf(k, n, p)` of finite k."""
    if not _binom_ok(n, p):
        from scipy import stats

        return np.asarray(stats.binom.cdf(k, n, p))
    k, n = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    out = np.where(k >= n, 1.0, 0.0)
    inside = (k >= 0) & (k < n) & np.isfinite(k)
    if np.any(inside):
        out[inside] = np.clip(scu._binom_cdf(np.floor(k[inside]), n[inside], p), 0, 1)
    return out


def binom_sf(k: np.ndarray, n: Any, p: float) -> np.ndarray:
    """`scipy.stats.binom.sf(k, n, p)` of finite k."""
    if not _binom_ok(n, p):
        from scipy import stats

        return np.asarray(stats.binom.sf(k, n, p))
    k, n = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    out = np.where(k < 0, 1.0, 0.0)
    inside = (k >= 0) & (k < n) & np.isfinite(k)
    if np.any(inside):
        out[inside] = np.clip(scu._binom_sf(np.floor(k[inside]), n[inside], p), 0, 1)
    return out


def binom_ppf(q: Any, n: int, p: float) -> np.ndarray:
    """`scipy.stats.binom.ppf(q, n, p)` for 0 < q < 1."""
    q = np.asarray(q, dtype=float)
    if not (_binom_ok(n, p) and np.all((q > 0) & (q < 1))):
        from scipy import stats

        return np.asarray(stats.binom.ppf(q, n, p))
    return np.asarray(scu._binom_ppf(q, np.asarray(n), p) + np.asarray(0))


_RTOL = 4 * np.finfo(float).eps  # scipy.optimize.brentq's default rtol


def brentq(
    f: Callable[[float], float], a: float, b: float, xtol: float = 2e-12, rtol: float = _RTOL, maxiter: int = 100
) -> float:
    """`scipy.optimize.brentq(f, a, b, xtol=xtol)`: the root of f in [a, b], f(a) and f(b) of opposite signs."""
    if xtol <= 0 or rtol < _RTOL:
        raise ValueError("brentq: xtol must be positive and rtol at least 4 eps, as scipy requires")

    def call(x: float) -> float:
        value = float(f(x))
        if math.isnan(value):
            raise ValueError(f"The function value at x={x:f} is NaN; solver cannot continue.")
        return value

    xpre, xcur = float(a), float(b)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = call(xpre), call(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1, fpre) == math.copysign(1, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1, fpre) != math.copysign(1, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # good short step
                spre, scur = scur, stry
            else:  # bisect
                spre = scur = sbis
        else:  # bisect
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = call(xcur)
    raise RuntimeError(f"Failed to converge after {maxiter} iterations, value is {xcur}.")
