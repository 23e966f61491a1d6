"""Ctrl-C and SIGTERM stop a case cleanly: a child `python -m popfair` process gets the signal while
requests are in flight; it exits 130 with a message saying how to resume, every answer received is in
the cache, no claim is left, the MLflow run is KILLED with its partial counts (rows answered,
dollars), and the rerun completes asking nothing twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from tests.llm_stub import StubServer

ROOT = Path(__file__).resolve().parents[1]
N, ANSWER_FIRST = 200, 60


def popfair(stub_url: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_API_KEY": "test-key-interrupt-0123456789", "PYTHONPATH": str(ROOT)}
    args = [
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"screener.base_url={stub_url}/v1",
        f"population.n={N}",
        "estimator=outcome_gap",
        "screener.engine.progress=false",
        "screener.engine.concurrency=4",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "popfair", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def cache_rows(cwd: Path, table: str) -> int:
    path = cwd / ".popfair_cache" / "responses.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        try:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_commits_answers_marks_the_run_killed_and_the_rerun_asks_nothing_twice(signum, tmp_path):
    with StubServer(latency_s=0.01, hold_after=ANSWER_FIRST) as stub:
        child = popfair(stub.url, tmp_path)
        deadline = time.monotonic() + 240
        while stub.state.held == 0 or cache_rows(tmp_path, "responses") < ANSWER_FIRST:
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the case never reached its screening"
            time.sleep(0.05)
        child.send_signal(signum)
        _, stderr = child.communicate(timeout=120)
        said = stderr.decode()
        assert child.returncode == 130, said[-3000:]
        name = signal.Signals(signum).name
        assert f"stopped by {name}; {ANSWER_FIRST} answers received this run are saved" in said
        assert "Rerun the same command to resume" in said and "Traceback" not in said
        assert cache_rows(tmp_path, "responses") == ANSWER_FIRST and cache_rows(tmp_path, "claims") == 0

        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
        killed = mlflow.search_runs(experiment_names=["popfair"]).iloc[0]
        assert killed["status"] == "KILLED"
        assert killed["metrics.screen.answered"] == ANSWER_FIRST and killed["metrics.screen.cost_usd"] > 0
        assert "resume" in killed["tags.error"]
        if signum == signal.SIGTERM:  # the same path as SIGINT from here: one rerun test is enough
            return

        stub.state.hold_after = None
        stub.state.released.set()
        rerun = popfair(stub.url, tmp_path)
        _, stderr = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, stderr.decode()[-3000:]
    assert len(stub.state.answered) == N and set(stub.state.answered.values()) == {1}  # nothing asked twice
    runs = mlflow.search_runs(experiment_names=["popfair"], order_by=["start_time DESC"])
    assert list(runs["status"]) == ["FINISHED", "KILLED"]
    assert runs.iloc[0]["metrics.screen.rows_from_cache"] >= ANSWER_FIRST


SECOND_SIGNAL = """
import asyncio, sys, time
from popfair.interrupts import engine_signals

async def main():
    def first(name):  # a clean stop that takes far too long
        print("first", name, flush=True)
    with engine_signals(asyncio.get_running_loop(), first):
        print("ready", flush=True)
        await asyncio.sleep(60)

asyncio.run(main())
"""


def test_a_second_signal_exits_at_once(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", SECOND_SIGNAL], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGINT)
    assert child.stdout.readline().strip() == "first SIGINT"  # the first one starts the clean stop
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=30)  # not the 60 s the clean stop would have taken
    assert child.returncode == 130 and "second SIGINT: exiting at once" in stderr
