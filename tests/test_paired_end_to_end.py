"""The paired callback audit as one case: postings -> pairs -> JSON -> tfidf -> paired_gap -> MLflow."""

from __future__ import annotations

import mlflow
import pytest

from popfair.case.population import PopulationCase
from popfair.case.power_plan import CasePower
from popfair.core.errors import ConfigError
from popfair.estimate.power import mcnemar_mde
from popfair.track.headline import logged_metrics
from tests.conftest import compose_config

CASE = ["experiment=paired_race", "screener=tfidf", "occupation.n_postings=60", "estimator.n_bootstrap=200"]


def test_paired_race_case_runs_end_to_end(tmp_path):
    experiment = PopulationCase.from_config(compose_config(CASE, tmp_path=tmp_path))
    assert experiment.case_name() == "entry_level_postings-race-json-tfidf-paired_gap"
    result = experiment.run()
    scored = result.scored
    assert len(scored) == 60 * 4 * 2 and scored["pair_key"].nunique() == 240
    assert set(scored["y"].unique()) <= {0.0, 1.0} and scored["y"].nunique() == 2
    assert scored["document"].str.startswith('{"name": ').all()
    row = result.effects.table.loc["gap"]
    assert row["n_pairs"] == 240 and row["n_clusters"] == 60 and row["n_dropped"] == 0
    assert row["ci_low"] <= row["estimate"] <= row["ci_high"]
    wide = scored.pivot(index="pair_key", columns="race", values="y")
    assert row["b"] == int(((wide["white"] == 1) & (wide["black"] == 0)).sum())
    assert row["estimate"] == pytest.approx(100 * (wide["white"].mean() - wide["black"].mean()))
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    run = mlflow.get_run(result.run_id)
    assert run.data.params["population.axis"] == "race" and run.data.params["protected_attr.name"] == "race"
    logged = logged_metrics(mlflow.MlflowClient(), run)  # the headline metrics and the tables' cells
    assert logged["gap.n_pairs"] == 240 and set(run.data.metrics) >= {"gap.estimate", "gap.mcnemar_p"}
    # the power line (config plan.*): logged at the planned n, and the next audit plans from this run
    assert logged["plan.n"] == 240 and run.data.tags["plan.units"] == "pairs"
    assert logged["plan.mde"] == pytest.approx(mcnemar_mde(240, 0.5, 0.05, 0.8))  # default: independent pairs
    tracking = {"enabled": True, "uri": f"sqlite:///{tmp_path}/mlflow.db"}
    power = CasePower.of({"from_run": result.run_id, "effect": 0.05}, tracking)
    plan = power.plan("paired", result.profiles)
    share = (row["b"] + row["c"]) / 240
    assert f"{share:.1%} of the pairs discordant, as in MLflow run {result.run_id[:12]}" in plan.line()
    # tfidf answers both sides of every pair alike: no gap is detectable at any n, and the plan says so
    assert share == 0 and plan.mde is None and "shows no gap at any n" in plan.line()
    with pytest.raises(ConfigError, match=r"^plan.from_run: no run 'deadbeef' in the MLflow store sqlite:"):
        CasePower.of({"from_run": "deadbeef"}, tracking)
