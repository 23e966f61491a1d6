"""ACS decoding written out in the tests, independently of popfair.population.pums, so that the
population tests compare popfair's decoders and models against a second implementation."""

from __future__ import annotations

import numpy as np
import pandas as pd

SCHL_TO_EDU = {
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


def race(hispanic: pd.Series, rac1p: pd.Series) -> np.ndarray:
    """Five categories, Hispanic first: hispanic, white, black, api (RAC1P 6-7), other."""
    return np.where(
        hispanic,
        "hispanic",
        np.where(rac1p == 1, "white", np.where(rac1p == 2, "black", np.where(rac1p.isin([6, 7]), "api", "other"))),
    )


def edu_level(schl: pd.Series) -> pd.Series:
    """SCHL 16-24 as the paper's seven education levels (below high school: NaN)."""
    return schl.map(SCHL_TO_EDU)
