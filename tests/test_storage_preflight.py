"""Locations a case writes that cannot be written, found before anything runs: a read-only working folder,
`hydra.run.dir`, `tracking.uri`'s folder, `tracking.artifact_root`, `cache_dir` or `hydra.sweep.dir`
each stop the command with one line naming its own key, the folder and the fix, exit status 2, no
traceback, nothing built or screened (popfair.sweep.storage).

A folder is made read-only with chmod; where the tests run as root (chmod does not stop root), with the
immutable attribute (chattr +i), and the test is skipped only when neither stops a write. A path below a
regular file cannot be written by anyone, root included: those tests always run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import popfair_in_process

ROOT = Path(__file__).resolve().parents[1]
CASE = ("screener=simulated", "population.n=60", "estimator=outcome_gap", "outcome_audit=null")


def _can_write(folder: Path) -> bool:
    try:
        (folder / ".probe").write_text("x")
    except OSError:
        return False
    (folder / ".probe").unlink()
    return True


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    immutable = False
    if _can_write(folder):  # root: chmod does not stop it, the immutable attribute does
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    try:
        if _can_write(folder):
            pytest.skip("no way to make a folder unwritable here (root, and chattr +i refused)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        folder.chmod(0o755)


@pytest.fixture
def read_only(tmp_path) -> Iterator[Path]:
    with _read_only(tmp_path / "ro") as folder:
        yield folder


def _stores(tmp_path: Path) -> list[str]:
    return [
        f"tracking.uri=sqlite:///{tmp_path}/w/mlflow.db",
        f"tracking.artifact_root={tmp_path}/w/artifacts",
        f"cache_dir={tmp_path}/w/cache",
        f"hydra.run.dir={tmp_path}/w/out",
    ]


def _one_line(done: subprocess.CompletedProcess, key: str) -> str:
    output = done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, output[-3000:]
    assert "Traceback" not in output and "stage population" not in output, output[-3000:]
    assert len(lines) == 1 and lines[0].startswith(f"popfair: {key}="), output[-3000:]
    assert "nothing was run" in lines[0] and f"Fix: {key}=" in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hydra.run.dir", "{ro}/out"),
        ("tracking.uri", "sqlite:///{ro}/mlflow.db"),
        ("tracking.artifact_root", "{ro}/artifacts"),
        ("cache_dir", "{ro}/cache"),
    ],
)
def test_a_read_only_location_stops_with_its_own_key(tmp_path, read_only, key, value):
    args = [
        *CASE,
        *(a for a in _stores(tmp_path) if not a.startswith(f"{key}=")),
        f"{key}={value.format(ro=read_only)}",
    ]
    done = popfair_in_process(*args, cwd=tmp_path)
    line = _one_line(done, key)
    assert f"cannot write in {read_only}" in line
    assert not (tmp_path / "w" / "cache").exists() and not (tmp_path / "w" / "out").exists()  # nothing made


def test_a_read_only_working_folder_names_the_output_folder(read_only, tmp_path):
    """In a real process, from a folder that cannot be written: Hydra's outputs/ would be made there."""
    done = subprocess.run(
        [sys.executable, "-m", "popfair", *CASE, f"cache_dir={tmp_path}/cache", "tracking=none"],
        cwd=read_only,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = _one_line(done, "hydra.run.dir")
    assert f"cannot write in {read_only} (the current folder)" in line
    assert "or run from a folder you can write in" in line
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("key", ["hydra.run.dir", "tracking.artifact_root", "cache_dir"])
def test_a_location_below_a_file_stops_with_its_own_key(tmp_path, key):
    """A path below a regular file cannot be made by anyone (root too): runs everywhere."""
    (tmp_path / "a_file").write_text("not a folder")
    args = [*CASE, *(a for a in _stores(tmp_path) if not a.startswith(f"{key}=")), f"{key}={tmp_path}/a_file/sub"]
    done = popfair_in_process(*args, cwd=tmp_path)
    line = _one_line(done, key)
    assert f"{tmp_path}/a_file is a file" in line
    assert not (tmp_path / "w").exists()  # nothing made: no output folder, store, cache


def test_a_read_only_artifact_root_is_not_blamed_on_the_tracking_uri(tmp_path):
    (tmp_path / "a_file").write_text("")
    done = popfair_in_process(
        *CASE,
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"tracking.artifact_root={tmp_path}/a_file/artifacts",
        f"hydra.run.dir={tmp_path}/out",
        cwd=tmp_path,
    )
    line = _one_line(done, "tracking.artifact_root")
    assert "tracking.uri" not in line.split("Fix:")[1].split(",")[0]


def test_a_sweep_folder_that_cannot_be_written_stops_before_its_first_case(tmp_path):
    (tmp_path / "a_file").write_text("")
    done = popfair_in_process(
        "-m", *CASE, "seed=0,1", "tracking=none", f"cache_dir={tmp_path}/cache", f"hydra.sweep.dir={tmp_path}/a_file/sweep",
        cwd=tmp_path,
    )  # fmt: skip
    _one_line(done, "hydra.sweep.dir")
    assert not (tmp_path / "cache").exists()


def test_doctor_names_the_artifact_root_as_the_failing_key(tmp_path):
    from popfair.sweep.preflight import check_tracking

    (tmp_path / "a_file").write_text("")
    check = check_tracking(f"sqlite:///{tmp_path}/mlflow.db", f"{tmp_path}/a_file/artifacts")
    assert not check.ok and check.detail.startswith(f"tracking.artifact_root={tmp_path}/a_file/artifacts")
    assert check.fix is not None and check.fix.startswith("tracking.artifact_root=")
    assert check_tracking(f"sqlite:///{tmp_path}/mlflow.db", f"{tmp_path}/artifacts").ok
