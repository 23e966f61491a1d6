"""Population stage interface: who the applicants are."""

from __future__ import annotations

from typing import Protocol

from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute
from popfair.types import Profiles


class Population(Protocol):
    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        """Draw applicants (one row each) with their SFM roles for the given protected attribute."""
        ...
