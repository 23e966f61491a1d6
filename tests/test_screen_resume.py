"""Crash safety on both cache backends: a screening process killed with SIGKILL halfway loses nothing
already answered; the rerun on the same host asks only what is missing (the prompts never sent, and
the ones in flight at the kill, up to the concurrency) and takes the dead process's claims over at
once (its process is gone: no wait for the lease), so every row ends scored and no prompt is
answered twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popfair.store.responses import open_cache
from tests.llm_stub import StubServer

ROOT = Path(__file__).resolve().parents[1]
N_DOCS, KILL_AFTER, LEASE_S = 150, 70, 4.0
DEAD_OWNER_LEASE_S = 600.0  # a rerun that waited for the dead process's leases would take 10 minutes


def start_worker(
    url: str, cache: str, out: Path, n: int = N_DOCS, lease_s: float = LEASE_S, commit_delay_s: float = 0.0
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-kill-0123456789"}
    env["SCREEN_WORKER_COMMIT_DELAY_S"] = str(commit_delay_s)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.screen_worker", url, cache, str(out), str(n), str(lease_s)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def cached_rows(location: str) -> int:
    with open_cache(location) as cache:
        return cache.count()


@pytest.fixture(params=["sqlite", "postgres"])
def cache_location(request, tmp_path) -> str:
    return request.getfixturevalue("pg_url") if request.param == "postgres" else str(tmp_path / "cache")


def test_sigkill_halfway_then_rerun_answers_every_prompt_exactly_once(cache_location, tmp_path):
    out = tmp_path / "results.json"
    # After KILL_AFTER answers the stub holds further requests (never answers them): the kill then
    # lands while requests are in flight and claimed, and no answer is in the wire when the process dies.
    with StubServer(latency_s=0.01, hold_after=KILL_AFTER) as stub:
        worker = start_worker(stub.url, cache_location, out, lease_s=DEAD_OWNER_LEASE_S)
        deadline = time.monotonic() + 120
        while cached_rows(cache_location) < KILL_AFTER:
            assert worker.poll() is None, worker.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "worker too slow"
            time.sleep(0.05)
        while stub.state.held == 0:  # requests are in flight, waiting on the stub
            time.sleep(0.02)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert worker.returncode == -signal.SIGKILL and not out.exists()
        assert cached_rows(cache_location) == KILL_AFTER == sum(stub.state.answered.values())
        in_flight = stub.state.held  # sent, never answered: what the docs say the rerun asks again

        stub.state.hold_after = None
        stub.state.released.set()  # held requests of the dead process get a 503
        rerun = start_worker(stub.url, cache_location, out, lease_s=DEAD_OWNER_LEASE_S)
        _, stderr = rerun.communicate(timeout=180)
        assert rerun.returncode == 0, stderr.decode()[-3000:]

        result = json.loads(out.read_text())
        rows, metrics = result["rows"], result["metrics"]
        assert len(rows) == N_DOCS and len({r[0] for r in rows}) == N_DOCS
        assert all(error is None and 0 <= value <= 100 for _, value, error, _ in rows)
        assert sum(cached for *_, cached in rows) == KILL_AFTER  # answered before the kill: from cache
        assert len(stub.state.answered) == N_DOCS and set(stub.state.answered.values()) == {1}
        # what README and docs/troubleshooting.md say of kill -9: the prompts in flight, up to the
        # concurrency (the worker's 4), are asked again; no other prompt is
        asked_again = sorted(p for p, n in stub.state.attempts.items() if n > 1)
        assert 1 <= len(asked_again) == in_flight <= 4
        # the dead worker's in-flight calls were still claimed: taken over at once, its process being gone
        assert metrics["screen.taken_over"] >= 1 and "no longer runs (no lease wait)" in stderr.decode()
        assert metrics["screen.wall_s"] < 60  # loosely: nowhere near the 600 s lease


def test_sigkill_while_answers_wait_for_their_commit_loses_at_most_the_concurrency(tmp_path):
    """The README's bound: a kill -9 costs at most `concurrency` prompts, also when it lands while
    answers have arrived and wait for a slow commit. A request keeps its concurrency slot until its
    answer is committed, so no more than 4 (the worker's concurrency) can be sent-but-uncommitted;
    freeing the slot on arrival let the worker's 16 tasks pile up answers behind a slow commit."""
    cache, out = str(tmp_path / "cache"), tmp_path / "results.json"
    with StubServer(latency_s=0.01) as stub:
        worker = start_worker(stub.url, cache, out, lease_s=DEAD_OWNER_LEASE_S, commit_delay_s=0.3)
        deadline = time.monotonic() + 120
        while cached_rows(cache) < 20:
            assert worker.poll() is None, worker.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "worker too slow"
            time.sleep(0.05)
        time.sleep(0.15)  # mid-commit: answers have arrived and wait
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert worker.returncode == -signal.SIGKILL and not out.exists()
        paid = sum(stub.state.answered.values())
        lost = paid - cached_rows(cache)  # answered by the provider, never committed: the rerun pays again
        assert paid < N_DOCS and 0 <= lost <= 4

        rerun = start_worker(stub.url, cache, out, lease_s=DEAD_OWNER_LEASE_S)
        _, stderr = rerun.communicate(timeout=180)
        assert rerun.returncode == 0, stderr.decode()[-3000:]
        asked_again = [p for p, n in stub.state.answered.items() if n > 1]
        assert len(stub.state.answered) == N_DOCS and len(asked_again) == lost


def test_parallel_processes_answer_each_prompt_once(cache_location, tmp_path):
    """Two processes screen the same documents at the same time through one cache: every distinct
    prompt is sent once; what one process claimed, the other waits for and reads from the cache."""
    n = 60
    # The stub holds every request until both processes have 4 in flight (their concurrency), so the
    # two runs overlap whatever their start-up times; held requests then get a 503 and are retried.
    with StubServer(latency_s=0.01, hold_after=0) as stub:
        outs = [tmp_path / f"out{i}.json" for i in range(2)]
        workers = [start_worker(stub.url, cache_location, out, n=n, lease_s=30.0) for out in outs]
        deadline = time.monotonic() + 120
        while stub.state.held < 8:
            assert all(w.poll() is None for w in workers) and time.monotonic() < deadline
            time.sleep(0.05)
        stub.state.hold_after = None
        stub.state.released.set()
        for worker in workers:
            _, stderr = worker.communicate(timeout=180)
            assert worker.returncode == 0, stderr.decode()[-3000:]
        assert len(stub.state.answered) == n and set(stub.state.answered.values()) == {1}
        results = [json.loads(out.read_text()) for out in outs]
    values = [[r[1] for r in result["rows"]] for result in results]
    assert values[0] == values[1] and None not in values[0]
    answered = [r["metrics"]["screen.answered"] for r in results]
    from_others = [r["metrics"]["screen.waited"] + r["metrics"]["screen.rows_from_cache"] for r in results]
    assert sum(answered) == n and min(answered) > 0  # both did part of the work
    assert all(a + w >= n for a, w in zip(answered, from_others))
