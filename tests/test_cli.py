"""The command line: --help, --cfg job, overrides, multirun, and clean errors. What the command prints
and the status a config error exits with are checked in this process (tests.conftest.popfair_in_process);
a real `python -m popfair` process's exit status, a closed pipe and a multirun in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from tests.conftest import popfair_in_process

ROOT = Path(__file__).resolve().parents[1]


def popfair(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_help_lists_groups(tmp_path):
    out = popfair_in_process("--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for group in ("population", "occupation", "renderer", "screener", "estimator", "protected_attr"):
        assert group in out.stdout


def test_fast_help_is_hydras_help(tmp_path):
    """A bare --help is answered from the config folder (no composition); with an override it goes
    through Hydra. Both must print the same text."""
    fast = popfair_in_process("--help", cwd=tmp_path)
    hydra_help = popfair_in_process("--help", "seed=0", cwd=tmp_path)
    assert hydra_help.returncode == 0, hydra_help.stderr
    assert fast.stdout == hydra_help.stdout
    assert "\nrenderer: " in fast.stdout and "screener/base: " in fast.stdout  # nested groups listed too


def test_cfg_job_prints_composed_config(tmp_path):
    out = popfair_in_process("--cfg", "job", "occupation=teacher", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "occp: 2310" in out.stdout


def test_unknown_option_fails_fast(tmp_path):
    out = popfair_in_process("screener=nope", cwd=tmp_path)
    assert out.returncode != 0
    assert "nope" in out.stderr


def test_bad_value_exits_with_named_key(tmp_path):
    # in this process (tracking=none: no tracking worker forked from the test's process)
    out = popfair_in_process("population.n=0", "tracking=none", cwd=tmp_path)
    assert out.returncode == 2
    assert "population.n" in out.stderr + out.stdout


def test_missing_pums_file_is_a_clear_error(tmp_path):
    out = popfair_in_process("population.pums_path=/nonexistent/pums.csv", "tracking=none", cwd=tmp_path)
    assert out.returncode == 2
    assert "/nonexistent/pums.csv" in out.stderr + out.stdout


def test_multirun_makes_one_mlflow_run_per_case(tmp_path):
    out = popfair_in_process(
        "-m",
        "occupation=nurse,teacher",
        "population.n=300",
        "estimator=outcome_gap",
        "estimator.n_bootstrap=200",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["popfair"])
    cases = runs[runs["tags.popfair.sweep"] != "parent"]  # the sweep's parent run has no case params
    assert sorted(cases["params.occupation.key"]) == ["nurse", "teacher"]


def test_runs_from_two_folders_in_one_process_log_into_their_own_stores(tmp_path):
    """The default tracking URI is relative (sqlite:///mlruns/mlflow.db) and MLflow keeps one store
    per URI string: a second run in the same process from another folder (the Python API, a notebook)
    must still log into that folder's store, not the first one's."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        out = popfair_in_process(
            "population.n=200", "estimator=outcome_gap", "outcome_audit=null", f"run_name={name}", cwd=tmp_path / name
        )
        assert out.returncode == 0, out.stderr[-3000:]
        # the store is held absolute but shown as typed, as docs/getting_started.md shows it
        assert "open the UI:   mlflow ui --backend-store-uri sqlite:///mlruns/mlflow.db\n" in out.stdout
    for name in ("first", "second"):
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path / name}/mlruns/mlflow.db")
        runs = mlflow.search_runs(experiment_names=["popfair"])
        assert runs["tags.mlflow.runName"].tolist() == [name]


@pytest.mark.parametrize(
    "command",
    [
        ["popfair", "--help"],  # popfair's own fast help
        ["popfair", "--help", "occupation=teacher"],  # Hydra's help
        ["popfair", "--cfg", "job"],  # Hydra prints inside its own error handler
        ["popfair.report", "--help"],
        ["popfair.case.export", "--help"],
        ["popfair.population.fetch", "--help"],
    ],
    ids=lambda command: " ".join(command),
)
def test_a_closed_pipe_ends_every_entry_point_quietly(command, tmp_path):
    """`popfair --help | head`: the reader has gone before the first write (deterministic, unlike a
    real `head`, which may read everything first): no traceback, the status a shell gives SIGPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(
            [sys.executable, "-m", *command],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(write_end)
    assert out.returncode == 141, out.stderr
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr


def test_a_returned_command_skips_only_the_interpreters_teardown(tmp_path):
    """`exit_without_teardown` (the end of `python -m popfair`): non-daemon threads are joined, atexit
    hooks run and buffered output is delivered, as at a normal exit; objects left for the final
    collection are not finalized (the teardown it saves); the status is 0."""
    script = tmp_path / "command.py"
    script.write_text(
        "import atexit, gc, sys, threading, time\n"
        "from pathlib import Path\n"
        "from popfair.runtime.entry import exit_without_teardown\n"
        "here = Path(sys.argv[1])\n"
        "class Cycle:\n"
        "    def __del__(self):\n"
        "        (here / 'finalized').write_text('teardown ran')\n"
        "gc.disable()  # the cycle stays for the interpreter's final collection\n"
        "a = Cycle(); a.me = a; del a\n"
        "atexit.register(lambda: (here / 'atexit').write_text('ran'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), (here / 'thread').write_text('joined'))).start()\n"
        "sys.stdout.write('last line, unflushed')\n"
        "exit_without_teardown()\n"
        "sys.stdout.write(' never')\n",
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "last line, unflushed"
    assert (tmp_path / "atexit").exists() and (tmp_path / "thread").exists()
    assert not (tmp_path / "finalized").exists()
    # a SystemExit's code is the status: a number as it is, a message on standard error with status 1
    for code, status, stderr in (("3", 3, ""), ("'popfair: stopped'", 1, "popfair: stopped\n")):
        script.write_text(f"from popfair.runtime.entry import exit_without_teardown\nexit_without_teardown({code})\n")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
        assert (done.returncode, done.stderr) == (status, stderr)
