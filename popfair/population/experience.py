"""Years of actual work experience given sex, age and education.

Simplest honest model: PSID (Blau & Kahn 2013, 1999 wave, currently employed) cell mean and SD of
total experience by sex x age group x education group, drawn from a normal truncated to
[0, age - 18]. (Issue 3 replaces the cell lookup with an XGBoost regressor and reweighting.)"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
from scipy.stats import truncnorm

from popfair.data import data_file

_AGE_BINS = [18, 25, 30, 35, 40, 45]
_AGE_LABELS = ["18-24", "25-29", "30-34", "35-39", "40-44"]
_EDU_TO_PSID = {"less_than_hs": "1_less_than_12_years", "hs_ged": "2_12_years_hs",
                "some_college": "3_13plus_years_no_ba", "associate": "3_13plus_years_no_ba",
                "bachelor": "4_bachelors", "master": "5_advanced_degree",
                "professional": "5_advanced_degree", "doctorate": "5_advanced_degree"}


@lru_cache(maxsize=1)
def psid_cells() -> pd.DataFrame:
    table = pd.read_csv(data_file("population", "psid_blau_kahn_actual_experience_by_year_sex_age_educ.csv"))
    table = table[(table["sample"] == "currently_employed") & (table["year"] == 1999)
                  & (table["age_group"] != "ALL") & (table["educ_group"] != "ALL")]
    return table.set_index(["sex", "age_group", "educ_group"])[["exp_total_mean", "exp_total_sd"]]


def draw_experience(gender: pd.Series, age: pd.Series, edu_level: pd.Series,
                    rng: np.random.Generator) -> np.ndarray:
    """Experience in whole years, 0 <= exp <= age - 18."""
    age_group = pd.cut(age, _AGE_BINS, right=False, labels=_AGE_LABELS).astype(str)
    keys = pd.MultiIndex.from_arrays([gender.to_numpy(), age_group.to_numpy(),
                                      edu_level.map(_EDU_TO_PSID).to_numpy()])
    cells = psid_cells().reindex(keys)
    upper = (age - 18).to_numpy(dtype=float)
    cell_mean = cells["exp_total_mean"].to_numpy(dtype=float)
    cell_sd = cells["exp_total_sd"].to_numpy(dtype=float)
    mean = np.minimum(np.where(np.isnan(cell_mean), 0.7 * upper, cell_mean), upper)
    sd = np.maximum(np.where(np.isnan(cell_sd), 1.5, cell_sd), 0.5)
    a, b = (0.0 - mean) / sd, (upper + 0.999 - mean) / sd
    draws = truncnorm.ppf(rng.uniform(size=len(age)), a, b, loc=mean, scale=sd)
    draws = np.where(np.isfinite(draws), draws, mean)  # ppf is NaN only deep in a tail
    return np.clip(np.floor(draws), 0, upper).astype(int)
