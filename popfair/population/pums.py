"""ACS PUMS person records: load (bundled extract or a user's national CSV), filter and decode.

The bundled extract is ACS 2024 1-year, civilian employed (ESR 1/2), age 18-44, the 20 largest
occupations, 48 states + DC: California and Texas are missing at the source (see SOURCES.md).
A national person CSV given as `population.pums_path` is filtered the same way."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError, DataError
from popfair.data import data_file

BUNDLED_PUMS = ("population", "acs_pums_2024_1yr_employed_age18_44_top20occ_48states_dc.csv.gz")
BUNDLED_NOTE = (
    "ACS PUMS 2024 bundled extract covers 48 states + DC: California and Texas are "
    "missing at the source (about 18-26% of these occupations' workers). "
    "Set population.pums_path to the full national PUMS person CSV to include them."
)
REQUIRED_COLUMNS = ("ST", "OCCP", "SEX", "AGEP", "RAC1P", "HISP", "SCHL", "PWGTP")
AGE_RANGE = (18, 44)  # early and mid career, as the paper

# SCHL -> the paper's seven education levels (ordered). SCHL 1-15 (below high school) has no
# resume level of its own; BELOW_HS_POLICIES says what happens to those records.
EDU_LEVELS = ("hs_ged", "some_college", "associate", "bachelor", "master", "professional", "doctorate")
_SCHL_TO_EDU = {
    16: "hs_ged",
    17: "hs_ged",
    18: "some_college",
    19: "some_college",
    20: "associate",
    21: "bachelor",
    22: "master",
    23: "professional",
    24: "doctorate",
}
BELOW_HS_POLICIES = ("drop", "hs_ged")
# Paper C.4: seven levels -> three groups.
EDU_GROUP = {
    "hs_ged": "low",
    "some_college": "low",
    "associate": "medium",
    "bachelor": "medium",
    "master": "high",
    "professional": "high",
    "doctorate": "high",
}
RACES = ("black", "white", "hispanic", "api", "other")
GENDERS = ("female", "male")


@lru_cache(maxsize=1)
def bundled_survey_year() -> int | None:
    """The bundled extract's survey year from its first record (a hint for work started before
    `load_pums` reads the whole file; None if it cannot be read)."""
    try:
        first = pd.read_csv(data_file(*BUNDLED_PUMS), nrows=1, usecols=["YEAR"])
        return int(first["YEAR"].iloc[0])
    except Exception:  # noqa: BLE001 - only a hint
        return None


@lru_cache(maxsize=4)
def load_pums(path: str | None = None) -> tuple[pd.DataFrame, int]:
    """(records, survey year): PUMS person records, employed, age 18-44. `path` None = bundled extract.

    A user file may be a national person CSV: it is filtered the same way as the extract
    (ESR in {1,2}, AGEP 18-44) and may name the state column STATE (2024) or ST. The survey year
    comes from a YEAR column or the first four digits of SERIALNO (it dates birth years for names)."""
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
    year_column = next((c for c in ("YEAR", "SERIALNO") if c in columns), None)
    if missing or year_column is None:
        missing += [] if year_column else ["YEAR or SERIALNO"]
        raise DataError(
            f"PUMS file {source} lacks required columns {missing}; it needs "
            f"{list(REQUIRED_COLUMNS)} plus YEAR or SERIALNO (ESR optional)"
        )
    use = [columns[c] for c in REQUIRED_COLUMNS] + [columns[year_column]]
    use += [columns["ESR"]] if "ESR" in columns else []
    table = pd.read_csv(source, usecols=use, dtype={columns[year_column]: str})
    table.columns = [c.upper() for c in table.columns]
    table = table.rename(columns={"STATE": "ST"})
    years = pd.to_numeric(table[year_column].str[:4], errors="coerce").dropna().unique()
    if len(years) != 1:
        raise DataError(
            f"PUMS file {source}: column {year_column} must name one survey year, found {sorted(years.tolist())[:5]}"
        )
    for column in REQUIRED_COLUMNS + (("ESR",) if "ESR" in table else ()):
        if not pd.api.types.is_numeric_dtype(table[column]):
            table[column] = pd.to_numeric(table[column], errors="coerce")
    keep = table["AGEP"].between(*AGE_RANGE) & table["OCCP"].notna()
    if "ESR" in table:
        keep &= table["ESR"].isin([1, 2])
    table = table.loc[keep, list(REQUIRED_COLUMNS)].dropna()
    if table.empty:
        raise DataError(f"PUMS file {source} has no employed person records aged 18-44")
    return table.astype("int64").reset_index(drop=True), int(years[0])


@lru_cache(maxsize=1)
def occupation_labels() -> pd.Series:
    """OCCP code -> 2024 PUMS label, for the 20 occupations in the bundled extract."""
    table = pd.read_csv(data_file("population", "acs_pums_2024_top20_occp_rank_48states_dc.csv"))
    return table.set_index("OCCP")["occp_label_2024_pums_dictionary"].str.replace("\n", " ")


def known_occupations_text() -> str:
    return ", ".join(f"{code} ({label})" for code, label in occupation_labels().sort_index().items())


def occupation_records(pums: pd.DataFrame, occp: int) -> pd.DataFrame:
    """The records of one OCCP code; a ConfigError listing the available codes if there are none."""
    records = pums[pums["OCCP"] == occp]
    if records.empty:
        present = sorted(pums["OCCP"].unique().tolist())
        labels = occupation_labels()
        listing = ", ".join(f"{c} ({labels.get(c, 'no label')})" for c in present[:40])
        raise ConfigError(f"occupation.occp: no PUMS records with OCCP {occp}; codes present: {listing}")
    return records.reset_index(drop=True)


def decode_race(rac1p: pd.Series, hisp: pd.Series) -> np.ndarray:
    """RAC1P + HISP -> white, black, api, hispanic, other (Hispanic of any race first). The paper lists
    no categories: this coding is popfair's (docs/replication.md R1; the LL144 table can use finer
    ones, popfair.core.race_coding)."""
    race = np.select(
        [hisp.to_numpy() != 1, rac1p.to_numpy() == 1, rac1p.to_numpy() == 2, np.isin(rac1p.to_numpy(), [6, 7])],
        ["hispanic", "white", "black", "api"],
        default="other",
    )
    return race.astype(object)


def decode_education(schl: pd.Series, below_hs: str = "drop") -> pd.Series:
    """SCHL -> one of EDU_LEVELS. Below high school: NaN under policy 'drop', hs_ged under 'hs_ged'."""
    edu = schl.map(_SCHL_TO_EDU)
    if below_hs == "hs_ged":
        edu = edu.where(schl >= 16, "hs_ged")
    return edu


def decode_sex(sex: pd.Series) -> np.ndarray:
    return np.where(sex.to_numpy() == 1, "male", "female").astype(object)


@lru_cache(maxsize=1)
def state_table() -> pd.DataFrame:
    """FIPS -> USPS code, state name and Census region."""
    table = pd.read_csv(data_file("audit", "us_states.csv"), dtype={"fips": int})
    return table.set_index("fips")[["usps", "state_name", "census_region"]]


def region_of(usps: pd.Series | np.ndarray) -> np.ndarray:
    """USPS state code -> Census region (Northeast, Midwest, South, West)."""
    lookup = state_table().set_index("usps")["census_region"]
    return lookup.reindex(np.asarray(usps)).to_numpy(dtype=object)


# Paper Table 3: structured profiles per occupation (ACS PUMS 2023, national).
TABLE3 = {3255: 17_632, 2310: 16_188, 1021: 13_370, 800: 7_784, 6260: 5_910}


def table3_label(occp: int, count: int, survey_year: int, n: int | None) -> str:
    """Whether the applicant count is the paper's Table 3 count for this occupation (an honest label)."""
    paper = TABLE3.get(occp)
    if paper is None:
        return f"not in the paper ({count} applicants)"
    if n is not None:
        return f"resampled to n={n}; the paper has {paper} (ACS 2023, all records)"
    verdict = "matches" if count == paper else "does not match"
    return f"{verdict} the paper's Table 3: {count} applicants (ACS {survey_year}) vs {paper} (ACS 2023)"
