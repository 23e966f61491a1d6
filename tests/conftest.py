"""Shared fixtures: compose configs with Hydra's compose API, isolated MLflow stores."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")  # this checkout's (popfair.runtime.paths.CONF_DIR)


def compose_config(overrides: list[str] | None = None, *, tmp_path: Path | None = None) -> DictConfig:
    """The composed config; with tmp_path, MLflow tracks into that directory."""
    overrides = list(overrides or [])
    extra = []
    if tmp_path is not None:
        extra = [f"cache_dir={tmp_path}/cache"]
        if "tracking=none" not in overrides:
            extra += [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_root={tmp_path}/artifacts"]
    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        return compose(config_name="config", overrides=overrides + extra)


def popfair_in_process(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m popfair ARGS` run in this process (popfair.__main__.main with that argv, in `cwd`):
    for tests of what the command prints, where a fresh interpreter is not the point. Its exit status
    (a SystemExit's code, else 0) and both streams come back as a CompletedProcess. Tests of signals,
    exit statuses and installs start a real process instead. With `env`, the environment is exactly
    that mapping during the call. The root logger's handlers and level (which a Hydra job sets up) and
    Hydra's HydraConfig are put back afterwards, so nothing of the run leaks into later tests."""
    import logging

    from hydra.core.hydra_config import HydraConfig

    from popfair.__main__ import main
    from popfair.sweep import plan

    plan._PLANNED.clear()  # a process plans one sweep: documents planned by an earlier call are not this one's

    argv, here, environ = sys.argv, os.getcwd(), dict(os.environ)
    handlers, level = logging.root.handlers[:], logging.root.level
    hydra_config = HydraConfig.instance().cfg  # a run leaves its own behind, which later code would read
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    sys.argv = ["popfair", *args]
    os.chdir(cwd)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.argv = argv
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
        for handler in logging.root.handlers[:]:
            if handler not in handlers:
                logging.root.removeHandler(handler)
                handler.close()
        logging.root.handlers[:] = handlers
        logging.root.setLevel(level)
        HydraConfig.instance().cfg = hydra_config
    status = code if isinstance(code, int) else (0 if code is None else 1)
    return subprocess.CompletedProcess(["popfair", *args], status, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 for the whole session (tests/pg_server.py)."""
    from tests.pg_server import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mlflow_tracking_server(tmp_path_factory):
    """One real `mlflow server` on 127.0.0.1 for the whole session (tests/mlflow_server.py): each
    server start imports MLflow's whole stack, so tests that only need *a* tracking server share
    this one and keep apart by experiment name. Tests that serve a store of their own start theirs."""
    from tests.mlflow_server import mlflow_server

    with mlflow_server(tmp_path_factory.mktemp("mlflow-shared")) as uri:
        yield uri


@pytest.fixture
def pg_url(postgres, monkeypatch) -> str:
    """URL of a fresh database on that server; its password is in PGPASSWORD only (never the URL)."""
    from tests.pg_server import PASSWORD

    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return postgres.new_database()


@pytest.fixture
def compose_cfg():
    return compose_config


# Solid colour per (gender, race, age_band) cell: stand-in headshots for renderer=image_photo tests.
PHOTO_CELL_COLOURS = {
    ("female", "black", "30-44"): (200, 40, 40),
    ("male", "white", "30-44"): (40, 60, 200),
    ("female", "black", "18-29"): (40, 160, 60),
}


def synthetic_photos_dir(path: Path) -> Path:
    """Write small synthetic photos (a colour per cell, a lighter disc) and manifest.csv to `path`."""
    from PIL import Image  # noqa: PLC0415

    path.mkdir(parents=True, exist_ok=True)
    rows = ["gender,race,age_band,file"]
    for i, ((gender, race, band), colour) in enumerate(PHOTO_CELL_COLOURS.items()):
        image = Image.new("RGB", (90, 120), colour)
        image.paste(tuple(min(255, c + 60) for c in colour), (25, 20, 65, 70))
        image.save(path / f"face{i}.png")
        rows.append(f"{gender},{race},{band},face{i}.png")
    (path / "manifest.csv").write_text("\n".join(rows) + "\n")
    return path
