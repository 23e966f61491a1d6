"""What an audit can detect: the minimum detectable effect (MDE) at its planned n and the n an effect
needs, for each design's main test, with the assumptions each figure rests on.

- Mean difference (the population design's TE on the 0-100 score): two groups of n1 and n0
  applicants with a common score SD, a two-sided two-sample t test (statsmodels `TTestIndPower`);
  with a previous run, its standard error scaled to the new n (se * sqrt(n_prev / n)), which keeps
  whatever the estimator's adjustment gained or lost, and a z test (`NormalIndPower`, one sample).
- Paired callbacks (McNemar with continuity correction, as `popfair.estimate.gap.paired.paired_gap`):
  a share psi of the pairs is discordant and the gap is delta = P(x1 yes, x0 no) - P(x1 no, x0 yes).
  Given m discordant pairs, b ~ Binomial(m, (psi + delta) / (2 psi)), and m ~ Binomial(n, psi): the
  power is summed exactly over both laws (no textbook class covers it; scipy's binomial laws do).
- Selection rates (the table design's impact ratio; one category's rate below the others'): with two
  categories a two-sided test of two proportions on Cohen's h (statsmodels `proportion_effectsize`,
  `NormalIndPower`), the MDE read back as a gap in percentage points below the base rate. With more,
  the test is not a textbook one (the lowest impact ratio against its null distribution, the
  reference chosen from the data: `popfair.estimate.impact_ratio.inference`), so its power is simulated:
  binomial counts per category (common random numbers), the null's alpha-quantile of the lowest
  ratio, and the share of draws with the smallest category `delta` below it.

The ranking design's top-1 rates are in `popfair.estimate.ranking.top1_power` (`top1_power`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from popfair.core.errors import ConfigError
from popfair.estimate import light_stats as ls  # scipy.stats' and scipy.optimize's figures without their import

DEFAULT_BASE_RATE = 0.5  # a 0/1 outcome's rate when nothing better is known: the largest binomial variance
DEFAULT_SCORE_SD = 25.0  # a 0-100 score's SD when nothing better is known (a uniform score has 28.9)


@dataclass(frozen=True)
class PowerSettings:
    """The `plan.*` config keys: alpha, power, the effect to plan for and the assumptions.

    effect is in the unit of the design's main estimate: score points for a 0-100 score, a
    proportion (0.03 = 3 pp) for callback, selection and top-1 rates. base_rate, sd and
    discordant_share stand for a pilot's figures; from_run names a previous run (an MLflow run id or
    a folder holding its effects.csv)."""

    alpha: float = 0.05
    power: float = 0.8
    effect: float | None = None
    base_rate: float | None = None
    sd: float | None = None
    discordant_share: float | None = None
    from_run: str | None = None
    enabled: bool = True
    noise_share: float | None = None  # a pilot's share of one answer's variance within prompts (screener noise)

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> PowerSettings:
        """The settings of a `plan` config node (None: the defaults); ConfigError naming the key on a bad value."""
        values = dict(node or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"plan.{unknown[0]}: unknown key; the plan keys are {', '.join(cls.__dataclass_fields__)}"
            )
        settings = cls(**values)
        given = vars(settings)  # every setting, defaults included
        for key in ("alpha", "power"):
            _open_unit(key, given[key])
        if settings.noise_share is not None and not (_number(settings.noise_share) and 0 <= settings.noise_share < 1):
            raise ConfigError(f"plan.noise_share: must lie in [0, 1), got {settings.noise_share!r}")
        for key in ("base_rate", "discordant_share"):
            if given[key] is not None:
                _open_unit(key, given[key])
        for key in ("effect", "sd"):
            value = given[key]
            if value is not None and not (_number(value) and value > 0):
                raise ConfigError(f"plan.{key}: must be a positive number (null: none), got {value!r}")
        if settings.from_run is not None and not str(settings.from_run).strip():
            raise ConfigError("plan.from_run: empty; give an MLflow run id or a run's artifact folder (null: none)")
        if not isinstance(settings.enabled, bool):
            raise ConfigError(f"plan.enabled: must be true or false, got {settings.enabled!r}")
        return settings


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _open_unit(key: str, value: Any) -> None:
    if not (_number(value) and 0 < value < 1):
        raise ConfigError(f"plan.{key}: must lie strictly between 0 and 1, got {value!r}")


@dataclass(frozen=True)
class PowerPlan:
    """What one audit can detect, with the assumptions behind it.

    mde and effect are in `unit` ("points" of a 0-100 score, or "pp": a proportion shown in
    percentage points); n and n_needed count `units` (applicants, pairs, trials, rows)."""

    estimand: str
    unit: str
    units: str
    n: int
    alpha: float
    power: float
    mde: float | None  # None: no effect is detectable with this power at this n (`detail` says why)
    test: str
    assumptions: tuple[str, ...]
    effect: float | None = None
    n_needed: int | None = None
    extra: dict[str, float] = field(default_factory=dict)  # more figures to log (plan.<name>)
    detail: str = ""  # one more clause after the MDE (the impact ratio it means, ...)

    def shown(self, value: float) -> str:
        return f"{100 * value:.1f} pp" if self.unit == "pp" else f"{value:.3g} points"  # 0.0195, 2.16, 12.5

    def needed_text(self) -> str:
        if self.effect is None:
            return ""
        if self.n_needed is None:
            return f"; an effect of {self.shown(self.effect)} cannot be planned under these assumptions"
        return f"; {self.shown(self.effect)} needs {self.n_needed:,} {self.units}"

    def line(self) -> str:
        """The plan's lines: the MDE and the n needed, then the assumptions."""
        detail = f" ({self.detail})" if self.detail else ""
        detects = "detects no effect" if self.mde is None else f"detects {self.shown(self.mde)} or more"
        return (
            f"power: {self.estimand} at n = {self.n:,} {self.units}: {detects}{detail} "
            f"with power {self.power:g} at alpha {self.alpha:g} ({self.test}){self.needed_text()}\n"
            f"    assuming {'; '.join(self.assumptions)}"
        )

    def sentence(self) -> str:
        """What the audit can and cannot detect, in plain words (reports)."""
        if self.mde is None:
            return (
                f"With {self.n:,} {self.units}, this audit cannot detect a {self.estimand} of any size "
                f"{100 * self.power:.0f}% of the time ({self.detail}). A result that is not significant says "
                f"nothing about whether there is an effect. Assumed: {'; '.join(self.assumptions)}."
            )
        return (
            f"With {self.n:,} {self.units}, this audit detects a {self.estimand} of {self.shown(self.mde)} or more "
            f"{100 * self.power:.0f}% of the time (two-sided, alpha {self.alpha:g}). A smaller effect can go "
            f"undetected: a result that is not significant is not evidence that no such effect exists"
            + (
                f". Detecting {self.shown(self.effect)} would take {self.n_needed:,} {self.units}."
                if self.effect is not None and self.n_needed is not None
                else "."
            )
            + f" Assumed: {'; '.join(self.assumptions)}."
        )

    def metrics(self) -> dict[str, float]:
        """MLflow metrics: plan.mde (in plan.effect's unit), plan.n, and plan.n_needed for plan.effect."""
        out = {"plan.n": float(self.n), "plan.alpha": self.alpha, "plan.power": self.power}
        if self.mde is not None:
            out["plan.mde"] = self.mde
        if self.effect is not None and self.n_needed is not None:
            out["plan.n_needed"] = float(self.n_needed)
        out.update({f"plan.{k}": v for k, v in self.extra.items()})
        return out

    def tags(self) -> dict[str, str]:
        """MLflow tags: what the MDE is of, as shown, and the assumptions (the sweep report reads them)."""
        return {
            "plan.detects": f"{'nothing' if self.mde is None else self.shown(self.mde)}"
            f"{' (' + self.detail + ')' if self.detail else ''}"[:4900],
            "plan.estimand": self.estimand,
            "plan.units": self.units,
            "plan.assumptions": "; ".join(self.assumptions)[:4900],
        }


def _z(alpha: float, power: float) -> float:
    return float(ls.norm_ppf(1 - alpha / 2) + ls.norm_ppf(power))


# --- mean difference (0-100 scores) -------------------------------------------------------------------


def mean_difference_mde(n1: int, n0: int, sd: float, alpha: float, power: float) -> float:
    """Smallest difference of two means (groups of n1 and n0, common SD) a two-sided t test detects."""
    from statsmodels.stats.power import TTestIndPower

    d = TTestIndPower().solve_power(effect_size=None, nobs1=n1, ratio=n0 / n1, alpha=alpha, power=power)
    return float(d) * sd


def mean_difference_n(effect: float, share1: float, sd: float, alpha: float, power: float) -> int:
    """Units in both groups together (a share `share1` in the first) that detect `effect`."""
    from statsmodels.stats.power import TTestIndPower

    ratio = (1 - share1) / share1
    n1 = TTestIndPower().solve_power(effect_size=effect / sd, nobs1=None, ratio=ratio, alpha=alpha, power=power)
    return int(math.ceil(float(n1) * (1 + ratio)))


def se_mde(unit_sd: float, n: int, alpha: float, power: float) -> float:
    """MDE of an estimate whose standard error is unit_sd / sqrt(n) (a z test)."""
    from statsmodels.stats.power import NormalIndPower

    d = NormalIndPower().solve_power(effect_size=None, nobs1=n, ratio=0, alpha=alpha, power=power)
    return float(d) * unit_sd


def se_n(effect: float, unit_sd: float, alpha: float, power: float) -> int:
    from statsmodels.stats.power import NormalIndPower

    n = NormalIndPower().solve_power(effect_size=effect / unit_sd, nobs1=None, ratio=0, alpha=alpha, power=power)
    return int(math.ceil(float(n)))


# --- paired callbacks (McNemar with continuity correction) ------------------------------------------


def mcnemar_power(n_pairs: int, psi: float, delta: float, alpha: float) -> float:
    """Power of McNemar's test with continuity correction (1 df, level alpha) on n_pairs pairs, a share
    psi discordant and a gap delta = P(b) - P(c) (|delta| <= psi): exact over the discordant count."""
    if n_pairs <= 0 or psi <= 0:
        return 0.0  # no discordant pairs, no information on the gap
    delta = min(abs(delta), psi)
    crit = ls.chi2_ppf(1 - alpha, 1)
    low, high = (int(v) for v in ls.binom_ppf([1e-12, 1 - 1e-12], n_pairs, psi))
    m = np.arange(max(low, 1), max(high, 1) + 1)
    weight = ls.binom_pmf(m, n_pairs, psi)
    # reject when (|b - c| - 1)^2 / m > crit, i.e. |2b - m| > 1 + sqrt(m crit)
    bound = (1 + np.sqrt(m * crit)) / 2
    favoured = (psi + delta) / (2 * psi)
    upper = ls.binom_sf(np.floor(m / 2 + bound), m, favoured)  # b > m/2 + bound
    lower = ls.binom_cdf(np.ceil(m / 2 - bound) - 1, m, favoured)  # b < m/2 - bound
    return float(np.sum(weight * (upper + lower)))


def mcnemar_mde(n_pairs: int, psi: float, alpha: float, power: float) -> float | None:
    """Smallest gap (a proportion) McNemar detects with `power`; None when even delta = psi falls short."""
    if mcnemar_power(n_pairs, psi, psi, alpha) < power:
        return None
    return float(ls.brentq(lambda d: mcnemar_power(n_pairs, psi, d, alpha) - power, 1e-9, psi, xtol=1e-7))


def mcnemar_n(delta: float, psi: float, alpha: float, power: float) -> int | None:
    """Pairs McNemar needs to detect the gap `delta`: Connor's (1987) normal formula as the start, then
    the smallest n whose exact power reaches `power` (None when delta exceeds psi)."""
    if delta >= psi or psi <= 0:
        return None
    za, zb = ls.norm_ppf(1 - alpha / 2), ls.norm_ppf(power)
    guess = int(math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2))
    low, high = max(1, guess // 2), max(2, guess)
    while mcnemar_power(high, psi, delta, alpha) < power:
        low, high = high, high * 2
    while high - low > 1:  # the power grows with n up to the binomial lattice's small wiggles
        mid = (low + high) // 2
        low, high = (low, mid) if mcnemar_power(mid, psi, delta, alpha) >= power else (mid, high)
    return high


# --- two selection rates -----------------------------------------------------------------------------


def _h_to_rate(base: float, h: float) -> float:
    """The rate whose Cohen's h against `base` is -h (a lower rate)."""
    angle = math.asin(math.sqrt(base)) - h / 2
    return math.sin(max(angle, 0.0)) ** 2


def two_rates_mde(n_low: int, n_ref: int, base: float, alpha: float, power: float) -> float:
    """Smallest drop below `base` of one group's rate (n_low rows) against a group of n_ref rows at
    `base`, detected by a two-sided test of two proportions on Cohen's h."""
    from statsmodels.stats.power import NormalIndPower

    h = NormalIndPower().solve_power(effect_size=None, nobs1=n_low, ratio=n_ref / n_low, alpha=alpha, power=power)
    return base - _h_to_rate(base, float(h))


def two_rates_n(effect: float, share_low: float, base: float, alpha: float, power: float) -> int | None:
    """Rows of both groups together (a share `share_low` in the low group) to detect a drop `effect`."""
    from statsmodels.stats.power import NormalIndPower
    from statsmodels.stats.proportion import proportion_effectsize

    if effect >= base:
        return None
    h = proportion_effectsize(base, base - effect)
    ratio = (1 - share_low) / share_low
    n_low = NormalIndPower().solve_power(effect_size=h, nobs1=None, ratio=ratio, alpha=alpha, power=power)
    return int(math.ceil(float(n_low) * (1 + ratio)))


LOWEST_RATIO_DRAWS = 20_000


def _lowest_ratio(selected: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    rates = selected / sizes
    top = rates.max(axis=1)
    return np.where(top > 0, rates.min(axis=1) / np.where(top > 0, top, 1.0), 1.0)


class LowestRatioTest:
    """Power of the test of "no category differs" on the lowest impact ratio (k categories of
    `sizes` rows at rate `base`; the category `low` drops by delta), simulated with fixed draws so
    that the power is a smooth function of delta and of the sizes' scale."""

    def __init__(self, sizes: np.ndarray, base: float, low: int, alpha: float, seed: int = 0) -> None:
        self.sizes, self.base, self.low, self.alpha = np.asarray(sizes, dtype=float), base, low, alpha
        self.uniforms = np.random.default_rng(seed).random((LOWEST_RATIO_DRAWS, len(self.sizes)))
        self._nulls: dict[float, tuple[np.ndarray, np.ndarray, float]] = {}

    def _null(self, scale: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Counts with no category differing, the sizes and the null's alpha-quantile of the lowest ratio."""
        from scipy import stats

        if scale not in self._nulls:
            sizes = np.maximum(np.round(self.sizes * scale), 1.0)
            counts = stats.binom.ppf(self.uniforms, sizes, self.base)
            self._nulls[scale] = (counts, sizes, float(np.quantile(_lowest_ratio(counts, sizes), self.alpha)))
        return self._nulls[scale]

    def power(self, delta: float, scale: float = 1.0) -> float:
        from scipy import stats

        null, sizes, threshold = self._null(scale)
        alternative = null.copy()  # the same draws: only the low category's counts move
        rate = max(self.base - delta, 0.0)
        alternative[:, self.low] = stats.binom.ppf(self.uniforms[:, self.low], sizes[self.low], rate)
        return float(np.mean(_lowest_ratio(alternative, sizes) < threshold - 1e-12))

    def mde(self, power: float) -> float | None:
        if self.power(self.base) < power:
            return None
        low, high = 0.0, self.base
        for _ in range(16):  # bisection to base / 65,536: the simulated power is a step function of delta
            mid = (low + high) / 2
            low, high = (low, mid) if self.power(mid) >= power else (mid, high)
        return high

    def rows_needed(self, delta: float, power: float) -> int | None:
        """Rows of the whole table (the sizes' proportions kept) at which delta is detected."""
        if delta >= self.base:
            return None
        low, high = 0.5, 1.0
        while self.power(delta, low) >= power and low > 1e-4:
            low, high = low / 2, low
        while self.power(delta, high) < power:
            low, high = high, high * 2
            if high > 1e6:
                return None
        while high / low > 1.005:  # to half a percent of the rows
            mid = math.sqrt(low * high)
            low, high = (low, mid) if self.power(delta, mid) >= power else (mid, high)
        return int(math.ceil(self.sizes.sum() * high))


def answers_factor(noise_share: float, samples: int) -> float:
    """The variance of the mean of `samples` answers per prompt, as a share of one answer's:
    f(k) = 1 - rho + rho / k, with rho the noise share (the share of one answer's variance within
    prompts; docs/concepts/screener_noise.md)."""
    return 1.0 - noise_share + noise_share / samples


def with_answers(plan: PowerPlan, samples: int, noise_share: float | None, source: str) -> PowerPlan:
    """The power plan of a case that asks each prompt `samples` times: the MDE times sqrt(f(k)) and the
    units needed times f(k) (`answers_factor`), the base plan being for one answer per prompt; the
    noise share from a pilot (plan.noise_share) or a previous run (`source`). Unknown noise: the plan
    is kept and says that it counts the k answers as one."""
    k = int(samples)
    if noise_share is None:
        if k == 1:
            return plan
        return replace(
            plan,
            assumptions=(
                *plan.assumptions,
                f"{k} answers per prompt counted as one (no noise share known: set plan.noise_share from a "
                "pilot, or plan.from_run a run with screener.samples > 1)",
            ),
        )
    f = answers_factor(noise_share, k)
    extra = {**plan.extra, "noise_share": float(noise_share), "answers_per_prompt": float(k), "noise_factor": f}
    said = (
        f"screener noise: {noise_share:.0%} of one answer's variance lies within prompts ({source}); the mean "
        f"of {k} answers per prompt keeps {f:.2f} of it, taken as the unit outcome's variance factor"
    )
    test = plan.test
    if k > 1 and "McNemar" in test:  # mean callbacks: the case tests them by the posting-clustered t
        test = f"the clustered t on mean callbacks; {test}'s MDE scaled by the answers' variance factor"
    return replace(
        plan,
        test=test,
        mde=None if plan.mde is None else plan.mde * math.sqrt(f),
        n_needed=None if plan.n_needed is None else max(2, math.ceil(plan.n_needed * f)),
        assumptions=(*plan.assumptions, said),
        extra=extra,
    )


def best_answers_per_prompt(noise_share: float, unit_cost: float, answer_cost: float) -> float:
    """The answers per prompt that buy the most precision per dollar (two-stage sampling): a unit's
    first answer costs `unit_cost` (its prompt), each further one `answer_cost` (an OpenAI-style `n`:
    output tokens only; else a whole request); the variance per dollar f(k) (c_u + (k - 1) c_a) is
    least at k* = sqrt(rho (c_u - c_a) / ((1 - rho) c_a)), at least 1."""
    if noise_share <= 0 or answer_cost <= 0 or unit_cost <= answer_cost:
        return 1.0
    if noise_share >= 1:
        return math.inf
    return max(1.0, math.sqrt(noise_share * (unit_cost - answer_cost) / ((1 - noise_share) * answer_cost)))


def answers_or_units(noise_share: float, samples: int, unit_cost: float, answer_cost: float, units: str) -> str:
    """Whether, for the same money, more answers per prompt or more units buy more precision: the
    CI width at `samples` answers against one answer per prompt with the money spent on more units,
    and the best k (`best_answers_per_prompt`)."""
    k = int(samples)
    per_dollar = lambda j: answers_factor(noise_share, j) * (unit_cost + (j - 1) * answer_cost)  # noqa: E731
    best = best_answers_per_prompt(noise_share, unit_cost, answer_cost)
    ratio = math.sqrt(per_dollar(k) / per_dollar(1))
    if math.isinf(best):
        advice = "more answers per prompt (the screener's noise is all the variance)"
    elif round(best) <= 1:
        advice = f"more {units}, one answer per prompt"
    else:
        advice = f"about {round(best)} answers per prompt"
    return (
        f"for the same money, {advice} buys the most precision (noise share {noise_share:.0%}; a further answer "
        f"costs {answer_cost / unit_cost:.0%} of a new prompt); with samples={k} the CI is {ratio:.2f} times "
        f"as wide as one answer per prompt over more {units}"
    )
