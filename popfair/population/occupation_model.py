"""What the PopResume SCM knows of one occupation: its PUMS records and fitted conditionals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.population.experience import AGE_GROUPS, ExperienceModel
from popfair.population.pums import EDU_LEVELS, GENDERS, RACES
from popfair.population.scm import DiscreteConditional

SMOOTHING = 10.0  # pseudo-records pulling a sparse conditional cell toward its coarser parent
REGIONS = ("Northeast", "Midwest", "South", "West")


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


def fit_conditionals(records: pd.DataFrame, weight: np.ndarray) -> tuple[DiscreteConditional, DiscreteConditional]:
    """The SCM's state | (gender, race, age group) and education | (gender, race, age group, region)
    conditionals (popfair.population.popresume), fitted with `weight`, each backing off to coarser
    cells where a cell is sparse."""
    levels: dict[str, Sequence[str]] = {"gender": GENDERS, "race": RACES, "age_group": AGE_GROUPS, "region": REGIONS}
    state = DiscreteConditional.fit(
        records,
        "state",
        tuple(sorted(records["state"].unique())),
        [("gender", "race", "age_group"), ("gender", "race"), ("race",)],
        levels,
        weight,
        SMOOTHING,
    )
    education = DiscreteConditional.fit(
        records,
        "edu_level",
        EDU_LEVELS,
        [("gender", "race", "age_group", "region"), ("gender", "race", "age_group"), ("gender", "race"), ("gender",)],
        levels,
        weight,
        SMOOTHING,
    )
    return state, education
