"""Tables that look like results but are not, run as a user types the command: a table of one sex and
one race stops saying nothing was compared, an empty file says it is empty, a file of only its header
says it has no rows, and a sex column of only "f" is read as the label f (DuckDB's sniffer would make it
a boolean)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.conftest import popfair_in_process

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = (
    "table.columns.outcome=advanced",
    "table.columns.sex=gender",
    "table.columns.race=ethnicity",
    "table.columns.applicant_id=id",
)


def _audit(tmp_path: Path, csv: Path, *extra: str, process: bool = False) -> subprocess.CompletedProcess:
    """`python -m popfair experiment=table_audit table.path=FILE table.columns...=...`, tracking off; in a
    real process where what is printed on stderr and the exit status are the point."""
    args = (
        "experiment=table_audit",
        f"table.path={csv.name}",
        *COLUMNS,
        "estimator.n_bootstrap=200",
        "tracking=none",
        f"hydra.run.dir={tmp_path}/out",
        *extra,
    )
    if not process:
        return popfair_in_process(*args, cwd=csv.parent)
    return subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=csv.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _one_line(done: subprocess.CompletedProcess) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "=== popfair case" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]  # Hydra's job log line: on stdout
    assert len(lines) == 1 and "[ERROR] - popfair: " in lines[0], output[-3000:]
    return lines[0].split("[ERROR] - ", 1)[1]


def _write(tmp_path: Path, gender: list[str], ethnicity: list[str], advanced: list[int]) -> Path:
    path = tmp_path / "decisions.csv"
    rows = {"id": [f"A{i:04d}" for i in range(len(gender))], "gender": gender, "ethnicity": ethnicity}
    pd.DataFrame({**rows, "advanced": advanced}).to_csv(path, index=False)
    return path


def test_a_table_of_one_sex_and_one_race_says_nothing_was_compared(tmp_path):
    csv = _write(tmp_path, ["Female"] * 60, ["White"] * 60, [1, 0, 0] * 20)
    line = _one_line(_audit(tmp_path, csv, process=True))
    assert "impact ratios: nothing was compared" in line
    assert "every applicant of known sex is female" in line and "every applicant of known race is white" in line
    assert "at least two categories" in line


def test_the_dry_run_of_a_table_of_one_sex_and_one_race_says_it_would_compare_nothing(tmp_path):
    """The dry run reads and maps the table without estimating: it says now what the run would stop
    on; a table with two races does not get the warning."""
    csv = _write(tmp_path, ["Female"] * 60, ["White"] * 60, [1, 0, 0] * 20)
    done = _audit(tmp_path, csv, "dry_run=true")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "NOTHING TO COMPARE: every applicant of known sex is female" in output
    assert "every applicant of known race is white" in output and "the run would stop" in output
    two = _write(tmp_path, ["Female"] * 60, ["White", "Black"] * 30, [1, 0, 0] * 20)
    checked = _audit(tmp_path, two, "dry_run=true")
    assert checked.returncode == 0 and "NOTHING TO COMPARE" not in checked.stdout + checked.stderr


def test_one_dimension_of_one_category_is_said_under_the_table(tmp_path):
    """Two races, one sex: the race ratios are computed; the sex block says that it compares nothing."""
    csv = _write(tmp_path, ["Female"] * 80, ["White", "Black"] * 40, [1, 0, 1, 0, 1, 0, 0, 0] * 10)
    done = _audit(tmp_path, csv)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Sex: nothing compared: every applicant of known sex is female" in done.stdout
    assert "selection/race/black" in done.stdout


def test_an_empty_csv_says_it_is_empty(tmp_path):
    csv = tmp_path / "decisions.csv"
    csv.write_bytes(b"")
    line = _one_line(_audit(tmp_path, csv, process=True))
    assert line.startswith("popfair: table.path: ") and line.endswith("is empty: no column names and no rows")
    assert "column0" not in line


def test_a_header_only_csv_says_it_has_no_rows(tmp_path):
    csv = tmp_path / "decisions.csv"
    csv.write_text("id,gender,ethnicity,advanced\n")
    line = _one_line(_audit(tmp_path, csv, process=True))
    assert line.startswith("popfair: table.path: ") and "decisions.csv has no rows" in line
    assert "only column names: id, gender, ethnicity, advanced" in line


def test_a_sex_column_of_only_f_maps_as_f(tmp_path):
    """DuckDB sniffs a column of only "f" as BOOLEAN (false); read as text, f maps to female by the
    default table.values.sex, and a race code 01 stays the text 01 that table.values.race={01: white, ...} names."""
    csv = _write(tmp_path, ["f"] * 80, ["01", "02"] * 40, [1, 0, 1, 0, 1, 0, 0, 0] * 10)
    done = _audit(tmp_path, csv, "table.values.race={01: white, 02: black}")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "no mapping covers" not in output
    assert "selection/sex/female" in done.stdout and "selection/race/black" in done.stdout
    assert "Sex: nothing compared: every applicant of known sex is female" in done.stdout


def test_a_type_given_in_read_options_is_kept(tmp_path):
    """table.read_options.dtype still decides a column the user names (here the outcome as text)."""
    csv = _write(tmp_path, ["f", "m"] * 40, ["White", "Black"] * 40, [1, 0, 1, 1, 0, 0, 1, 0] * 10)
    done = _audit(tmp_path, csv, "+table.read_options.dtype={advanced: VARCHAR}")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "selection/sex/female" in done.stdout and "selection/sex/male" in done.stdout
