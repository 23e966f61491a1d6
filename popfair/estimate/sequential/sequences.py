"""Anytime-valid confidence sequences (CIs valid at every look) for rates, gaps, ratios and impact ratios.

A confidence sequence (CS) covers the true value at *every* sample size at once with probability
>= 1 - alpha, so an audit may look after each batch and stop whenever it likes (Howard et al. 2021,
Waudby-Smith and Ramdas 2024). A fixed-n CI looked at ten times covers far less than 95% of the time.

The library: ``ville`` (BSD-3, pure Python on numpy/scipy, Python >= 3.10). It implements the
hedged-capital *betting* CS for a bounded mean (Waudby-Smith and Ramdas 2024, JRSS-B, Theorem 3),
nonasymptotic and variance-adaptive, and the closed-form predictable plug-in empirical-Bernstein CS
(their Theorem 2). Of the other libraries that implement these: ``confseq`` (the same authors'
reference code, 0.0.11, 2023) ships no wheel and its C++ build needs Boost headers, so a plain
``pip install`` fails on a clean machine; ``expectation`` (0.6.1) requires Python >= 3.12 and popfair
supports 3.10; ``savvi`` (0.3.1, 2024) requires Python >= 3.11 and cvxpy, and covers multinomial
tests and Gaussian linear models, not bounded means. ``ville`` is young (0.1.0), so popfair pins
its minor version, wraps it here in one module (a switch is local) and checks every interval below
against simulation (tests/test_sequential.py, benchmarks/bench_sequential.py). docs/concepts/
sequential.md says the same for users.

Every estimand here is the mean of i.i.d. bounded units, or follows from several such means:

- a selection / callback / top-1 rate: units are 0/1 decisions, bounds [0, 1];
- a paired gap: units are within-pair differences (or a posting's mean of them) in [-1, 1];
- a difference, ratio or impact ratio of group rates: one CS per group at alpha / G (Bonferroni), so
  all G hold at once with probability >= 1 - alpha, and the derived interval is the image of the
  box of group intervals: [L_a - U_b, U_a - L_b], [L_a / U_b, U_a / L_b], and for the impact ratio of
  group g against the highest-rate group, [L_g / max_h U_h, min(1, U_g / max_h L_h)] - which holds
  whichever group truly has the highest rate, so it accounts for the reference choice.

The API (stateful objects for a stream fed batch by batch; functions for a whole stream and its looks):

``MeanSequence(bounds=(0, 1), alpha=0.05, method="betting")``
    ``.update(x) -> AnytimeInterval`` adds a batch of units (in sampling order); ``.interval``, ``.n``.
``GroupRates(groups, alpha=0.05, method="betting", bounds=(0, 1))``
    ``.update(y, group)``; ``.rate(g)``, ``.difference(a, b)``, ``.ratio(a, b)``,
    ``.impact_ratios() -> {group: AnytimeInterval}``, ``.lowest_impact_ratio() -> (group, interval)``;
    ``.n``. All intervals hold simultaneously.
``rate_sequence(y, looks)``, ``paired_gap_sequence(diff, looks)``,
``rate_difference_sequence(y, group, a, b, looks)``, ``rate_ratio_sequence(y, group, a, b, looks)``,
``impact_ratio_sequence(y, group, looks, groups=None)``
    One ``AnytimeInterval`` (or dict of them) per look; ``looks`` are cumulative unit counts, so look
    k uses the first ``looks[k]`` units. ``looks_for(n, n_looks=..., batch=...)`` spaces them.
``fixed_mean_interval(x, alpha)``
    The fixed-n t interval of the same mean, to print beside the anytime-valid one (labelled).

``AnytimeInterval`` has ``estimate, low, high, n, alpha, method``, ``excludes(value)`` (the CS lies
wholly above or below value), ``within(margin, center=0)`` (equivalence: the CS lies inside
center +- margin), ``scaled(factor)`` (e.g. 100 for percentage points) and ``as_dict()``.

Units must arrive in an order fixed before their outcomes are seen (popfair's nested samples give
every unit its place), and be i.i.d. draws; a unit's value is only its own outcome.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from popfair.core.errors import ConfigError, EstimationError

METHODS = ("betting", "bernstein")
DEFAULT_METHOD = "betting"
GRID = 2_000  # candidate means on the betting CS's grid: 0.05% of the range; coarser is conservative


@dataclass(frozen=True)
class AnytimeInterval:
    """One look of a confidence sequence: valid at this and every other look at once."""

    estimate: float
    low: float
    high: float
    n: int
    alpha: float
    method: str

    def excludes(self, value: float = 0.0) -> bool:
        """True when the whole interval lies above or below `value` (e.g. a gap of 0)."""
        return bool(self.low > value or self.high < value)

    def within(self, margin: float, center: float = 0.0) -> bool:
        """True when the whole interval lies inside center +- margin (equivalence)."""
        return bool(center - margin <= self.low and self.high <= center + margin)

    def scaled(self, factor: float) -> AnytimeInterval:
        """The same interval in other units (factor 100: proportions to percentage points)."""
        return AnytimeInterval(
            self.estimate * factor, self.low * factor, self.high * factor, self.n, self.alpha, self.method
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 0.5):
        raise ConfigError(f"sequential alpha must be a number in (0, 0.5), got {alpha!r}")
    return float(alpha)


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise ConfigError(f"unknown confidence-sequence method {method!r}; choose one of {', '.join(METHODS)}")
    return method


class MeanSequence:
    """Anytime-valid CS for the mean of i.i.d. units known to lie in `bounds`, fed batch by batch."""

    def __init__(
        self,
        bounds: tuple[float, float] = (0.0, 1.0),
        *,
        alpha: float = 0.05,
        method: str = DEFAULT_METHOD,
        grid: int = GRID,
    ) -> None:
        import ville

        lo, hi = (float(b) for b in bounds)
        if not lo < hi:
            raise ConfigError(f"confidence-sequence bounds must satisfy low < high, got {bounds!r}")
        self.bounds = (lo, hi)
        self.alpha = _check_alpha(alpha)
        self.method = _check_method(method)
        if self.method == "betting":
            self._cs = ville.BettingCS(bounds=self.bounds, alpha=self.alpha, grid=int(grid))
        else:
            self._cs = ville.EmpiricalBernsteinCS(bounds=self.bounds, alpha=self.alpha)

    @property
    def n(self) -> int:
        return int(self._cs.n_)

    @property
    def interval(self) -> AnytimeInterval:
        """The current interval; before any unit it is the whole range (trivially valid)."""
        if self.n == 0:
            lo, hi = self.bounds
            return AnytimeInterval(float("nan"), lo, hi, 0, self.alpha, self.method)
        lo, hi = self._cs.interval()
        return AnytimeInterval(float(self._cs.estimate_[-1]), float(lo), float(hi), self.n, self.alpha, self.method)

    def update(self, x: Iterable[float]) -> AnytimeInterval:
        """Add a batch of units in their sampling order; returns the interval after it."""
        values = np.asarray(list(x) if not isinstance(x, np.ndarray) else x, dtype=float).ravel()
        if values.size:
            lo, hi = self.bounds
            if not np.all(np.isfinite(values)):
                raise EstimationError("confidence sequence: a unit's value is missing or not finite")
            outside = (values < lo) | (values > hi)
            if outside.any():
                bad = values[outside][0]
                raise EstimationError(
                    f"confidence sequence: a unit's value {bad:g} lies outside its bounds [{lo:g}, {hi:g}]"
                )
            self._cs.update(values)
        return self.interval


class GroupRates:
    """Anytime-valid rates of several groups held simultaneously (alpha / G each), with the
    differences, ratios and impact ratios that follow from them. `bounds`: the range of a unit's
    value (default 0/1 outcomes; (0, 100) for scores, whose "rate" is then a mean score)."""

    def __init__(
        self,
        groups: Sequence[Any],
        *,
        alpha: float = 0.05,
        method: str = DEFAULT_METHOD,
        grid: int = GRID,
        bounds: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        names = list(dict.fromkeys(groups))
        if len(names) < 1:
            raise ConfigError("GroupRates needs at least one group")
        self.alpha = _check_alpha(alpha)
        self.method = _check_method(method)
        self.groups = names
        if bounds[0] < 0:
            raise ConfigError(f"GroupRates: group means must be nonnegative (ratios), got bounds {bounds!r}")
        self._seq = {g: MeanSequence(bounds, alpha=self.alpha / len(names), method=method, grid=grid) for g in names}

    @property
    def n(self) -> int:
        return sum(s.n for s in self._seq.values())

    def update(self, y: Iterable[float], group: Iterable[Any]) -> None:
        """Add a batch of outcomes (0/1, or values in `bounds`) and their groups, in sampling order."""
        y_arr = np.asarray(list(y) if not isinstance(y, np.ndarray) else y, dtype=float).ravel()
        g_arr = np.asarray(list(group) if not isinstance(group, np.ndarray) else group, dtype=object).ravel()
        if y_arr.shape != g_arr.shape:
            raise EstimationError(f"GroupRates.update: {y_arr.size} outcomes but {g_arr.size} group labels")
        unknown = set(g_arr.tolist()) - set(self.groups)
        if unknown:
            raise EstimationError(
                f"GroupRates.update: group {sorted(map(str, unknown))[0]!r} is not one of the declared groups "
                f"{', '.join(map(str, self.groups))}"
            )
        for g, seq in self._seq.items():
            seq.update(y_arr[g_arr == g])

    def rate(self, g: Any) -> AnytimeInterval:
        if g not in self._seq:
            raise EstimationError(f"GroupRates: no group {g!r}; declared: {', '.join(map(str, self.groups))}")
        r = self._seq[g].interval
        return AnytimeInterval(r.estimate, r.low, r.high, r.n, self.alpha, self.method)

    def difference(self, a: Any, b: Any) -> AnytimeInterval:
        """rate(a) - rate(b)."""
        ra, rb = self.rate(a), self.rate(b)
        return AnytimeInterval(
            ra.estimate - rb.estimate, ra.low - rb.high, ra.high - rb.low, ra.n + rb.n, self.alpha, self.method
        )

    def ratio(self, a: Any, b: Any) -> AnytimeInterval:
        """rate(a) / rate(b); the upper end is inf while rate(b)'s lower end is 0."""
        ra, rb = self.rate(a), self.rate(b)
        return AnytimeInterval(
            _div(ra.estimate, rb.estimate), _div(ra.low, rb.high, low=True), _div(ra.high, rb.low),
            ra.n + rb.n, self.alpha, self.method,
        )  # fmt: skip

    def impact_ratios(self) -> dict[Any, AnytimeInterval]:
        """Each group's rate over the highest group rate (LL144), valid whichever group is highest."""
        rates = {g: self.rate(g) for g in self.groups}
        top_est = max((r.estimate for r in rates.values() if not math.isnan(r.estimate)), default=float("nan"))
        top_high = max(r.high for r in rates.values())
        top_low = max(r.low for r in rates.values())
        out = {}
        for g, r in rates.items():
            high = min(1.0, _div(r.high, top_low))
            out[g] = AnytimeInterval(
                _div(r.estimate, top_est), _div(r.low, top_high, low=True), high, self.n, self.alpha, self.method
            )
        return out

    def lowest_impact_ratio(self) -> tuple[Any, AnytimeInterval]:
        """The lowest impact ratio (min over groups) and the group that has it now: its interval is
        [min_g L_g, min_g U_g], valid because all group intervals hold at once."""
        irs = self.impact_ratios()
        low_group = min(irs, key=lambda g: (math.isnan(irs[g].estimate), irs[g].estimate))
        iv = AnytimeInterval(
            min((r.estimate for r in irs.values() if not math.isnan(r.estimate)), default=float("nan")),
            min(r.low for r in irs.values()),
            min(r.high for r in irs.values()),
            self.n,
            self.alpha,
            self.method,
        )
        return low_group, iv


def _div(a: float, b: float, *, low: bool = False) -> float:
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    if b <= 0:
        return 0.0 if low or a <= 0 else float("inf")
    return a / b


def looks_for(n: int, *, n_looks: int | None = None, batch: int | None = None) -> list[int]:
    """Cumulative unit counts of the looks at a stream of n units: n_looks evenly spaced, or every
    `batch` units; the last look is always n."""
    if n < 1:
        raise ConfigError(f"a sequential audit needs at least one unit, got n={n}")
    if (n_looks is None) == (batch is None):
        raise ConfigError("give exactly one of n_looks (how many looks) or batch (units between looks)")
    if n_looks is not None:
        if n_looks < 1:
            raise ConfigError(f"n_looks must be >= 1, got {n_looks}")
        k = min(int(n_looks), n)
        return sorted({int(math.ceil(n * (i + 1) / k)) for i in range(k)})
    assert batch is not None
    if batch < 1:
        raise ConfigError(f"batch must be >= 1 unit, got {batch}")
    return [*range(int(batch), n, int(batch)), n]


def _check_looks(looks: Sequence[int], n: int) -> list[int]:
    out = [int(k) for k in looks]
    if not out or any(b <= a for a, b in zip(out, out[1:])) or out[0] < 1 or out[-1] > n:
        raise ConfigError(
            f"looks must be increasing unit counts between 1 and {n} (the stream's length), got {list(looks)}"
        )
    return out


def _mean_looks(
    x: Sequence[float] | np.ndarray, looks: Sequence[int], bounds: tuple[float, float], alpha: float, method: str
) -> list[AnytimeInterval]:
    values = np.asarray(x, dtype=float).ravel()
    seq = MeanSequence(bounds, alpha=alpha, method=method)
    out, start = [], 0
    for k in _check_looks(looks, values.size):
        out.append(seq.update(values[start:k]))
        start = k
    return out


def rate_sequence(
    y: Sequence[float] | np.ndarray, looks: Sequence[int], *, alpha: float = 0.05, method: str = DEFAULT_METHOD
) -> list[AnytimeInterval]:
    """Anytime-valid CS of a 0/1 rate at each look (look k uses the first looks[k] units)."""
    return _mean_looks(y, looks, (0.0, 1.0), alpha, method)


def paired_gap_sequence(
    diff: Sequence[float] | np.ndarray, looks: Sequence[int], *, alpha: float = 0.05, method: str = DEFAULT_METHOD
) -> list[AnytimeInterval]:
    """Anytime-valid CS of a paired gap: units are within-pair differences y_x1 - y_x0 in [-1, 1]
    (or each posting's mean of them, when pairs are clustered in postings)."""
    return _mean_looks(diff, looks, (-1.0, 1.0), alpha, method)


def _group_looks(
    y: Sequence[float] | np.ndarray,
    group: Sequence[Any] | np.ndarray,
    looks: Sequence[int],
    groups: Sequence[Any] | None,
    alpha: float,
    method: str,
) -> Iterable[GroupRates]:
    y_arr = np.asarray(y, dtype=float).ravel()
    g_arr = np.asarray(group, dtype=object).ravel()
    if y_arr.shape != g_arr.shape:
        raise EstimationError(f"{y_arr.size} outcomes but {g_arr.size} group labels")
    names = list(groups) if groups is not None else sorted(set(g_arr.tolist()), key=str)
    rates = GroupRates(names, alpha=alpha, method=method)
    start = 0
    for k in _check_looks(looks, y_arr.size):
        rates.update(y_arr[start:k], g_arr[start:k])
        start = k
        yield rates


def rate_difference_sequence(
    y: Sequence[float] | np.ndarray,
    group: Sequence[Any] | np.ndarray,
    a: Any,
    b: Any,
    looks: Sequence[int],
    *,
    alpha: float = 0.05,
    method: str = DEFAULT_METHOD,
) -> list[AnytimeInterval]:
    """Anytime-valid CS of rate(a) - rate(b) at each look (units are 0/1 outcomes with a group)."""
    return [r.difference(a, b) for r in _group_looks(y, group, looks, [a, b], alpha, method)]


def rate_ratio_sequence(
    y: Sequence[float] | np.ndarray,
    group: Sequence[Any] | np.ndarray,
    a: Any,
    b: Any,
    looks: Sequence[int],
    *,
    alpha: float = 0.05,
    method: str = DEFAULT_METHOD,
) -> list[AnytimeInterval]:
    """Anytime-valid CS of rate(a) / rate(b) at each look."""
    return [r.ratio(a, b) for r in _group_looks(y, group, looks, [a, b], alpha, method)]


def impact_ratio_sequence(
    y: Sequence[float] | np.ndarray,
    group: Sequence[Any] | np.ndarray,
    looks: Sequence[int],
    *,
    groups: Sequence[Any] | None = None,
    alpha: float = 0.05,
    method: str = DEFAULT_METHOD,
) -> list[Mapping[Any, AnytimeInterval]]:
    """Anytime-valid CSs of every group's impact ratio (rate / highest rate) at each look, all
    groups and looks at once with probability >= 1 - alpha."""
    return [r.impact_ratios() for r in _group_looks(y, group, looks, groups, alpha, method)]


def fixed_mean_interval(x: Sequence[float] | np.ndarray, *, alpha: float = 0.05) -> AnytimeInterval:
    """The fixed-n t interval of a mean (valid at one pre-planned n only), for printing beside the
    anytime-valid one; method is "fixed-n t"."""
    values = np.asarray(x, dtype=float).ravel()
    n = values.size
    if n < 2:
        raise EstimationError(f"a fixed-n interval needs at least 2 units, got {n}")
    from scipy import stats  # at first use: a dry run imports this module, not scipy.stats (about 1.3 s)

    mean = float(values.mean())
    half = float(stats.t.ppf(1 - alpha / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return AnytimeInterval(mean, mean - half, mean + half, n, float(alpha), "fixed-n t")
