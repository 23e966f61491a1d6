"""Years of actual work experience: exp_year ~ TruncNormal(f(sex, race, age, edu), sigma, [0, age - 18]).

Two sources (config `population.experience_source`):

- `nlsy97` (default): NLSY97 public-use person-years 1998-2022 (bundled `population/nlsy97/`), the only
  recent person-level data here with race. Experience is the number of years since 18 with any paid
  work (full-time + part-time years, `EXP_FT_YEARS + EXP_PT_YEARS`): the PSID and PDII measure ("in how
  many years have you worked") and what a resume shows; the file's full-time-equivalent years
  (`EXP_FTE`) are about 2 years lower by age 30. The sample is person-years with a complete work
  history and some work in the year (the analogue of "currently employed"). Race: NLSY97 has Black, Hispanic, mixed
  (non-Hispanic) and non-Black-non-Hispanic only, so applicants map black -> black, hispanic ->
  hispanic, white and api -> non-Black-non-Hispanic (NLSY97's group includes Asian respondents),
  other (AIAN, some other race, two or more) -> mixed. Education is the final level reported.
- `psid_cells`: the PSID (Blau & Kahn 2013) cell tables, 1980/1990/1999, by sex x age group x
  education: no race, so experience cannot depend on race. Kept as an alternative and as a check.

Mean f. An XGBoost regressor learns the share of potential experience actually worked,
r = exp / (age - 18), so f = r * (age - 18) is smooth in age and inside [0, age - 18]. NLSY97
person-years are grouped by (sex, race, single-year age, education) first: with squared error, a
cell mean weighted by its row count gives exactly the gradient and hessian sums of its rows, so the
fit equals the person-level fit at a fraction of the cost. Density-ratio reweighting (paper,
Sugiyama et al.): each training cell c (sex x [race] x age group x education) is weighted by
p_applicants(c) / p_source(c), the weighted composition of the occupation's applicants over that of
the source, so training matches the applicants' distribution (on this discrete support the cell-share
ratio is the exact density ratio).

Sigma. Per training cell, the residual variance around f is the within-cell variance plus
(mean - f)^2 (PSID cells span an age group, so the spread that f explains by age is taken out). It
is pooled with the density-ratio weights for the occupation (the paper's J), then by sex, then by
sex x age group, each level shrunk toward its parent with KAPPA pseudo-observations.

Draws. T ~ N(loc, sigma) truncated to [0, age - 18] with loc chosen so that E[T] = f;
exp_year = round(T). The integer pmf is computed in closed form, so draws are inverse-CDF (and
invertible: see popfair.population.scm)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from popfair.core.errors import DataError
from popfair.data import data_file
from popfair.population.pums import AGE_RANGE, EDU_LEVELS, GENDERS, RACES
from popfair.population.scm import abduct_from_cdf, cdf_rows, draw_from_cdf, normal_mass, truncated_location

if TYPE_CHECKING:
    import xgboost as xgb

PSID_FILE = ("population", "psid_blau_kahn_actual_experience_by_year_sex_age_educ.csv")
PDII_FILE = ("population", "pdii2008_actual_experience_by_sex_age_educ.csv")
AGE_GROUPS = ("18-24", "25-29", "30-34", "35-39", "40-44")
_AGE_EDGES = [18, 25, 30, 35, 40, 45]
_AGE_WIDTH = {"18-24": 7.0, "25-29": 5.0, "30-34": 5.0, "35-39": 5.0, "40-44": 5.0}
PSID_EDU = {
    "1_less_than_12_years": 1,
    "2_12_years_hs": 2,
    "3_13plus_years_no_ba": 3,
    "4_bachelors": 4,
    "5_advanced_degree": 5,
}
EDU_TO_PSID = {
    "hs_ged": 2,
    "some_college": 3,
    "associate": 3,
    "bachelor": 4,
    "master": 5,
    "professional": 5,
    "doctorate": 5,
}
PDII_EDU = {
    "02_hs_graduate": "hs_ged",
    "03_some_college": "some_college",
    "05_associate": "associate",
    "06_bachelors": "bachelor",
    "07_masters": "master",
    "08_professional": "professional",
    "09_doctorate": "doctorate",
}
PREDICT_WAVE = 1999  # the latest PSID wave with actual experience
NLSY_FILE = ("population", "nlsy97", "nlsy97_person_years.csv.gz")
NLSY_CELLS_FILE = ("population", "nlsy97", "nlsy97_experience_cells.csv")
# Applicant race -> NLSY97 KEY_RACE_ETHNICITY group (see the module docstring for why).
RACE_TO_NLSY = {
    "black": "black",
    "hispanic": "hispanic",
    "white": "nonblack_nonhisp",
    "api": "nonblack_nonhisp",
    "other": "mixed_nonhisp",
}
NLSY_EDU = ("lt_hs", "hs", "some_college", "ba", "grad")
EDU_TO_NLSY = {
    "hs_ged": "hs",
    "some_college": "some_college",
    "associate": "some_college",
    "bachelor": "ba",
    "master": "grad",
    "professional": "grad",
    "doctorate": "grad",
}
EXPERIENCE_SOURCES = ("nlsy97", "psid_cells")
MAX_EXP = _AGE_EDGES[-1] - 1 - 18
_AGES = np.arange(AGE_RANGE[0], AGE_RANGE[1] + 1)
KAPPA = 50.0  # pseudo-observations pulling a sigma cell toward its parent level
MIN_SIGMA = 0.5


def age_group(age: pd.Series | np.ndarray) -> np.ndarray:
    return np.asarray(pd.cut(np.asarray(age), _AGE_EDGES, right=False, labels=AGE_GROUPS).astype(object))


@lru_cache(maxsize=1)
def psid_cells() -> tuple[pd.DataFrame, str]:
    """(PSID currently-employed cells by wave x sex x age group x edu, sha256 of the file)."""
    path = data_file(*PSID_FILE)
    table = pd.read_csv(path)
    table = table[
        (table["sample"] == "currently_employed")
        & (table["age_group"] != "ALL")
        & (table["educ_group"] != "ALL")
        & table["exp_total_mean"].notna()
    ]
    cells = pd.DataFrame(
        {
            "year": table["year"].astype(int),
            "sex": table["sex"],
            "age_group": table["age_group"],
            "edu": table["educ_group"].map(PSID_EDU).astype(int),
            "n": table["n_unweighted"].astype(float),
            "w": table["sum_weight"].astype(float),
            "mean": table["exp_total_mean"].astype(float),
            "sd": table["exp_total_sd"].fillna(table["exp_total_sd"].median()).astype(float),
            "p25": table["exp_total_p25"],
            "p50": table["exp_total_p50"],
            "p75": table["exp_total_p75"],
            "potential": table["potential_exp_age_minus_18_mean"].astype(float),
        }
    ).reset_index(drop=True)
    cells["age"] = cells["potential"] + 18
    cells["ratio"] = (cells["mean"] / cells["potential"].clip(lower=0.5)).clip(0, 1)
    return cells, hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def pdii_cells() -> pd.DataFrame:
    """PDII 2008 currently-working cells (sex x age group x the seven resume education levels)."""
    table = pd.read_csv(data_file(*PDII_FILE))
    table = table[
        (table["sample"] == "currently_working")
        & table["sex"].isin(["female", "male"])
        & table["age_group"].isin(AGE_GROUPS)
        & table["educ_group"].isin(list(PDII_EDU))
    ]
    return pd.DataFrame(
        {
            "sex": table["sex"],
            "age_group": table["age_group"],
            "edu_level": table["educ_group"].map(PDII_EDU),
            "pdii_n": table["n_unweighted"],
            "pdii_mean": table["years_worked_mean"],
        }
    ).reset_index(drop=True)


def file_digest(parts: tuple[str, ...]) -> str:
    return hashlib.sha256(data_file(*parts).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def nlsy_person_years() -> pd.DataFrame:
    """NLSY97 person-years with a complete work history, some work in the year and a known education (the
    sample of the file's own cell table), with EXP_YEARS = years with any work since 18."""
    years = pd.read_csv(
        data_file(*NLSY_FILE),
        usecols=[
            "PUBID",
            "SEX",
            "RACE",
            "EDUC",
            "AGE",
            "EXP_FTE",
            "EXP_FT_YEARS",
            "EXP_PT_YEARS",
            "HIST_COMPLETE",
            "HOURS_THIS_YEAR",
        ],
    )
    keep = years["HIST_COMPLETE"].astype(bool) & (years["HOURS_THIS_YEAR"] > 0) & years["EDUC"].isin(NLSY_EDU)
    years = years[keep].reset_index(drop=True)
    return years.assign(EXP_YEARS=years["EXP_FT_YEARS"] + years["EXP_PT_YEARS"])


@lru_cache(maxsize=1)
def nlsy_cells() -> pd.DataFrame:
    """NLSY97 person-years grouped by sex x race x single-year age (19+: at 18 nothing has accumulated)
    x education: n person-years, mean and (population) variance of EXP_YEARS."""
    years = nlsy_person_years()
    grouped = years[years["AGE"] > 18].groupby(["SEX", "RACE", "AGE", "EDUC"])["EXP_YEARS"]
    cells = pd.DataFrame({"n": grouped.size(), "mean": grouped.mean(), "var": grouped.var(ddof=0)}).reset_index()
    return pd.DataFrame(
        {
            "sex": cells["SEX"],
            "race": cells["RACE"],
            "age": cells["AGE"].astype(float),
            "age_group": age_group(cells["AGE"]),
            "edu": cells["EDUC"],
            "n": cells["n"].astype(float),
            "mean": cells["mean"],
            "var": cells["var"],
            "potential": cells["AGE"] - 18.0,
        }
    )


def applicant_cells(
    source: str, gender: pd.Series, race: pd.Series, age: pd.Series, edu_level: pd.Series, weight: pd.Series
) -> tuple[tuple[tuple[str, ...], float], ...]:
    """Weighted composition of applicants over the source's cells, hashable (an lru_cache key).
    nlsy97: (sex, NLSY race, age group, NLSY edu); psid_cells: (sex, age group, PSID edu)."""
    edu = pd.Series(np.asarray(edu_level, dtype=object))
    frame = pd.DataFrame({"sex": np.asarray(gender), "age_group": age_group(age), "w": np.asarray(weight, dtype=float)})
    if source == "nlsy97":
        frame["race"] = pd.Series(np.asarray(race, dtype=object)).map(RACE_TO_NLSY).to_numpy()
        frame["edu"] = edu.map(EDU_TO_NLSY).to_numpy()
        keys = ["sex", "race", "age_group", "edu"]
    else:
        frame["edu"] = edu.map(EDU_TO_PSID).astype(int).astype(str).to_numpy()
        keys = ["sex", "age_group", "edu"]
    shares = frame.groupby(keys)["w"].sum()
    shares = (shares / shares.sum()).round(12)
    return tuple((tuple(str(k) for k in key), float(p)) for key, p in shares.items())


def _features(
    source: str,
    sex: np.ndarray,
    race: np.ndarray | None,
    age: np.ndarray,
    edu: np.ndarray,
    year: np.ndarray | None = None,
) -> np.ndarray:
    """Model inputs. `race` and `edu` are in the source's coding (NLSY group / NLSY edu; PSID edu 1-5)."""
    male = (np.asarray(sex) == "male").astype(float)
    if source == "psid_cells":
        wave = np.full(len(male), PREDICT_WAVE) if year is None else year
        return np.column_stack([male, np.asarray(age, float), np.asarray(edu, float), np.asarray(wave, float)])
    race = np.asarray(race, dtype=object)
    edu_rank = pd.Series(np.asarray(edu, dtype=object)).map({e: i for i, e in enumerate(NLSY_EDU)}).to_numpy(float)
    return np.column_stack(
        [male, np.asarray(age, float), edu_rank, race == "black", race == "hispanic", race == "mixed_nonhisp"]
    ).astype(float)


@dataclass(frozen=True)
class ExperienceModel:
    """f and sigma fitted for one applicant composition; draws and inverts exp_year."""

    source: str  # one of EXPERIENCE_SOURCES
    booster_raw: bytes  # XGBoost's raw model: draws read cdf_table, so a cached model loads without XGBoost
    sigma: pd.Series  # index (sex, age group) -> sigma in years
    training: pd.DataFrame  # training cells with density-ratio weight and fitted mean

    @cached_property
    def booster(self) -> xgb.Booster:
        """The fitted booster, loaded from `booster_raw` when a mean is asked for."""
        from xgboost import Booster

        return Booster(model_file=bytearray(self.booster_raw))

    def __getstate__(self) -> dict[str, object]:  # without the loaded booster: unpickling imports no XGBoost
        return {key: value for key, value in self.__dict__.items() if key != "booster"}

    def mean(self, gender: np.ndarray, race: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """Conditional mean f = r(sex, [race,] age, edu) * (age - 18) (PSID: at the 1999 wave)."""
        edu = pd.Series(np.asarray(edu_level, dtype=object))
        if self.source == "psid_cells":
            features = _features(self.source, gender, race, age, edu.map(EDU_TO_PSID).to_numpy(dtype=float))
        else:
            nlsy_race = pd.Series(np.asarray(race, dtype=object)).map(RACE_TO_NLSY).to_numpy()
            features = _features(self.source, gender, nlsy_race, age, edu.map(EDU_TO_NLSY).to_numpy())
        ratio = np.clip(self.booster.inplace_predict(features), 0.0, 1.0)
        return ratio * (np.asarray(age, float) - 18)

    def scale(self, gender: np.ndarray, age: np.ndarray) -> np.ndarray:
        keys = pd.MultiIndex.from_arrays([np.asarray(gender, dtype=object), age_group(age)])
        return self.sigma.reindex(keys).to_numpy(dtype=float)

    def _cell_cdfs(self, gender: np.ndarray, race: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """CDF over exp_year = 0..MAX_EXP per cell: round(T), T ~ N(loc, sigma) truncated to [0, age - 18],
        loc chosen so that E[T] = f."""
        upper = (np.asarray(age, float) - 18)[:, None]
        sd = self.scale(gender, age)[:, None]
        loc = truncated_location(self.mean(gender, race, age, edu_level), sd[:, 0], upper[:, 0])[:, None]
        grid = np.arange(MAX_EXP + 1, dtype=float)[None, :]
        lo = (np.clip(grid - 0.5, 0, upper) - loc) / sd
        hi = (np.clip(grid + 0.5, 0, upper) - loc) / sd
        mass = normal_mass(lo, hi)
        mass[:, 0] = np.where(upper[:, 0] == 0, 1.0, mass[:, 0])
        mass = np.clip(mass, 0, None) * (grid <= upper)
        return cdf_rows(mass)

    @cached_property
    def cdf_table(self) -> np.ndarray:
        """The CDF of every (gender, race, age, edu_level) cell, built once (and pickled with the model)."""
        g, r, a, e = (
            axis.ravel()
            for axis in np.meshgrid(
                np.array(GENDERS, dtype=object),
                np.array(RACES, dtype=object),
                _AGES,
                np.array(EDU_LEVELS, dtype=object),
                indexing="ij",
            )
        )
        return self._cell_cdfs(g, r, a, e)

    def cdf(self, gender: np.ndarray, race: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """Per-row CDF over exp_year = 0..MAX_EXP, looked up in cdf_table."""
        codes = [
            pd.Categorical(np.asarray(values, dtype=object), categories=levels).codes.astype(np.int64)
            for values, levels in ((gender, GENDERS), (race, RACES), (edu_level, EDU_LEVELS))
        ]
        ages = np.asarray(age, dtype=np.int64) - _AGES[0]
        bad = (np.min(codes, axis=0) < 0) | (ages < 0) | (ages >= len(_AGES))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"experience: no model cell for gender={np.asarray(gender)[i]!r}, race="
                f"{np.asarray(race)[i]!r}, age={np.asarray(age)[i]!r}, edu_level={np.asarray(edu_level)[i]!r}"
            )
        index = ((codes[0] * len(RACES) + codes[1]) * len(_AGES) + ages) * len(EDU_LEVELS) + codes[2]
        return self.cdf_table[index]

    def draw(
        self, gender: np.ndarray, race: np.ndarray, age: np.ndarray, edu_level: np.ndarray, u: np.ndarray
    ) -> np.ndarray:
        return draw_from_cdf(self.cdf(gender, race, age, edu_level), u).astype(np.int64)

    def abduct(
        self,
        gender: np.ndarray,
        race: np.ndarray,
        age: np.ndarray,
        edu_level: np.ndarray,
        exp_year: np.ndarray,
        v: np.ndarray,
    ) -> np.ndarray:
        return abduct_from_cdf(self.cdf(gender, race, age, edu_level), np.asarray(exp_year, dtype=np.int64), v)

    def expected(self, gender: np.ndarray, race: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """E[exp_year] under the model (for fit reports)."""
        pmf = np.diff(self.cdf(gender, race, age, edu_level), axis=1, prepend=0.0)
        return pmf @ np.arange(MAX_EXP + 1)


def _hierarchical_sigma(cells: pd.DataFrame) -> pd.Series:
    """sqrt of the residual variance pooled over the occupation, then sex, then sex x age group, each
    level shrunk toward its parent with KAPPA pseudo-observations (weights: density-ratio weights)."""

    def pooled(frame: pd.DataFrame) -> tuple[float, float]:
        return float(np.average(frame["resid_var"], weights=frame["weight"])), float(frame["n"].sum())

    top, _ = pooled(cells)
    sigma = {}
    for sex in ("female", "male"):
        by_sex = cells[cells["sex"] == sex]
        sex_var = top
        if len(by_sex):
            var, n = pooled(by_sex)
            sex_var = (n * var + KAPPA * top) / (n + KAPPA)
        for group in AGE_GROUPS:
            cell = by_sex[by_sex["age_group"] == group]
            var_cell = sex_var
            if len(cell):
                var, n = pooled(cell)
                var_cell = (n * var + KAPPA * sex_var) / (n + KAPPA)
            sigma[(sex, group)] = float(np.sqrt(max(var_cell, MIN_SIGMA**2)))
    return pd.Series(sigma)


def _density_ratio_weights(
    cells: pd.DataFrame, keys: list[str], composition: tuple, source_weight: pd.Series, by: str | None = None
) -> pd.Series:
    """Training weight = source weight x p_applicants(cell) / p_source(cell), normalised to mean 1 over the
    positive weights. A cell is `keys` (within each `by` group, e.g. a PSID wave, when given)."""
    target = pd.Series(dict(composition))
    groups = [cells[k].astype(str) for k in keys] + ([cells[by]] if by else [])
    cell_total = source_weight.groupby(groups).transform("sum")
    total = source_weight.groupby(cells[by]).transform("sum") if by else source_weight.sum()
    ratio = target.reindex(pd.MultiIndex.from_arrays(groups[: len(keys)])).fillna(0.0).to_numpy() / (cell_total / total)
    weight = source_weight * ratio
    return weight / weight[weight > 0].mean()


def _booster(
    features: np.ndarray, target: pd.Series, weight: pd.Series, max_depth: int, n_trees: int = 300
) -> xgb.Booster:
    """Weighted squared-error XGBoost; n_trees x learning rate is held at 15 (300 trees at 0.05)."""
    import xgboost as xgb  # here: a paired panel, which draws no experience, starts without it (half a second)

    regressor = xgb.XGBRegressor(
        n_estimators=n_trees,
        max_depth=max_depth,
        learning_rate=15 / n_trees,
        min_child_weight=0.5,
        reg_lambda=1.0,
        n_jobs=1,
        random_state=0,
        tree_method="exact",
    )
    regressor.fit(features, target, sample_weight=weight)
    return regressor.get_booster()


@lru_cache(maxsize=32)
def fit_nlsy_model(composition: tuple, nlsy_digest: str) -> ExperienceModel:
    """Fit f and sigma on NLSY97 cells reweighted to an applicant composition (from applicant_cells)."""
    if file_digest(NLSY_FILE) != nlsy_digest:
        raise DataError("the NLSY97 person-year file changed during the session; restart to refit")
    cells = nlsy_cells().copy()
    cells["weight"] = _density_ratio_weights(cells, ["sex", "race", "age_group", "edu"], composition, cells["n"])
    cells = cells[cells["weight"] > 0].reset_index(drop=True)
    features = _features(
        "nlsy97", cells["sex"].to_numpy(), cells["race"].to_numpy(), cells["age"], cells["edu"].to_numpy()
    )
    booster = _booster(features, cells["mean"] / cells["potential"], cells["weight"], max_depth=4, n_trees=150)
    cells["fitted"] = np.clip(booster.inplace_predict(features), 0, 1) * cells["potential"]
    cells["resid_var"] = np.maximum(cells["var"] + (cells["mean"] - cells["fitted"]) ** 2, MIN_SIGMA**2)
    return _with_table(ExperienceModel("nlsy97", bytes(booster.save_raw()), _hierarchical_sigma(cells), cells))


@lru_cache(maxsize=32)
def fit_psid_model(composition: tuple, psid_digest: str) -> ExperienceModel:
    """Fit f and sigma on the PSID cells reweighted to an applicant composition (from applicant_cells)."""
    cells, digest = psid_cells()
    if digest != psid_digest:
        raise DataError("the PSID experience table changed during the session; restart to refit")
    cells = cells.assign(
        weight=_density_ratio_weights(cells, ["sex", "age_group", "edu"], composition, cells["w"], by="year")
    )
    cells = cells[cells["weight"] > 0].reset_index(drop=True)
    features = _features("psid_cells", cells["sex"].to_numpy(), None, cells["age"], cells["edu"], cells["year"])
    booster = _booster(features, cells["ratio"], cells["weight"], max_depth=3)
    ratio_hat = np.clip(booster.inplace_predict(features), 0, 1)
    cells["fitted"] = ratio_hat * cells["potential"]
    within_age = (ratio_hat * cells["age_group"].map(_AGE_WIDTH)) ** 2 / 12
    cells["resid_var"] = np.maximum(
        cells["sd"] ** 2 + (cells["mean"] - cells["fitted"]) ** 2 - within_age, MIN_SIGMA**2
    )
    return _with_table(ExperienceModel("psid_cells", bytes(booster.save_raw()), _hierarchical_sigma(cells), cells))


def _with_table(model: ExperienceModel) -> ExperienceModel:
    model.cdf_table  # noqa: B018 (built now, so the disk cache stores it)
    return model


def source_digest(source: str) -> str:
    """Content hash of the data an experience source is fitted on (a cache key)."""
    return file_digest(NLSY_FILE) if source == "nlsy97" else psid_cells()[1]


def experience_model_for(
    source: str, gender: pd.Series, race: pd.Series, age: pd.Series, edu_level: pd.Series, weight: pd.Series
) -> ExperienceModel:
    """The (cached) experience model of `source` reweighted to these applicants."""
    composition = applicant_cells(source, gender, race, age, edu_level, weight)
    fit = fit_nlsy_model if source == "nlsy97" else fit_psid_model
    return fit(composition, source_digest(source))
