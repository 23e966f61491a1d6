"""ACS PUMS person records: load (bundled extract or a user's national CSV) and decode."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from popfair.data import data_file
from popfair.errors import DataError

BUNDLED_PUMS = ("population", "acs_pums_2024_1yr_employed_age18_44_top20occ_48states_dc.csv.gz")
BUNDLED_NOTE = ("ACS PUMS 2024 bundled extract covers 48 states + DC: California and Texas are "
                "missing at the source (about 18-26% of these occupations' workers). "
                "Set population.pums_path to the full national PUMS person CSV to include them.")
REQUIRED_COLUMNS = ("ST", "OCCP", "SEX", "AGEP", "RAC1P", "HISP", "SCHL", "PWGTP")
SURVEY_YEAR = 2024

# SCHL -> the paper's seven education levels (ordered). Below-HS codes 1-15 are handled by policy.
EDU_LEVELS = ("hs_ged", "some_college", "associate", "bachelor", "master", "professional", "doctorate")
_SCHL_TO_EDU = {16: "hs_ged", 17: "hs_ged", 18: "some_college", 19: "some_college",
                20: "associate", 21: "bachelor", 22: "master", 23: "professional", 24: "doctorate"}


@lru_cache(maxsize=4)
def load_pums(path: str | None = None) -> pd.DataFrame:
    """Raw PUMS person records (employed, age 18-44). `path` None means the bundled extract.

    A user file may be a national person CSV: it is filtered the same way as the extract
    (ESR in {1,2}, AGEP 18-44) and may name the state column STATE (2024) or ST."""
    source = Path(path) if path else data_file(*BUNDLED_PUMS)
    if not source.exists():
        raise DataError(f"population.pums_path: file not found: {source}")
    try:
        header = pd.read_csv(source, nrows=0).columns
    except Exception as exc:  # pandas raises several types for unreadable files
        raise DataError(f"population.pums_path: cannot read {source} as CSV: {exc}") from exc
    columns = {c.upper(): c for c in header}
    if "ST" not in columns and "STATE" in columns:
        columns["ST"] = columns["STATE"]
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise DataError(f"PUMS file {source} lacks required columns {missing}; "
                        f"it needs {list(REQUIRED_COLUMNS)} (ESR optional)")
    use = [columns[c] for c in REQUIRED_COLUMNS] + ([columns["ESR"]] if "ESR" in columns else [])
    table = pd.read_csv(source, usecols=use)
    table.columns = [c.upper() for c in table.columns]
    table = table.rename(columns={"STATE": "ST"})
    for column in REQUIRED_COLUMNS:
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = pd.to_numeric(table[column], errors="coerce")
    table = table.dropna(subset=list(REQUIRED_COLUMNS))
    keep = table["AGEP"].between(18, 44)
    if "ESR" in table:
        keep &= table["ESR"].isin([1, 2])
    return table.loc[keep, list(REQUIRED_COLUMNS)].astype("int64").reset_index(drop=True)


def decode_race(rac1p: pd.Series, hisp: pd.Series) -> np.ndarray:
    """RAC1P + HISP -> white, black, api, hispanic, other (Hispanic of any race first, as the paper)."""
    race = np.select(
        [hisp.to_numpy() != 1, rac1p.to_numpy() == 1, rac1p.to_numpy() == 2,
         np.isin(rac1p.to_numpy(), [6, 7])],
        ["hispanic", "white", "black", "api"], default="other")
    return race.astype(object)


def decode_education(schl: pd.Series) -> pd.Series:
    """SCHL -> one of EDU_LEVELS; NaN for below high school."""
    return schl.map(_SCHL_TO_EDU)


@lru_cache(maxsize=1)
def state_table() -> pd.DataFrame:
    """FIPS -> USPS code, state name and Census region."""
    table = pd.read_csv(data_file("audit", "us_states.csv"), dtype={"fips": int})
    return table.set_index("fips")[["usps", "state_name", "census_region"]]
