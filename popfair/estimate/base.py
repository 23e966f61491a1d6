"""Estimate stage interface: scored table + SFM roles -> effects table with inference."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pandas as pd

from popfair.errors import EstimationError
from popfair.population.base import Population
from popfair.render.base import Renderer
from popfair.screen.base import Screener
from popfair.types import CallPlan, Document, Effects, Profiles, Roles

EFFECT_COLUMNS = ["estimate", "se", "ci_low", "ci_high"]


class Estimator(Protocol):
    name: str

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        """`data` holds one row per scored applicant with the role columns and outcome `y`
        (failed screens already removed). Positive effects favour roles.x1."""
        ...


@dataclass(frozen=True)
class Pipeline:
    """The case's components, for estimators that query them themselves (interventional).

    `Experiment.from_config` binds them before any work (so an incompatible case fails early) and
    `Experiment.run` binds again with `profiles`, the applicants it sampled."""

    population: Population
    renderer: Renderer
    screener: Screener
    profiles: Profiles | None = None


class PipelineEstimator(Estimator, Protocol):
    """An estimator that renders and screens documents of its own (e.g. counterfactual resumes)."""

    def bind(self, pipeline: Pipeline) -> None:
        """Keep the components; raise ConfigError when they cannot support the estimate."""
        ...

    def extra_documents(self, profiles: Profiles, renderer: Renderer | None = None) -> list[Document]:
        """The documents it would screen beyond the factual ones (dry runs plan them too)."""
        ...

    def extra_plan(self, profiles: Profiles, documents: Sequence[Document],
                   renderer: Renderer | None = None) -> CallPlan:
        """Calls, tokens and dollars its own screening adds to screening `documents` (dry runs)."""
        ...


def contrast_rows(data: pd.DataFrame, roles: Roles, y: str) -> pd.DataFrame:
    """Rows in the x0 / x1 contrast with a finite outcome; clear errors when that is impossible."""
    missing = [c for c in (roles.x, y) if c not in data.columns]
    if missing:
        raise EstimationError(f"scored table lacks columns {missing}")
    rows = data[data[roles.x].isin([roles.x0, roles.x1]) & data[y].notna()]
    counts = rows[roles.x].value_counts()
    for level in (roles.x0, roles.x1):
        if counts.get(level, 0) < 2:
            raise EstimationError(
                f"{roles.x}={level!r} has {counts.get(level, 0)} scored rows; need at least 2 "
                "for a contrast (is the sample too small or the level misspelled?)")
    return rows
