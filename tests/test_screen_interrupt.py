"""Ctrl-C and SIGTERM stop a case cleanly: a child `python -m popfair` process gets the signal while
requests are held in flight by the stub. Nothing new is sent; the requests in flight get a grace period
(their answers are paid for): when the stub then answers them they are committed, the child exits 130
with a message saying how to resume, no claim is left, the MLflow run is KILLED with its partial counts
(rows answered, dollars), and the rerun completes sending only prompts never answered (the stub counts
requests per prompt: none twice). A grace period that runs out, or a second signal, stops at once:
committed answers are kept, the ones in flight are lost (the message says so)."""

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

from popfair.track.headline import search_logged_runs
from tests.llm_stub import StubServer

ROOT = Path(__file__).resolve().parents[1]
N, ANSWER_FIRST, CONCURRENCY = 200, 60, 4


def popfair(stub_url: str, cwd: Path, *overrides: str) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_API_KEY": "test-key-interrupt-0123456789", "PYTHONPATH": str(ROOT)}
    args = [
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"screener.base_url={stub_url}/v1",
        f"population.n={N}",
        "estimator=outcome_gap",
        "screener.engine.progress=false",
        f"screener.engine.concurrency={CONCURRENCY}",
        *overrides,
    ]
    stderr = (cwd / "stderr.txt").open("w")  # a file: read while the child runs, without blocking it
    return subprocess.Popen(
        [sys.executable, "-m", "popfair", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr
    )


def said(cwd: Path) -> str:
    return (cwd / "stderr.txt").read_text()


def cache_rows(cwd: Path, table: str) -> int:
    path = cwd / ".popfair_cache" / "responses.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        try:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


def wait_until(condition, child: subprocess.Popen, cwd: Path, what: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert child.poll() is None, said(cwd)[-3000:]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def signal_while_held(stub: StubServer, cwd: Path, signum: int, *overrides: str) -> subprocess.Popen:
    """A child screening the population, signalled while CONCURRENCY requests are held by the stub."""
    child = popfair(stub.url, cwd, *overrides)
    wait_until(
        lambda: stub.state.held == CONCURRENCY and cache_rows(cwd, "responses") == ANSWER_FIRST and run_exists(cwd),
        child,
        cwd,
        "the case reaching its held requests",
    )
    child.send_signal(signum)
    return child


def run_exists(cwd: Path) -> bool:
    """The case's MLflow run has been created (by the tracking worker, in the background)."""
    path = cwd / "mlruns" / "mlflow.db"
    if not path.exists():
        return False
    with sqlite3.connect(path) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] > 0
        except sqlite3.OperationalError:
            return False


def killed_run(cwd: Path):
    mlflow.set_tracking_uri(f"sqlite:///{cwd}/mlruns/mlflow.db")
    return search_logged_runs(experiment_names=["popfair"], order_by=["start_time DESC"])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_commits_the_answers_in_flight_marks_the_run_killed_and_the_rerun_asks_nothing_twice(
    signum, tmp_path
):
    with StubServer(latency_s=0.01, hold_after=ANSWER_FIRST, answer_held=True) as stub:
        child = signal_while_held(stub, tmp_path, signum)
        name = signal.Signals(signum).name
        waiting = f"waiting up to 30 s for {CONCURRENCY} requests in flight; press Ctrl-C again to stop now"
        wait_until(lambda: waiting in said(tmp_path), child, tmp_path, "the grace message", seconds=30)
        assert sum(stub.state.attempts.values()) == ANSWER_FIRST + CONCURRENCY  # nothing new was sent
        stub.state.released.set()  # the provider answers what was in flight: paid for, so kept
        child.communicate(timeout=60)
        assert child.returncode == 130, said(tmp_path)[-3000:]
        answered = ANSWER_FIRST + CONCURRENCY
        assert f"stopped by {name}; {answered} answers received this run are saved" in said(tmp_path)
        assert "Rerun the same command to resume. Nothing is asked twice." in said(tmp_path)
        assert "Traceback" not in said(tmp_path)
        assert cache_rows(tmp_path, "responses") == answered and cache_rows(tmp_path, "claims") == 0

        killed = killed_run(tmp_path).iloc[0]
        assert killed["status"] == "KILLED"
        assert killed["metrics.screen.answered"] == answered and killed["metrics.screen.cost_usd"] > 0
        assert "resume" in killed["tags.error"]
        if signum == signal.SIGTERM:  # the same path as SIGINT from here: one rerun test is enough
            return

        stub.state.hold_after = None
        rerun = popfair(stub.url, tmp_path)
        rerun.communicate(timeout=300)
        assert rerun.returncode == 0, said(tmp_path)[-3000:]
    # every prompt was sent exactly once over both runs: the answers in flight at the signal were kept
    assert len(stub.state.attempts) == N and set(stub.state.attempts.values()) == {1}
    runs = killed_run(tmp_path)
    assert list(runs["status"]) == ["FINISHED", "KILLED"]
    assert runs.iloc[0]["metrics.screen.rows_from_cache"] >= answered


def test_a_grace_period_that_runs_out_stops_keeping_what_was_committed(tmp_path):
    with StubServer(latency_s=0.01, hold_after=ANSWER_FIRST) as stub:  # the held requests never answer
        child = signal_while_held(stub, tmp_path, signal.SIGTERM, "screener.engine.interrupt_grace_s=1")
        child.communicate(timeout=60)
        assert child.returncode == 130, said(tmp_path)[-3000:]
        assert f"stopped by SIGTERM; {ANSWER_FIRST} answers received this run are saved" in said(tmp_path)
        assert f"{CONCURRENCY} requests still in flight after 1 s were abandoned" in said(tmp_path)
        assert cache_rows(tmp_path, "responses") == ANSWER_FIRST and cache_rows(tmp_path, "claims") == 0
        assert killed_run(tmp_path).iloc[0]["status"] == "KILLED"


def test_a_second_signal_mid_run_exits_at_once_keeping_the_committed_answers(tmp_path):
    with StubServer(latency_s=0.01, hold_after=ANSWER_FIRST) as stub:
        child = signal_while_held(stub, tmp_path, signal.SIGINT)
        wait_until(lambda: "requests in flight" in said(tmp_path), child, tmp_path, "the grace message", seconds=30)
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=10)  # not the 30 s grace period
        assert child.returncode == 130
        assert "second SIGINT: exiting at once; answers committed so far are kept, requests in flight are lost" in (
            said(tmp_path)
        )
        assert cache_rows(tmp_path, "responses") == ANSWER_FIRST
    # The process left at once; its tracking worker sees it go and ends the run FAILED (never RUNNING forever)
    deadline = time.monotonic() + 30
    while (status := killed_run(tmp_path).iloc[0]["status"]) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == "FAILED"
    assert "ended before its run was complete" in killed_run(tmp_path).iloc[0]["tags.error"]


SECOND_SIGNAL = """
import asyncio, sys, time
from popfair.runtime.interrupts import engine_signals

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
