"""What the PopResume SCM knows of one occupation: its PUMS records and fitted conditionals."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from popfair.population.experience import ExperienceModel
from popfair.population.scm import DiscreteConditional


@dataclass(frozen=True)
class OccupationModel:
    """Everything the SCM needs for one occupation: its records and fitted conditionals.

    State and education are fitted twice, once for each population the factual rows can be: every
    record once (`population.n: null`, the default) or draws weighted by PWGTP (`population.n`). The
    worlds must reproduce the factual rows, and the two differ where the weights vary with X: the
    transported CA/TX rows are self-weighting while the other states' rows are the raw sample, so by
    rows 22% of Black nurses are in CA/TX and by weight 14%."""

    records: pd.DataFrame  # decoded PUMS records (after the below-HS policy), CA/TX transported rows last
    survey_year: int
    dropped_below_hs: int
    state: DiscreteConditional  # PUMS-weighted: the population a weighted draw represents
    education: DiscreteConditional
    state_by_row: DiscreteConditional  # every record counted once: the population of all records
    education_by_row: DiscreteConditional
    experience: ExperienceModel
    source: str  # which population this is (logged as population.source)
    transport: pd.DataFrame | None  # one row per transported state (None: no transport)

    def conditionals(self, weighted: bool) -> tuple[DiscreteConditional, DiscreteConditional]:
        """(state, education) for factual rows that are PUMS-weighted draws, or every record once."""
        return (self.state, self.education) if weighted else (self.state_by_row, self.education_by_row)
