"""A new user's first hour: an error ends the command at once, and the bad inputs that used to run
(or wait) before failing stop with one line and exit status 2 before anything is built. Each trip
runs the command as typed, in a real process, in an empty folder that must stay empty."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from popfair.core.types import Check
from popfair.sweep.preflight import Finding, format_findings

ROOT = Path(__file__).resolve().parents[1]


def timed_popfair(*args: str, cwd: Path, timeout: float = 300) -> tuple[int, list[tuple[float, str]], float]:
    """`python -m popfair ARGS` in a real process: its status, each line it printed (either stream)
    with the time it arrived, and the time the process ended (seconds from the start)."""
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "popfair", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # Hydra's log handler writes to standard output
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = process.wait(timeout=timeout)
    ended = time.monotonic() - start
    reader.join(timeout=10)
    return status, lines, ended


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["tracking.uri=http://127.0.0.1:9"], "the MLflow store is not usable"),
        (["population.n=abc"], "population.n: must be null or an integer"),
        (["seed=-1", "population.n=300"], "seed=-1: must be an integer >= 0"),
    ],
)
def test_an_error_ends_the_command_at_once(args, says, tmp_path):
    """The command used to wait 5-19 s after its error line for the tracking worker to finish importing
    MLflow for a case that would never log (10-19 s at load 10)."""
    status, lines, ended = timed_popfair(*args, cwd=tmp_path)
    errors = [(at, line) for at, line in lines if says in line]
    assert status == 2 and errors, lines
    at, _ = errors[-1]
    assert ended - at < 1.5, f"exited {ended - at:.2f} s after its error line"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["seed=-1", "population.n=300"], "popfair: seed=-1: must be an integer >= 0"),
        (
            ["screener=http", "screener.base_url=127.0.0.1:8000/v1"],
            "popfair: screener.base_url=127.0.0.1:8000/v1: must be an http(s) URL; "
            "did you mean screener.base_url=http://127.0.0.1:8000/v1?",
        ),
        (
            ["protected_attr=gender,race"],
            "popfair: protected_attr=gender,race: a comma list is a sweep, one case per value: add -m "
            "(python -m popfair -m protected_attr=gender,race)",
        ),
        (
            ["+screener.coefficients.first_name.Michael=4"],
            "popfair: +screener.coefficients.first_name.Michael: belongs to screener=simulated",
        ),
    ],
)
def test_each_trip_is_one_line_and_exit_2_before_anything_is_built(args, line, tmp_path):
    status, lines, _ = timed_popfair(*args, cwd=tmp_path)
    assert status == 2, lines
    assert [text for _, text in lines if text.strip()] and lines[0][1].startswith(line), lines
    assert len([text for _, text in lines if text.strip()]) == 1, lines
    assert list(tmp_path.iterdir()) == []  # no cache, no store, no Hydra output folder


def test_a_whole_number_with_an_exponent_is_that_integer(tmp_path):
    from tests.conftest import popfair_in_process

    out = popfair_in_process("--cfg", "job", "population.n=1e3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "\n  'n': 1000\n" in out.stdout


def test_an_exponent_is_an_integer_only_where_it_is_whole():
    from popfair.runtime.overrides import integer_literals

    assert integer_literals(["population.n=1e3", "-m", "population.n=2E3,5e2", "x=1.5e-3", "a=1e3x"]) == [
        "population.n=1000",
        "-m",
        "population.n=2000,500",
        "x=1.5e-3",
        "a=1e3x",
    ]


def test_a_comma_list_runs_as_a_sweep_with_m_or_a_sweep_preset():
    from popfair.runtime.overrides import check_overrides
    from popfair.runtime.paths import CONF_DIR

    assert check_overrides(["-m", "protected_attr=gender,race"], CONF_DIR)
    assert check_overrides(["experiment=popresume_grid_offline", "protected_attr=gender,race"], CONF_DIR)


def test_doctor_marks_a_route_without_credentials_as_failing(tmp_path, monkeypatch):
    """`route: auto` with no key of any route used to print `ok  route ... no route's credentials are set`."""
    from popfair.case.compose import build_for_plan
    from popfair.screen.preflight import screener_checks
    from tests.conftest import compose_config

    for variable in ("OPENROUTER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_config(["screener=gpt4o_mini"], tmp_path=tmp_path)
    route = {c.name: c for c in screener_checks(build_for_plan(cfg.screener, "screener", dry_run=True))}["route"]
    assert not route.ok and "no route's credentials are set" in route.detail
    assert route.fix and "export OPENROUTER_API_KEY=..." in route.fix


def test_leave_these_cases_out_names_the_failing_cases_and_the_override_that_runs_the_rest():
    """The callback panel's dry run said "leave these cases out: panel_cell=..." and listed the cells
    to keep."""
    cells = ["a", "b", "c", "d"]
    cases = {job: [f"panel_cell={cell}", "seed=0"] for job, cell in enumerate(cells)}
    failed = [1, 3]  # cells b and d
    finding = Finding("screener", Check("extra", False, "needs the embedding extra", "pip install x"), failed)
    text = format_findings([finding], cases, everything=False)
    assert "leave these cases out (panel_cell=b,d): run panel_cell=a,c" in text
