"""A new SQLite tracking store starts as a copy of an empty store at MLflow's schema (seed_sqlite_store)."""

from __future__ import annotations

import sqlite3

import mlflow

from popfair.track import store_template
from popfair.track.mlflow_tracker import MlflowTracker, seed_sqlite_store


def _schema(path) -> tuple[list[str], list[tuple]]:
    """Every line of the schema (MLflow's migrations order some constraints and indexes differently
    from one run to the next), and the schema version."""
    with sqlite3.connect(path) as db:
        statements = [row[0] for row in db.execute("select sql from sqlite_master where sql is not null")]
        version = db.execute("select version_num from alembic_version").fetchall()
    return sorted(line.strip().rstrip(",") for sql in statements for line in sql.splitlines()), version


def test_new_stores_are_seeded_from_one_template_and_match_mlflows_own(tmp_path, monkeypatch):
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("first", "second"):  # the first builds the template, the second only copies it
        db = tmp_path / name / "mlflow.db"
        tracker = MlflowTracker(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / name / "artifacts"))
        with tracker.run("case", {"k": "v"}) as run:
            run.metrics({"m": 1.0})
        mlflow.set_tracking_uri(tracker.uri)  # the run was logged by the tracking worker
        runs = mlflow.search_runs(experiment_names=["popfair"])
        assert list(runs["status"]) == ["FINISHED"] and float(runs["metrics.m"].iloc[0]) == 1.0
        assert {e.name for e in mlflow.search_experiments()} == {"Default", "popfair"}
    assert len(list((tmp_path / "cache").glob("mlflow-*-empty-store.db"))) == 1
    monkeypatch.setenv("POPFAIR_CACHE_DIR", "off")  # MLflow creates this one itself
    own = tmp_path / "own" / "mlflow.db"
    with MlflowTracker(uri=f"sqlite:///{own}", artifact_root=str(tmp_path / "own")).run("case"):
        pass
    assert _schema(own) == _schema(tmp_path / "second" / "mlflow.db")


def test_an_existing_store_is_never_replaced_and_failures_fall_back(tmp_path, monkeypatch):
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "cache"))
    existing = tmp_path / "existing.db"
    existing.write_bytes(b"not a template")
    assert not seed_sqlite_store(existing)
    assert existing.read_bytes() == b"not a template"

    def broken(template):
        raise RuntimeError("no template today")

    monkeypatch.setattr(store_template, "_build_store_template", broken)
    db = tmp_path / "fresh" / "mlflow.db"
    db.parent.mkdir()
    assert not seed_sqlite_store(db) and not db.exists()
    with MlflowTracker(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / "artifacts")).run("case") as run:
        assert run.run_id  # MLflow created the store itself
    assert list(db.parent.iterdir()) == [db]  # no temporary file left behind
