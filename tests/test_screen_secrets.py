"""API keys live only in the environment: a planted sentinel key never reaches config dumps, logs,
MLflow or artifacts, and a missing key stops the CLI before any work, naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from popfair.track.headline import search_logged_runs
from tests.llm_stub import StubServer

ROOT = Path(__file__).resolve().parents[1]
SENTINEL = "sk-SENTINEL-7f3a9c1e5b2d4f6a8c0e"


def popfair(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "PYTHONPATH": str(ROOT)},
    )


def test_sentinel_key_appears_nowhere_under_outputs_or_mlruns(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": SENTINEL}
    with StubServer() as stub:
        out = popfair(
            "screener=gpt4o_mini",
            "screener.route=openai",
            f"screener.base_url={stub.url}/v1",
            "population.n=150",
            "screener.engine.progress=false",
            cwd=tmp_path,
            env=env,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert stub.state.requests >= 150  # the case really called the (stub) API with the key
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = search_logged_runs(experiment_names=["popfair"]).iloc[0]
    assert run["params.screener.api_key_env"] == "OPENAI_API_KEY"
    # what the papers leave unstated is tagged as popfair's choice (docs/replication.md)
    assert "popfair's assignment" in run["tags.popfair_choice.route"]
    assert "PopResume prints no prompt" in run["tags.popfair_choice.prompt_score"]
    # the 150 applicants, and the worlds of the default estimator's sample (the auditor's report is
    # written too: it is among the files searched below)
    assert run["metrics.n_rows"] == 150 and run["metrics.screen.rows"] > 150
    files = [
        p for folder in ("outputs", "mlruns", ".popfair_cache") for p in (tmp_path / folder).rglob("*") if p.is_file()
    ]
    assert any(p.name == "config.yaml" for p in files) and any(p.suffix == ".log" for p in files)
    leaks = [str(p) for p in files if SENTINEL.encode() in p.read_bytes()]
    assert leaks == []
    assert SENTINEL not in out.stdout + out.stderr


def test_missing_key_fails_when_the_case_is_built_naming_the_variable(tmp_path, monkeypatch):
    from popfair.case.population import PopulationCase
    from popfair.core.errors import MissingSecretError
    from tests.conftest import compose_config

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    cfg = compose_config(["screener=claude_haiku_4_5", "screener.route=anthropic"], tmp_path=tmp_path)
    try:
        PopulationCase.from_config(cfg)
    except MissingSecretError as exc:
        assert "ANTHROPIC_API_KEY" in str(exc) and "screener.api_key_env" in str(exc)
    else:
        raise AssertionError("no MissingSecretError")
    assert not (tmp_path / "mlflow.db").exists()  # nothing tracked: no work was done


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://me:s3cret@db.internal:5432/popfair?sslmode=require",
            "postgresql+psycopg://me:***@db.internal:5432/popfair",
        ),
        ("https://api.vendor.example/v1/score?api_key=s3cret#frag", "https://api.vendor.example/v1/score"),
        ("https://user@host.example/p", "https://user@host.example/p"),
        ("http://127.0.0.1:1", "http://127.0.0.1:1"),
        ("sqlite:///mlruns/mlflow.db", "sqlite:///mlruns/mlflow.db"),
        ("http://[::1]:8080/x?token=s3cret", "http://[::1]:8080/x"),
    ],
)
def test_one_url_redaction_rule(url, shown):
    """Every message naming an endpoint or a database goes through the one rule: password hidden,
    query and fragment dropped."""
    from popfair.runtime.secrets import safe_url

    assert safe_url(url) == shown
    assert "s3cret" not in safe_url(url)
