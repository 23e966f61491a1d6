"""Population stage interface: who the applicants are."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from popfair.core.types import Profiles
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute


class Population(Protocol):
    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        """Draw applicants (one row each) with their SFM roles for the given protected attribute."""
        ...


# --- optional abilities: declared by defining them, found with isinstance (defaults beside them) -----


@runtime_checkable
class DrawnForDesign(Protocol):
    """A population drawn for a study design of its own (popfair.design: paired, ranking, ...); the
    default is "population" (one resume per prompt, a 0-100 score)."""

    design: str


@runtime_checkable
class Named(Protocol):
    """A population with a name for its dataset input and reports; the default is its class's name."""

    name: str


@runtime_checkable
class SampledToSize(Protocol):
    """A population whose sample size is a setting (`n`; None: every record), so that a sequential
    audit can grow it. Without it, or with n None, the sample cannot grow."""

    n: int | None


def design_name(population: object) -> str:
    """The design a population (or its class) is drawn for (`DrawnForDesign`, default "population")."""
    return str(population.design) if isinstance(population, DrawnForDesign) else "population"


def population_name(population: object) -> str:
    """A population's name (`Named`, default its class's name)."""
    return str(population.name) if isinstance(population, Named) else type(population).__name__


def sample_size(population: object) -> int | None:
    """A population's set sample size (`SampledToSize`; None: every record, or not a setting)."""
    return population.n if isinstance(population, SampledToSize) else None


@runtime_checkable
class GroupsColumns(Protocol):
    """A population whose SFM roles hold some columns grouped from a raw column the documents show
    (role column -> raw column, e.g. PopResume's `name_gender_typicality` from `first_name`, paper
    C.4); the case's estimand notes and grouping check read it (popfair.estimate.pse.estimand). A
    population without it holds every role column raw."""

    grouped_from: ClassVar[Mapping[str, str]]


class _Diagnosed(Protocol):
    diagnostics: bool


P = TypeVar("P", bound=_Diagnosed)


@runtime_checkable
class LogsDiagnostics(Protocol):
    """A population that draws diagnostics with its sample (figures and tables logged with a run as
    MLflow artifacts) and can leave them out: `without_diagnostics()` is the same population drawing
    the same applicants without them (a dry run logs none)."""

    def without_diagnostics(self) -> Population: ...


def copy_without_diagnostics(population: P) -> P:
    """A shallow copy of a population whose `diagnostics` setting is off (the population itself where it
    is off already): what `LogsDiagnostics.without_diagnostics` returns, the population left as it is."""
    if not population.diagnostics:
        return population
    quiet = copy.copy(population)
    quiet.diagnostics = False
    return quiet
