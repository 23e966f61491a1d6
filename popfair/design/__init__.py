"""Study designs, one module (or folder) each: how sampled applicants are grouped into prompts, what
the screener is asked, how its replies are read and which estimators apply (`Design`, design/base.py).

- `population`: the population audit (PopResume): one resume per prompt, a 0-100 score.
- `paired`: the paired callback audit: identical profiles differing in a name, a yes/no callback.
- `ranking`: the list-wise audit: k candidates in one prompt, ranked; top-1 rates and impact ratios,
  position effects and a rank-ordered logit.
- `table`: decisions that already exist (a CSV, Parquet, a database table): nothing is asked.

A case's design is named by its population (its `design` attribute; `population` when it has none).
A new design is a new folder here plus its entry in DESIGNS (its estimators register themselves for
it in popfair.estimate.registry); the pipeline stages stay as they are."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, cast

from popfair.core.lazy import lazy_exports
from popfair.population.base import design_name

if TYPE_CHECKING:
    from popfair.design.base import Design, ScreenedDesign

DESIGNS = {  # design name -> the module holding its DESIGN
    "population": "popfair.design.population.design",
    "paired": "popfair.design.paired.design",
    "ranking": "popfair.design.ranking.design",
    "table": "popfair.design.table.design",
}


def design_named(name: str) -> Design:
    """The design called `name` (a key of DESIGNS)."""
    from popfair.core.errors import ConfigError

    if name not in DESIGNS:
        raise ConfigError(f"population.design: unknown design {name!r}; choose one of {', '.join(DESIGNS)}")
    return import_module(DESIGNS[name]).DESIGN


def design_of(population: Any) -> ScreenedDesign:
    """The design a population's applicants are drawn for (a population's designs ask a screener)."""
    return cast("ScreenedDesign", design_named(design_name(population)))


def screened_designs() -> list[ScreenedDesign]:
    """Every registered design that asks a screener, in registration order."""
    return [cast("ScreenedDesign", d) for d in map(design_named, DESIGNS) if d.asks_screener]


def for_outcome(outcome: str) -> ScreenedDesign:
    """The design that asks the screener `outcome` (score, callback, rank)."""
    for design in screened_designs():
        if design.outcome == outcome:
            return design
    from popfair.core.errors import ConfigError

    outcomes = ", ".join(design.outcome for design in screened_designs())
    raise ConfigError(f"outcome: must be one of {outcomes}, got {outcome!r}")


def prompt_defaults() -> dict[str, str]:
    """The default prompt file of every design's question: '<outcome>_<part>' -> file name."""
    return {
        f"{design.outcome}_{part}": file for design in screened_designs() for part, file in design.prompt_files.items()
    }


_EXPORTS = {
    "Design": "popfair.design.base",
    "PairedAuditPopulation": "popfair.design.paired.population",
}
__all__ = ["DESIGNS", "design_named", "design_of", "screened_designs", "for_outcome", "prompt_defaults", *_EXPORTS]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
