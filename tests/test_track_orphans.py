"""Runs left RUNNING by a killed popfair process (kill -9 of its process group: nothing could close
them) are closed FAILED, with the reason, by the next run of the experiment; runs of live processes stay
RUNNING. A real SQLite MLflow store; the killed process is a real process that ran and was killed."""

from __future__ import annotations

import signal
import subprocess
import sys

from mlflow import MlflowClient

from popfair.track import background
from popfair.track.mlflow_tracker import MlflowTracker


def _killed_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    import os

    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return process.pid


def test_the_next_run_closes_a_killed_process_run_as_failed(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = MlflowTracker(uri=uri, experiment_name="orphans", artifact_root=str(tmp_path / "artifacts"))
    experiment_id = tracker._open_experiment()
    client = MlflowClient(uri)
    dead = _killed_pid()
    orphan = client.create_run(experiment_id, run_name="killed", tags=background.process_tags(dead)).info.run_id
    live = client.create_run(experiment_id, run_name="live", tags=background.process_tags()).info.run_id
    untagged = client.create_run(experiment_id, run_name="older popfair").info.run_id
    assert client.get_run(orphan).info.status == "RUNNING"

    background._EXPERIMENTS.clear()  # a new popfair process opens the experiment afresh
    with tracker.run("next case") as run:
        run.metrics({"x": 1.0})
    closed = client.get_run(orphan)
    assert closed.info.status == "FAILED"
    assert f"pid {dead}" in closed.data.tags["error"] and "kill" in closed.data.tags["error"]
    assert closed.data.tags["error_type"] == "ProcessDied"
    assert client.get_run(live).info.status == "RUNNING"
    assert client.get_run(untagged).info.status == "RUNNING"


def test_a_sweep_parent_closes_orphans_too(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = MlflowTracker(uri=uri, experiment_name="orphans", artifact_root=str(tmp_path / "artifacts"))
    experiment_id = tracker._open_experiment()
    client = MlflowClient(uri)
    orphan = client.create_run(experiment_id, tags=background.process_tags(_killed_pid())).info.run_id
    parent = tracker.start_parent("sweep", {"popfair.sweep": "parent"})
    assert client.get_run(orphan).info.status == "FAILED"
    assert client.get_run(parent).data.tags["popfair.pid"]
