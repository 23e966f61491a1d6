"""The SQLite tracking store is created by a child process beside the first stages (MlflowTracker.create_store)."""

from __future__ import annotations

import sys

from popfair.track.mlflow_tracker import MlflowTracker


def test_new_sqlite_store_is_created_by_a_child_and_used(tmp_path):
    db = tmp_path / "store" / "mlflow.db"
    tracker = MlflowTracker(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / "artifacts"))
    tracker.create_store()
    assert tracker._creating is not None
    with tracker.run("case", {"k": "v"}) as run:
        run.metrics({"m": 1.0})
    assert tracker._creating is None and db.is_file()
    import mlflow

    runs = mlflow.search_runs(experiment_names=["popfair"])
    assert list(runs["status"]) == ["FINISHED"] and float(runs["metrics.m"].iloc[0]) == 1.0
    again = MlflowTracker(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / "artifacts"))
    again.create_store()  # the file exists: nothing to create
    assert again._creating is None


def test_a_failed_child_leaves_the_store_to_this_process(tmp_path, monkeypatch):
    db = tmp_path / "mlflow.db"
    tracker = MlflowTracker(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / "artifacts"))
    monkeypatch.setattr(sys, "executable", sys.executable + "-missing")  # the child cannot start
    tracker.create_store()
    monkeypatch.undo()
    tracker.prepare()
    with tracker.run("case") as run:
        assert run.run_id
    assert db.is_file()


def test_no_child_for_other_stores_or_disabled_tracking(tmp_path):
    for tracker in (
        MlflowTracker(uri="http://127.0.0.1:1"),
        MlflowTracker(uri=f"sqlite:///{tmp_path}/x.db", enabled=False),
    ):
        tracker.create_store()
        assert tracker._creating is None
