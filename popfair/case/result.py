"""What a generated case returns (`RunResult`, a `popfair.case.base.CaseResult`) and shows its screener (`CasePrompts`), and an effects
table as MLflow metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from popfair.case.base import CaseResult
from popfair.core.types import Document, Effects, Profiles
from popfair.estimate.impact_ratio.table import ImpactRatios


@dataclass(kw_only=True)
class RunResult(CaseResult):
    """What `PopulationCase.run` returns (popfair.case.base.CaseResult, with a generated case's own parts).

    Parameters
    ----------
    effects : Effects
        The estimator's table (estimate, se, ci_low, ci_high, unit, ...), pattern labels, metrics, artifacts.
    scored : DataFrame
        One row per sampled applicant: profile columns, document, raw answer, y, error.
    run_id : str or None
        The MLflow run (None with tracking=none).
    notes, timings, audit, power, report, sequential
        As `CaseResult` declares them.
    samples : dict, optional
        A few rendered documents, logged under `samples/`.
    screening : dict, optional
        The screener's metrics for this case (calls, tokens, cost, failures by reason).
    profiles : Profiles, optional
        The sampled applicants and counterfactual worlds (not logged).
    scored_worlds : DataFrame, optional
        The counterfactual world rows as scored (an estimator's `WorldRequest`).

    Examples
    --------
    >>> result = popfair.Experiment.from_config(cfg).run()  # doctest: +SKIP
    >>> result.effects.table, result.effects.pattern, result.failure_rate  # doctest: +SKIP
    """

    scored: pd.DataFrame
    samples: dict[str, Any] = field(default_factory=dict)  # a few rendered documents, logged as artifacts
    screening: dict[str, float] = field(default_factory=dict)  # screener.metrics() of the case's screening
    profiles: Profiles | None = None  # the sampled applicants and counterfactual worlds (not logged)
    scored_worlds: pd.DataFrame | None = None  # the counterfactual world rows as scored (estimator design)
    data_sha256: str = ""  # sha256 of the applicants' rows as drawn: the run's dataset input, the report's source

    @property
    def failure_rate(self) -> float:
        return float(self.scored["error"].notna().mean()) if len(self.scored) else 0.0

    @property
    def n_rows(self) -> int:
        return len(self.scored)

    @property
    def n_failed(self) -> int:
        return int(self.scored["error"].notna().sum())


@dataclass
class CasePrompts:
    """What a case shows its screener (`PopulationCase.prompts`): the rows to screen (factual then
    counterfactual worlds, column `world`), each row's rendered document, and the design's prompts."""

    rows: pd.DataFrame
    documents: list[Document]
    prompts: Sequence[Document]
    placebo: Any = None  # a PlaceboSet (config renderer.placebo): edited documents screened again

    @property
    def screened(self) -> Sequence[Document]:
        """Everything the screener is asked: the design's prompts, then any placebo re-screens."""
        return self.prompts if self.placebo is None else [*self.prompts, *self.placebo.all_prompts]


def effects_metrics(effects: Effects) -> dict[str, float]:
    """An effects table as MLflow metrics, one scheme and each number once: `<effect>.<column>` for the
    numbers of every identified effect (an effect that is not identified logs no estimate and no
    `significant` flag, only what was measured on counterfactual resumes beside it, `intv_*`; its
    `<effect>.identified` tag says why, popfair.report.run_page), plus the
    estimator's own metrics. Impact ratios are logged once, as the estimator's `ll144.*` metrics (the
    scheme every case's outcome audit uses), not again row by row."""
    own = {k: v for k, v in effects.metrics.items() if not k.endswith(".identified")}
    if isinstance(effects.detail, ImpactRatios):
        return own
    metrics: dict[str, float] = {}
    table = effects.table
    identified = table["identified"].fillna(True).astype(bool) if "identified" in table else None
    for effect, row in table.iterrows():
        gated = identified is not None and not identified[effect]
        for column, value in row.items():
            # an effect the factual data cannot answer keeps only what was measured on counterfactual
            # resumes beside it (estimator=both's intv_* columns)
            if column == "identified" or (gated and not str(column).startswith("intv_")):
                continue
            if isinstance(value, (int, float)) and math.isfinite(value):
                metrics[f"{effect}.{column}"] = value
    metrics.update(own)
    return metrics
