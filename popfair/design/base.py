"""The design seam: what a study design is. Every design names the estimators that apply (read from
popfair.estimate.registry) and checks a composed case; a design that asks a screener (`ScreenedDesign`)
also says what is asked, how applicants are grouped into prompts and how a reply becomes a value.
The pipeline stages (population, render, screen, estimate) are shared; everything one design knows
lives in its own folder or module of popfair.design."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import Document, Outcome, Profiles, ScreenResult
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.estimate.registry import estimators_for

if TYPE_CHECKING:
    from popfair.design.sequential import SequentialRules


@dataclass(frozen=True)
class PreviousRun:
    """A previous run's logged numbers (`plan.from_run`): its metrics as MLflow holds them
    (`<effect>.<column>`, n_rows, plan.n, ...) and where they were read."""

    source: str
    metrics: Mapping[str, float]

    def get(self, *names: str) -> float | None:
        for name in names:
            value = self.metrics.get(name)
            if value is not None and math.isfinite(value):
                return float(value)
        return None


PowerLine = Callable[[Any, PowerSettings, "PreviousRun | None"], "PowerPlan | None"]


class Design(Protocol):
    """One study design (population audit, paired audit, ranking audit, table audit, ...).

    name: the design's name (a population's `design` attribute names it; DESIGNS registers it).
    estimators: names of the estimators that apply to its data (popfair.estimate.registry).
    asks_screener: whether a screener is asked (False: the decisions exist already, the table design).
    power_line: what its main test can detect at the planned n (its sample -> PowerPlan), or None.
    power_imports: modules the power line imports at first use (a sweep imports them beside its worker).
    sequential: its sequential audit's rules (units, targets, values), or None: no sequential audit."""

    name: str
    asks_screener: bool
    power_line: PowerLine | None
    power_imports: tuple[str, ...]
    sequential: SequentialRules | None

    @property
    def estimators(self) -> tuple[str, ...]: ...

    def check_case(self, parts: Mapping[str, Any]) -> None:
        """Cross-group checks of a composed case (config group -> built component), before any work."""
        ...


class ScreenedDesign(Design, Protocol):
    """A design that asks a screener.

    outcome: what the screener is asked; names the prompt files `<outcome>_system` / `<outcome>_user`.
    prompt_files: the default prompt file of each part ("system", "user") under conf/prompts/."""

    outcome: Outcome
    prompt_files: Mapping[str, str]

    def parse_reply(self, raw: str) -> tuple[float | None, str | None]:
        """A model's reply as y: (value, None), or (None, reason) for an unparseable reply."""
        ...

    def reply_tokens(self, users: Sequence[str]) -> np.ndarray | None:
        """Output tokens a reply to each user message is expected to take (dry-run plans), or None:
        the screener's `expected_output_tokens`."""
        ...

    def prompts(self, profiles: Profiles, rows: pd.DataFrame, documents: Sequence[Document]) -> Sequence[Document]:
        """What the screener is shown: one Document per prompt, built from the applicants' documents
        (`rows`: every row to screen, factual then counterfactual worlds; `documents`: theirs)."""
        ...

    def scored(
        self,
        profiles: Profiles,
        rows: pd.DataFrame,
        documents: Sequence[Document],
        prompts: Sequence[Document],
        results: Sequence[ScreenResult],
    ) -> pd.DataFrame:
        """The applicant rows with the screener's answers: columns document, raw, y, error (and any
        design-specific columns), one row per row of `rows`, in order."""
        ...


class DesignBase:
    """What every design shares: its estimators are those registered for its name; by default it
    plans no power line and has no sequential audit."""

    power_line: PowerLine | None = None
    power_imports: tuple[str, ...] = ()
    sequential: SequentialRules | None = None

    name: str
    asks_screener = True

    @property
    def estimators(self) -> tuple[str, ...]:
        return estimators_for(self.name)

    def check_case(self, parts: Mapping[str, Any]) -> None:
        check_estimator(self, parts["estimator"])


class OnePromptPerDocument(DesignBase):
    """Designs that show the screener one applicant's document per prompt (population, paired)."""

    def prompts(self, profiles: Profiles, rows: pd.DataFrame, documents: Sequence[Document]) -> Sequence[Document]:
        return documents

    def reply_tokens(self, users: Sequence[str]) -> np.ndarray | None:
        return None  # a word or a number: the screener's expected_output_tokens

    def scored(
        self,
        profiles: Profiles,
        rows: pd.DataFrame,
        documents: Sequence[Document],
        prompts: Sequence[Document],
        results: Sequence[ScreenResult],
    ) -> pd.DataFrame:
        # The texts stay Python objects: inferring a string column copies every resume into Arrow
        # (0.2-0.4 CPU s for the default case's 18,963 nurses, on the critical path of every run).
        def texts(values: list[Any]) -> pd.Series:
            return pd.Series(values, index=rows.index, dtype=object)

        return rows.assign(
            document=texts([d.text for d in documents]),
            raw=texts([r.raw for r in results]),
            y=[r.value for r in results],
            error=[r.error for r in results],
        )


def check_estimator(design: Design, estimator: Any, why: str = "") -> None:
    """ConfigError unless `estimator` applies to `design`: registered for it in
    popfair.estimate.registry. `why` says, in the design's words, what the others need."""
    name = estimator.name
    if name not in design.estimators:
        reason = f" ({why})" if why else ""
        raise ConfigError(
            f"estimator: {name!r} does not apply to the {design.name} design{reason}; choose one of "
            f"{', '.join(design.estimators)}"
        )


def plan_power(
    design: Design, sample: Any, settings: PowerSettings, previous: PreviousRun | None = None
) -> PowerPlan | None:
    """The power line of a case of `design` for its sample (the case's Profiles, or the table's category
    counts): None when the design has none, or plan.enabled is false."""
    if not settings.enabled or design.power_line is None:
        return None
    return design.power_line(sample, settings, previous)
