"""Building blocks of the PopResume structural causal model: keyed exogenous uniforms, smoothed
discrete conditionals drawn by inverse CDF (forward) or inverted to their noise (abduction), and the
truncated normal that experience's conditional is discretised from.

Every endogenous variable V = F^-1(U | parents) with U ~ Uniform(0, 1) per applicant. Given a factual
value v, the noise consistent with it is uniform on [F(v-), F(v)) ("abduction"); redrawing with that
noise under changed parents is the counterfactual, and under unchanged parents returns v exactly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import log_ndtr, ndtr

from popfair.core.errors import DataError

# Profiles tag of a population drawn i.i.d. (keyed by unit id): its rows are in draw order, so its
# first n rows are a sample of n.
DRAW_TAG = "population.draw"
IID_DRAW = "keyed resample, in draw order"
_HASH_KEY = "popfair-scm-u-01"  # pandas' hash key must be 16 bytes
# Abducted noise stays this far inside its interval, so float rounding can never move it across
# an interval boundary (intervals are at least ~1e-7 wide; the shift of the posterior is negligible).
_EDGE = 1e-6


def keyed_uniforms(ids: pd.Series | np.ndarray, seed: int, variable: str) -> np.ndarray:
    """One Uniform(0,1) per id, a pure function of (id, seed, variable).

    Keyed by applicant id rather than row position, so a subset or reordering of the table gets
    the same noise for the same applicant (common random numbers across counterfactual worlds)."""
    keys = pd.Series(np.asarray(ids, dtype=object)).astype(str) + f"|{variable}|{int(seed)}"
    hashed = pd.util.hash_array(keys.to_numpy(dtype=object), hash_key=_HASH_KEY)
    return ((hashed >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def keyed_streams(ids: pd.Series | np.ndarray, seed: int, stream: str, k: int) -> np.ndarray:
    """(k, len(ids)) uniforms: k independent keyed streams per id (`keyed_uniforms` of stream0..k-1).

    A pure function of (id, seed, stream), so a sample of n units is the first n of any larger
    sample with the same seed (nested samples: growing an audit re-draws nothing it already has)."""
    return np.stack([keyed_uniforms(ids, seed, f"{stream}{j}") for j in range(k)]) if k else np.empty((0, len(ids)))


def keyed_choice(u: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Index drawn with probability proportional to `weights` for each uniform in `u` (inverse CDF)."""
    cdf = np.cumsum(np.asarray(weights, dtype=float))
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def interior(v: np.ndarray) -> np.ndarray:
    return _EDGE + (1 - 2 * _EDGE) * v


def cdf_rows(probs: np.ndarray) -> np.ndarray:
    """Row-wise CDF with the last column exactly 1."""
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    cdf[:, -1] = 1.0
    return cdf


def draw_from_cdf(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index of the first category whose CDF exceeds u, per row."""
    return np.minimum((cdf <= u[:, None]).sum(axis=1), cdf.shape[1] - 1)


def abduct_from_cdf(cdf: np.ndarray, index: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Noise u uniform on [F(index-1), F(index)) of each row (v: Uniform(0,1) per row)."""
    rows = np.arange(len(index))
    upper = cdf[rows, index]
    lower = np.where(index > 0, cdf[rows, np.maximum(index - 1, 0)], 0.0)
    if np.any(upper <= lower):
        raise DataError("a factual value has zero probability under its fitted conditional")
    return lower + interior(v) * (upper - lower)


def codes(values: pd.Series | np.ndarray, levels: Sequence[str], name: str) -> np.ndarray:
    """Integer codes of values in levels; a DataError naming unknown values."""
    result = pd.Categorical(np.asarray(values, dtype=object), categories=list(levels)).codes.astype(np.int64)
    if (result < 0).any():
        bad = sorted(set(pd.Series(np.asarray(values, dtype=object))[result < 0].astype(str)))[:5]
        raise DataError(f"column {name!r} has values {bad} outside {list(levels)}")
    return result


@dataclass(frozen=True)
class DiscreteConditional:
    """P(child | parents) on a full grid of parent levels, smoothed by hierarchical back-off.

    Each cell's distribution is (weighted counts + alpha * the next coarser cell's distribution) /
    (cell weight + alpha), from the finest parent set down to the unconditional one, so sparse cells
    borrow strength and every cell (including ones no record occupies, needed for counterfactual
    parents) has a proper distribution. Weights are in record units (survey weights rescaled to sum
    to the record count), so alpha is a number of pseudo-records."""

    child: str
    levels: tuple[str, ...]
    parents: tuple[str, ...]
    parent_levels: tuple[tuple[str, ...], ...]
    cdf: np.ndarray  # (product of parent level counts, len(levels))

    @classmethod
    def fit(
        cls,
        data: pd.DataFrame,
        child: str,
        levels: Sequence[str],
        backoff: Sequence[Sequence[str]],
        parent_levels: dict[str, Sequence[str]],
        weight: np.ndarray,
        alpha: float = 10.0,
    ) -> DiscreteConditional:
        """backoff: parent sets from finest (the conditioning set) to coarsest, each a subset of
        the one before; the empty set is appended."""
        parents = tuple(backoff[0])
        sizes = [len(parent_levels[p]) for p in parents]
        n_cells, n_levels = int(np.prod(sizes)), len(levels)
        child_codes = codes(data[child], levels, child)
        weight = np.asarray(weight, dtype=float)
        weight = weight * len(weight) / weight.sum()
        grid = np.array(np.unravel_index(np.arange(n_cells), sizes)).T if parents else np.zeros((1, 0), int)
        row_codes = {p: codes(data[p], parent_levels[p], p) for p in parents}
        probs = np.bincount(child_codes, weights=weight, minlength=n_levels)[None, :] / weight.sum()
        for subset in reversed([tuple(s) for s in backoff] + [()]):
            if not subset:
                continue
            sub_sizes = [len(parent_levels[p]) for p in subset]
            cell_of_row = np.ravel_multi_index([row_codes[p] for p in subset], sub_sizes)
            counts = np.bincount(
                cell_of_row * n_levels + child_codes, weights=weight, minlength=int(np.prod(sub_sizes)) * n_levels
            ).reshape(-1, n_levels)
            cell_of_grid = np.ravel_multi_index([grid[:, parents.index(p)] for p in subset], sub_sizes)
            prior = probs if probs.shape[0] == n_cells else np.broadcast_to(probs, (n_cells, n_levels))
            local = counts[cell_of_grid]
            probs = (local + alpha * prior) / (local.sum(axis=1, keepdims=True) + alpha)
        probs = np.broadcast_to(probs, (n_cells, n_levels)).copy()
        return cls(
            child=child,
            levels=tuple(levels),
            parents=parents,
            parent_levels=tuple(tuple(parent_levels[p]) for p in parents),
            cdf=cdf_rows(probs),
        )

    def _cells(self, frame: pd.DataFrame) -> np.ndarray:
        if not self.parents:
            return np.zeros(len(frame), dtype=np.int64)
        return np.ravel_multi_index(
            [codes(frame[p], lv, p) for p, lv in zip(self.parents, self.parent_levels)],
            [len(lv) for lv in self.parent_levels],
        )

    def probabilities(self, frame: pd.DataFrame) -> np.ndarray:
        """P(child = level | parents of each row), shape (rows, levels)."""
        cdf = self.cdf[self._cells(frame)]
        return np.diff(cdf, axis=1, prepend=0.0)

    def draw(self, frame: pd.DataFrame, u: np.ndarray) -> np.ndarray:
        """Child values by inverse CDF at the parents in frame."""
        return np.asarray(self.levels, dtype=object)[draw_from_cdf(self.cdf[self._cells(frame)], u)]

    def abduct(self, frame: pd.DataFrame, v: np.ndarray) -> np.ndarray:
        """Noise consistent with frame[child] given frame's parents."""
        return abduct_from_cdf(self.cdf[self._cells(frame)], codes(frame[self.child], self.levels, self.child), v)


def normal_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """P(lo < N(0,1) < hi), on the side of the mean where it is numerically accurate."""
    return np.where(lo > 0, ndtr(-lo) - ndtr(-hi), ndtr(hi) - ndtr(lo))


def _truncated_mean(loc: np.ndarray, sd: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """E[T] for T ~ N(loc, sd) truncated to [0, upper], stable far in the tails (log-space)."""
    a, b = (0 - loc) / sd, (upper - loc) / sd
    flip = a > 0  # mirror so the interval is never entirely in the far upper tail
    a, b = np.where(flip, -b, a), np.where(flip, -a, b)
    log_mass = log_ndtr(b) + np.log1p(-np.exp(np.minimum(log_ndtr(a) - log_ndtr(b), -1e-300)))
    log_phi = lambda z: -0.5 * z**2 - 0.5 * np.log(2 * np.pi)
    shift = np.exp(log_phi(a) - log_mass) - np.exp(log_phi(b) - log_mass)
    return loc + sd * np.where(flip, -shift, shift)


def truncated_location(target_mean: np.ndarray, sd: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """loc such that TruncNormal(loc, sd, [0, upper]) has mean target_mean (bisection; the truncated
    mean rises with loc). Without it the truncation at age - 18 pulls experience below the PSID means."""
    target = np.clip(target_mean, 0.02 * upper, 0.98 * upper)
    low, high = -upper - 20 * sd, 2 * upper + 20 * sd
    for _ in range(50):
        mid = 0.5 * (low + high)
        above = _truncated_mean(mid, sd, np.maximum(upper, 1e-9)) > target
        low, high = np.where(above, low, mid), np.where(above, mid, high)
    return np.where(upper > 0, 0.5 * (low + high), 0.0)
