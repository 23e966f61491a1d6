"""Population diagnostics logged as run artifacts: composition by occupation (paper Fig. 7 a-c),
age vs experience (Fig. 7 d), the experience model's Q-Q plot (Fig. 6), its fit to the NLSY97 cells
and (as checks) to PSID and PDII, the Black - White experience gap within sex x age x education, and
the CA/TX transport summary."""

from __future__ import annotations

import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml
from scipy.stats import norm

from popfair.core.types import Plot
from popfair.population import experience
from popfair.population.cache import disk_cached
from popfair.population.experience import (
    EDU_TO_NLSY,
    EDU_TO_PSID,
    NLSY_FILE,
    PDII_FILE,
    PSID_FILE,
    RACE_TO_NLSY,
    ExperienceModel,
    age_group,
    file_digest,
    nlsy_person_years,
    pdii_cells,
    psid_cells,
)
from popfair.population.occupation import Occupation
from popfair.store.blobs import content_key

if TYPE_CHECKING:
    from popfair.population.occupation_model import OccupationModel

COMPOSITION_ATTRIBUTES = ("gender", "race", "edu_level", "edu_group", "region")


def weighted_shares(table: pd.DataFrame, column: str, weight: str = "weight") -> pd.Series:
    totals = table.groupby(column)[weight].sum()
    return totals / totals.sum()


def composition(table: pd.DataFrame, records: pd.DataFrame, occupation: str) -> pd.DataFrame:
    """Weighted shares of each attribute level: generated profiles vs the PUMS records they come from."""
    from popfair.population.pums import EDU_GROUP

    records = records.assign(edu_group=records["edu_level"].map(EDU_GROUP))
    rows = []
    for attribute in COMPOSITION_ATTRIBUTES:
        generated, pums = weighted_shares(table, attribute), weighted_shares(records, attribute)
        for level in sorted(set(generated.index) | set(pums.index)):
            rows.append(
                {
                    "occupation": occupation,
                    "attribute": attribute,
                    "level": level,
                    "share_profiles": float(generated.get(level, 0.0)),
                    "share_pums": float(pums.get(level, 0.0)),
                }
            )
    return pd.DataFrame(rows)


def _weighted_mean(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grouped = frame.assign(wx=frame["exp_year"] * frame["weight"]).groupby(keys)
    sums = grouped[["wx", "weight"]].sum()
    return pd.DataFrame({"n_profiles": grouped.size(), "profiles_mean": sums["wx"] / sums["weight"]})


def experience_fit(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Generated exp_year cell means vs PSID 1999 (sex x age group x PSID edu) and vs PDII 2008
    (sex x age group x seven levels), with n-weighted mean absolute error and correlation."""
    frame = table[["gender", "age", "edu_level", "exp_year", "weight"]].assign(  # only what is used: no copy
        sex=table["gender"], age_group=age_group(table["age"]), edu=table["edu_level"].map(EDU_TO_PSID)
    )
    cells, _ = psid_cells()
    psid = cells[cells["year"] == 1999].set_index(["sex", "age_group", "edu"])[["n", "mean"]]
    psid = psid.rename(columns={"n": "psid_n", "mean": "psid_mean"})
    fit_psid = _weighted_mean(frame, ["sex", "age_group", "edu"]).join(psid, how="inner").reset_index()
    pdii = pdii_cells().set_index(["sex", "age_group", "edu_level"])
    fit_pdii = _weighted_mean(frame, ["sex", "age_group", "edu_level"]).join(pdii, how="inner").reset_index()
    summary: dict[str, float] = {}
    for name, fit, ref in (("psid", fit_psid, "psid_mean"), ("pdii", fit_pdii, "pdii_mean")):
        w = fit["n_profiles"].to_numpy(float)
        diff = fit["profiles_mean"] - fit[ref]
        summary[f"{name}_cells"] = float(len(fit))
        summary[f"{name}_mae_years"] = float(np.average(diff.abs(), weights=w)) if len(fit) else float("nan")
        summary[f"{name}_bias_years"] = float(np.average(diff, weights=w)) if len(fit) else float("nan")
        summary[f"{name}_corr"] = (
            float(np.corrcoef(fit["profiles_mean"], fit[ref])[0, 1]) if len(fit) > 2 else float("nan")
        )
    return fit_psid, fit_pdii, summary


NLSY_KEYS = ["race_nlsy", "sex", "age_group", "educ"]


@lru_cache(maxsize=4)
def nlsy_reference_cells(measure: str = "EXP_YEARS", age: str = "age_group") -> pd.DataFrame:
    """NLSY97 cells by race x sex x age band (`age="age"`: single year) x education straight from the
    person-years (not the model): persons, mean and SD of `measure`. With EXP_FTE and age bands these are
    the file's own nlsy97_experience_cells.csv. Cached on disk: a warm run does not read the person-years."""
    return disk_cached(
        f"nlsy97_reference_{measure}_{age}",
        [file_digest(NLSY_FILE)],
        [sys.modules[__name__]],
        lambda: _nlsy_reference_cells(measure, age),
    )


def _nlsy_reference_cells(measure: str, age: str) -> pd.DataFrame:
    years = nlsy_person_years()
    frame = pd.DataFrame(
        {
            "race_nlsy": years["RACE"],
            "sex": years["SEX"],
            age: age_group(years["AGE"]) if age == "age_group" else years["AGE"],
            "educ": years["EDUC"],
            "person": years["PUBID"],
            "value": years[measure],
        }
    )
    grouped = frame.groupby(["race_nlsy", "sex", age, "educ"])
    return pd.DataFrame(
        {"n_persons": grouped["person"].nunique(), "mean": grouped["value"].mean(), "sd": grouped["value"].std()}
    )


def nlsy_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The applicants' columns in NLSY97 coding (race group, education) next to sex and age band."""
    if "race_nlsy" in table:
        return table
    slim = table[["gender", "race", "age", "edu_level", "exp_year", "weight"]]  # only what is used: no copy
    return slim.assign(
        sex=table["gender"],
        age_group=age_group(table["age"]),
        race_nlsy=table["race"].map(RACE_TO_NLSY),
        educ=table["edu_level"].map(EDU_TO_NLSY),
    )


def nlsy_fit(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Generated exp_year cell means vs the NLSY97 cells (race x sex x age band x education), with the
    applicant-weighted mean absolute error, bias and correlation; `nlsy97_age_*` compare single-year-age
    cells instead (within a band applicants are older than NLSY97 respondents, whose 40-44 band stops at
    42, so band means differ by composition; `nlsy97_age_share` is the share of applicants compared)."""
    frame = nlsy_frame(table)
    cells = nlsy_reference_cells().rename(columns={"mean": "nlsy97_mean", "sd": "nlsy97_sd"})
    fit = _weighted_mean(frame, NLSY_KEYS).join(cells, how="inner").reset_index()
    by_age = _weighted_mean(frame, ["race_nlsy", "sex", "age", "educ"]).join(
        nlsy_reference_cells(age="age"), how="inner"
    )
    age_w = by_age["n_profiles"].to_numpy(float)
    age_diff = by_age["profiles_mean"] - by_age["mean"]
    w = fit["n_profiles"].to_numpy(float)
    diff = fit["profiles_mean"] - fit["nlsy97_mean"]
    summary = {
        "nlsy97_cells": float(len(fit)),
        "nlsy97_mae_years": float(np.average(diff.abs(), weights=w)) if len(fit) else float("nan"),
        "nlsy97_bias_years": float(np.average(diff, weights=w)) if len(fit) else float("nan"),
        "nlsy97_corr": float(np.corrcoef(fit["profiles_mean"], fit["nlsy97_mean"])[0, 1])
        if len(fit) > 2
        else float("nan"),
        "nlsy97_age_mae_years": float(np.average(age_diff.abs(), weights=age_w)) if len(by_age) else float("nan"),
        "nlsy97_age_bias_years": float(np.average(age_diff, weights=age_w)) if len(by_age) else float("nan"),
        "nlsy97_age_share": float(age_w.sum() / max(len(frame), 1)),
    }
    return fit, summary


def race_gap(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Black - White mean experience within sex x age band x education: generated applicants vs the NLSY97
    cells (White = NLSY97 non-Black-non-Hispanic). Per sex, cells are averaged with the generated Black
    applicants' counts as weights (standardised to the Black applicants' composition); `se_nlsy` is the
    NLSY97 standard error of that average from the cells' SD / sqrt(persons)."""
    keys = ["sex", "age_group", "educ"]
    frame = nlsy_frame(table)
    generated = frame[frame["race"].isin(["black", "white"])].groupby(keys + ["race"])["exp_year"].mean().unstack()
    counts = frame[frame["race"] == "black"].groupby(keys).size().rename("n_black")
    nlsy = nlsy_reference_cells()
    black, white = nlsy.loc["black"], nlsy.loc["nonblack_nonhisp"]
    cells = (
        pd.DataFrame(
            {
                "gap_generated": generated.get("black") - generated.get("white"),
                "gap_nlsy97": black["mean"] - white["mean"],
                "var_nlsy97": black["sd"] ** 2 / black["n_persons"] + white["sd"] ** 2 / white["n_persons"],
            }
        )
        .join(counts, how="inner")
        .dropna()
    )
    cells = cells.reset_index()
    rows = []
    for sex, group in cells.groupby("sex"):
        w = group["n_black"].to_numpy(float) / group["n_black"].sum()
        rows.append(
            {
                "sex": sex,
                "cells": len(group),
                "black_applicants": int(group["n_black"].sum()),
                "gap_generated": float(w @ group["gap_generated"]),
                "gap_nlsy97": float(w @ group["gap_nlsy97"]),
                "se_nlsy97": float(np.sqrt((w**2) @ group["var_nlsy97"])),
            }
        )
    return pd.DataFrame(rows), cells


@lru_cache(maxsize=1)
def _qq_sample() -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """2,000 NLSY97 person-years (age 19+, high school or more) with race and education in applicant coding."""
    return disk_cached("nlsy97_qq_sample", [file_digest(NLSY_FILE)], [sys.modules[__name__]], _build_qq_sample)


def _build_qq_sample() -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    years = nlsy_person_years()
    years = years[(years["AGE"] > 18) & (years["EDUC"] != "lt_hs")].sample(n=2000, random_state=0)
    race = years["RACE"].map({v: k for k, v in RACE_TO_NLSY.items() if k not in ("white", "api")}).fillna("white")
    edu = years["EDUC"].map({"hs": "hs_ged", "some_college": "some_college", "ba": "bachelor", "grad": "master"})
    return years, race, edu


def qq_points(model: ExperienceModel) -> pd.DataFrame:
    """Normality check (paper Fig. 6). NLSY97: percentiles 1-99 of the person-year residuals standardised
    by the model's f and sigma vs the normal's. PSID: cell quartiles standardised by cell mean and SD."""
    if model.source == "nlsy97":
        years, race, edu = _qq_sample()
        z = (
            years["EXP_YEARS"]
            - model.mean(years["SEX"].to_numpy(), race.to_numpy(), years["AGE"].to_numpy(), edu.to_numpy())
        ) / model.scale(years["SEX"].to_numpy(), years["AGE"].to_numpy())
        probs = np.arange(1, 100) / 100
        return pd.DataFrame({"theoretical": norm.ppf(probs), "empirical": np.quantile(z, probs), "weight": 1.0})
    model_training = model.training
    rows = []
    for column, prob in (("p25", 0.25), ("p50", 0.5), ("p75", 0.75)):
        empirical = (model_training[column] - model_training["mean"]) / model_training["sd"]
        rows.append(
            pd.DataFrame({"theoretical": norm.ppf(prob), "empirical": empirical, "weight": model_training["weight"]})
        )
    return pd.concat(rows, ignore_index=True).dropna()


def age_experience(table: pd.DataFrame) -> pd.DataFrame:
    """Experience by single-year age per gender: mean and 10th / 90th percentiles (paper Fig. 7 d),
    one row per (gender, age)."""
    by_age = table.groupby(["gender", "age"], observed=True)["exp_year"]
    quantiles = by_age.quantile([0.1, 0.9]).unstack()
    return pd.DataFrame({"mean": by_age.mean(), "p10": quantiles[0.1], "p90": quantiles[0.9]}).reset_index()


def cached_population_artifacts(table: pd.DataFrame, model: OccupationModel, occupation: Occupation) -> dict[str, Any]:
    """`population_artifacts`, kept on disk (`popfair.population.cache`) under a digest of all they
    read: the profiles, the occupation model's records, experience model (its booster's raw bytes,
    sigma, training cells) and transport table, the occupation, the NLSY97, PSID and PDII files and
    this code. A rerun of the same population (the second run of a case, a sweep's other screeners)
    reads them instead of refitting the checks (0.5-1 s)."""
    fitted = model.experience
    key = content_key(
        table,
        model.records,
        fitted.booster_raw,
        fitted.sigma.to_frame(),
        fitted.training,
        fitted.source,
        model.transport,
        model.survey_year,
        model.source,
        model.dropped_below_hs,
        occupation.key,
        occupation.occp,
        occupation.title,
        *(file_digest(f) for f in (NLSY_FILE, PSID_FILE, PDII_FILE)),
    )
    modules = [sys.modules[__name__], experience]
    return disk_cached("population_artifacts", [key], modules, lambda: population_artifacts(table, model, occupation))


def population_artifacts(table: pd.DataFrame, model: OccupationModel, occupation: Occupation) -> dict[str, Any]:
    """Artifacts for one occupation's profiles (names are prefixed `population_`)."""
    fit_psid, fit_pdii, summary = experience_fit(table)
    coded = nlsy_frame(table)
    fit_nlsy, summary_nlsy = nlsy_fit(coded)
    gap, gap_cells = race_gap(coded)
    source = {
        "nlsy97": "NLSY97 person-years 1998-2022 by sex, race, age, education (fit); PSID 1999 and "
        "PDII 2008 cells used only as checks",
        "psid_cells": "PSID (Blau & Kahn) cells by sex, age, education, no race (fit); NLSY97 and PDII "
        "2008 used only as checks",
    }[model.experience.source]
    summary_doc = {
        "occupation": occupation.key,
        "occp": occupation.occp,
        "survey_year": model.survey_year,
        "source": model.source,
        "profiles": len(table),
        "pums_records": len(model.records),
        "transported_rows": int(model.records["transported"].sum()),
        "dropped_below_hs": model.dropped_below_hs,
        "experience_source": source,
        "experience_sigma": {f"{s} {a}": round(v, 3) for (s, a), v in model.experience.sigma.items()},
        "experience_fit": {k: round(v, 4) for k, v in {**summary_nlsy, **summary}.items()},
        "experience_black_minus_white": {
            row["sex"]: {k: round(row[k], 3) for k in ("gap_generated", "gap_nlsy97", "se_nlsy97")}
            for row in gap.to_dict("records")
        },
    }
    artifacts: dict[str, Any] = {
        "population_composition.csv": composition(table, model.records, occupation.key),
        "population_experience_fit_nlsy97.csv": fit_nlsy,
        "population_experience_fit_psid.csv": fit_psid,
        "population_experience_fit_pdii.csv": fit_pdii,
        "population_experience_race_gap.csv": gap_cells,
        "population_summary.yaml": yaml.safe_dump(summary_doc, sort_keys=False),
        # figures as data, drawn when the run is logged (popfair.track.figures)
        "population_age_vs_experience.png": Plot(
            "age_experience", age_experience(table), f"{occupation.title}: age vs experience", keep=True
        ),
        "population_experience_qq.png": Plot(
            "qq", qq_points(model.experience), f"Q-Q: {model.experience.source} experience vs normal", keep=True
        ),
    }
    if model.transport is not None:
        artifacts["population_transport.csv"] = model.transport
    return artifacts
