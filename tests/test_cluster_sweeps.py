"""Sweeps spread like a cluster, with the services a cluster shares: a real PostgreSQL response cache
and a real `mlflow server`, both on 127.0.0.1. The SLURM recipe runs through submitit's local executor
(hydra/launcher=slurm_local); the Ray launcher runs on a Ray cluster the test starts (`ray start
--head`), in the Ray environment only (the `ray` extra cannot share an environment with joblib 1.6).
Each 4-case sweep asks the LLM stub every distinct prompt once, and MLflow holds one parent run with
the four cases as its children."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
from omegaconf import OmegaConf

from popfair.core.errors import ConfigError
from popfair.sweep.preflight import check_shared_services
from popfair.track.headline import logged_metrics
from tests.conftest import CONF_DIR
from tests.llm_stub import StubServer
from tests.pg_server import free_port
from tests.test_cli import popfair
from tests.test_sweep_shared_cache import CASES, SMALL, planned_after_sharing

# What is checked here is the launcher and the shared services (each prompt asked once, one parent
# run and its children), not an estimate: 60 applicants a case keep the screening stage short.
CLUSTER_SMALL = [*(o for o in SMALL if not o.startswith("population.n=")), "population.n=60"]


@pytest.fixture
def tracking_uri(mlflow_tracking_server):
    return mlflow_tracking_server  # the session's server (conftest); each sweep has its own experiment


def run_sweep(
    launcher: list[str],
    cwd: Path,
    pg_url: str,
    tracking_uri: str,
    monkeypatch,
    occupations: tuple[str, ...] = ("nurse", "teacher"),
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-cluster-0123456789")
    planned = planned_after_sharing(cwd, occupations, CLUSTER_SMALL)
    cases = [f"occupation={','.join(occupations)}", CASES[1]]
    experiment = f"cluster-{cwd.name}"
    with StubServer(latency_s=0.005) as stub:
        out = popfair(
            "-m",
            *launcher,
            *cases,
            *CLUSTER_SMALL,
            f"cache_url={pg_url}",
            f"tracking.uri={tracking_uri}",
            f"tracking.experiment_name={experiment}",
            "+hydra.callbacks.popfair_sweep.report=false",
            f"screener.base_url={stub.url}/v1",
            cwd=cwd,
        )
        assert out.returncode == 0, out.stderr[-4000:]
        answered = stub.state.answered
    assert set(answered.values()) == {1} and len(answered) == planned
    mlflow.set_tracking_uri(tracking_uri)
    runs = mlflow.search_runs(experiment_names=[experiment])
    (parent,) = runs.loc[runs["tags.popfair.sweep"] == "parent", "run_id"]
    children = runs[runs["tags.mlflow.parentRunId"] == parent]
    n_cases = 2 * len(occupations)
    assert len(runs) == n_cases + 1 and len(children) == n_cases and (children["status"] == "FINISHED").all()
    client = mlflow.MlflowClient()  # screen.answered is a cell of each child's metrics/screen.json
    answered_runs = [logged_metrics(client, client.get_run(r))["screen.answered"] for r in children["run_id"]]
    assert sum(answered_runs) == planned


def test_slurm_recipe_through_submitits_local_executor(tmp_path, pg_url, tracking_uri, monkeypatch):
    # one occupation (2 cases, 2 processes): submitit's local executor starts every case at once
    run_sweep(["hydra/launcher=slurm_local"], tmp_path, pg_url, tracking_uri, monkeypatch, occupations=("nurse",))


def test_ray_cluster_sweep_with_the_postgres_cache(tmp_path, pg_url, tracking_uri, monkeypatch):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the `ray` extra lives in its own environment")
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-cluster-0123456789")  # the Ray workers inherit it
    # Ray swaps 127.0.0.1 for the machine's outward address unless told it is a one-machine cluster:
    # this keeps every Ray connection on the loopback interface.
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    port = free_port()
    ray_dir = Path(f"/tmp/ray-{port}")  # Ray's socket paths must stay short
    head = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("ray")),
            "start",
            "--head",
            "--block",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            "2",
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
            "--object-store-memory",
            str(200 * 2**20),
            "--temp-dir",
            str(ray_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(Path(CONF_DIR).parent)},
    )
    try:
        time.sleep(1)
        assert head.poll() is None, "ray start --head exited"
        run_sweep(
            [  # Ray's workers run in the head's folder: an absolute sweep folder keeps outputs under tmp_path
                "hydra/launcher=ray_cluster",
                f"hydra.launcher.ray.init.address=127.0.0.1:{port}",
                f"hydra.sweep.dir={tmp_path}/multirun/ray",
            ],
            tmp_path,
            pg_url,
            tracking_uri,
            monkeypatch,
        )
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
        shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.mark.parametrize("launcher", ["slurm", "ray_cluster"])
def test_a_cluster_launcher_needs_a_server_cache_and_tracking_server(launcher):
    base = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}
    if launcher == "ray_cluster":
        base = {
            "_target_": "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher",
            "ray": {"init": {"address": "head:6379"}},
        }
    config = OmegaConf.create(
        {
            "hydra": {"launcher": base},
            "cache_url": None,
            "dry_run": False,
            "tracking": {"enabled": True, "uri": "sqlite:///mlruns/mlflow.db"},
        }
    )
    with pytest.raises(ConfigError, match="^cache_url: .*postgresql"):
        check_shared_services(config)
    config.cache_url = "postgresql+psycopg://me@db/popfair"
    with pytest.raises(ConfigError, match="^tracking.uri: .*mlflow server"):
        check_shared_services(config)
    config.tracking.uri = "http://mlflow-host:5000"
    check_shared_services(config)
    config.hydra.launcher = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"}
    config.cache_url = None
    check_shared_services(config)  # one machine: the SQLite cache is fine


def test_a_slurm_sweep_without_a_server_cache_stops_before_any_case(tmp_path):
    out = popfair("-m", "hydra/launcher=slurm", "occupation=nurse", cwd=tmp_path)
    assert out.returncode == 1 and "popfair: cache_url: hydra/launcher runs cases on several machines" in out.stderr
    assert not (tmp_path / "mlruns").exists()
