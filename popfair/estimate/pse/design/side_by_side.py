"""`estimator=both`: the observational DML-UCA estimate and the interventional one, side by side.

The observational estimator sees only the factual scored table and rests on its assumptions (no
hidden confounding, overlap, good nuisances); the interventional one scores counterfactual resumes
of the same case. Putting them in one table, with their difference and whether their CIs overlap
and reach the same conclusion, checks the observational estimate on a case where the truth can
be measured."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popfair.core.constraints import ParameterError
from popfair.core.errors import EstimationError
from popfair.core.types import Effects, Plot, Roles
from popfair.estimate.base import EFFECT_COLUMNS, Estimator, factual_rows
from popfair.estimate.pse.design.interventional import Interventional
from popfair.estimate.pse.estimand import OBSERVED_PREFIX, SAME_ESTIMAND
from popfair.estimate.pse.sfm import EFFECTS

INTERVENTIONAL_PREFIX = "intv_"


class SideBySide:
    """Runs `observational` (pse_dml) and `interventional` on the same scored table.

    The effects table keeps the observational columns (estimate, se, ci_low, ci_high, significant)
    so labels, metrics and downstream reports read it as usual, and adds intv_estimate, intv_se,
    intv_ci_low, intv_ci_high, intv_significant, difference (observational minus interventional),
    ci_overlap (the two CIs intersect) and same_conclusion (both CIs exclude 0 on the same side,
    or both cover 0); `identified` and `reason` are the observational gate's (an unidentified DML effect
    has no numbers, so its difference is missing and it overlaps nothing). Case labels are the observational ones; the interventional ones are in
    `interventional_pattern.txt` and the metrics."""

    name = "both"

    def __init__(self, observational: Estimator, interventional: Interventional) -> None:
        name = getattr(observational, "name", type(observational).__name__)
        if name != "pse_dml" or not callable(getattr(observational, "estimate", None)):
            raise ParameterError(
                "observational",
                "must be the pse_dml estimator (the same five path-specific "
                f"effects; conf/estimator/pse_dml.yaml), got {name!r}",
            )
        if not isinstance(interventional, Interventional):
            raise ParameterError(
                "interventional",
                f"must be popfair.estimate.pse.design.interventional.Interventional, got {type(interventional).__name__}",
            )
        self.observational, self.interventional = observational, interventional
        self.counterfactuals = interventional.counterfactuals  # the interventional part's worlds

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        observed = self.observational.estimate(factual_rows(data), roles, y)  # never the world rows
        measured = self.interventional.estimate(data, roles, y)
        table = compare(observed.table, measured.table)
        agree = table["ci_overlap"].to_numpy(bool)
        same = table["same_conclusion"].to_numpy(bool)
        metrics = {
            **observed.metrics,
            **measured.metrics,
            "compare.ci_overlap_count": float(agree.sum()),
            "compare.same_conclusion_count": float(same.sum()),
            "compare.max_abs_difference": float(np.abs(table["difference"]).max()),
        }
        title = f"{roles.x}: {roles.x1} vs {roles.x0} (positive favours {roles.x1})"
        artifacts: dict[str, Any] = {
            **observed.artifacts,
            **measured.artifacts,
            "side_by_side.csv": table,
            "side_by_side_forest.png": side_by_side_plot(table, title),
            "interventional_pattern.txt": measured.pattern,
        }
        return Effects(table=table, labels=observed.labels, metrics=metrics, artifacts=artifacts, notes=observed.notes)


def compare(observed: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """One row per effect: observational and interventional estimates with CIs, their difference,
    whether the CIs overlap and whether they reach the same significance conclusion."""
    for name, table in (("observational", observed), ("interventional", measured)):
        missing = [e for e in EFFECTS if e not in table.index]
        lacking = [c for c in EFFECT_COLUMNS if c not in table.columns]
        if missing or lacking:
            raise EstimationError(
                f"estimator=both: the {name} effects table lacks effects {missing} or "
                f"columns {lacking}; the observational estimator must be pse_dml"
            )
    obs = observed.loc[list(EFFECTS), EFFECT_COLUMNS].astype(float)
    intv = measured.loc[list(EFFECTS), EFFECT_COLUMNS].astype(float)
    table = obs.assign(significant=_direction(obs) != 0)
    for column in EFFECT_COLUMNS:
        table[INTERVENTIONAL_PREFIX + column] = intv[column]
    table[INTERVENTIONAL_PREFIX + "significant"] = _direction(intv) != 0
    table["difference"] = obs["estimate"] - intv["estimate"]
    table["ci_overlap"] = np.maximum(obs["ci_low"], intv["ci_low"]) <= np.minimum(obs["ci_high"], intv["ci_high"])
    table["same_conclusion"] = _direction(obs) == _direction(intv)
    if "identified" in observed:  # an effect DML cannot identify has nothing to compare: say so
        identified = observed.loc[list(EFFECTS), "identified"].astype(bool)
        table["identified"] = identified
        table["reason"] = observed.loc[list(EFFECTS), "reason"]
        table.loc[~identified, "same_conclusion"] = False
    table.index.name = "effect"
    return table


def _direction(table: pd.DataFrame) -> np.ndarray:
    """+1 when the CI lies above 0, -1 below, 0 when it covers 0."""
    return np.where(table["ci_low"] > 0, 1, np.where(table["ci_high"] < 0, -1, 0))


def side_by_side_plot(table: pd.DataFrame, title: str = "Observational vs interventional") -> Plot:
    """Forest plot: each effect's observational (DML-UCA) and interventional estimate with CIs."""
    return Plot(
        "forest",
        table,
        title,
        {"series": (("", "observational (DML-UCA)", "C0"), (INTERVENTIONAL_PREFIX, "interventional", "C3"))},
    )


def beside(table: pd.DataFrame, observed: pd.DataFrame) -> pd.DataFrame:
    """The design's effects with DML-UCA's beside them (dml_estimate, dml_se, dml_ci_low, dml_ci_high,
    dml_identified, dml_reason), `comparable` (the two estimate the same quantity: SAME_ESTIMAND), the
    difference (design minus DML), its standard error (the two treated as independent: they share
    the factual answers, which makes it conservative for TE) and `agree`: the difference's CI covers
    0 (missing where DML does not identify the effect or the two estimands differ, and then so are
    the difference and its SE)."""
    from scipy import stats

    dml = observed.reindex(list(EFFECTS))
    out = table.copy()
    for column in EFFECT_COLUMNS:
        out[OBSERVED_PREFIX + column] = dml[column].astype(float).to_numpy()
    identified = dml["identified"].astype(bool).to_numpy() if "identified" in dml else np.ones(len(dml), bool)
    out[OBSERVED_PREFIX + "identified"] = identified
    out[OBSERVED_PREFIX + "reason"] = dml["reason"].fillna("").to_numpy() if "reason" in dml else ""
    difference = out["estimate"] - out[OBSERVED_PREFIX + "estimate"]
    se = np.sqrt(out["se"] ** 2 + out[OBSERVED_PREFIX + "se"] ** 2)
    half = stats.norm.ppf(0.975) * se
    comparable = out.index.isin(SAME_ESTIMAND)
    out["comparable"] = comparable
    out["difference"] = difference.where(comparable)
    out["difference_se"] = se.where(comparable)
    agree = (difference - half <= 0) & (difference + half >= 0)
    out["agree"] = pd.Series(agree.to_numpy(), index=out.index, dtype=object).where(identified & comparable, None)
    return out
