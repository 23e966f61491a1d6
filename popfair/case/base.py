"""The contract every kind of case keeps: `Case` (run, plan, describe), its typed `CaseResult`, the
`CasePlan` of a dry run, the `CaseSettings` composed once from config (popfair.case.compose), the
`RunContext` a sweep gives a case, and the registry of case kinds. A new kind of case is one module
(a class with `compose(parts, settings)`, `run`, `plan` and `describe`) and one `register_case` line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd
from hydra.utils import get_object

from popfair.core.errors import ConfigError
from popfair.core.types import Effects
from popfair.design.sequential import SequentialSettings
from popfair.estimate.power import PowerPlan

if TYPE_CHECKING:
    from popfair.case.power_plan import CasePower
    from popfair.track.mlflow_tracker import MlflowTracker

MAX_RUN_NAME = 240  # MLflow keeps run names up to 250 characters


@dataclass(frozen=True)
class RunContext:
    """What the command that runs a case knows and the case does not: the sweep's parent MLflow run,
    the case's extra tags (its options, the sweep's varying overrides) and what its run name shows
    beside the case's own parts when config `run_name` is null (`RunName`)."""

    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    name: RunName = field(default_factory=lambda: RunName())


@dataclass(frozen=True)
class CaseSettings:
    """A case's own settings, read from the composed config once and checked (popfair.case.compose,
    `case_settings`); nothing below the compose step reads the config.

    seed: the sample's seed. run_name: the MLflow run name (None: the case name and `context`'s
    suffix). config: the resolved config, logged only. audit_report: auto, True or False.
    max_failure_share: a share of failed screens that stops the case (None: never). document_store
    and cache_location: where rendered documents are kept (None: nowhere). sequential: the looks
    (config `sequential`). power: config `plan.*` and the run it names. dry_run: planning only."""

    seed: int = 0
    run_name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    audit_report: Any = "auto"
    max_failure_share: float | None = None
    cache_location: str | None = None
    sequential: SequentialSettings = field(default_factory=lambda: SequentialSettings.from_config(None))
    power: CasePower | None = None
    dry_run: bool = False
    context: RunContext = field(default_factory=RunContext)


@dataclass(frozen=True)
class RunName:
    """What a case's MLflow run name shows beside the case's own parts (`Case.name_parts`: screener,
    occupation, protected attribute, renderer, design), so that runs people compare differ where the
    run list shows them (about 20 characters): the overrides a sweep varies first (`varied` are
    their keys, whose parts lead too), then the case's parts, then the other overrides that set a
    value (`population.n=2000`), then `#` and a short hash of the settings too long to show that
    change the result (`table.columns.*`), so two runs with different settings never share a name."""

    varied: frozenset[str] = frozenset()
    front: tuple[str, ...] = ()
    differs: tuple[str, ...] = ()
    digest: str = ""

    def of(self, parts: Sequence[tuple[str, str]]) -> str:
        lead = [p for p in parts if p[0] in self.varied] + [p for p in parts if p[0] not in self.varied]
        words = [*self.front, "-".join(option for _, option in lead), *self.differs]
        if self.digest:
            words.append("#" + self.digest)
        name = " ".join(w for w in words if w)
        return name if len(name) <= MAX_RUN_NAME else name[: MAX_RUN_NAME - 3] + "..."


def run_name_of(parts: Sequence[tuple[str, str]], run_name: str | None, name: RunName) -> str:
    """The MLflow run name: config `run_name`, else the case's parts and what `name` adds."""
    return run_name if run_name else name.of(parts)


@dataclass(kw_only=True)
class CaseResult:
    """What every case's `run` returns, its optional parts declared: the effects table (with its
    `unit` column), notes, timings, the outcome audit, the power plan, the auditor's report, and
    where a kind of case has them, its periods, a watch's look, the sequential looks and the path of
    a report file. `n_rows` and `n_failed` count what the estimate read and what it left out
    (`failed_label` says which: failed screens, rows left out)."""

    effects: Effects
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    audit: Effects | None = None  # the LL144 impact ratios beside another estimator (config outcome_audit)
    power: PowerPlan | None = None  # what the main test can detect at this n (config plan.*)
    report: dict[str, str | bytes] = field(default_factory=dict)  # the auditor's report (popfair.report.audit)
    periods: Any = None  # impact ratios by period (PeriodRatios, config table.period)
    watch: Any = None  # a watch's look (popfair.case.table_watch.WatchLook)
    sequential: Any = None  # a sequential case's looks (popfair.case.looks.SequentialRecord)
    report_path: Path | None = None  # a report file the case wrote beside its run (table_report.csv)
    failed_label: str = "failed screens"

    @property
    def units(self) -> list[str]:
        """The unit of each effect row (popfair.estimate's `Explains`: the estimator's own units)."""
        table = self.effects.table
        return [str(u) for u in table["unit"]] if "unit" in table else []

    @property
    def n_rows(self) -> int:
        raise NotImplementedError

    @property
    def n_failed(self) -> int:
        raise NotImplementedError

    def printed(self) -> bool:
        """Whether the console shows its summary: a watch's look that read no new rows has none."""
        return self.watch is None or bool(self.watch.rows_read)


@dataclass
class CasePlan:
    """Calls, tokens and dollars of one case; `new_*` leave out answers earlier cases already bought."""

    case_name: str
    screener: str
    renderer: str
    documents: int
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    new_calls: int
    new_input_tokens: int
    new_output_tokens: int
    new_cost_usd: float
    image_estimated_from_text: bool = False
    estimator_documents: int = 0  # of `documents`, the counterfactual worlds the estimator declared (interventional)
    note: str = ""  # what the estimator says about the case's size (ranking: trials needed for a given effect)
    cached_calls: int = 0  # distinct prompts the response cache already answers: reused, not paid (a grown case)
    power: str = ""  # what the main test can detect at this n, and its assumptions (config plan.*)
    mde: float | None = None  # the minimum detectable effect, in plan.effect's unit

    @classmethod
    def free(cls, case_name: str, kind: str, power: PowerPlan | None = None) -> CasePlan:
        """The plan of a case that screens nothing (a table): nothing is called, nothing costs."""
        what = f"none ({kind})"
        return cls(case_name, what, what, 0, 0, 0, 0, 0.0, 0, 0, 0, 0.0,
                   power="" if power is None else power.line(), mde=None if power is None else power.mde)  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        estimate = " (image tokens from the text layout)" if self.image_estimated_from_text else ""
        own = f" ({self.estimator_documents:,} for the estimator)" if self.estimator_documents else ""
        return (
            f"plan {self.case_name}: {self.documents:,} documents{own}, {self.calls:,} calls "
            f"({self.new_calls:,} not yet planned), {self.input_tokens:,} input + "
            f"{self.output_tokens:,} output tokens, ${self.cost_usd:,.2f} "
            f"(${self.new_cost_usd:,.2f} new){estimate}"
            + (f"; {self.cached_calls:,} answers reused from the response cache" if self.cached_calls else "")
            + (f"\n  {self.note}" if self.note else "")
            + (f"\n  {self.power}" if self.power else "")
        )


class Planner(Protocol):
    """What prices a case that screens (popfair.sweep.plan.Planner): its screener's calls and dollars,
    with what the cases planned before it in this process share."""

    def price(self, case: Any) -> CasePlan: ...


@dataclass(frozen=True)
class CaseDescription:
    """What a case is, in words: its name (`<occupation>-<attribute>-...`) and its kind."""

    name: str
    kind: str


class Case(Protocol):
    """A case: built once by popfair.case.compose (never edited after), then run or planned."""

    tracker: MlflowTracker

    def case_name(self) -> str: ...

    def describe(self) -> CaseDescription: ...

    def run(self) -> CaseResult: ...

    def plan(self, planner: Planner) -> CasePlan: ...


@dataclass(frozen=True)
class CaseKind:
    """A registered kind of case: its class (`module.Class`, with `compose(parts, settings)`) and the
    config group that chooses it when set (None: the default kind)."""

    name: str
    target: str
    chosen_by: str | None = None

    def load(self) -> Any:
        return get_object(self.target)


CASE_KINDS: dict[str, CaseKind] = {}


def register_case(name: str, target: str, chosen_by: str | None = None) -> None:
    """Register (or re-register) a kind of case (fields: `CaseKind`)."""
    if chosen_by is None and any(k.chosen_by is None and k.name != name for k in CASE_KINDS.values()):
        raise ConfigError(f"case kind {name!r}: only one kind is the default; give it chosen_by=<config group>")
    CASE_KINDS[name] = CaseKind(name, target, chosen_by)


def kind_for(chosen: set[str], kinds: dict[str, CaseKind] | None = None) -> CaseKind:
    """The kind of case (of `kinds`, default: those registered) whose choosing config group is among
    the groups set (`chosen`), else the default kind."""
    kinds = CASE_KINDS if kinds is None else kinds
    for kind in reversed(list(kinds.values())):  # the latest registered wins
        if kind.chosen_by is not None and kind.chosen_by in chosen:
            return kind
    return next(k for k in kinds.values() if k.chosen_by is None)


register_case("population", "popfair.case.population.PopulationCase")  # the generated pipeline
register_case("table", "popfair.case.table.TableCase", chosen_by="table")  # decisions that exist


def empty_effects() -> Effects:
    return Effects(table=pd.DataFrame())
