"""Population stage interface: who the applicants are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Protocol, runtime_checkable

from popfair.core.types import Profiles
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute


class Population(Protocol):
    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        """Draw applicants (one row each) with their SFM roles for the given protected attribute."""
        ...


@runtime_checkable
class GroupsColumns(Protocol):
    """A population whose SFM roles hold some columns grouped from a raw column the documents show
    (role column -> raw column, e.g. PopResume's `name_gender_typicality` from `first_name`, paper
    C.4); the case's estimand notes and grouping check read it (popfair.estimate.pse.estimand). A
    population without it holds every role column raw."""

    grouped_from: ClassVar[Mapping[str, str]]


@runtime_checkable
class LogsDiagnostics(Protocol):
    """A population that draws diagnostics with its sample (figures and tables logged with a run as
    MLflow artifacts) and can leave them out (`diagnostics=False`: a dry run logs none). The
    applicants drawn are the same either way."""

    def sample(
        self, occupation: Occupation, protected: ProtectedAttribute, seed: int, diagnostics: bool = True
    ) -> Profiles: ...
