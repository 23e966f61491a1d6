"""A joblib sweep whose worker process is killed (kill -9, as the out-of-memory killer kills) loses only
that case: the other case finishes, the summary names the dead one, the sweep exits 1, and the rerun
completes it asking the LLM stub only what had not been answered (hydra_plugins/popfair_launcher)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow

from hydra_plugins.popfair_launcher.joblib_launcher import death_reason
from popfair.track.headline import search_logged_runs
from tests.llm_stub import StubServer
from tests.test_cli import ROOT

N, HOLD_AFTER, CONCURRENCY = 60, 50, 4
SWEEP = [
    "-m",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    "occupation=nurse,teacher",
    "screener=gpt4o_mini",
    "screener.route=openai",
    f"population.n={N}",
    "estimator=outcome_gap",
    "estimator.n_bootstrap=100",
    "outcome_audit=null",
    "screener.engine.progress=false",
    f"screener.engine.concurrency={CONCURRENCY}",
    "screener.engine.claim_poll_s=0.1",
    "screener.engine.claim_lease_s=2",
    "+hydra.callbacks.popfair_sweep.report=false",
]


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


def case_processes(sweep_pid: int) -> list[int]:
    """The cases' worker processes: children of the sweep's fork server."""
    servers = [p for p in children_of(sweep_pid) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    return [worker for server in servers for worker in children_of(server)]


def sweep(stub: StubServer, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "popfair", *SWEEP, f"screener.base_url={stub.url}/v1", "cache_dir=cache"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-worker-death-0123"},
    )


def test_a_killed_worker_fails_only_its_case_and_the_rerun_completes_it(tmp_path):
    with StubServer(latency_s=0.01, hold_after=HOLD_AFTER) as stub:
        first = sweep(stub, tmp_path)
        deadline = time.monotonic() + 240
        # both cases have all their requests in flight, held by the stub: both workers are mid-case
        while stub.state.held < 2 * CONCURRENCY:
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the cases did not get going"
            time.sleep(0.05)
        workers = case_processes(first.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)
        stub.state.hold_after = None
        stub.state.released.set()  # held requests get a 503: the live case retries them
        out, err = first.communicate(timeout=300)
        answered_first = sum(stub.state.answered.values())
        assert first.returncode == 1, err[-3000:]
        assert "=== popfair sweep: 2 cases reported of 2, 1 failed ===" in out
        (dead,) = [line for line in out.splitlines() if line.startswith("FAILED job")]
        assert "WorkerDied: worker killed by SIGKILL, possibly out of memory; rerun to resume" in dead
        assert "TerminatedWorkerError" not in err and "Traceback" not in err

        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
        runs = search_logged_runs(experiment_names=["popfair"])
        children = runs[runs["tags.popfair.sweep"] != "parent"]
        assert sorted(children["status"]) == ["FAILED", "FINISHED"]
        assert children.loc[children["status"] == "FAILED", "tags.error"].str.contains("SIGKILL").all()
        # the live case got every answer (its held requests were retried); the dead one got some
        finished = children[children["status"] == "FINISHED"].iloc[0]
        assert finished["metrics.screen.failed_rows"] == 0

        rerun = sweep(stub, tmp_path)
        out, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err[-3000:]
        assert "=== popfair sweep: 2 cases reported of 2, 0 failed ===" in out
    # nothing was asked twice: the rerun asked only what the dead worker had not been answered
    assert set(stub.state.answered.values()) == {1}
    assert sum(stub.state.answered.values()) > answered_first
    runs = search_logged_runs(experiment_names=["popfair"])
    latest = runs[(runs["tags.popfair.sweep"] != "parent") & (runs["status"] == "FINISHED")]
    assert len(latest) == 3  # the first sweep's live case and both cases of the rerun
    rerun_cases = latest.sort_values("start_time").iloc[1:]
    assert rerun_cases["metrics.screen.failed_rows"].sum() == 0
    assert rerun_cases["metrics.screen.answered"].sum() == sum(stub.state.answered.values()) - answered_first


def test_death_reasons_name_the_signal():
    assert death_reason(-signal.SIGKILL) == "worker killed by SIGKILL, possibly out of memory; rerun to resume"
    assert death_reason(-signal.SIGSEGV) == "worker killed by SIGSEGV; rerun to resume"
    assert death_reason(3) == "worker exited with status 3 before reporting; rerun to resume"


def test_sigterm_to_the_sweep_stops_its_cases_and_starts_no_more(tmp_path):
    """`kill <sweep>`: the running case gets the SIGTERM too, the cases not yet started are recorded
    as such, and the sweep still ends with its summary and status 1; its rerun completes every case.
    The stub answers the requests held at the signal: the stopping case commits them, so no prompt is
    ever asked twice (more of that: tests/test_screen_interrupt.py)."""
    with StubServer(latency_s=0.01, hold_after=HOLD_AFTER, answer_held=True) as stub:
        args = [a.replace("n_jobs=2", "n_jobs=1") for a in SWEEP]  # nurse runs, teacher waits
        command = [sys.executable, "-m", "popfair", *args, f"screener.base_url={stub.url}/v1", "cache_dir=cache"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-worker-death-0123"}
        first = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        deadline = time.monotonic() + 240
        while stub.state.held < CONCURRENCY:  # case 0 is mid-screening
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first case did not get going"
            time.sleep(0.05)
        first.send_signal(signal.SIGTERM)
        stub.state.hold_after = None
        stub.state.released.set()
        out, err = first.communicate(timeout=300)
        assert first.returncode == 1, err[-3000:]
        assert "=== popfair sweep: 2 cases reported of 2, 2 failed ===" in out, out[-3000:]
        failed = [line for line in out.splitlines() if line.startswith("FAILED job")]
        assert sum("not started: the sweep was stopped; rerun to resume" in line for line in failed) == 1
        rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert "=== popfair sweep: 2 cases reported of 2, 0 failed ===" in rerun.stdout
    assert set(stub.state.attempts.values()) == {1}, stub.state.attempts.most_common(3)
