"""Estimate stage interface: scored table + SFM roles -> effects table with inference.

`Estimator` is what every estimator is. The optional capabilities below it (`SizesWorlds`,
`PlansPower`, `DeclaresEstimand`, `DeclaresDocuments`, `ExplainsEffects`, `DeclaresUnits`) are what
the case asks of an estimator that has them, checked with isinstance; an estimator declares one by
subclassing it (mypy then checks its signature) or by defining its method, as
`popfair.estimate.pse.design.counterfactual.Counterfactual` declares the first four."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import pandas as pd

from popfair.core.errors import EstimationError
from popfair.core.types import FACTUAL, WORLD, Effects, Roles, WorldRequest
from popfair.estimate.power import PowerPlan, PowerSettings

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


# --- optional capabilities: declared by subclassing, found by the case with isinstance ----------------


@runtime_checkable
class SizesWorlds(Protocol):
    """An estimator that sizes the worlds it declares (`counterfactuals`) by the case's plan, e.g.
    the sample a target precision needs (the counterfactual design's `target_mde`). Without it the
    case draws `counterfactuals` as declared."""

    def sized(
        self, request: WorldRequest, eligible: int, settings: PowerSettings, previous: Any, scale: Any = None
    ) -> WorldRequest:
        """The world request for a population of `eligible` x0/x1 applicants, under the case's `plan.*`
        `settings`, the `previous` run they name and the screener's score `scale`."""
        ...


@runtime_checkable
class PlansPower(Protocol):
    """An estimator that plans the power of its own sample (the counterfactual design's world budget);
    the case's power line is its plan instead of the design's (popfair.case.power_plan)."""

    def power_plan(self, profiles: Any, settings: PowerSettings, previous: Any, scale: Any = None) -> PowerPlan | None:
        """What the estimator's sample of `profiles` can detect (None: no plan for this sample)."""
        ...


EstimandDesign = Literal["observational", "worlds"]


@runtime_checkable
class DeclaresEstimand(Protocol):
    """An estimator that says how its path-specific effects are measured: "worlds" (on counterfactual
    worlds) or "observational" (from factual data), which words the case's estimand notes
    (popfair.estimate.pse.estimand). An estimator without it is observational."""

    estimand_design: EstimandDesign


@runtime_checkable
class DeclaresDocuments(Protocol):
    """An estimator told what the case's documents display and what its screener reads before it
    estimates, so that it can declare which effects are exact by design (the counterfactual design:
    NDE, where its two worlds show the same document to a screener that reads only the document)."""

    def declare_documents(self, shows: frozenset[str] | None, reads: frozenset[str] | None) -> None:
        """`shows`: the attributes the renderer's documents display (None: undeclared); `reads`: the
        profile columns the screener's answer depends on (None: it reads the document)."""
        ...


def estimand_design(estimator: Estimator) -> EstimandDesign:
    """How `estimator` measures its effects: its declared `estimand_design`, else observational."""
    return estimator.estimand_design if isinstance(estimator, DeclaresEstimand) else "observational"


@dataclass(frozen=True)
class CaseFacts:
    """What an estimator's explanation of its effects may read of the case (`ExplainsEffects`): the
    roles, the protected attributes the documents display (`Renderer.shows`, None: not declared), the
    role columns the population holds grouped and the raw column of each (`GroupsColumns`), the kind of
    documents (text, image, ...) and the columns the screener is known to read (None: the document)."""

    roles: Roles
    shows: frozenset[str] | None = None
    grouped_from: Mapping[str, str] = field(default_factory=dict)
    documents: str = "text"
    reads: frozenset[str] | None = None


@runtime_checkable
class ExplainsEffects(Protocol):
    """An estimator that explains its own effects in this case: notes on what they mean, and a gate
    that withholds what the case cannot answer (the path-specific effects' estimand notes and
    structural gate). A family of estimators may declare it once for its members
    (popfair.estimate.registry.register_family); an estimator with neither explains nothing."""

    def explain(self, effects: Effects, facts: CaseFacts) -> Effects: ...


@runtime_checkable
class DeclaresUnits(Protocol):
    """An estimator that says the unit of each of its effect rows (UNIT_MEANING's names: ratio for
    impact ratios, pp for the paired callback gap, a ranking's rates, ranks and log-worths). Without
    it: `default_unit`."""

    def effect_unit(self, effect: str, outcome: str) -> str: ...


@runtime_checkable
class PricesItself(Protocol):
    """An estimator whose own work takes long enough to price up front (pse_paper's resample-and-refit
    iterations): its line for the dry run and `popfair doctor`, for `n_rows` rows."""

    def price(self, n_rows: int) -> str: ...


UNIT_COLUMN = "unit"


def default_unit(effect: str, outcome: str) -> str:
    """The unit of an effect of an estimator that declares none: a ratio for an impact ratio's row
    (`<metric>/<dimension>/<category>`), score points for differences of scores, else a proportion
    (a difference of 0/1 outcomes or a rate)."""
    if effect.count("/") == 2:
        return "ratio"
    return "points" if outcome == "score" else "proportion"


def unit_of(estimator: object, effect: str, outcome: str) -> str:
    """The unit of one effect row, as the estimator declares it (`DeclaresUnits`), else `default_unit`."""
    return (
        estimator.effect_unit(effect, outcome)
        if isinstance(estimator, DeclaresUnits)
        else default_unit(effect, outcome)
    )


def with_units(table: pd.DataFrame, estimator: object, outcome: str) -> pd.DataFrame:
    """`table` with its `unit` column (one per effect row, as the estimator declares it: `DeclaresUnits`),
    placed after the interval."""
    units = [unit_of(estimator, str(effect), outcome) for effect in table.index]
    out = table.drop(columns=UNIT_COLUMN, errors="ignore")
    position = next((i + 1 for i, c in enumerate(out.columns) if c == "ci_high"), len(out.columns))
    out.insert(min(position, len(out.columns)), UNIT_COLUMN, units)
    return out


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
