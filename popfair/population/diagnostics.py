"""Population diagnostics logged as run artifacts: composition by occupation (paper Fig. 7 a-c),
age vs experience (Fig. 7 d), the experience model's Q-Q plot (Fig. 6) and its fit to PSID and PDII."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure
from scipy.stats import norm

from popfair.population.experience import EDU_TO_PSID, age_group, pdii_cells, psid_cells
from popfair.population.occupation import Occupation

if TYPE_CHECKING:
    from popfair.population.popresume import OccupationModel

COMPOSITION_ATTRIBUTES = ("gender", "race", "edu_level", "edu_group", "region")


def weighted_shares(table: pd.DataFrame, column: str, weight: str = "weight") -> pd.Series:
    totals = table.groupby(column)[weight].sum()
    return totals / totals.sum()


def composition(table: pd.DataFrame, records: pd.DataFrame, occupation: str) -> pd.DataFrame:
    """Weighted shares of each attribute level: generated profiles vs the PUMS records they come from."""
    from popfair.population.pums import EDU_GROUP  # noqa: PLC0415
    records = records.assign(edu_group=records["edu_level"].map(EDU_GROUP))
    rows = []
    for attribute in COMPOSITION_ATTRIBUTES:
        generated, pums = weighted_shares(table, attribute), weighted_shares(records, attribute)
        for level in sorted(set(generated.index) | set(pums.index)):
            rows.append({"occupation": occupation, "attribute": attribute, "level": level,
                         "share_profiles": float(generated.get(level, 0.0)), "share_pums": float(pums.get(level, 0.0))})
    return pd.DataFrame(rows)


def _weighted_mean(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grouped = frame.assign(wx=frame["exp_year"] * frame["weight"]).groupby(keys)
    sums = grouped[["wx", "weight"]].sum()
    return pd.DataFrame({"n_profiles": grouped.size(), "profiles_mean": sums["wx"] / sums["weight"]})


def experience_fit(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """Generated exp_year cell means vs PSID 1999 (sex x age group x PSID edu) and vs PDII 2008
    (sex x age group x seven levels), with n-weighted mean absolute error and correlation."""
    frame = table.assign(sex=table["gender"], age_group=age_group(table["age"]),
                         edu=table["edu_level"].map(EDU_TO_PSID))
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
        summary[f"{name}_corr"] = float(np.corrcoef(fit["profiles_mean"], fit[ref])[0, 1]) if len(fit) > 2 else float("nan")
    return fit_psid, fit_pdii, summary


def qq_points(model_training: pd.DataFrame) -> pd.DataFrame:
    """PSID cell quartiles standardised by cell mean and SD vs the normal's quartiles (normality check)."""
    rows = []
    for column, prob in (("p25", 0.25), ("p50", 0.5), ("p75", 0.75)):
        empirical = (model_training[column] - model_training["mean"]) / model_training["sd"]
        rows.append(pd.DataFrame({"theoretical": norm.ppf(prob), "empirical": empirical,
                                  "weight": model_training["weight"]}))
    return pd.concat(rows, ignore_index=True).dropna()


def qq_figure(points: pd.DataFrame, title: str) -> Figure:
    fig = Figure(figsize=(4.5, 4.5))
    ax = fig.subplots()
    jitter = np.random.default_rng(0).normal(0, 0.02, len(points))
    ax.scatter(points["theoretical"] + jitter, points["empirical"], s=8 + 40 * points["weight"] / points["weight"].max(),
               alpha=0.5)
    lim = [-1.5, 1.5]
    ax.plot(lim, lim, color="k", lw=1)
    ax.set(xlabel="normal quantile", ylabel="PSID cell quantile, standardised", title=title, xlim=lim, ylim=lim)
    return fig


def age_experience_figure(table: pd.DataFrame, title: str) -> Figure:
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for gender, rows in table.groupby("gender"):
        stats = rows.groupby("age")["exp_year"].agg(["mean", lambda s: s.quantile(0.1), lambda s: s.quantile(0.9)])
        stats.columns = ["mean", "p10", "p90"]
        ax.plot(stats.index, stats["mean"], label=f"{gender} mean")
        ax.fill_between(stats.index, stats["p10"], stats["p90"], alpha=0.2)
    ages = np.arange(18, 45)
    ax.plot(ages, ages - 18, "k--", lw=1, label="age - 18 (upper bound)")
    ax.set(xlabel="age", ylabel="years of experience", title=title)
    ax.legend()
    return fig


def population_artifacts(table: pd.DataFrame, model: OccupationModel, occupation: Occupation) -> dict[str, Any]:
    """Artifacts for one occupation's profiles (names are prefixed `population_`)."""
    fit_psid, fit_pdii, summary = experience_fit(table)
    summary_doc = {"occupation": occupation.key, "occp": occupation.occp, "survey_year": model.survey_year,
                   "profiles": len(table), "pums_records": len(model.records),
                   "dropped_below_hs": model.dropped_below_hs,
                   "experience_sigma": {f"{s} {a}": round(v, 3) for (s, a), v in model.experience.sigma.items()},
                   "experience_fit": {k: round(v, 4) for k, v in summary.items()},
                   "experience_source": "PSID (Blau & Kahn) fit; PDII 2008 used only as a check"}
    return {
        "population_composition.csv": composition(table, model.records, occupation.key),
        "population_experience_fit_psid.csv": fit_psid,
        "population_experience_fit_pdii.csv": fit_pdii,
        "population_summary.yaml": yaml.safe_dump(summary_doc, sort_keys=False),
        "population_age_vs_experience.png": age_experience_figure(table, f"{occupation.title}: age vs experience"),
        "population_experience_qq.png": qq_figure(qq_points(model.experience.training),
                                                  "Q-Q: PSID experience cells vs normal"),
    }
