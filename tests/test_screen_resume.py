"""Crash safety: a screening run killed with SIGKILL halfway loses nothing already answered; the rerun
asks only what is missing, so every row ends scored and no prompt is answered twice."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.llm_stub import StubServer

ROOT = Path(__file__).resolve().parents[1]
N_DOCS, KILL_AFTER = 150, 70

WORKER = r"""
import json, sys
from tests.screen_helpers import FAST_ENGINE, JOBS, documents
from popfair.screen.llm import LLMScreener
url, cache, out = sys.argv[1:4]
screener = LLMScreener(name="kill", provider="openai", model="stub-model", api_key_env="OPENAI_API_KEY",
                       base_url=url + "/v1", cache_dir=cache, engine={**FAST_ENGINE, "concurrency": 4,
                       "timeout_s": 30.0})
results = screener.screen(JOBS, documents(N_DOCS), "score")
json.dump([[r.applicant_id, r.value, r.error, r.cached] for r in results], open(out, "w"))
""".replace("N_DOCS", str(N_DOCS))


def start_worker(url: str, cache: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-kill-0123456789"}
    return subprocess.Popen([sys.executable, "-c", WORKER, url, str(cache), str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def cached_rows(cache: Path) -> int:
    path = cache / "responses.sqlite"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.OperationalError:  # schema not created yet
        return 0


def test_sigkill_halfway_then_rerun_answers_every_prompt_exactly_once(tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "results.json"
    # After KILL_AFTER answers the stub holds further requests (never answers them): the kill then
    # lands while requests are in flight, and no answer is in the wire when the process dies.
    with StubServer(latency_s=0.01, hold_after=KILL_AFTER) as stub:
        worker = start_worker(stub.url, cache, out)
        deadline = time.monotonic() + 120
        while cached_rows(cache) < KILL_AFTER:
            assert worker.poll() is None, worker.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "worker too slow"
            time.sleep(0.05)
        while stub.state.held == 0:  # requests are in flight, waiting on the stub
            time.sleep(0.02)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert worker.returncode == -signal.SIGKILL and not out.exists()
        assert cached_rows(cache) == KILL_AFTER == sum(stub.state.answered.values())

        stub.state.hold_after = None
        stub.state.released.set()  # held requests of the dead process get a 503
        rerun = start_worker(stub.url, cache, out)
        _, stderr = rerun.communicate(timeout=180)
        assert rerun.returncode == 0, stderr.decode()[-3000:]

        rows = json.loads(out.read_text())
        assert len(rows) == N_DOCS and len({r[0] for r in rows}) == N_DOCS
        assert all(error is None and 0 <= value <= 100 for _, value, error, _ in rows)
        assert sum(cached for *_, cached in rows) == KILL_AFTER  # answered before the kill: from cache
        assert len(stub.state.answered) == N_DOCS and set(stub.state.answered.values()) == {1}
