"""What the PopResume SCM knows of one occupation: its PUMS records and fitted conditionals."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from popfair.population.experience import ExperienceModel
from popfair.population.scm import DiscreteConditional


@dataclass(frozen=True)
class OccupationModel:
    """Everything the SCM needs for one occupation: its records and fitted conditionals."""

    records: pd.DataFrame  # decoded PUMS records (after the below-HS policy), CA/TX transported rows last
    survey_year: int
    dropped_below_hs: int
    state: DiscreteConditional
    education: DiscreteConditional
    experience: ExperienceModel
    source: str  # which population this is (logged as population.source)
    transport: pd.DataFrame | None  # one row per transported state (None: no transport)
