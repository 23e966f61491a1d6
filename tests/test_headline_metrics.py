"""A run's metrics are its headline (at most 40: what people sort and chart runs by), every other
number is a cell of an MLflow table: per design, every number of effects.csv is a metric or a cell
of a logged table, and `logged_metrics` gives back every number the case computed."""

from __future__ import annotations

import math

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from popfair.track.headline import MAX_METRICS, join_name, logged_metrics, restore, split, split_name, tables_of
from tests.conftest import compose_config

SAMPLE = "docs/data/sample_decisions.csv"
DESIGNS = {
    "population": (["population.n=600", "estimator.n_bootstrap=100"], [f"{e}.{c}" for e in ("TE", "BIE") for c in ("estimate", "ci_low", "ci_high", "p_value")]),
    "paired": (
        ["experiment=paired_race", "screener=tfidf", "occupation.n_postings=40", "estimator.n_bootstrap=100"],
        ["gap.estimate", "gap.ci_low", "gap.ci_high", "gap.mcnemar_p", "gap.cluster_p"],
    ),
    "ranking": (
        ["experiment=ranking_race_gender", "population.n_trials=200"],
        ["impact_ratio.white_male.estimate", "impact_ratio.black_female.p_value", "top1.black_female.estimate"],
    ),
    "table": (
        [
            "experiment=table_audit",
            f"table.path={SAMPLE}",
            "table.columns.outcome=advanced",
            "table.columns.sex=gender",
            "table.columns.race=ethnicity",
            "table.columns.cluster=requisition_id",
            "estimator.n_bootstrap=200",
        ],
        ["ll144.selection.race.min_ratio", "ll144.selection.race.min_ratio_ci_low", "ll144.selection.race.min_ratio_flag_survives"],
    ),
}  # fmt: skip


def _case(overrides: list[str], tmp_path):
    from popfair.sweep.run_case import case_from_config

    return case_from_config(compose_config(overrides, tmp_path=tmp_path))


def _cells(client: MlflowClient, run_id: str, tmp_path) -> list[float]:
    """Every number in every MLflow table the run logged (effects_table.json and metrics/*.json)."""
    found: list[float] = []
    files = [f.path for f in client.list_artifacts(run_id, "metrics")] + ["effects_table.json"]
    for file in files:
        table = mlflow.load_table(file, run_ids=[run_id])
        for value in table.to_numpy().ravel():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                found.append(float(value))
            elif isinstance(value, bool):
                found.append(float(value))
    return found


@pytest.mark.parametrize("design", list(DESIGNS))
def test_every_effects_number_is_a_metric_or_a_table_cell(design, tmp_path, monkeypatch):
    monkeypatch.chdir(__import__("pathlib").Path(__file__).parents[1])  # the sample table's relative path
    overrides, headline = DESIGNS[design]
    case = _case(overrides, tmp_path)
    result = case.run()
    uri = case.tracker.uri
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    run = client.get_run(result.run_id)
    mlflow.set_experiment(experiment_id=run.info.experiment_id)  # load_table searches the active experiment
    metrics = run.data.metrics
    assert 0 < len(metrics) <= MAX_METRICS, sorted(metrics)
    assert set(headline) <= set(metrics), sorted(metrics)
    assert "time.total_s" in metrics and metrics["time.total_s"] > 0
    local = client.download_artifacts(result.run_id, "effects.csv", str(tmp_path))
    effects = pd.read_csv(local, index_col=0)
    known = list(metrics.values()) + _cells(client, result.run_id, tmp_path)
    missing = []
    for effect, row in effects.iterrows():
        for column, value in row.items():
            number = pd.to_numeric(value, errors="coerce")
            if pd.isna(number) or not math.isfinite(float(number)):
                continue
            if not any(math.isclose(float(number), k, rel_tol=1e-9, abs_tol=1e-12) for k in known):
                missing.append(f"{effect}.{column}={number}")
    near = [min(known, key=lambda k: abs(k - float(m.split("=")[1]))) for m in missing]
    assert not missing, (missing[:10], near[:10])
    # everything the case computed comes back as flat metrics: the metrics and the tables' cells
    full = logged_metrics(client, run)
    computed = {k: v for k, v in result.effects.metrics.items() if not k.endswith(".identified")}
    assert {k for k, v in computed.items() if math.isfinite(v)} <= set(full)
    for key, value in computed.items():
        if math.isfinite(value):
            assert full[key] == pytest.approx(value), key


def test_names_split_and_join_back():
    for name in (
        "n_rows",
        "plan.n",
        "pse.ess.E_Y_x1",
        "ll144.selection.race.black.ratio",
        "ll144.selection.race.black.given_reference.fisher_p",
        "ll144.race.n_unknown",
    ):
        assert join_name(*split_name(name)) == name
    assert split_name("ll144.selection.race.black.given_reference.z") == (
        "ll144",
        "selection.race.black",
        "given_reference.z",
    )


def test_split_caps_the_headline_and_keeps_every_other_number():
    # a ranking audit of 30 groups: 30 x 4 headline numbers would not fit
    effects = {f"impact_ratio.g{i}": {"estimate", "ci_low", "ci_high", "p_value", "se"} for i in range(30)}
    metrics = {f"{e}.{c}": float(i) for i, e in enumerate(effects) for c in effects[e]}
    metrics |= {"pse.ess.E_Y_x1": 3.0, "plan.n": 10.0, "n_failed": 0.0, "time.total_s": 1.0}
    top, tables = split(metrics, effects)
    assert len(top) == MAX_METRICS and "time.total_s" in top
    assert set(tables) == {"metrics/pse.json", "metrics/plan.json", "metrics/run.json"}
    back = restore(tables)
    assert back == {"pse.ess.E_Y_x1": 3.0, "plan.n": 10.0, "n_failed": 0.0}
    assert tables_of({"ll144.s.race.black.ratio": 0.5, "ll144.s.race.black.ci_low": 0.2})["metrics/ll144.json"].to_dict(
        "records"
    ) == [{"row": "s.race.black", "ratio": 0.5, "ci_low": 0.2}]
