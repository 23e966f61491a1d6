"""`popfair doctor` and the pre-flight checks every sweep runs before its first case, against real
services on 127.0.0.1: the LLM stub, PostgreSQL (pgserver) and an `mlflow server`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from popfair.sweep.preflight import drop_cells
from tests.conftest import popfair_in_process
from tests.llm_stub import StubServer
from tests.pg_server import free_port
from tests.test_cli import ROOT

MODEL = "gpt-4o-mini-2024-07-18"  # gpt4o_mini's model id on the openai route
# a sitecustomize that makes the `embedding` extra look uninstalled (as after README's first install)
NO_EMBEDDING = 'import sys\nsys.modules["sentence_transformers"] = None\n'


def doctor(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m popfair doctor ARGS` in this process: what it prints and its exit status are the point."""
    return popfair_in_process("doctor", *args, cwd=cwd, env=env)


def popfair(*args: str, cwd: Path, env: dict[str, str] | None = None, path: str = str(ROOT)):
    """A real `python -m popfair` with PYTHONPATH `path` (a sitecustomize there hides an extra)."""
    return subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**(env if env is not None else os.environ), "PYTHONPATH": path},
    )


def without_keys() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}


def rows(out: str, status: str) -> dict[str, str]:
    """check name -> line, for the doctor's table rows of one status."""
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0] == status:
            found.setdefault(parts[1], line)
    return found


def test_doctor_passes_on_a_good_setup(tmp_path, pg_url, mlflow_tracking_server):
    env = {**without_keys(), "OPENAI_API_KEY": "test-key-doctor-0123456789"}
    tracking = mlflow_tracking_server  # the session's server (conftest)
    with StubServer(models=(MODEL,)) as stub:
        out = doctor(
            "screener=gpt4o_mini",  # route auto: openai, the one route whose key is set
            f"screener.base_url={stub.url}/v1",
            f"cache_url={pg_url}",
            f"tracking.uri={tracking}",
            cwd=tmp_path,
            env=env,
        )
        assert stub.state.answered == {} and stub.state.requests == 0  # a check never buys a generation
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "all checks passed" in out.stdout and not rows(out.stdout, "FAIL")
    passed = rows(out.stdout, "ok")
    expected = {"route", "key", "endpoint", "model", "build", "config", "cache", "tracking", "disk"}  # model id
    assert expected <= set(passed), out.stdout
    assert "screener gpt4o_mini (route openai)" in passed["endpoint"] and MODEL in passed["model"]
    assert "screener=gpt4o_mini" in out.stdout and "renderer=text" in out.stdout
    assert "opens (server database)" in passed["cache"] and "reachable" in passed["tracking"]
    assert "pg-test-secret" not in out.stdout + out.stderr  # PGPASSWORD never shown
    assert not any(tmp_path.glob("outputs")) and not (tmp_path / "multirun").exists()  # nothing left behind


def test_doctor_names_each_broken_piece(tmp_path):
    closed = free_port()
    out = doctor(
        "screener=gpt4o_mini",  # no key for any of its routes
        "renderer=image_photo",  # and no photos_dir
        f"cache_url=postgresql+psycopg://popfair@127.0.0.1:{closed}/popfair",
        f"tracking.uri=http://127.0.0.1:{closed}",
        cwd=tmp_path,
        env=without_keys(),
    )
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    failed = rows(out.stdout, "FAIL")
    assert {"key", "route", "config", "cache", "tracking"} <= set(failed), out.stdout
    assert "OPENROUTER_API_KEY is not set" in failed["key"]
    assert "fix: export OPENROUTER_API_KEY=..." in out.stdout
    assert "renderer=image_photo" in failed["config"] and "photos_dir" in failed["config"]
    assert f"127.0.0.1:{closed}" in failed["cache"] and "refused" in failed["cache"]
    assert f"tracking http://127.0.0.1:{closed}" in failed["tracking"] and "refused" in failed["tracking"]
    assert "5 check(s) failed" in out.stdout  # the route too: auto found no route's credentials
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "fault,check,cause",
    [
        ({"reject_auth": True}, "key", "HTTP 401"),  # a revoked key
        ({}, "model", "does not list model gpt-4o-mini-2024-07-18"),  # the endpoint serves other models
        (None, "endpoint", "connection refused"),  # nothing listens at base_url
    ],
    ids=["rejected key", "unknown model id", "closed port"],
)
def test_doctor_probes_the_endpoint_without_generating(fault, check, cause, tmp_path):
    env = {**without_keys(), "OPENAI_API_KEY": "test-key-doctor-0123456789"}
    with StubServer(**(fault or {})) as stub:
        url = f"{stub.url}/v1" if fault is not None else f"http://127.0.0.1:{free_port()}/v1"
        out = doctor("screener=gpt4o_mini", f"screener.base_url={url}", cwd=tmp_path, env=env)
        assert stub.state.answered == {}
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    failed = rows(out.stdout, "FAIL")
    assert set(failed) == {check}, out.stdout
    assert cause in failed[check] and "test-key-doctor" not in out.stdout + out.stderr


def test_doctor_of_a_sweep_checks_the_launchers_needs(tmp_path):
    out = doctor("-m", "hydra/launcher=slurm", "occupation=nurse,teacher", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert "popfair doctor: sweep, 2 case(s)" in out.stdout
    launcher = rows(out.stdout, "FAIL")["launcher"]
    assert "2/2 cases" in launcher and "SlurmLauncher" in launcher and "cache_url" in launcher
    assert not (tmp_path / "multirun").exists() and not (tmp_path / "mlruns").exists()


def test_a_sweep_without_an_extra_stops_before_its_first_case(tmp_path):
    """The --help example `experiment=popresume_grid_offline` after an install without extras: 10 of
    its 40 cases need the `embedding` extra. The sweep stops before case 1 with the pip command and
    the override that leaves those cases out; nothing runs; the parent run says why it stopped."""
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(NO_EMBEDDING)
    out = popfair("experiment=popresume_grid_offline", cwd=tmp_path, path=f"{tmp_path / 'hide'}:{ROOT}")
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert "popfair pre-flight: 10 of 40 cases cannot run; the sweep stops before its first case" in out.stdout
    assert "fix: pip install 'popfair[embedding]'" in out.stdout
    assert "): run format_model=text-tfidf,text-simulated,image-simulated" in out.stdout
    assert "leave these cases out (format_model=text-embedding_minilm" in out.stdout
    (sweep_dir,) = (tmp_path / "multirun").glob("*/*")
    assert not (sweep_dir / "cases").exists()  # no case ran
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["popfair"])
    assert len(runs) == 1 and runs.iloc[0]["status"] == "FAILED"  # the parent only: no case run
    assert runs.iloc[0]["tags.sweep.stopped"] == "pre-flight: 1 problem(s) in 10 case(s)"


def test_a_dry_run_prints_the_same_warnings_and_plans_on(tmp_path):
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(NO_EMBEDDING)
    out = popfair(
        "experiment=popresume_grid_offline",
        "occupation=nurse",
        "protected_attr=gender",
        "dry_run=true",
        cwd=tmp_path,
        path=f"{tmp_path / 'hide'}:{ROOT}",
    )
    assert "popfair pre-flight: 1 of 4 cases would fail; a real run of this sweep stops here" in out.stdout
    assert "fix: pip install 'popfair[embedding]'" in out.stdout
    assert "dry run: 3 cases planned, nothing called" in out.stdout
    assert out.returncode == 1  # the case that cannot be planned is a failed case of the sweep


@pytest.mark.parametrize(
    "failed,expected",
    [
        ({1, 3}, ["screener=tfidf,simulated"]),  # every case of one cell
        ({1}, []),  # part of a cell: no override leaves out exactly that
        ({0, 1, 2, 3}, []),  # everything: nothing to keep
    ],
)
def test_drop_cells_leaves_out_exactly_the_failed_cases(failed, expected):
    cases = {
        0: ["occupation=nurse", "screener=tfidf"],
        1: ["occupation=nurse", "screener=embedding_minilm"],
        2: ["occupation=teacher", "screener=simulated"],
        3: ["occupation=teacher", "screener=embedding_minilm"],
    }
    assert drop_cells(failed, cases) == expected
