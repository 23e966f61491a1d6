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
# This machine sets PYTHONDONTWRITEBYTECODE=1: every `python -m popfair` a test starts (and every
# xdist worker) would compile popfair's modules afresh, about 0.4 CPU s each. The suite's processes
# write and reuse __pycache__ (git-ignored) as a user's install does.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# xdist workers share the machine's cores: each (and the processes it starts) gets its share of BLAS,
# OpenMP and torch threads, not all of them (two workers of two threads each on two cores spin-wait
# on each other: the two-process embedding test took 60 s instead of 5 at load 8)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = str(max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1) // _WORKERS))
    for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, _THREADS)

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = str(ROOT / "conf")  # this checkout's (popfair.runtime.paths.CONF_DIR)

# What a run writes into its working directory: a test writes these under its tmp paths only.
ROOT_OUTPUTS = ("mlflow.db", "mlruns", "multirun", "outputs")

# Under xdist the suite's wall time is the busier worker's total: the longest work units start first
# (longest processing time first), the rest follow in collection order. Node id prefixes, longest
# first, from `pytest --durations=60` (refresh them from its output); a unit is an
# xdist_group (see pytest_collection_modifyitems) or a single test.
LONGEST_FIRST = (
    "tests/test_docs.py",
    "tests/test_sweep_worker_death.py::test_sigterm",
    "tests/test_identification.py",
    "tests/test_sweep.py::test_sweep_has_one_parent",  # the failing_sweep group
    "tests/test_sweep_shared_cache.py::test_joblib",
    "tests/test_cluster_sweeps.py::test_slurm",
    "tests/test_sweep_worker_death.py::test_a_killed_worker",
    "tests/test_sweep.py::test_offline_popresume_grid",
    "tests/test_screen_embedding.py::test_processes_encoding",
    "tests/test_nuisance_cache.py",
    "tests/test_sweep.py::test_offline_callback_panel",
    "tests/test_doctor.py::test_a_sweep_without",
    "tests/test_table_source.py",
    "tests/test_screen_interrupt.py::test_signal_mid_run",
    "tests/test_interventional.py",
    "tests/test_ranking.py",
    "tests/test_end_to_end.py",
    "tests/test_screen_resume.py",
    "tests/test_render_store.py::test_two_processes",
    "tests/test_render_store.py::test_a_killed_render",
)


# Session fixtures that start a server (10 CPU s for `mlflow server`): their tests share one worker
SHARED_SERVERS = ("mlflow_tracking_server",)


def _module_fixture_groups(item: pytest.Item) -> list[str]:
    """Module- or class-scoped fixtures that `item`'s own module defines (with the parameter it gets),
    and the SHARED_SERVERS it uses: the tests sharing one are kept on one xdist worker, so the fixture
    is built once, not per worker."""
    module = item.nodeid.split("::", 1)[0]
    groups = []
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        fixture = definitions[-1]
        if fixture.scope in ("module", "class") and fixture.baseid == module:
            callspec = getattr(item, "callspec", None)
            param = f".{callspec.indices[name]}" if callspec is not None and name in callspec.indices else ""
            groups.append(f"{Path(module).stem}.{name}{param}")
        elif name in SHARED_SERVERS:  # a session fixture: started once, on the worker that runs its tests
            groups.append(name)
    return groups


def pytest_itemcollected(item: pytest.Item) -> None:
    """Tests sharing a module fixture form one xdist group, unless they name a group themselves (marked
    as each test is collected: xdist reads the groups when the collection is modified)."""
    if item.get_closest_marker("xdist_group") is None and (groups := _module_fixture_groups(item)):
        item.add_marker(pytest.mark.xdist_group(min(groups)))


@pytest.hookimpl(tryfirst=True)  # before xdist sends the collection; after every collection_modifyitems
def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker: each test of an xdist_group gets its `@group` suffix (xdist 3.8 sets the
    suffix on `item._nodeid`, which pytest 9 no longer reads, so without this no group holds
    together), and the units listed in LONGEST_FIRST are handed out first (xdist schedules in the
    order of the collection; a unit is a group or a single test)."""
    from _pytest.nodeid import coerce_node_id

    config = session.config
    if not hasattr(config, "workerinput"):
        return
    if config.getvalue("loadgroup"):
        for item in session.items:
            names = {
                str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
            }
            suffix = "@" + "_".join(sorted(names))
            if names and not item.nodeid.endswith(suffix):
                item._id = coerce_node_id(item.nodeid + suffix)  # what xdist means by item._nodeid

    def unit(nodeid: str) -> str:  # as xdist's loadgroup scheduler splits it
        return nodeid.rsplit("@", 1)[-1] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid

    rank: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(session.items):
        u = unit(item.nodeid)
        first.setdefault(u, i)
        here = next((r for r, p in enumerate(LONGEST_FIRST) if item.nodeid.startswith(p)), len(LONGEST_FIRST))
        rank[u] = min(rank.get(u, here), here)
    session.items.sort(key=lambda item: (rank[unit(item.nodeid)], first[unit(item.nodeid)]))


@pytest.fixture(autouse=True)
def _writes_nothing_at_the_repository_root():
    """Fails the test during which mlflow.db, mlruns/, multirun/ or outputs/ appeared at the repository
    root (a run with the default tracking URI or working directory), and removes what it wrote."""
    import shutil

    before = {name for name in ROOT_OUTPUTS if (ROOT / name).exists()}
    yield
    made = [name for name in ROOT_OUTPUTS if name not in before and (ROOT / name).exists()]
    for name in made:
        path = ROOT / name
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    if made:
        pytest.fail(
            f"{', '.join(made)} written at the repository root {ROOT} during this test: tests write under tmp paths"
        )


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

    plan.default_planner().planned.clear()  # a process plans one sweep: documents planned by an earlier call are not this one's

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
