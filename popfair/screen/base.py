"""The screener seam (`Screener`): what every screener does, and the optional abilities a screener
declares by overriding the defaults (never probed with getattr)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from popfair.core.errors import require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult

_NONE: Mapping[str, Any] = MappingProxyType({})


class Screener(ABC):
    """A screener: `screen` and `plan`, and every optional ability with its default. A screener
    subclasses this and overrides what it has; the pipeline, the plan, pre-flight and the report
    read these names (a new screener is one module and one config file under conf/screener/).

    Abilities (class attributes unless noted):
    audits_a_tool: it audits an outside tool (http, file): the run writes the auditor's report.
    plans_real_documents: a dry run plans the real pages (image cache keys and files need them).
    answers_rankings: it can rank k candidates in one prompt (the ranking design).
    display_name: the tool's name in reports (default: `name`).
    score_range: the scale its scores are on, (0, 100) as popfair asks; a power line before any score
        exists takes a quarter of it as the score SD (popfair.design.base.ScoreScale).
    reads: the profile columns its answer depends on, where that is known (simulated: its
        coefficients' columns), else None: it reads the document (popfair.estimate.pse.estimand).
    problems: the rows its answers had problems with (file: the results sheets'), or None.
    run_tags / popfair_choices: MLflow tags of the run (the route chosen and why; choices neither
        paper states, one `popfair_choice.<key>` tag each).
    metrics(): its counters for the case (calls, cache hits, tokens, dollars, failures by reason).
    Hosted-model abilities (pre-flight reads them): provider (the request adapter, a
    `popfair.screen.providers.Provider` that declares its probe and error hints, or None),
    api_key_env (the variable its key comes from), route / routes (the route taken, every route
    with its variable), missing_key (built keyless for a dry run). samples: answers asked per prompt
    (screener.samples; the plan's MDE counts them)."""

    name: str
    audits_a_tool: ClassVar[bool] = False
    plans_real_documents: ClassVar[bool] = False
    answers_rankings: ClassVar[bool] = False
    display_name: str | None = None
    score_range: ClassVar[tuple[float, float]] = (0.0, 100.0)
    reads: frozenset[str] | None = None
    problems: Any = None
    run_tags: Mapping[str, str] = _NONE
    popfair_choices: Mapping[str, Any] = _NONE
    provider: Any = None
    api_key_env: str | None = None
    route: str | None = None
    routes: Mapping[str, Any] = _NONE
    missing_key: bool = False
    max_cost_usd: float | None = None  # a cap on the dollars a screening may spend (API screeners); None: none
    samples: int = 1  # answers asked per prompt (screener.samples); a document's outcome is their mean
    costs_nothing: bool = False  # offline and free to ask (TF-IDF, embedding, simulated): a plan may pilot it

    @abstractmethod
    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document, in order. `outcome` says what to answer: "score" (0-100)
        or "callback" (1 yes / 0 no). Failures are results with `error` set, never dropped."""

    @abstractmethod
    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Calls, tokens and dollars `screen` would spend (for dry runs and budgets); no calls made."""

    def metrics(self) -> dict[str, float]:
        """The screener's counters for the case (API screeners: calls, cache hits, dollars)."""
        return {}

    def answer_costs(self, plan: CallPlan) -> tuple[float, float] | None:
        """Dollars of a new unit's first answer (its prompt) and of each further answer of the same
        prompt, from its plan (None: not known; the plan then says nothing of answers against units)."""
        return None


def one_answer_per_prompt(name: str, samples: int, why: str) -> None:
    """Refuse `screener.samples` > 1 for a screener whose answer to a prompt cannot vary (`why`): asking
    again would pay for the same answer (ConfigError, one line)."""
    require(
        isinstance(samples, int) and not isinstance(samples, bool) and samples == 1,
        "screener.samples",
        f"{name} {why}, so every answer to a prompt is the same; set samples=1 "
        "(repeated answers are for LLM routes, route=local and HTTP endpoints)",
    )
