"""Parallel sweeps share one response cache: a 4-case sweep (gender and race of two occupations,
same model) under the joblib launcher asks the local LLM stub each distinct prompt exactly once, and
that number is the dry-run plan's "after cache sharing" figure. The same case scores identically
through the SQLite and the PostgreSQL cache."""

from __future__ import annotations

import mlflow
import pandas as pd

from popfair.case.population import PopulationCase
from popfair.sweep import plan
from popfair.track.headline import search_logged_runs
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.test_cli import popfair

CASES = ["occupation=nurse,teacher", "protected_attr=gender,race"]
SMALL = [
    "screener=gpt4o_mini",
    "screener.route=openai",
    "population.n=150",
    "estimator=outcome_gap",
    "estimator.n_bootstrap=100",
    "outcome_audit=null",
    "screener.engine.progress=false",
    "screener.engine.concurrency=4",
    "screener.engine.claim_poll_s=0.1",
]


def planned_after_sharing(
    tmp_path, occupations: tuple[str, ...] = ("nurse", "teacher"), small: list[str] = SMALL
) -> int:
    """The dry-run plan's total of calls "after cache sharing" (new_calls) for the cases, in sweep order
    (each case with the `small` overrides)."""
    plan.default_planner().planned.clear()
    cases = [[f"occupation={o}", f"protected_attr={a}"] for o in occupations for a in ("gender", "race")]
    return sum(
        plan.plan_case(
            PopulationCase.from_config(
                compose_config([*case, *small, f"cache_dir={tmp_path}/plan_cache", "tracking=none"]), dry_run=True
            )
        ).new_calls
        for case in cases
    )


def test_joblib_sweep_answers_every_distinct_prompt_once(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-sweep-0123456789")
    planned = planned_after_sharing(tmp_path)
    with StubServer(latency_s=0.005) as stub:
        out = popfair(
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=2",
            *CASES,
            *SMALL,
            "cache_dir=cache",
            "+hydra.callbacks.popfair_sweep.report=false",
            f"screener.base_url={stub.url}/v1",
            cwd=tmp_path,
        )
        errors = [line for line in (out.stdout + out.stderr).splitlines() if "render" not in line]
        assert out.returncode == 0, "\n".join(errors)[-3000:]
        answered = stub.state.answered
    assert set(answered.values()) == {1}  # nothing paid twice, across the two worker processes
    assert len(answered) == planned  # the plan's "after cache sharing" figure came true
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = search_logged_runs(experiment_names=["popfair"])
    children = runs[runs["tags.popfair.sweep"] != "parent"]
    assert len(children) == 4 and (children["status"] == "FINISHED").all()
    assert children["metrics.screen.answered"].sum() == planned
    assert children["metrics.screen.failed_rows"].sum() == 0


def test_sqlite_and_postgres_caches_give_identical_scored_tables(tmp_path, pg_url, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-same-0123456789")
    with StubServer() as stub:
        scored = {}
        for name, where in (("sqlite", f"cache_dir={tmp_path}/cache"), ("postgres", f"cache_url={pg_url}")):
            cfg = compose_config(
                [
                    "screener=gpt4o_mini",
                    "screener.route=openai",
                    "population.n=120",
                    "estimator=outcome_gap",
                    "estimator.n_bootstrap=100",
                    "outcome_audit=null",
                    "tracking=none",
                    "screener.engine.progress=false",
                    f"screener.base_url={stub.url}/v1",
                    where,
                ]
            )
            scored[name] = PopulationCase.from_config(cfg).run().scored
    assert scored["sqlite"]["error"].isna().all()
    pd.testing.assert_frame_equal(scored["sqlite"], scored["postgres"])
