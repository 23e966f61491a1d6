"""The test of change over time in impact ratios: did the ratios of the categories' selection rates
move between periods? (table.period; `popfair.estimate.impact_ratio.trend` runs it.)

The impact ratio is a ratio of selection rates, so the model is on the log of the rate (a binomial
GLM with a log link, statsmodels), fitted to the counts of selected and not selected per period x
category:

- per period t from the second on, against the periods before it: log p = a_category + b_period
  (earlier periods and t each have their own base rate, the categories' rate ratios are shared)
  against the same plus a category effect in period t alone. The likelihood-ratio statistic has
  (categories - 1) degrees of freedom. A change of the overall selection rate alone (a hiring freeze,
  a busy season) leaves every rate ratio where it was and is not a change: a logistic model would
  call it one, since odds ratios move when base rates do. Comparing with the earlier periods only
  is what a monitor can do as the periods arrive (a later period cannot flag an earlier one), and
  the first period is the baseline;
- overall, every period at once: the same additive model against the saturated one
  ((categories - 1) x (periods - 1) degrees of freedom).

The per-period p-values of one metric (sex and race/ethnicity, every period) are adjusted together
by Holm's method, so the chance that a table with no change flags any period is at most alpha
(checked by simulation in benchmarks/bench_drift.py). The intersection of sex and race is shown per
period but not tested: its cells, split by period, are mostly too small for the asymptotic test."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats

TESTED_DIMENSIONS = ("sex", "race")
CHANGE_COLUMNS = [
    "metric",
    "dimension",
    "period",
    "against",
    "statistic",
    "df",
    "p_value",
    "p_holm",
    "flagged",
    "note",
]


def _design(period: np.ndarray, category: np.ndarray, n_periods: int, n_categories: int) -> np.ndarray:
    """Intercept, category dummies (first category as base) and period dummies (first as base)."""
    columns = [np.ones(len(period))]
    columns += [(category == c).astype(float) for c in range(1, n_categories)]
    columns += [(period == t).astype(float) for t in range(1, n_periods)]
    return np.column_stack(columns)


def _deviance(selected: np.ndarray, n: np.ndarray, design: np.ndarray) -> float:
    """Deviance of the log-binomial GLM of `selected` of `n` on `design` (nan when it does not fit)."""
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, DomainWarning, PerfectSeparationWarning

    endog = np.column_stack([selected, n - selected])
    family = sm.families.Binomial(link=sm.families.links.Log())
    # start inside the parameter space: the log of the pooled rate, and no effects
    start = np.zeros(design.shape[1])
    start[0] = np.log(max(selected.sum(), 0.5) / n.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        for category in (DomainWarning, PerfectSeparationWarning, RuntimeWarning):
            warnings.simplefilter("ignore", category)
        try:
            fit = sm.GLM(endog, design, family=family).fit(start_params=start, maxiter=200)
        except (ConvergenceWarning, ValueError, np.linalg.LinAlgError, FloatingPointError):
            return float("nan")
    mu = np.asarray(fit.mu)
    if not np.all(np.isfinite(mu)) or np.any(mu > 1 + 1e-9):
        return float("nan")
    return float(fit.deviance)


def lr_test(cells: pd.DataFrame, current: int | None) -> tuple[float, int, float, str]:
    """LR test on cells (columns period, category: integer codes from 0; n; selected).

    current=None: every period (additive against saturated); else period `current` against the
    periods before it (only those rows are used). Returns statistic, df, p-value, note ('' when tested)."""
    rows = cells if current is None else cells[cells["period"] <= current]
    rows = rows[rows["n"] > 0]
    if current is not None and not (rows["period"] == current).any():
        return float("nan"), 0, float("nan"), "not tested: no applicants in this period"
    periods = np.unique(rows["period"])
    categories = np.unique(rows["category"])
    if len(periods) < 2 or len(categories) < 2:
        return float("nan"), 0, float("nan"), "not tested: needs two periods and two categories with applicants"
    period = np.searchsorted(periods, rows["period"].to_numpy())
    category = np.searchsorted(categories, rows["category"].to_numpy())
    n, selected = rows["n"].to_numpy(float), rows["selected"].to_numpy(float)
    null = _design(period, category, len(periods), len(categories))
    if current is None:
        cell = period * len(categories) + category
        alternative = np.column_stack([(cell == c).astype(float) for c in np.unique(cell)])
    else:
        now = (period == len(periods) - 1).astype(float)
        alternative = np.column_stack([null, *[(category == c) * now for c in range(1, len(categories))]])
    df = int(np.linalg.matrix_rank(alternative) - np.linalg.matrix_rank(null))
    if df <= 0:
        return float("nan"), 0, float("nan"), "not tested: the period has a single category with applicants"
    d0, d1 = _deviance(selected, n, null), _deviance(selected, n, alternative)
    if not (np.isfinite(d0) and np.isfinite(d1)):
        return float("nan"), df, float("nan"), "not tested: the log-binomial model did not converge"
    statistic = max(d0 - d1, 0.0)
    return statistic, df, float(stats.chi2.sf(statistic, df)), ""


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (nan entries stay nan and do not count): the step-down formula,
    max over j <= i of (m - j + 1) p_(j), capped at 1. statsmodels' multipletests(method="holm")
    gives the same numbers (tests/test_table_periods.py checks it) but runs a full gc.collect() per
    call, a third of a second in a process holding a case."""
    out = np.full(len(p_values), np.nan)
    tested = np.flatnonzero(np.isfinite(p_values))
    if tested.size:
        order = tested[np.argsort(p_values[tested], kind="stable")]
        factors = np.arange(tested.size, 0, -1)
        out[order] = np.minimum(np.maximum.accumulate(factors * p_values[order]), 1.0)
    return out


def change_tests(cells: pd.DataFrame, periods: list[str], alpha: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per metric x dimension x period (from the second) the test against the earlier periods, Holm
    adjusted within each metric; and per metric x dimension the test over every period.

    `cells`: metric, dimension, period (label), category, n, selected (known categories only)."""
    by_period, overall = [], []
    for metric, block in cells.groupby("metric", sort=False):
        rows = []
        for dimension in TESTED_DIMENSIONS:
            part = block[block["dimension"] == dimension]
            if part.empty:
                continue
            codes = part.assign(
                period=[periods.index(p) for p in part["period"]],
                category=pd.factorize(part["category"], sort=True)[0],
            )
            statistic, df, p, note = lr_test(codes, None)
            overall.append(
                {"metric": metric, "dimension": dimension, "statistic": statistic, "df": df, "p_value": p, "note": note}
            )
            for t in range(1, len(periods)):
                statistic, df, p, note = lr_test(codes, t)
                rows.append(
                    {
                        "metric": metric,
                        "dimension": dimension,
                        "period": periods[t],
                        "against": f"{periods[0]} to {periods[t - 1]}" if t > 1 else periods[0],
                        "statistic": statistic,
                        "df": df,
                        "p_value": p,
                        "note": note,
                    }
                )
        if rows:
            frame = pd.DataFrame(rows)
            frame["p_holm"] = holm(frame["p_value"].to_numpy(float))
            frame["flagged"] = frame["p_holm"] < alpha
            by_period.append(frame)
    changes = pd.concat(by_period, ignore_index=True) if by_period else pd.DataFrame(columns=CHANGE_COLUMNS)
    overall_frame = pd.DataFrame(overall, columns=["metric", "dimension", "statistic", "df", "p_value", "note"])
    return changes.reindex(columns=CHANGE_COLUMNS), overall_frame
