"""A generated case screened in looks (config `sequential`): batches of units from the nested sample,
the target's anytime-valid interval after each, a stop by the rule; and what the case reports of it.

Look k screens the units between look k-1 and look k only; every earlier answer is in the response
cache, so a rerun replays the looks for free and a rerun with a larger planned n (the size key,
e.g. occupation.n_postings) continues where the stopped audit ended. The interval at each look is a
function of the first n units only, so the replay reaches the same stop and extending keeps the
guarantee (a confidence sequence is valid at every n, however the decision to go on was taken)."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.types import FACTUAL, WORLD, Document, Profiles, ScreenResult
from popfair.design.sequential import (
    UNIT,
    Look,
    SequentialSettings,
    Stream,
    Target,
    fixed_interval,
    looks_for,
    path,
    resolve_target,
    rules_of,
    target_info,
)
from popfair.estimate.sequential.sequences import AnytimeInterval

log = logging.getLogger("popfair")


@dataclass
class SequentialRecord:
    """What a sequential case did: its looks, why it stopped, the units and prompts it used against
    the fixed-n plan, and the target's anytime-valid and fixed-n intervals at the stop."""

    settings: SequentialSettings
    target: Target
    stream: Stream
    planned_looks: list[int]
    looks: list[Look] = field(default_factory=list)
    stopped_by: str = ""
    prompts_used: int = 0
    prompts_planned: int = 0
    cost_usd: float = 0.0
    calls_paid: int = 0
    fixed: AnytimeInterval | None = None

    @property
    def n_used(self) -> int:
        return self.looks[-1].n_units if self.looks else 0

    @property
    def n_planned(self) -> int:
        return self.planned_looks[-1]

    @property
    def saved_share(self) -> float:
        return 1 - self.prompts_used / self.prompts_planned if self.prompts_planned else 0.0

    @property
    def final(self) -> AnytimeInterval | None:
        return self.looks[-1].interval if self.looks else None

    def _size(self, units: int) -> int:
        return units * self.stream.per_unit

    def table(self) -> pd.DataFrame:
        """One row per look taken: units, the size key's n, the anytime-valid interval (printed scale)."""
        s = self.target.scale
        rows = []
        for i, look in enumerate(self.looks, start=1):
            iv = look.interval
            rows.append(
                {
                    "look": i,
                    "units": look.n_units,
                    self.stream.size_key: self._size(look.n_units),
                    "estimate": iv.estimate * s,
                    "cs_low": iv.low * s,
                    "cs_high": iv.high * s,
                    "group": look.group,
                    "stop": self.stopped_by if i == len(self.looks) else "",
                }
            )
        return pd.DataFrame(rows)

    def metrics(self) -> dict[str, float]:
        s = self.target.scale
        out = {
            "sequential.looks": float(len(self.looks)),
            "sequential.looks_planned": float(len(self.planned_looks)),
            "sequential.n_used": float(self._size(self.n_used)),
            "sequential.n_planned": float(self._size(self.n_planned)),
            "sequential.prompts_used": float(self.prompts_used),
            "sequential.prompts_planned": float(self.prompts_planned),
            "sequential.saved_share": self.saved_share,
        }
        if self.final is not None:
            final = self.final
            out.update(
                {
                    f"sequential.anytime_{k}": v * s
                    for k, v in zip(("estimate", "low", "high"), (final.estimate, final.low, final.high))
                }
            )
        if self.fixed is not None:
            out.update({"sequential.fixed_n_low": self.fixed.low * s, "sequential.fixed_n_high": self.fixed.high * s})
        return {k: v for k, v in out.items() if math.isfinite(v)}

    def tags(self) -> dict[str, str]:
        return {
            "sequential.rule": self.settings.rule,
            "sequential.target": self.target.name,
            "sequential.stopped_by": self.stopped_by,
            "sequential.method": self.settings.method,
        }

    def sentences(self) -> list[str]:
        """The record in plain words (console, auditor's report, sweep report)."""
        s, key = self.target.scale, self.stream.size_key
        used, planned = self._size(self.n_used), self._size(self.n_planned)
        lines = [
            f"sequential audit ({self.settings.rule}, target {self.target.label}): {len(self.looks)} of "
            f"{len(self.planned_looks)} looks, {used} of {planned} planned ({key}; {self.n_used} "
            f"{self.stream.what}); stopped because {self.stopped_by}",
            f"answers used: {self.prompts_used} of the fixed-n plan's {self.prompts_planned} prompts "
            f"({100 * self.saved_share:.0f}% not needed)"
            + (
                f"; ${self.cost_usd:.2f} paid this run, about "
                f"${self.cost_usd / self.calls_paid * (self.prompts_planned - self.prompts_used):.2f} not spent"
                if self.calls_paid and self.cost_usd
                else ""
            ),
        ]
        if self.final is not None:
            iv = self.final
            lines.append(
                f"decision (anytime-valid): {self.target.verdict(iv, self.settings.margin, self.looks[-1].group)}"
            )
            lines.append(
                f"anytime-valid {100 * (1 - iv.alpha):.0f}% CI (valid at every look, {iv.method} confidence "
                f"sequence): {iv.estimate * s:.4g} [{iv.low * s:.4g}, {iv.high * s:.4g}]"
            )
        if self.fixed is not None:
            f = self.fixed
            lines.append(
                f"fixed-n {100 * (1 - f.alpha):.0f}% CI at the n used ({f.method}; valid only had this n been "
                f"planned without looking): {f.estimate * s:.4g} [{f.low * s:.4g}, {f.high * s:.4g}]"
            )
        lines.append(_detectable(self))
        lines.extend(self.stream.notes)
        return lines


def _detectable(record: SequentialRecord) -> str:
    iv, t = record.final, record.target
    if iv is None:
        return "no look was taken"
    if t.null == 1:
        return (
            f"it can rule out impact ratios below {iv.low:.3g} and shows none is below {iv.high:.3g} only if "
            f"that is under 1; a larger n narrows the interval (rerun with a larger {record.stream.size_key} to "
            "continue from the cache)"
        )
    half = (iv.high - iv.low) / 2 * t.scale
    return (
        f"at this n the anytime-valid CI is +-{half:.3g} wide: a gap smaller than that cannot be told from 0; "
        f"rerun with a larger {record.stream.size_key} to continue from the cache"
    )


@dataclass
class SequentialScreening:
    """What the looks screened, in the shapes the case's later stages take."""

    profiles: Profiles
    prompts: list[Document]
    results: list[ScreenResult]
    scored_rows: pd.DataFrame
    metrics: dict[str, float]
    record: SequentialRecord


def _restrict(profiles: Profiles, unit: np.ndarray, lo: int, hi: int) -> Profiles:
    """The profiles of the units in [lo, hi), and their counterfactual world rows."""
    table = profiles.table[(unit >= lo) & (unit < hi)].reset_index(drop=True)
    worlds = profiles.worlds
    if worlds is not None:
        worlds = worlds[worlds["applicant_id"].isin(set(table["applicant_id"]))].reset_index(drop=True)
    return dataclasses.replace(profiles, table=table, worlds=worlds)


# the screener's noise (screener.samples > 1): over looks, a mean weighted by each look's prompts
NOISE = ("screen.flip_rate", "screen.noise_share", "screen.within_prompt_sd", "screen.between_prompt_sd")


def _add_metrics(total: dict[str, float], new: dict[str, float]) -> None:
    before, added = total.get("screen.noise_prompts", 0.0), new.get("screen.noise_prompts", 0.0)
    for key in NOISE:
        if key in new and before + added > 0:
            total[key] = (total.get(key, 0.0) * before + float(new[key]) * added) / (before + added)
    for key, value in new.items():
        if key in NOISE:
            continue
        if key == "screen.samples":
            total[key] = float(value)
        elif key.endswith("min_concurrency"):
            total[key] = min(total.get(key, value), value)
        elif not key.endswith("_rate"):
            total[key] = total.get(key, 0.0) + float(value)
    if "screen.rows" in total and "screen.failed_rows" in total:
        total["screen.failure_rate"] = total["screen.failed_rows"] / max(total["screen.rows"], 1.0)


def screen_in_looks(exp: Any, profiles: Profiles) -> SequentialScreening:
    """Screen the case's sample (`exp`: the popfair.case.population.PopulationCase; `profiles`: its
    whole planned sample, drawn before any answer) in looks and stop by `exp.sequential`'s rule."""
    settings = exp.sequential
    assert settings is not None and exp.design is not None
    design = exp.design
    rules = rules_of(design)
    stream = rules.stream(exp.population, exp.occupation, profiles, exp.seed)
    target_name = resolve_target(design, settings, profiles.outcome, exp.population)
    target = target_info(target_name, profiles)
    groups = rules.groups(target_name, profiles)
    planned = looks_for(stream.n_units, n_looks=settings.looks, batch=settings.batch)
    full = _restrict(profiles, stream.unit, 0, stream.n_units)
    record = SequentialRecord(settings, target, stream, planned, prompts_planned=rules.prompt_count(full))
    unit_of = dict(zip(profiles.table["applicant_id"], stream.unit))
    screener = exp.screener
    cap = screener.max_cost_usd  # API screeners' budget (Screener: None)
    prompts: list[Document] = []
    results: list[ScreenResult] = []
    parts: list[pd.DataFrame] = []
    metrics: dict[str, float] = {}
    done = 0
    try:
        for k, n in enumerate(planned, start=1):
            if cap is not None:
                remaining = cap - metrics.get("screen.cost_usd", 0.0)
                if remaining <= 0:
                    record.stopped_by = f"the budget max_cost_usd={cap:g} is spent"
                    break
                screener.max_cost_usd = remaining  # this look may spend what is left
            batch = _restrict(profiles, stream.unit, done, n)
            shown = exp.prompts(batch, store=exp.documents, progress=False)
            answers = screener.screen(batch.jobs, shown.prompts, batch.outcome)
            _add_metrics(metrics, screener.metrics())
            scored = design.scored(batch, shown.rows, shown.documents, shown.prompts, answers)
            parts.append(scored.assign(**{UNIT: scored["applicant_id"].map(unit_of).to_numpy()}))
            prompts.extend(shown.prompts)
            results.extend(answers)
            done = n
            all_rows = pd.concat(parts, ignore_index=True)
            ok = all_rows[(all_rows[WORLD] == FACTUAL) & all_rows["error"].isna()]
            values = rules.unit_values(target_name, ok, profiles, settings)
            record.looks = path(rules, target_name, values, planned[:k], groups, profiles, settings)
            iv = record.looks[-1].interval
            why = target.decide(settings.rule, iv, settings.margin)
            log.info(
                "sequential look %d/%d: %d %s, %s %.4g [%.4g, %.4g]%s",
                k, len(planned), n, stream.what, target.label, iv.estimate * target.scale,
                iv.low * target.scale, iv.high * target.scale, f"; stop: {why}" if why else "",
            )  # fmt: skip
            if why is not None:
                record.stopped_by = why
                break
        else:
            record.stopped_by = f"the planned n is spent ({stream.size_key})"
    finally:
        if cap is not None:
            screener.max_cost_usd = cap
    record.prompts_used = len(prompts)
    record.cost_usd = metrics.get("screen.cost_usd", 0.0)
    record.calls_paid = int(metrics.get("screen.answered", 0.0))
    all_rows = pd.concat(parts, ignore_index=True) if parts else profiles.table.iloc[:0].assign(**{UNIT: []})
    if record.looks:
        ok = all_rows[(all_rows[WORLD] == FACTUAL) & all_rows["error"].isna()]
        values = rules.unit_values(target_name, ok, profiles, settings)
        try:
            record.fixed = fixed_interval(
                rules, target_name, values, record.n_used, groups, profiles, settings.alpha, exp.seed
            )
        except Exception as exc:  # noqa: BLE001 - too few units for a fixed-n interval: say so, keep the record
            log.warning("sequential: no fixed-n interval at the n used: %s", exc)
    # the case's later stages expect the factual rows first, then the counterfactual worlds
    order = np.argsort((all_rows[WORLD] != FACTUAL).to_numpy(), kind="stable") if len(all_rows) else np.arange(0)
    if len(prompts) == len(all_rows):
        prompts = [prompts[i] for i in order]
        results = [results[i] for i in order]
    scored_rows = all_rows.iloc[order].drop(columns=UNIT).reset_index(drop=True)
    used = _restrict(profiles, stream.unit, 0, done)
    return SequentialScreening(used, prompts, results, scored_rows, metrics, record)


def record_artifacts(record: SequentialRecord) -> dict[str, Any]:
    return {"sequential/looks.csv": record.table(), "sequential/summary.txt": "\n".join(record.sentences())}


__all__: Sequence[str] = ["SequentialRecord", "SequentialScreening", "record_artifacts", "screen_in_looks"]
