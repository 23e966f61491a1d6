"""Race/ethnicity coding schemes for outcome-level reports (the LL144 impact-ratio table).

Neither paper lists its race categories (docs/replication.md R1-R2); these are popfair's:
- `five`: the population's own `race` column: Hispanic of any race first, then White, Black,
  API (ACS RAC1P 6 Asian and 7 Native Hawaiian or Pacific Islander merged) and other. The PSE
  contrasts (x0 black, x1 white) use this coding.
- `ll144`: the categories of NYC Local Law 144 bias audits (EEO-1 style), from the raw ACS RAC1P code
  kept in the PopResume profiles (`rac1p`): Hispanic or Latino first (from `race`), then White (1),
  Black (2), American Indian or Alaska Native (3-5), Asian (6), Native Hawaiian or Pacific Islander
  (7), Some Other Race (8) and Two or More Races (9), so NHPI and two-or-more are reported separately.
"""

from __future__ import annotations

import pandas as pd

from popfair.core.errors import DataError

RACE_SCHEMES = ("five", "ll144")
LL144_FROM_RAC1P = {
    1: "white",
    2: "black",
    3: "aian",
    4: "aian",
    5: "aian",
    6: "asian",
    7: "nhpi",
    8: "some_other",
    9: "two_or_more",
}
LL144_DISPLAY = {
    "aian": "American Indian or Alaska Native",
    "asian": "Asian",
    "nhpi": "Native Hawaiian or Pacific Islander",
    "some_other": "Some Other Race",
    "two_or_more": "Two or More Races",
}


def recode_race(data: pd.DataFrame, race_column: str, scheme: str, rac1p_column: str = "rac1p") -> pd.Series:
    """The race category per row under `scheme` (missing stays missing: counted as unknown)."""
    if scheme == "five":
        return data[race_column]
    if scheme != "ll144":
        raise DataError(f"race_scheme must be one of {list(RACE_SCHEMES)}, got {scheme!r}")
    if rac1p_column not in data.columns:
        raise DataError(
            f"race_scheme=ll144 needs the raw ACS race code column {rac1p_column!r} (PopResume "
            f"profiles carry it); this table has {sorted(map(str, data.columns))}"
        )
    codes = pd.to_numeric(data[rac1p_column], errors="coerce")
    bad = codes.notna() & ~codes.isin(list(LL144_FROM_RAC1P))
    if bad.any():
        raise DataError(
            f"{rac1p_column}: values {sorted(codes[bad].unique().tolist())[:5]} are not ACS RAC1P "
            f"codes 1-9 (row {int(bad.to_numpy().nonzero()[0][0])})"
        )
    coded = codes.map(LL144_FROM_RAC1P)
    return coded.where(data[race_column] != "hispanic", "hispanic").where(
        codes.notna() | (data[race_column] == "hispanic")
    )
