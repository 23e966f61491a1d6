"""Sequential audits: the stopping rules and their settings, the target effects, and the looks'
anytime-valid intervals (popfair.estimate.sequential.sequences computes them). What a design knows
(its units in the order looks take them, its targets, a unit's value) is its `SequentialRules`,
declared in the design's own folder (`planning.py`) and reached here through `design.sequential`.

A look at n units uses the first n units of the nested sample, so a look's answers are those of
every earlier look plus the new batch. Units whose screens all failed are skipped (they carry no
outcome); failures are assumed unrelated to the answer the unit would have had.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import Profiles
from popfair.estimate.sequential.sequences import (
    METHODS,
    AnytimeInterval,
    GroupRates,
    MeanSequence,
    fixed_mean_interval,
    looks_for,
)

RULES = ("off", "excludes_zero", "equivalence", "budget")
UNIT = "_unit"  # column: a row's unit (its place in the order looks take units, 0-based)
N_BOOTSTRAP = 2000  # the fixed-n interval of a group-based target: unit bootstrap replicates


@dataclass(frozen=True)
class SequentialSettings:
    """Config group `sequential` (conf/config.yaml): the stopping rule and its looks."""

    rule: str = "off"
    target: str = "auto"
    margin: float = 0.02
    looks: int | None = 10
    batch: int | None = None
    alpha: float = 0.05
    method: str = "betting"
    threshold: float | None = None

    @property
    def on(self) -> bool:
        return self.rule != "off"

    @classmethod
    def from_config(cls, values: Mapping[str, Any] | None) -> SequentialSettings:
        values = dict(values or {})
        if values.get("rule") is False:  # YAML reads a bare `off` as false
            values["rule"] = "off"
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(
                f"sequential.{unknown[0]}: no such setting; settings: {', '.join(cls.__dataclass_fields__)}"
            )
        s = cls(**values)
        if s.rule not in RULES:
            raise ConfigError(f"sequential.rule: {s.rule!r} is not a rule; choose one of {', '.join(RULES)}")
        if s.method not in METHODS:
            raise ConfigError(f"sequential.method: {s.method!r}; choose one of {', '.join(METHODS)}")
        if not (_number(s.margin) and 0 < s.margin < 1):
            raise ConfigError(f"sequential.margin: must be a share in (0, 1) (0.02 = 2 pp), got {s.margin!r}")
        if not (_number(s.alpha) and 0 < s.alpha < 0.5):
            raise ConfigError(f"sequential.alpha: must be in (0, 0.5), got {s.alpha!r}")
        if s.on and (s.looks is None) == (s.batch is None):
            raise ConfigError("sequential.looks / sequential.batch: set exactly one (the other null)")
        for key, value in (("looks", s.looks), ("batch", s.batch)):
            if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"sequential.{key}: must be a positive integer or null, got {value!r}")
        if s.threshold is not None and not _number(s.threshold):
            raise ConfigError(f"sequential.threshold: must be a score (e.g. 70) or null, got {s.threshold!r}")
        return s


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Stream:
    """A design's units in look order: `unit` per factual row of the profiles table."""

    unit: np.ndarray
    n_units: int
    what: str  # "postings", "applicants", "blocks of 8 trials"
    size_key: str  # the config key whose value is the planned n
    per_unit: int = 1  # units of size_key in one stream unit (ranking: trials per block)
    notes: tuple[str, ...] = ()


class SequentialRules(Protocol):
    """What one design knows of its sequential audit (declared in its folder's planning.py).

    targets: the target effects that apply, the design's main one first."""

    targets: tuple[str, ...]

    def stream(self, population: Any, occupation: Any, profiles: Profiles, seed: int) -> Stream:
        """The units of a composed case's sample, in the order its looks take them."""
        ...

    def check(self, target: str, settings: SequentialSettings, population: Any, outcome: str) -> None:
        """ConfigError when the case cannot be audited in looks for `target` (before any work)."""
        ...

    def unit_values(
        self, target: str, ok: pd.DataFrame, profiles: Profiles, settings: SequentialSettings
    ) -> pd.DataFrame:
        """One value per unit (column value; `group` for group targets), from the factual rows that
        were scored (column UNIT), sorted by unit."""
        ...

    def groups(self, target: str, profiles: Profiles) -> list[str]:
        """The groups of a group target, known from the sample before any answer (alpha / G is fixed)."""
        ...

    def value_bounds(self, target: str, profiles: Profiles) -> tuple[float, float]:
        """The range a unit's value can take (the confidence sequences need it)."""
        ...

    def mean_of_units(self, target: str) -> bool:
        """Whether the target is the mean of one value per unit (else a contrast of group rates)."""
        ...

    def prompt_count(self, profiles: Profiles) -> int:
        """Prompts the whole planned sample takes."""
        ...


def rules_of(design: Any) -> SequentialRules:
    """The design's sequential rules, or ConfigError when it has none."""
    rules = design.sequential  # declared by every design (DesignBase: None, no sequential audit)
    if rules is None:
        raise ConfigError(f"sequential: the {design.name} design has no sequential audit")
    return rules


def resolve_target(design: Any, settings: SequentialSettings, outcome: str, population: Any = None) -> str:
    """The target effect: sequential.target, or the design's main one for `auto`."""
    rules = rules_of(design)
    targets = rules.targets
    target = targets[0] if settings.target == "auto" and targets else settings.target
    if target not in targets:
        raise ConfigError(
            f"sequential.target: {settings.target!r} does not apply to the {design.name} design; choose auto or "
            f"{', '.join(targets)}"
        )
    rules.check(target, settings, population, outcome)
    return target


def score_gap_values(ok: pd.DataFrame, profiles: Profiles) -> pd.DataFrame:
    """Each applicant of the x0 and x1 groups as a unit: its group and outcome (a gap of means)."""
    roles = profiles.roles
    rows = ok[ok[roles.x].isin([roles.x0, roles.x1])]
    return pd.DataFrame({UNIT: rows[UNIT].to_numpy(), "group": rows[roles.x].to_numpy(), "value": rows["y"].to_numpy()})


def group_rate_values(ok: pd.DataFrame, column: str, profiles: Profiles, settings: SequentialSettings) -> pd.DataFrame:
    """Each unit's rate per group of `column` (scores count as selected at sequential.threshold)."""
    y = ok["y"].to_numpy(dtype=float)
    if profiles.outcome == "score":
        y = (y >= float(settings.threshold if settings.threshold is not None else math.inf)).astype(float)
    frame = pd.DataFrame({UNIT: ok[UNIT].to_numpy(), "group": ok[column].to_numpy(), "value": y})
    return frame.groupby([UNIT, "group"], sort=True, as_index=False)["value"].mean()


@dataclass
class Look:
    """One look: the target's anytime-valid interval and, for group targets, each group's."""

    n_units: int
    interval: AnytimeInterval
    groups: dict[str, AnytimeInterval] = field(default_factory=dict)
    group: str | None = None  # for the lowest impact ratio: the group that has it


@dataclass(frozen=True)
class Target:
    """How a target reads and prints: its no-effect value, unit label and scale."""

    name: str
    null: float  # the value of "no effect"
    label: str  # e.g. "gap x1 - x0 (pp)"
    scale: float  # printed value = interval x scale
    margin_scale: float  # margin (a share) in the interval's units
    sides: tuple[str, str] = ("", "")  # gap: the groups a positive and a negative value favour

    def verdict(self, interval: AnytimeInterval, margin: float, group: str | None = None) -> str:
        """What the anytime-valid interval says, in words."""
        m = margin * self.margin_scale
        if self.null == 1:
            if interval.high < 1:
                line = "below 0.8 (the four-fifths line)" if interval.high < 0.8 else "below 1"
                return f"some group's impact ratio is {line}; now lowest: {group}"
            if interval.low >= 1 - m:
                return f"no group's impact ratio is below {1 - m:g}"
            return "not settled: the anytime-valid CI still includes 1 (no group differs)"
        if interval.excludes(self.null):
            return f"the gap favours {self.sides[0] if interval.low > self.null else self.sides[1]}"
        if interval.within(m, self.null):
            return f"no gap larger than +-{m * self.scale:g}"
        return f"not settled: the anytime-valid CI still includes {self.null:g} (no gap)"

    def decide(self, rule: str, interval: AnytimeInterval, margin: float) -> str | None:
        """Why the rule stops at this interval, or None."""
        m = margin * self.margin_scale
        if rule == "excludes_zero" and interval.excludes(self.null):
            return f"the anytime-valid CI excludes {self.null:g} (no effect)"
        if rule == "equivalence":
            inside = interval.low >= 1 - m if self.null == 1 else interval.within(m, self.null)
            if inside:
                bound = f"impact ratio >= {1 - m:g}" if self.null == 1 else f"within +-{m * self.scale:g}"
                return f"the anytime-valid CI lies inside the equivalence margin ({bound})"
        return None


def target_info(target: str, profiles: Profiles) -> Target:
    roles = profiles.roles
    if target == "gap":
        if profiles.outcome == "score":
            sides = (roles.x1, roles.x0)
            return Target("gap", 0.0, f"mean score gap {roles.x1} - {roles.x0} (points)", 1.0, 100.0, sides)
        return Target("gap", 0.0, f"callback gap {roles.x1} - {roles.x0} (pp)", 100.0, 1.0, (roles.x1, roles.x0))
    what = "top-1 rates" if target == "top1" else "selection rates"
    return Target(target, 1.0, f"lowest impact ratio of the {what}", 1.0, 1.0)


def path(
    rules: SequentialRules,
    target: str,
    values: pd.DataFrame,
    looks: Sequence[int],
    groups: Sequence[str],
    profiles: Profiles,
    settings: SequentialSettings,
) -> list[Look]:
    """The target's anytime-valid interval at each look (look k: units < looks[k]), one pass."""
    out: list[Look] = []
    units = values[UNIT].to_numpy()
    if rules.mean_of_units(target):
        seq = MeanSequence(rules.value_bounds(target, profiles), alpha=settings.alpha, method=settings.method)
        start = 0
        for n in looks:
            stop = int(np.searchsorted(units, n, side="left"))
            out.append(Look(n, seq.update(values["value"].to_numpy()[start:stop])))
            start = stop
        return out
    bounds = rules.value_bounds(target, profiles)
    rates = GroupRates(list(groups), alpha=settings.alpha, method=settings.method, bounds=bounds)
    start = 0
    for n in looks:
        stop = int(np.searchsorted(units, n, side="left"))
        batch = values.iloc[start:stop]
        rates.update(batch["value"].to_numpy(dtype=float), batch["group"].astype(str).to_numpy(dtype=object))
        start = stop
        per_group = {g: rates.rate(g) for g in groups}
        if target == "gap":
            out.append(Look(n, rates.difference(profiles.roles.x1, profiles.roles.x0), per_group))
        else:
            group, lowest = rates.lowest_impact_ratio()
            out.append(Look(n, lowest, per_group, str(group)))
    return out


def fixed_interval(
    rules: SequentialRules,
    target: str,
    values: pd.DataFrame,
    n: int,
    groups: Sequence[str],
    profiles: Profiles,
    alpha: float,
    seed: int,
) -> AnytimeInterval:
    """The fixed-n CI of the target at the units used (valid only for an n planned in advance):
    the t interval of the posting means (the paired gap's cluster-robust t), else a unit bootstrap."""
    used = values[values[UNIT] < n]
    if rules.mean_of_units(target):
        return fixed_mean_interval(used["value"].to_numpy(), alpha=alpha)
    wide = used.pivot_table(index=UNIT, columns="group", values="value", aggfunc="first").reindex(columns=list(groups))
    x = wide.to_numpy(dtype=float)
    seen = ~np.isnan(x)
    x0 = np.where(seen, x, 0.0)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(x), np.full(len(x), 1 / len(x)), size=N_BOOTSTRAP).astype(float)

    def stat(sums: np.ndarray, ns: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            means = sums / ns
            if target == "gap":
                i1, i0 = list(groups).index(profiles.roles.x1), list(groups).index(profiles.roles.x0)
                return means[..., i1] - means[..., i0]
            return np.nanmin(means / np.nanmax(means, axis=-1, keepdims=True), axis=-1)

    point = float(stat(x0.sum(axis=0), seen.sum(axis=0)))
    reps = stat(counts @ x0, counts @ seen.astype(float))
    low, high = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2])
    return AnytimeInterval(point, float(low), float(high), int(len(x)), float(alpha), "fixed-n bootstrap")


__all__ = [
    "RULES",
    "UNIT",
    "Look",
    "SequentialSettings",
    "Stream",
    "Target",
    "check_sequential",
    "fixed_interval",
    "group_rate_values",
    "looks_for",
    "path",
    "resolve_target",
    "rules_of",
    "score_gap_values",
    "SequentialRules",
    "target_info",
]


def check_sequential(design: Any, settings: SequentialSettings, population: Any) -> None:
    """Before any work: the design (a ScreenedDesign) has sequential audits, the target applies to
    it, and its sample can grow."""
    rules_of(design)
    resolve_target(design, settings, design.outcome, population)
