"""Estimate stage interface: scored table + SFM roles -> effects table with inference."""

from __future__ import annotations

from typing import Protocol

import pandas as pd

from popfair.core.errors import EstimationError
from popfair.core.types import FACTUAL, WORLD, Effects, Roles, WorldRequest

EFFECT_COLUMNS = ["estimate", "se", "ci_low", "ci_high"]


class Estimator(Protocol):
    """A function of the scored table and the roles. An estimator that needs counterfactual worlds
    scored (interventional) declares them in `counterfactuals`; the pipeline then draws, renders and screens
    them with the factual applicants and passes their rows too (column `world`)."""

    name: str
    counterfactuals: WorldRequest | None

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        """`data` holds one row per scored applicant with the role columns and outcome `y`
        (failed screens already removed); with `counterfactuals`, also the world rows (failed screens
        kept, `y` missing). Positive effects favour roles.x1."""
        ...


def factual_rows(data: pd.DataFrame) -> pd.DataFrame:
    """The factual applicants of a scored table (all rows when it has no `world` column)."""
    if WORLD not in data.columns:
        return data
    return data[data[WORLD] == FACTUAL].drop(columns=WORLD)


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
                "for a contrast (is the sample too small or the level misspelled?)"
            )
    return rows
