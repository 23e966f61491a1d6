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
            "(-m protected_attr=gender,race)",
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

    # a database URL is not a screener's: no http(s) asked of it
    assert check_overrides(["table=default", "table.url=postgresql+psycopg://u@h/db", "table.name=t"], CONF_DIR)

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


def test_a_stage_longer_than_its_clock_shows_a_bar_of_its_seconds():
    import io

    from popfair.runtime.progress import stage_clock

    shown = io.StringIO()
    with stage_clock("estimate", after_s=0.2, file=shown):
        time.sleep(1.5)
    assert "stage estimate: 1 s" in shown.getvalue()
    quiet = io.StringIO()
    with stage_clock("worlds", after_s=0.5, file=quiet):
        time.sleep(0.1)
    assert quiet.getvalue() == ""  # a short stage shows nothing


def _table_overrides(tmp_path: Path, *extra: str) -> list[str]:
    from tests.test_table_source import COLUMNS, decisions, write

    path = tmp_path / "decisions.csv"
    write(decisions(), path, "csv")
    return ["experiment=table_audit", f"table.path={path}", *COLUMNS, "estimator.n_bootstrap=100", *extra]


def test_a_test_data_audit_of_a_named_tool_must_explain_its_data(tmp_path):
    """LL144's rules ask an audit on test data why historical data were not used and how the test data
    were made: without them, a table audit that states its tool (a published summary) stops at once."""
    from popfair.core.errors import ConfigError
    from popfair.sweep.run_case import case_from_config
    from tests.conftest import compose_config

    cfg = compose_config(
        _table_overrides(tmp_path, "table.kind=test", "table.tool.name='Acme Screen 4'"), tmp_path=tmp_path
    )
    with pytest.raises(ConfigError, match=r"table\.test_data\.why_not_historical: table\.kind=test: the LL144 rules"):
        case_from_config(cfg)
    historical = compose_config(_table_overrides(tmp_path, "table.test_data.how_made='generated'"), tmp_path=tmp_path)
    with pytest.raises(ConfigError, match=r"table\.test_data: explains test data; this audit's table\.kind is hist"):
        case_from_config(historical)


def test_the_report_prints_the_test_data_statement_and_a_historical_audit_says_so(tmp_path):
    from popfair.sweep.run_case import case_from_config
    from tests.conftest import compose_config

    why, how = "The tool has not been deployed yet", "1,574 synthetic applicants scored by the vendor sandbox"
    test = compose_config(
        _table_overrides(
            tmp_path,
            "table.kind=test",
            "table.tool.name='Acme Screen 4'",
            f"table.test_data.why_not_historical='{why}'",
            f"table.test_data.how_made='{how}'",
            "tracking=none",
        ),
        tmp_path=tmp_path,
    )
    text = case_from_config(test).run().report["report.md"]
    assert "**Data used:** Test data" in text
    assert f"Why historical data were not used: {why}. How the test data were made: {how}." in text
    historical = compose_config(_table_overrides(tmp_path, "tracking=none"), tmp_path=tmp_path)
    text = case_from_config(historical).run().report["report.md"]
    assert "**Data used:** Historical data" in text and "This audit used historical data" in text


def test_pse_paper_states_its_iterations_and_their_minutes_from_the_first(tmp_path, caplog):
    """estimator=pse_paper used to say nothing for minutes before "50 of 500": its first line now names
    the iterations, and the first iteration's measured time gives the expected minutes for all."""
    import logging

    from popfair.estimate.pse.paper.estimator import estimate_pse_paper
    from popfair.estimate.pse.simulate import SimulatedSFM

    sim = SimulatedSFM()
    grid = {"n_estimators": [20], "max_depth": [2], "reg_lambda": [1.0]}
    with caplog.at_level(logging.INFO, logger="popfair.pse"):
        estimate_pse_paper(
            sim.sample(800, seed=3), x0="female", x1="male", y="y", n_bootstrap=10, grid=grid, n_jobs=1, **sim.roles
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "popfair.pse"]
    assert lines[0].startswith("pse_paper: the grid search's selections (cached), then 10 resample-and-refit")
    assert "of 60 XGBoost fits each, 1 side by side" in lines[0]
    first = next(line for line in lines if line.startswith("pse_paper: iteration 1 of 10 took"))
    seconds = float(first.split(" took ")[1].split(" s ")[0])
    minutes = float(first.split("about ")[1].split(" min")[0])
    assert minutes == pytest.approx(seconds * 10 / 60, abs=0.06)
    assert any(line.startswith("pse_paper: 5 of 10 bootstrap iterations in") and "min left" in line for line in lines)


def test_getting_started_shows_the_default_cases_output_as_it_is_now(tmp_path):
    """docs/getting_started.md includes docs/console/default_case.txt, committed so that a fresh clone
    and a code host show it: `python -m popfair` run now prints the same, less the run's id, its link
    and its seconds. When this fails: python docs/_ext/popfair_docs.py --refresh-outputs."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("popfair_docs", ROOT / "docs" / "_ext" / "popfair_docs.py")
    assert spec is not None and spec.loader is not None
    docs = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("popfair_docs", docs)  # its dataclasses look their module up
    spec.loader.exec_module(sys.modules["popfair_docs"])
    docs = sys.modules["popfair_docs"]
    page = (ROOT / "docs" / "getting_started.md").read_text()
    assert "```{literalinclude} console/default_case.txt" in page
    kept = (ROOT / "docs" / "console" / "default_case.txt").read_text()
    fresh = docs.command_output(docs.COMMAND_OUTPUTS["default_case"], tmp_path)
    assert docs.stable(fresh) == docs.stable(kept), "stale: python docs/_ext/popfair_docs.py --refresh-outputs"
    assert "MLflow run id:" in kept and "time: " in kept  # what `stable` leaves out is there to leave out


def test_pse_paper_is_priced_from_the_last_measured_iteration(tmp_path, caplog):
    """Before a run on this machine the price uses the config's figure and says so; after one, the
    measured seconds kept in cache_dir, scaled by rows; the estimate stage logs the same line."""
    import json
    import logging

    from popfair.estimate.pse.paper.estimator import PsePaper, estimate_pse_paper
    from popfair.estimate.pse.paper.progress import TIMING_FILE
    from popfair.estimate.pse.simulate import SimulatedSFM

    grid = {"n_estimators": [20], "max_depth": [2], "reg_lambda": [1.0]}
    settings = {"n_bootstrap": 4, "grid": grid, "n_jobs": 1, "cache_dir": str(tmp_path)}
    before = PsePaper(**settings).price(19000)
    assert before == (
        "pse_paper: 4 resample-and-refit iterations of 60 XGBoost fits on 19,000 rows, 1 side by side: about 0 min "
        "(not measured here yet: the config's 0.25 s an iteration per core for 19,000 rows; the run measures it)"
    )
    sim = SimulatedSFM()
    with caplog.at_level(logging.INFO, logger="popfair.pse"):
        estimate_pse_paper(sim.sample(800, seed=4), x0="female", x1="male", y="y", **settings, **sim.roles)
    kept = json.loads((tmp_path / TIMING_FILE).read_text())
    assert kept["rows"] == 800 and kept["core_seconds"] > 0
    after = PsePaper(**{**settings, "n_bootstrap": 500}).price(8000)
    minutes = kept["core_seconds"] * 10 * 500 / 60
    assert f"1 side by side: about {minutes:.0f} min (measured here: {kept['core_seconds']:.1f} core-seconds" in after
    lines = [r.getMessage() for r in caplog.records if r.name == "popfair.pse"]
    assert lines[1].startswith("pse_paper: 4 resample-and-refit iterations of 60 XGBoost fits on 800 rows")


def test_doctor_prices_pse_paper(tmp_path):
    from tests.conftest import popfair_in_process

    out = popfair_in_process(
        "doctor", "estimator=pse_paper", "population.n=300", f"cache_dir={tmp_path}/c", cwd=tmp_path
    )
    (line,) = [line for line in out.stdout.splitlines() if " cost " in line]
    assert line.split()[:2] == ["ok", "cost"], out.stdout
    assert "pse_paper: 500 resample-and-refit iterations of 60 XGBoost fits on 300 rows" in line
    assert "about " in line and " min (not measured here yet" in line


def test_the_dry_run_prices_pse_paper(tmp_path):
    from tests.conftest import popfair_in_process

    out = popfair_in_process(
        "estimator=pse_paper", "population.n=300", "dry_run=true", f"cache_dir={tmp_path}/c", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pse_paper: 500 resample-and-refit iterations of 60 XGBoost fits on 300 rows" in out.stdout
