"""Tracking in the background: a case's run is complete (every param, metric, tag and artifact,
status FINISHED) when the case returns; a case that raises leaves one FAILED run with its error;
a popfair process killed mid-case does not leave its run RUNNING."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from popfair.case.population import PopulationCase
from popfair.track.headline import in_effects_table, logged_metrics, split_name
from popfair.track.mlflow_tracker import MAX_PARAM_CHARS, MlflowTracker, flatten
from tests.conftest import compose_config

OVERRIDES = ["population.n=300", "estimator=outcome_gap", "estimator.n_bootstrap=100"]


def _artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(run_id, path):
        found |= _artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def test_the_run_is_complete_when_the_case_returns(tmp_path):
    experiment = PopulationCase.from_config(compose_config(OVERRIDES, tmp_path=tmp_path))
    result = experiment.run()
    client = MlflowClient(experiment.tracker.uri)
    run = client.get_run(result.run_id)  # read at once: nothing may still be in flight
    assert run.info.status == "FINISHED"
    expected_params = {
        key: (text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "...")
        for key, value in flatten(experiment.config).items()
        for text in ["null" if value is None else str(value)]
    }
    assert run.data.params == expected_params  # every config value, in batches of 100
    table = result.effects.table
    for effect, row in table.iterrows():
        assert run.data.metrics[f"{effect}.estimate"] == pytest.approx(row["estimate"])
    logged = logged_metrics(client, run)  # the headline metrics and the tables' cells
    assert run.data.metrics["n_rows"] == 300 and "time.estimate_s" in logged and len(run.data.metrics) <= 40
    assert set(result.effects.metrics) <= set(logged)
    assert run.data.tags["pattern"] and run.data.tags["case_name"] == experiment.case_name()
    # the run name leads with what runs are compared by: the screener, then the case's other parts
    assert run.data.tags["mlflow.runName"] == experiment.mlflow_name == "tfidf-nurse-gender-text-outcome_gap"
    assert run.data.tags["mlflow.source.name"] and run.data.tags["mlflow.user"]  # as mlflow.start_run sets
    profiles = result.profiles
    assert profiles is not None
    expected = {"config.yaml", "roles.yaml", "scored.parquet", "effects.csv", "effects_table.json"}
    expected |= set(profiles.artifacts) | set(result.samples) | set(result.effects.artifacts)
    expected |= {f"audit_report/{name}" for name in result.report}  # a population case writes it by default
    assert {"report.html", "report.md", "report.pdf"} <= set(result.report)
    if result.audit is not None:
        expected |= set(result.audit.artifacts)
    if result.notes:
        expected.add("notes.txt")
    # the numbers that are not headline metrics, one MLflow table per first name segment
    columns = {str(effect): [str(c) for c in table.columns] for effect in table.index}
    rest = [k for k in logged if k not in run.data.metrics and not in_effects_table(k, columns)]
    expected |= {f"metrics/{split_name(k)[0]}.json" for k in rest}
    assert {"metrics/ll144.json", "metrics/time.json"} <= expected
    assert _artifacts(client, result.run_id) == expected  # each written once, nothing else
    folder = Path(mlflow.artifacts.download_artifacts(run_id=result.run_id, tracking_uri=experiment.tracker.uri))
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "scored.parquet"), result.scored, check_dtype=False)
    assert yaml.safe_load((folder / "config.yaml").read_text()) == experiment.config
    assert (folder / "population_age_vs_experience.png").read_bytes()[:4] == b"\x89PNG"  # drawn by the worker
    # the outcome audit's chart, queued by the thread that waits for the forked audit
    assert (folder / "impact_ratios" / "impact_ratios.png").read_bytes()[:4] == b"\x89PNG"


def test_an_equal_figure_is_drawn_once_per_process(monkeypatch):
    """The population's figures are the same for every screener cell of a sweep: drawn once."""
    from popfair.core.types import Plot
    from popfair.track import figures

    drawn = []
    monkeypatch.setattr(figures, "_DRAWN", {})
    monkeypatch.setattr(
        figures, "draw", lambda plot: drawn.append(plot) or figures.DRAW[plot.kind](plot.table, plot.title)
    )
    table = pd.DataFrame({"theoretical": [-1.0, 0.0, 1.0], "empirical": [-0.9, 0.1, 1.2], "weight": [1.0, 2.0, 1.0]})
    first = figures.png(Plot("qq", table, "a"))
    again = figures.png(Plot("qq", table.copy(), "a"))  # equal content, another object
    other = figures.png(Plot("qq", table.assign(empirical=[-1.0, 0.0, 1.0]), "a"))
    assert first[:4] == b"\x89PNG" and again == first and other != first
    assert len(drawn) == 2


def test_a_figure_drawn_beside_is_taken_from_the_worker(monkeypatch):
    """A figure the tracking worker was asked to draw (the auditor's report's chart) is not drawn in
    this process; one the worker failed to draw is drawn here."""
    from concurrent.futures import Future

    from popfair.core.types import Plot
    from popfair.track import figures

    drawn = []
    monkeypatch.setattr(figures, "_DRAWN", {})
    monkeypatch.setattr(
        figures, "draw", lambda plot: drawn.append(plot) or figures.DRAW[plot.kind](plot.table, plot.title)
    )
    table = pd.DataFrame({"theoretical": [-1.0, 0.0, 1.0], "empirical": [-0.9, 0.1, 1.2], "weight": [1.0, 2.0, 1.0]})

    def submit(result: bytes | Exception):
        def call(fn, figure, dpi):
            assert fn is figures.png
            done: Future = Future()
            done.set_exception(result) if isinstance(result, Exception) else done.set_result(result)
            return done

        return call

    figures.draw_beside(Plot("qq", table, "a"), 100, submit(b"the worker's PNG"))
    assert figures.png(Plot("qq", table.copy(), "a"), dpi=100) == b"the worker's PNG" and not drawn
    figures.draw_beside(Plot("qq", table, "b"), 100, submit(RuntimeError("the worker died")))
    assert figures.png(Plot("qq", table, "b"), dpi=100)[:4] == b"\x89PNG" and len(drawn) == 1


def test_a_kept_figure_is_drawn_once_per_machine(monkeypatch, tmp_path):
    """A Plot marked `keep` (a population's diagnostics) drawn by one process is read from popfair's
    disk cache by the next (each case of a joblib sweep, each rerun, is a fresh process): the same
    bytes, nothing drawn; another table, or the disk cache off, draws."""
    from popfair.core.types import Plot
    from popfair.track import figures

    table = pd.DataFrame({"theoretical": [-1.0, 0.0, 1.0], "empirical": [-0.9, 0.1, 1.2], "weight": [1.0, 2.0, 1.0]})
    table.to_pickle(tmp_path / "table.pkl")
    code = (
        "import sys, pandas as pd\n"
        "from popfair.core.types import Plot\n"
        "from popfair.track import figures\n"
        "drawn = []; draw = figures.draw; figures.draw = lambda p: drawn.append(p) or draw(p)\n"
        f"png = figures.png(Plot('qq', pd.read_pickle({str(tmp_path / 'table.pkl')!r}), 'a', keep=True))\n"
        "sys.stdout.write(f'{len(drawn)} {len(png)}')\n"
    )
    env = {**os.environ, "POPFAIR_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr[-2000:]
    (drawn_first, size), (drawn_again, size_again) = (r.stdout.split() for r in runs)
    assert (drawn_first, drawn_again) == ("1", "0") and size == size_again
    (kept,) = (tmp_path / "cache").glob("figure-*.png")
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(figures, "_DRAWN", {})
    monkeypatch.setattr(figures, "draw", lambda plot: pytest.fail("drawn again"))
    assert figures.png(Plot("qq", table, "a", keep=True)) == kept.read_bytes()
    drawn = []
    monkeypatch.setattr(
        figures, "draw", lambda plot: drawn.append(plot) or figures.DRAW[plot.kind](plot.table, plot.title)
    )
    figures.png(Plot("qq", table.assign(empirical=[-1.0, 0.0, 1.0]), "a", keep=True))  # another table
    monkeypatch.setenv("POPFAIR_CACHE_DIR", "off")
    monkeypatch.setattr(figures, "_DRAWN", {})
    figures.png(Plot("qq", table, "a", keep=True))  # no disk cache: drawn
    assert len(drawn) == 2 and len(list((tmp_path / "cache").glob("figure-*.png"))) == 2


def test_a_case_that_raises_leaves_one_failed_run_with_its_error(tmp_path, monkeypatch):
    experiment = PopulationCase.from_config(compose_config(OVERRIDES, tmp_path=tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("estimator exploded")

    monkeypatch.setattr(experiment.estimator, "estimate", broken)
    with pytest.raises(RuntimeError, match="exploded"):
        experiment.run()
    client = MlflowClient(experiment.tracker.uri)
    runs = client.search_runs([client.get_experiment_by_name("popfair").experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FAILED" and "estimator exploded" in run.data.tags["error"]
    assert run.info.run_id == experiment.tracker.failed_run_id
    assert {"config.yaml", "scored.parquet", "error.txt"} <= _artifacts(client, run.info.run_id)
    # a sweep records the failure on that same run instead of adding a second one
    same = experiment.tracker.record_failure("x", {"error_type": "RuntimeError"}, {}, "RuntimeError: exploded")
    assert same == run.info.run_id
    assert client.get_run(same).data.tags["error_type"] == "RuntimeError"
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_a_failure_without_a_case_run_gets_its_own_failed_run(tmp_path):
    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_root=str(tmp_path / "artifacts"))
    run_id = tracker.record_failure("bad-config", {"case_name": "bad"}, {"seed": 0}, "ConfigError: seed", "trace")
    run = MlflowClient(tracker.uri).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["error"] == "ConfigError: seed"
    assert run.data.params == {"seed": "0"}


def test_a_killed_popfair_process_does_not_leave_its_run_running(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    script = textwrap.dedent(
        f"""
        import sys, time
        from popfair.track.mlflow_tracker import MlflowTracker
        tracker = MlflowTracker(uri={uri!r}, artifact_root={str(tmp_path / "artifacts")!r})
        with tracker.run("doomed") as run:
            run.metrics({{"m": 1.0}})
            print(run.run_id, flush=True)  # waits until the worker created the run
            time.sleep(600)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    run_id = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    client = MlflowClient(uri)
    deadline = time.monotonic() + 60
    while client.get_run(run_id).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED" and "ended before its run was complete" in run.data.tags["error"]


def test_a_worker_forked_before_the_case_follows_its_folder_and_environment(tmp_path, monkeypatch):
    """`python -m popfair` forks the tracking worker before Hydra runs (warm_up); what Hydra then changes
    (hydra.job.chdir, hydra.job.env_set) must hold in the worker too: relative sqlite paths and
    MLFLOW_* variables mean there what they mean in the case."""
    from popfair.track import background

    background.warm_up()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POPFAIR_TEST_SET_AFTER_FORK", "yes")
    monkeypatch.delenv("POPFAIR_TEST_GONE_AFTER_FORK", raising=False)
    assert background.submit(os.getcwd).result() == str(tmp_path)
    assert background.submit(os.getenv, "POPFAIR_TEST_SET_AFTER_FORK").result() == "yes"
    assert background.submit(os.getpid).result() != os.getpid()  # a forked worker, not a thread
    assert background.submit(signal.getsignal, signal.SIGTERM).result() == signal.SIG_IGN


@pytest.mark.parametrize(
    "args,tracks",
    [
        ([], True),
        (["occupation=teacher", "+seed=3"], True),
        (["-m", "occupation=nurse,teacher"], False),
        (["dry_run=true"], False),
        (["tracking=none"], False),
        (["--cfg", "job"], False),
    ],
)
def test_only_a_single_tracked_case_forks_the_worker_early(args, tracks):
    from popfair.__main__ import _tracks_one_case

    assert _tracks_one_case(args) is tracks
