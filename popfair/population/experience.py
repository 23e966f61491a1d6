"""Years of actual work experience: exp_year ~ TruncNormal(f(sex, age, edu), sigma, [0, age - 18]).

Source. PSID (Blau & Kahn 2013 replication file), currently employed heads and wives, 1980/1990/1999,
tabulated by sex x age group x education: cell mean, SD and quartiles of total years worked since 18.
PSID is the primary source because it is the paper's, has 3 waves and ~2-4x the cell sizes; the
PDII 2008 survey (n = 2,413, many cells under 30) is more recent and is used as an independent
check of the generated cell means (`experience_fit` artifact), not for fitting.

Mean f. An XGBoost regressor on the PSID cells learns the share of potential experience actually
worked, r(sex, age, edu, wave), from cell mean age; f = r(., wave 1999) * (age - 18) is then smooth in
age and inside [0, age - 18]. Density-ratio reweighting: each PSID cell c = (sex, age group, edu
group) is weighted by its PSID weight times p_ACS(c) / p_PSID(c), where p_ACS is the weighted
composition of the occupation's applicants, so training matches the applicants' (sex, age, edu)
distribution (on this discrete support the cell-frequency ratio is the exact density ratio).

Sigma. Per PSID cell, the residual variance around f is sd^2 + (mean - f)^2 minus the part of the
spread that f already explains by age within the cell. It is pooled with the density-ratio weights
for the occupation, then by sex, then by sex x age group, each level shrunk toward its parent with
KAPPA pseudo-observations (hierarchical partial pooling).

Draws. T ~ N(f, sigma) truncated to [0, age - 18]; exp_year = round(T). The integer pmf is computed
in closed form, so draws are inverse-CDF (and invertible: see popfair.population.scm)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
import xgboost as xgb
from scipy.special import log_ndtr, ndtr

from popfair.data import data_file
from popfair.errors import DataError
from popfair.population.scm import abduct_from_cdf, cdf_rows, draw_from_cdf

PSID_FILE = ("population", "psid_blau_kahn_actual_experience_by_year_sex_age_educ.csv")
PDII_FILE = ("population", "pdii2008_actual_experience_by_sex_age_educ.csv")
AGE_GROUPS = ("18-24", "25-29", "30-34", "35-39", "40-44")
_AGE_EDGES = [18, 25, 30, 35, 40, 45]
_AGE_WIDTH = {"18-24": 7.0, "25-29": 5.0, "30-34": 5.0, "35-39": 5.0, "40-44": 5.0}
PSID_EDU = {"1_less_than_12_years": 1, "2_12_years_hs": 2, "3_13plus_years_no_ba": 3,
            "4_bachelors": 4, "5_advanced_degree": 5}
EDU_TO_PSID = {"hs_ged": 2, "some_college": 3, "associate": 3, "bachelor": 4,
               "master": 5, "professional": 5, "doctorate": 5}
PDII_EDU = {"02_hs_graduate": "hs_ged", "03_some_college": "some_college", "05_associate": "associate",
            "06_bachelors": "bachelor", "07_masters": "master", "08_professional": "professional",
            "09_doctorate": "doctorate"}
PREDICT_WAVE = 1999   # the latest PSID wave with actual experience
MAX_EXP = _AGE_EDGES[-1] - 1 - 18
KAPPA = 50.0          # pseudo-observations pulling a sigma cell toward its parent level
MIN_SIGMA = 0.5


def age_group(age: pd.Series | np.ndarray) -> np.ndarray:
    return np.asarray(pd.cut(np.asarray(age), _AGE_EDGES, right=False, labels=AGE_GROUPS).astype(object))


@lru_cache(maxsize=1)
def psid_cells() -> tuple[pd.DataFrame, str]:
    """(PSID currently-employed cells by wave x sex x age group x edu, sha256 of the file)."""
    path = data_file(*PSID_FILE)
    table = pd.read_csv(path)
    table = table[(table["sample"] == "currently_employed") & (table["age_group"] != "ALL")
                  & (table["educ_group"] != "ALL") & table["exp_total_mean"].notna()]
    cells = pd.DataFrame({
        "year": table["year"].astype(int), "sex": table["sex"], "age_group": table["age_group"],
        "edu": table["educ_group"].map(PSID_EDU).astype(int), "n": table["n_unweighted"].astype(float),
        "w": table["sum_weight"].astype(float), "mean": table["exp_total_mean"].astype(float),
        "sd": table["exp_total_sd"].fillna(table["exp_total_sd"].median()).astype(float),
        "p25": table["exp_total_p25"], "p50": table["exp_total_p50"], "p75": table["exp_total_p75"],
        "potential": table["potential_exp_age_minus_18_mean"].astype(float)}).reset_index(drop=True)
    cells["age"] = cells["potential"] + 18
    cells["ratio"] = (cells["mean"] / cells["potential"].clip(lower=0.5)).clip(0, 1)
    return cells, hashlib.sha256(path.read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def pdii_cells() -> pd.DataFrame:
    """PDII 2008 currently-working cells (sex x age group x the seven resume education levels)."""
    table = pd.read_csv(data_file(*PDII_FILE))
    table = table[(table["sample"] == "currently_working") & table["sex"].isin(["female", "male"])
                  & table["age_group"].isin(AGE_GROUPS) & table["educ_group"].isin(list(PDII_EDU))]
    return pd.DataFrame({"sex": table["sex"], "age_group": table["age_group"],
                         "edu_level": table["educ_group"].map(PDII_EDU), "pdii_n": table["n_unweighted"],
                         "pdii_mean": table["years_worked_mean"]}).reset_index(drop=True)


def applicant_cells(gender: pd.Series, age: pd.Series, edu_level: pd.Series,
                    weight: pd.Series) -> tuple[tuple[tuple[str, str, int], float], ...]:
    """Weighted composition of applicants over PSID cells (sex, age group, PSID edu), hashable."""
    frame = pd.DataFrame({"sex": np.asarray(gender), "age_group": age_group(age),
                          "edu": pd.Series(np.asarray(edu_level)).map(EDU_TO_PSID).to_numpy(),
                          "w": np.asarray(weight, dtype=float)})
    shares = frame.groupby(["sex", "age_group", "edu"])["w"].sum()
    shares = (shares / shares.sum()).round(12)
    return tuple(((s, a, int(e)), float(p)) for (s, a, e), p in shares.items())


def _features(sex: np.ndarray, age: np.ndarray, edu: np.ndarray, year: np.ndarray) -> np.ndarray:
    return np.column_stack([(np.asarray(sex) == "male").astype(float), np.asarray(age, float),
                            np.asarray(edu, float), np.asarray(year, float)])


@dataclass(frozen=True)
class ExperienceModel:
    """f and sigma fitted for one applicant composition; draws and inverts exp_year."""

    booster: xgb.Booster
    sigma: pd.Series          # index (sex, age group) -> sigma in years
    training: pd.DataFrame    # PSID cells with density-ratio weight and fitted mean

    def mean(self, gender: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """Conditional mean f = r(sex, age, edu, 1999) * (age - 18)."""
        edu = pd.Series(np.asarray(edu_level, dtype=object)).map(EDU_TO_PSID).to_numpy(dtype=float)
        features = _features(gender, age, edu, np.full(len(edu), PREDICT_WAVE))
        ratio = np.clip(self.booster.inplace_predict(features), 0.0, 1.0)
        return ratio * (np.asarray(age, float) - 18)

    def scale(self, gender: np.ndarray, age: np.ndarray) -> np.ndarray:
        keys = pd.MultiIndex.from_arrays([np.asarray(gender, dtype=object), age_group(age)])
        return self.sigma.reindex(keys).to_numpy(dtype=float)

    def cdf(self, gender: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """CDF over exp_year = 0..MAX_EXP per row: round(T), T ~ N(loc, sigma) truncated to [0, age - 18],
        loc chosen so that E[T] = f. Computed once per distinct (gender, age, edu_level)."""
        keys = pd.DataFrame({"g": np.asarray(gender, dtype=object), "a": np.asarray(age, dtype=np.int64),
                             "e": np.asarray(edu_level, dtype=object)})
        row_cell, distinct = pd.MultiIndex.from_frame(keys).factorize()
        cells = pd.DataFrame(list(distinct), columns=["g", "a", "e"])
        upper = (cells["a"].to_numpy(float) - 18)[:, None]
        sd = self.scale(cells["g"].to_numpy(), cells["a"].to_numpy())[:, None]
        loc = truncated_location(self.mean(cells["g"].to_numpy(), cells["a"].to_numpy(), cells["e"].to_numpy()),
                                 sd[:, 0], upper[:, 0])[:, None]
        grid = np.arange(MAX_EXP + 1, dtype=float)[None, :]
        lo = (np.clip(grid - 0.5, 0, upper) - loc) / sd
        hi = (np.clip(grid + 0.5, 0, upper) - loc) / sd
        mass = _normal_mass(lo, hi)
        mass[:, 0] = np.where(upper[:, 0] == 0, 1.0, mass[:, 0])
        mass = np.clip(mass, 0, None) * (grid <= upper)
        return cdf_rows(mass)[row_cell]

    def draw(self, gender: np.ndarray, age: np.ndarray, edu_level: np.ndarray, u: np.ndarray) -> np.ndarray:
        return draw_from_cdf(self.cdf(gender, age, edu_level), u).astype(np.int64)

    def abduct(self, gender: np.ndarray, age: np.ndarray, edu_level: np.ndarray, exp_year: np.ndarray,
               v: np.ndarray) -> np.ndarray:
        return abduct_from_cdf(self.cdf(gender, age, edu_level), np.asarray(exp_year, dtype=np.int64), v)

    def expected(self, gender: np.ndarray, age: np.ndarray, edu_level: np.ndarray) -> np.ndarray:
        """E[exp_year] under the model (for fit reports)."""
        pmf = np.diff(self.cdf(gender, age, edu_level), axis=1, prepend=0.0)
        return pmf @ np.arange(MAX_EXP + 1)


def _normal_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """P(lo < N(0,1) < hi), on the side of the mean where it is numerically accurate."""
    return np.where(lo > 0, ndtr(-lo) - ndtr(-hi), ndtr(hi) - ndtr(lo))


def _truncated_mean(loc: np.ndarray, sd: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """E[T] for T ~ N(loc, sd) truncated to [0, upper], stable far in the tails (log-space)."""
    a, b = (0 - loc) / sd, (upper - loc) / sd
    flip = a > 0  # mirror so the interval is never entirely in the far upper tail
    a, b = np.where(flip, -b, a), np.where(flip, -a, b)
    log_mass = log_ndtr(b) + np.log1p(-np.exp(np.minimum(log_ndtr(a) - log_ndtr(b), -1e-300)))
    log_phi = lambda z: -0.5 * z ** 2 - 0.5 * np.log(2 * np.pi)  # noqa: E731
    shift = np.exp(log_phi(a) - log_mass) - np.exp(log_phi(b) - log_mass)
    return loc + sd * np.where(flip, -shift, shift)


def truncated_location(target_mean: np.ndarray, sd: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """loc such that TruncNormal(loc, sd, [0, upper]) has mean target_mean (bisection; the truncated
    mean rises with loc). Without it the truncation at age - 18 pulls experience below the PSID means."""
    target = np.clip(target_mean, 0.02 * upper, 0.98 * upper)
    low, high = -upper - 20 * sd, 2 * upper + 20 * sd
    for _ in range(50):
        mid = 0.5 * (low + high)
        above = _truncated_mean(mid, sd, np.maximum(upper, 1e-9)) > target
        low, high = np.where(above, low, mid), np.where(above, mid, high)
    return np.where(upper > 0, 0.5 * (low + high), 0.0)


@lru_cache(maxsize=32)
def fit_experience_model(composition: tuple[tuple[tuple[str, str, int], float], ...],
                         psid_digest: str) -> ExperienceModel:
    """Fit f and sigma for an applicant composition (from applicant_cells). Cached in-process by
    (composition, PSID file hash): the same occupation never refits."""
    cells, digest = psid_cells()
    if digest != psid_digest:
        raise DataError("the PSID experience table changed during the session; restart to refit")
    target = pd.Series({key: share for key, share in composition})
    key = pd.MultiIndex.from_frame(cells[["sex", "age_group", "edu"]])
    psid_share = cells["w"] / cells.groupby("year")["w"].transform("sum")
    density_ratio = target.reindex(key).fillna(0.0).to_numpy() / psid_share.to_numpy()
    cells = cells.assign(weight=cells["w"] * density_ratio)
    cells = cells[cells["weight"] > 0].reset_index(drop=True)
    cells["weight"] /= cells["weight"].mean()

    features = _features(cells["sex"].to_numpy(), cells["age"], cells["edu"], cells["year"])
    regressor = xgb.XGBRegressor(n_estimators=300, max_depth=3, learning_rate=0.05, min_child_weight=0.5,
                                 reg_lambda=1.0, n_jobs=1, random_state=0, tree_method="exact")
    regressor.fit(features, cells["ratio"], sample_weight=cells["weight"])
    booster = regressor.get_booster()
    ratio_hat = np.clip(booster.inplace_predict(features), 0, 1)
    cells["fitted"] = ratio_hat * cells["potential"]

    within_age = (ratio_hat * cells["age_group"].map(_AGE_WIDTH)) ** 2 / 12
    cells["resid_var"] = np.maximum(cells["sd"] ** 2 + (cells["mean"] - cells["fitted"]) ** 2 - within_age,
                                    MIN_SIGMA ** 2)

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
            sigma[(sex, group)] = float(np.sqrt(var_cell))
    return ExperienceModel(booster=booster, sigma=pd.Series(sigma), training=cells)


def experience_model_for(gender: pd.Series, age: pd.Series, edu_level: pd.Series,
                         weight: pd.Series) -> ExperienceModel:
    """The (cached) experience model reweighted to these applicants."""
    return fit_experience_model(applicant_cells(gender, age, edu_level, weight), psid_cells()[1])
