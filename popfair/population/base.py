"""Population stage interface: who the applicants are."""

from __future__ import annotations

from typing import Protocol

from popfair.core.types import Profiles
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute


class Population(Protocol):
    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        """Draw applicants (one row each) with their SFM roles for the given protected attribute."""
        ...
