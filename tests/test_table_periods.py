"""Decisions over time (table.period): counts per period equal a hand count, the test of change equals
an independent maximum-likelihood fit, Holm's adjustment equals statsmodels', and a table with a
known drop in one quarter is flagged in that quarter, logged with one MLflow step per period and
written in the auditor's report. Bad inputs are one line naming the key."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from popfair.core.errors import ConfigError, DataError
from popfair.estimate.impact_ratio.change import holm, lr_test
from tests.test_table_source import COLUMNS, decisions, table_case, write

QUARTER_STARTS = ["2024-01-01", "2024-04-01", "2024-07-01", "2024-10-01"]


def _log_binomial_deviance(selected: np.ndarray, n: np.ndarray, design: np.ndarray) -> float:
    """-2 log-likelihood of the log-binomial model, maximised with scipy (not statsmodels)."""

    def negative(beta: np.ndarray) -> float:
        p = np.exp(np.clip(design @ beta, -30, -1e-9))
        return -float(np.sum(selected * np.log(p) + (n - selected) * np.log1p(-p)))

    start = np.zeros(design.shape[1])
    start[0] = np.log(selected.sum() / n.sum())
    fit = optimize.minimize(
        negative, start, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000}
    )
    return 2 * fit.fun


def test_the_change_test_equals_an_independent_likelihood_ratio():
    # two categories x three periods; period 2 against periods 0-1
    cells = pd.DataFrame(
        {
            "period": [0, 0, 1, 1, 2, 2],
            "category": [0, 1, 0, 1, 0, 1],
            "n": [400, 300, 380, 320, 410, 290],
            "selected": [160, 110, 120, 95, 170, 60],
        }
    )
    statistic, df, p, note = lr_test(cells, 2)
    k, n = cells["selected"].to_numpy(float), cells["n"].to_numpy(float)
    cat, per = cells["category"].to_numpy(), cells["period"].to_numpy()
    null = np.column_stack([np.ones(6), cat == 1, per == 1, per == 2]).astype(float)
    alternative = np.column_stack([null, (cat == 1) & (per == 2)]).astype(float)
    expected = _log_binomial_deviance(k, n, null) - _log_binomial_deviance(k, n, alternative)
    assert note == "" and df == 1
    assert statistic == pytest.approx(expected, abs=1e-4)
    from scipy import stats

    assert p == pytest.approx(stats.chi2.sf(expected, 1), rel=1e-3)
    # a change of the overall rate alone (every rate x0.5 in period 2) is not a change of the ratios
    same_ratios = cells.assign(selected=[160, 120, 140, 112, 82, 58])
    assert lr_test(same_ratios, 2)[0] < 0.05


def test_holm_equals_statsmodels():
    from statsmodels.stats.multitest import multipletests

    p = np.array([0.01, 0.04, np.nan, 0.03, 0.2, 0.001])
    tested = np.isfinite(p)
    np.testing.assert_allclose(holm(p)[tested], multipletests(p[tested], method="holm")[1])
    assert np.isnan(holm(p)[2])


@pytest.mark.parametrize(
    "period,labels", [("quarter", ["2024-Q1", "2024-Q2", "2024-Q3", "2024-Q4"]), ("month", None), ("year", ["2024"])]
)
def test_counts_by_period_equal_a_hand_count(tmp_path, period, labels):
    table = decisions()
    path = tmp_path / "d.csv"
    write(table, path, "csv")
    mapped = table_case(tmp_path, [f"table.path={path}", *COLUMNS, f"table.period={period}"]).read()
    try:
        counts = mapped.counts(by_period=True).counts
    finally:
        mapped.source.close()
    dates = pd.to_datetime(table["Decided"])
    hand = {
        "quarter": dates.dt.year.astype(str) + "-Q" + dates.dt.quarter.astype(str),
        "month": dates.dt.strftime("%Y-%m"),
        "year": dates.dt.year.astype(str),
    }[period]
    got = counts.groupby("period")["n"].sum()
    assert got.to_dict() == hand.value_counts().to_dict()
    assert got.sum() == len(table)
    if labels is not None:
        assert list(got.index) == labels
    selected = table.assign(period=hand, y=table["Decision"] == "Yes").groupby("period")["y"].sum()
    assert counts.groupby("period")["selection"].sum().to_dict() == selected.to_dict()


def drop_table(rng: np.random.Generator, n: int = 6000) -> pd.DataFrame:
    """A year of decisions; Black applicants' selection rate halves in Q3 only."""
    race = rng.choice(["White", "Black or African American", "Hispanic or Latino"], n, p=[0.5, 0.3, 0.2])
    day = rng.integers(0, 366, n)
    dates = pd.Timestamp("2024-01-01") + pd.to_timedelta(day, unit="D")
    rate = np.where((race == "Black or African American") & (dates.quarter == 3), 0.18, 0.38)
    return pd.DataFrame(
        {
            "Applicant": np.arange(n),
            "Sex": rng.choice(["F", "Male"], n),
            "Race_Ethnicity": race,
            "Decided": dates.strftime("%Y-%m-%d"),
            "Decision": np.where(rng.random(n) < rate, "Yes", "No"),
        }
    )


def test_a_drop_in_one_quarter_is_flagged_there_logged_by_step_and_reported(tmp_path):
    import mlflow

    from tests.test_table_case import popfair_cli

    path = tmp_path / "drop.csv"
    drop_table(np.random.default_rng(5)).to_csv(path, index=False)
    columns = [c for c in COLUMNS if "Requisition" not in c]
    done = popfair_cli(
        tmp_path,
        "experiment=table_audit",
        f"table.path={path}",
        *columns,
        "table.period=quarter",
        "estimator.n_bootstrap=200",
        "audit_report=false",  # the report's wording: test_the_report_says_by_period_what_changed
        in_process=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "By quarter:" in done.stdout
    assert (
        "2024-Q3: impact ratios changed against the earlier periods; race/ethnicity: Black or African American fell"
        in done.stdout
    )
    assert "2024-Q2: no change in impact ratios" in done.stdout
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    # the lowest ratio per period stays a metric with a history (its trend chart); each category's is
    # a row of metrics/steps.json
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "period.selection.race.min_ratio")
    assert [m.step for m in history] == [0, 1, 2, 3]
    mlflow.set_experiment(experiment_id=run.info.experiment_id)
    steps = mlflow.load_table("metrics/steps.json", run_ids=[run.info.run_id])
    black = steps[steps["name"] == "period.selection.race.black.ratio"].sort_values("step")
    assert black["step"].tolist() == [0, 1, 2, 3] and black["value"].idxmin() == black.index[2]
    starts = [pd.Timestamp(m.timestamp, unit="ms").strftime("%Y-%m-%d") for m in history]
    assert starts == QUARTER_STARTS
    assert min(history, key=lambda m: m.value).step == 2  # the drop quarter has the lowest ratio
    assert run.data.tags["periods.changes_flagged"].startswith("2024-Q3 race")
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "periods")}
    assert {"periods/trend.png", "periods/table.csv", "periods/changes.csv"} <= artifacts


def test_the_report_says_by_period_what_changed(tmp_path):
    from popfair.estimate.impact_ratio.settings import ImpactRatioSettings
    from popfair.estimate.impact_ratio.trend import impact_ratios_by_period
    from popfair.report.document import to_markdown
    from popfair.report.trend import period_blocks

    table = drop_table(np.random.default_rng(5))
    quarter = "2024-Q" + pd.to_datetime(table["Decided"]).dt.quarter.astype(str)
    race = table["Race_Ethnicity"].map(
        {"White": "white", "Black or African American": "black", "Hispanic or Latino": "hispanic"}
    )
    counts = (
        table.assign(period=quarter, race=race, sex=table["Sex"].map({"F": "female", "Male": "male"}), cluster="all")
        .assign(selection=table["Decision"].eq("Yes").astype(int))
        .groupby(["period", "cluster", "sex", "race"], as_index=False)
        .agg(n=("selection", "size"), selection=("selection", "sum"))
    )
    periods = impact_ratios_by_period(counts, period="quarter", settings=ImpactRatioSettings(n_bootstrap=100))
    report = to_markdown("report", period_blocks(periods, tmp_path), tmp_path)
    assert "## Impact ratios by quarter" in report
    assert (
        "2024-Q3: impact ratios changed against the earlier periods; race/ethnicity: Black or African American fell"
        in report
    )
    assert "2024-Q2: no change in impact ratios against the earlier periods" in report
    assert "### Race/Ethnicity: impact ratio by quarter (selection)" in report and "trend.png" in report
    assert (tmp_path / "trend.png").stat().st_size > 10_000


def test_bad_period_inputs_are_one_line_and_lose_nothing(tmp_path):
    table = decisions()
    path = tmp_path / "d.csv"
    table.assign(Decided=np.where(np.arange(len(table)) < 3, "03/05/2024", table["Decided"])).to_csv(path, index=False)
    base = [f"table.path={path}", *COLUMNS]
    with pytest.raises(
        ConfigError, match=r"^table.period: must be one of \['month', 'quarter', 'year'\].*did you mean quarter"
    ):
        table_case(tmp_path, [*base, "table.period=quartr"])
    no_date = [c for c in base if "Decided" not in c]
    with pytest.raises(ConfigError, match=r"^table.period: period=month needs table.columns.date"):
        table_case(tmp_path, [*no_date, "table.period=month"])
    with pytest.raises(ConfigError, match=r"^table.columns.date: no column 'Decidd'"):
        table_case(tmp_path, [*no_date, "table.columns.date=Decidd", "table.period=month"]).read()
    with pytest.raises(
        DataError, match=r"^table.bad_rows: 3 rows have problems \(3 date is missing or not a date"
    ) as err:
        table_case(tmp_path, [*base, "table.period=month"]).read()
    assert "\n" not in str(err.value) and "table_report.csv" in str(err.value)
    report = pd.read_csv(tmp_path / "table_report.csv")
    assert list(report["source_row"]) == [1, 2, 3] and set(report["value"]) == {"03/05/2024"}
    mapped = table_case(tmp_path, [*base, "table.period=month", "table.bad_rows=drop"]).read()
    try:
        assert mapped.record.rows_dropped == 3 and mapped.counts(by_period=True).counts["n"].sum() == len(table) - 3
    finally:
        mapped.source.close()
