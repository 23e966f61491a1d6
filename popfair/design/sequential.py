"""Sequential audits, what each design knows: its units in the order looks take them, the target
effects their anytime-valid intervals are computed for, the stopping rules and their settings.

A look at n units uses the first n units of the nested sample, so a look's answers are those of
every earlier look plus the new batch (popfair.estimate.sequential.sequences has the intervals):

- paired design: a unit is a posting, in draw order (`occupation.n_postings`); its value is the
  mean within-pair difference y_x1 - y_x0 over its complete pairs (target `gap`), or its
  callback rate per group (target `impact_ratio`).
- population design: a unit is an applicant of the i.i.d. resample (`population.n`); target `gap`
  is the difference of the x1 and x0 mean outcomes (callback share, or score on 0-100), target
  `impact_ratio` the LL144 ratios of selection rates over the categories of X (callbacks, or a
  score of at least `sequential.threshold`).
- ranking design: a unit is a block of trials (one pass through the Latin square, k trials, 2k
  for odd k; one trial with `order: random`), so every unit shows each group in each position
  equally often and units are i.i.d.; target `top1` is the lowest impact ratio of the groups'
  top-1 rates.

Units whose screens all failed are skipped (they carry no outcome); failures are assumed
unrelated to the answer the unit would have had.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
TARGETS = {"paired": ("gap", "impact_ratio"), "population": ("gap", "impact_ratio"), "ranking": ("top1",)}
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
        for key in ("looks", "batch"):
            value = getattr(s, key)
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


def stream_for(design: str, population: Any, occupation: Any, profiles: Profiles, seed: int) -> Stream:
    """The units of a composed case's sample, in the order its looks take them."""
    table = profiles.table
    if design == "paired":
        posting = table["posting_id"].to_numpy(dtype=object)
        ids = pd.unique(posting)
        if getattr(occupation, "postings_csv", None) is None:
            order = np.argsort([int(str(p)[1:]) for p in ids], kind="stable")  # draw order: p00000, p00001, ...
            notes: tuple[str, ...] = ()
        else:  # a user's file may be sorted (by firm, date): a seeded shuffle, fixed before any answer
            from popfair.population.scm import keyed_uniforms

            order = np.argsort(keyed_uniforms(ids, seed, "sequential_order"), kind="stable")
            notes = ("sequential: the postings of occupation.postings_csv are taken in a seeded random order",)
        rank = pd.Series(np.empty(len(ids), dtype=np.int64), index=ids)
        rank.iloc[order] = np.arange(len(ids))
        return Stream(rank.loc[posting].to_numpy(), len(ids), "postings", "occupation.n_postings", 1, notes)
    if design == "population":
        if getattr(population, "n", None) is None:
            raise ConfigError(
                "sequential: the population design grows an i.i.d. resample; set population.n (the planned "
                "number of applicants). With population.n=null every PUMS record is taken once, in file order, "
                "with survey weights, which a look cannot take a random part of"
            )
        return Stream(np.arange(len(table)), len(table), "applicants", "population.n")
    if design == "ranking":
        from popfair.design.ranking.trials import TRIAL
        from popfair.estimate.ranking.model import williams_square

        trials = table[TRIAL].to_numpy(dtype=object)
        ids = pd.unique(trials)
        k = int(getattr(population, "k", 0) or table.groupby(TRIAL).size().max())
        block = len(williams_square(k)) if getattr(population, "order", "latin_square") == "latin_square" else 1
        n_units = len(ids) // block
        index = pd.Series(np.arange(len(ids)), index=ids).loc[trials].to_numpy()
        unit = np.where(index < n_units * block, index // block, -1)  # -1: an incomplete last block
        notes = ()
        if n_units * block < len(ids):
            notes = (
                f"sequential: the last {len(ids) - n_units * block} trials do not fill a block of {block} "
                "(population.n_trials is not a multiple of it) and are not screened",
            )
        if n_units < 1:
            raise ConfigError(f"sequential: population.n_trials must be at least one block of {block} trials")
        what = f"blocks of {block} trials" if block > 1 else "trials"
        return Stream(unit, n_units, what, "population.n_trials", block, notes)
    raise ConfigError(f"sequential: the {design} design has no sequential audit (paired, population, ranking do)")


def resolve_target(design: str, settings: SequentialSettings, outcome: str) -> str:
    """The target effect: sequential.target, or the design's main one for `auto`."""
    targets = TARGETS.get(design, ())
    target = targets[0] if settings.target == "auto" and targets else settings.target
    if target not in targets:
        raise ConfigError(
            f"sequential.target: {settings.target!r} does not apply to the {design} design; choose auto or "
            f"{', '.join(targets)}"
        )
    if design == "population" and target == "impact_ratio" and outcome == "score" and settings.threshold is None:
        raise ConfigError(
            "sequential.threshold: the impact-ratio target on scores needs a fixed selection threshold "
            "(e.g. sequential.threshold=70); a sample's median or top share is not known before the answers"
        )
    return target


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


def target_info(design: str, target: str, profiles: Profiles, settings: SequentialSettings) -> Target:
    roles = profiles.roles
    if target == "gap":
        if profiles.outcome == "score":
            sides = (roles.x1, roles.x0)
            return Target("gap", 0.0, f"mean score gap {roles.x1} - {roles.x0} (points)", 1.0, 100.0, sides)
        return Target("gap", 0.0, f"callback gap {roles.x1} - {roles.x0} (pp)", 100.0, 1.0, (roles.x1, roles.x0))
    what = "top-1 rates" if target == "top1" else "selection rates"
    return Target(target, 1.0, f"lowest impact ratio of the {what}", 1.0, 1.0)


def unit_values(
    design: str, target: str, ok: pd.DataFrame, profiles: Profiles, settings: SequentialSettings
) -> pd.DataFrame:
    """One value per unit (column value; `group` for group targets), from the factual rows that
    were scored (column UNIT), sorted by unit."""
    roles = profiles.roles
    ok = ok.sort_values(UNIT, kind="stable")
    if design == "paired" and target == "gap":
        sides = ok.pivot_table(index=[UNIT, "pair_key"], columns=roles.x, values="y", aggfunc="first")
        if roles.x1 not in sides or roles.x0 not in sides:
            return pd.DataFrame({UNIT: [], "value": []})
        diff = (sides[roles.x1] - sides[roles.x0]).dropna()
        per_unit = diff.groupby(level=0).mean()
        return pd.DataFrame({UNIT: per_unit.index.to_numpy(), "value": per_unit.to_numpy()})
    if design == "population" and target == "gap":
        rows = ok[ok[roles.x].isin([roles.x0, roles.x1])]
        return pd.DataFrame(
            {UNIT: rows[UNIT].to_numpy(), "group": rows[roles.x].to_numpy(), "value": rows["y"].to_numpy()}
        )
    # group rates per unit: paired callbacks (x0, x1), population selections, ranking top-1
    if design == "ranking":
        from popfair.design.ranking.trials import GROUP

        column, y = GROUP, ok["y"].to_numpy(dtype=float)
    else:
        column, y = roles.x, ok["y"].to_numpy(dtype=float)
        if profiles.outcome == "score":
            y = (y >= float(settings.threshold if settings.threshold is not None else math.inf)).astype(float)
    frame = pd.DataFrame({UNIT: ok[UNIT].to_numpy(), "group": ok[column].to_numpy(), "value": y})
    return frame.groupby([UNIT, "group"], sort=True, as_index=False)["value"].mean()


def groups_of(design: str, target: str, profiles: Profiles) -> list[str]:
    """The groups of a group target, known from the sample before any answer (so alpha / G is fixed)."""
    roles = profiles.roles
    if design == "ranking":
        from popfair.design.ranking.trials import GROUP

        return sorted(map(str, pd.unique(profiles.table[GROUP])))
    if target == "gap" or design == "paired":
        return [roles.x1, roles.x0]
    return sorted(map(str, pd.unique(profiles.table[roles.x].dropna())))


def path(
    design: str,
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
    if design == "paired" and target == "gap":
        seq = MeanSequence((-1.0, 1.0), alpha=settings.alpha, method=settings.method)
        start = 0
        for n in looks:
            stop = int(np.searchsorted(units, n, side="left"))
            out.append(Look(n, seq.update(values["value"].to_numpy()[start:stop])))
            start = stop
        return out
    bounds = (0.0, 100.0) if (target == "gap" and profiles.outcome == "score") else (0.0, 1.0)
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
    design: str,
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
    if design == "paired" and target == "gap":
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
    "TARGETS",
    "UNIT",
    "Look",
    "SequentialSettings",
    "Stream",
    "Target",
    "check_sequential",
    "fixed_interval",
    "groups_of",
    "looks_for",
    "path",
    "resolve_target",
    "stream_for",
    "target_info",
    "unit_values",
]


def check_sequential(design: Any, settings: SequentialSettings, population: Any) -> None:
    """Before any work: the design (a ScreenedDesign) has sequential audits, the target applies to
    it, and its sample can grow."""
    if design.name not in TARGETS:
        raise ConfigError(
            f"sequential.rule: the {design.name} design has no sequential audit (paired, population, ranking do)"
        )
    resolve_target(design.name, settings, design.outcome)
    if design.name == "population" and getattr(population, "n", None) is None:
        raise ConfigError(
            "sequential: the population design grows an i.i.d. resample; set population.n (the planned number "
            "of applicants), or sequential.rule=off"
        )
