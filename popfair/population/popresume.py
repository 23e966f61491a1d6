"""PopResume population: applicants drawn from ACS PUMS microdata of one occupation."""
from __future__ import annotations

import numpy as np
import pandas as pd

from popfair.errors import ConfigError, require
from popfair.population.experience import draw_experience
from popfair.population.names import draw_first_names, draw_surnames
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute
from popfair.population.pums import (BUNDLED_NOTE, SURVEY_YEAR, decode_education, decode_race,
                                     load_pums, state_table)
from popfair.types import Profiles, Roles

MAX_N = 5_000_000  # beyond this a resample is a typo, not a study


class PopResumePopulation:
    """Every PUMS record of the occupation (default) or `n` draws weighted by PWGTP.

    Records below high school are dropped (resumes in the paper's seven education levels start
    at HS/GED); their count is reported in the run's notes."""

    def __init__(self, n: int | None = None, pums_path: str | None = None) -> None:
        require(n is None or (isinstance(n, int) and 0 < n <= MAX_N), "population.n",
                f"must be null (all records) or an integer in 1..{MAX_N}, got {n!r}")
        self.n = n
        self.pums_path = pums_path

    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        rng = np.random.default_rng([seed, 1])
        pums = load_pums(self.pums_path)
        records = pums[pums["OCCP"] == occupation.occp]
        if records.empty:
            raise ConfigError(f"occupation.occp: no PUMS records with OCCP {occupation.occp} "
                              f"(codes present: {sorted(pums['OCCP'].unique().tolist())})")
        notes = [] if self.pums_path else [BUNDLED_NOTE]
        edu = decode_education(records["SCHL"])
        below_hs = int(edu.isna().sum())
        if below_hs:
            notes.append(f"{below_hs} PUMS records below high school dropped "
                         "(not one of the seven resume education levels)")
        records = records[edu.notna()].reset_index(drop=True)
        if self.n is not None:
            weights = records["PWGTP"].to_numpy(dtype=float)
            pick = rng.choice(len(records), size=self.n, replace=True, p=weights / weights.sum())
            records = records.iloc[pick].reset_index(drop=True)
            records["PWGTP"] = 1  # a weighted resample is self-weighting

        states = state_table().reindex(records["ST"])
        table = pd.DataFrame({
            "applicant_id": [f"{occupation.key}-{i:06d}" for i in range(len(records))],
            "job_id": occupation.key,
            "gender": np.where(records["SEX"] == 1, "male", "female").astype(object),
            "race": decode_race(records["RAC1P"], records["HISP"]),
            "age": records["AGEP"].to_numpy(),
            "state": states["usps"].to_numpy(),
            "region": states["census_region"].to_numpy(),
            "edu_level": decode_education(records["SCHL"]).to_numpy(),
            "weight": records["PWGTP"].to_numpy(),
        })
        table["birth_year"] = SURVEY_YEAR - table["age"]
        table["exp_year"] = draw_experience(table["gender"], table["age"], table["edu_level"], rng)
        table["first_name"] = draw_first_names(table["gender"].map({"female": "F", "male": "M"}),
                                               table["birth_year"], rng)
        table["surname"] = draw_surnames(table["race"], rng)
        return Profiles(table=table, roles=roles_for(protected), jobs={occupation.key: occupation.job},
                        notes=notes)


def roles_for(protected: ProtectedAttribute) -> Roles:
    """SFM roles: the other demographic attribute and age are confounders Z."""
    other = "race" if protected.name == "gender" else "gender"
    return Roles(x=protected.name, x0=protected.x0, x1=protected.x1, z=(other, "age"),
                 b=("edu_level", "exp_year"), r=("first_name", "surname", "state"))
