"""Sweeps end to end: one MLflow parent run per sweep with a child run per case, failures recorded
without aborting, the comparison report, launchers, dry-run plans, and reading through mlflow server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml

from popfair.case.population import PopulationCase
from popfair.core.errors import MissingSecretError
from popfair.report.__main__ import main as report_main
from popfair.sweep.state import read_case_records, sweep_grid
from tests.conftest import CONF_DIR, compose_config, popfair_in_process
from tests.mlflow_server import mlflow_server
from tests.test_cli import popfair

SMALL = ["population.n=300", "estimator=outcome_gap", "estimator.n_bootstrap=200"]
TFIDF = "popfair.screen.tfidf.TfidfScreener"
EXPLODING = "tests.sweep_support.ExplodingScreener"


def sweep_dir(cwd: Path) -> Path:
    (found,) = [p.parent for p in (cwd / "multirun").glob("*/*/popfair_sweep.json")]
    return found


def runs_of(cwd: Path) -> pd.DataFrame:
    mlflow.set_tracking_uri(f"sqlite:///{cwd}/mlruns/mlflow.db")
    return mlflow.search_runs(experiment_names=["popfair"])


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    """2 occupations x (tfidf, a screener that raises mid-case): jobs 1 and 3 fail, 0 and 2 finish.
    Run by the joblib launcher: the cases live in worker processes, the parent run in this one."""
    cwd = tmp_path_factory.mktemp("sweep")
    out = popfair(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "occupation=nurse,teacher",
        f"screener._target_={TFIDF},{EXPLODING}",
        *SMALL,
        cwd=cwd,
    )
    # two cases failed: the sweep finishes the others, prints its summary, then exits 1
    assert out.returncode == 1, out.stderr[-3000:]
    assert "=== popfair sweep: 4 cases reported of 4, 2 failed ===" in out.stdout
    return cwd, out


def test_sweep_has_one_parent_and_a_child_per_case(failing_sweep):
    cwd, _ = failing_sweep
    runs = runs_of(cwd)
    parents = runs[runs["tags.popfair.sweep"] == "parent"]
    assert len(parents) == 1
    parent = parents.iloc[0]
    children = runs[runs["tags.mlflow.parentRunId"] == parent["run_id"]]
    assert len(children) == 4 and len(runs) == 5
    assert parent["status"] == "FINISHED"
    assert parent["metrics.cases_failed"] == 2 and parent["metrics.cases_finished"] == 2
    # the overrides that vary across the sweep are tags; fixed ones (population.n) are not
    assert set(children["tags.sweep.occupation"]) == {"nurse", "teacher"}
    assert set(children["tags.sweep.screener._target_"]) == {TFIDF, EXPLODING}
    assert "tags.sweep.population.n" not in runs.columns
    assert parent["tags.sweep.varying"] == "occupation,screener._target_"


def test_a_case_that_raises_is_recorded_failed_and_the_others_finish(failing_sweep):
    cwd, out = failing_sweep
    children = runs_of(cwd).dropna(subset=["tags.mlflow.parentRunId"])
    failed = children[children["status"] == "FAILED"]
    assert sorted(failed["tags.sweep.occupation"]) == ["nurse", "teacher"]
    assert (failed["tags.sweep.screener._target_"] == EXPLODING).all()
    assert failed["tags.error"].str.contains("boom: the model endpoint fell over").all()
    assert (failed["tags.error_type"] == "RuntimeError").all()
    finished = children[children["status"] == "FINISHED"]
    assert (finished["tags.sweep.screener._target_"] == TFIDF).all()
    assert finished["metrics.gap.estimate"].notna().all()
    records = {r.job: r for r in read_case_records(sweep_dir(cwd))}
    assert [records[j].status for j in range(4)] == ["finished", "failed", "finished", "failed"]
    summary = pd.read_csv(sweep_dir(cwd) / "summary.csv")
    assert list(summary.loc[summary["status"] == "failed", "job"]) == [1, 3]
    assert "2 failed" in out.stdout and "FAILED job 1" in out.stdout and "boom" in out.stdout


def test_sweep_report_files_and_plots(failing_sweep):
    cwd, out = failing_sweep
    # the sweep prints its parent run's page (Model training view) and the compare view of its cases
    assert "the sweep:     http://127.0.0.1:5000/#/experiments/" in out.stdout
    assert "compare cases: http://127.0.0.1:5000/#/compare-runs?runs=" in out.stdout
    report = sweep_dir(cwd) / "report"
    for name in (
        "report.html",
        "report.md",
        "runs.csv",
        "effects.csv",
        "popresume_cases.csv",
        "pattern_tally.csv",
        "summary.csv",
        "report.pdf",
        "cases.csv",
    ):
        assert (report / name).is_file(), name
    assert (report / "report.pdf").read_bytes().startswith(b"%PDF")
    # the report says which popfair wrote it and from which runs, never a local path
    text = (report / "report.md").read_text()
    assert "popfair " in text and "MLflow parent run" in text and str(cwd) not in text
    forests = sorted(p.name for p in (report / "plots" / "forest").glob("*.png"))
    # one per finished case, named by the case and what the sweep varied (the screener's _target_)
    assert [name.split("-screener.")[0] for name in forests] == ["nurse-gender-text-tfidf", "teacher-gender-text-tfidf"]
    assert all(name.endswith(("-pse_dml.png", "-counterfactual.png", "-outcome_gap.png")) for name in forests)
    assert all("TfidfScreener" in name for name in forests)
    page = (report / "report.html").read_text()
    # the grid at a glance (one figure of every case's effects), then the pattern counts, then the detail
    assert (report / "plots" / "effects_overview.png").stat().st_size > 0
    # overview + every case on one x scale + 2 forests
    assert page.count("data:image/png;base64,") == 4 and "src='plots/" not in page
    glance, tally_at, detail = (
        page.index(h) for h in ("All cases at a glance", "Cases per discrimination", "Effects per case")
    )
    assert glance < tally_at < detail
    assert "boom" in page  # failed cases are listed
    cases = pd.read_csv(report / "popresume_cases.csv")
    assert sorted(cases["occupation"]) == ["nurse", "teacher"]
    tally = pd.read_csv(report / "pattern_tally.csv")
    assert tally["cases"].sum() >= 2
    # logged to the parent run
    runs = runs_of(cwd)
    parent_id = runs.loc[runs["tags.popfair.sweep"] == "parent", "run_id"].iloc[0]
    logged = {a.path for a in mlflow.MlflowClient().list_artifacts(parent_id, "report")}
    assert {"report/report.html", "report/report.md", "report/summary.csv", "report/report.pdf"} <= logged
    # the comparison as one MLflow table, one row per case with its unit
    mlflow.set_experiment(experiment_id=mlflow.MlflowClient().get_run(parent_id).info.experiment_id)
    per_case = mlflow.load_table("cases.json", run_ids=[parent_id])
    assert len(per_case) == 2 and per_case["unit"].notna().all()
    assert [c for c in per_case.columns if c.endswith(".estimate")]  # one column per effect: charted as is


def test_report_cli_rebuilds_the_report_from_mlflow(failing_sweep, tmp_path):
    cwd, _ = failing_sweep
    code = report_main(
        [
            "--latest-sweep",
            "--no-log",
            "--tracking-uri",
            f"sqlite:///{cwd}/mlruns/mlflow.db",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert code == 0
    effects = pd.read_csv(tmp_path / "r" / "effects.csv")
    assert len(effects) == 2 and set(effects["effect"]) == {"gap"}
    runs = runs_of(cwd)
    finished = runs[runs["status"] == "FINISHED"].dropna(subset=["tags.mlflow.parentRunId"])
    merged = effects.merge(finished, on="run_id")
    assert merged["estimate"].tolist() == pytest.approx(merged["metrics.gap.estimate"].tolist())


def test_report_cli_unknown_parent_is_a_clear_error(failing_sweep, capsys):
    cwd, _ = failing_sweep
    code = report_main(["--parent", "0123456789abcdef", "--tracking-uri", f"sqlite:///{cwd}/mlruns/mlflow.db"])
    assert code == 2 and "0123456789abcdef" in capsys.readouterr().err


def test_mlflow_server_serves_the_sweep_over_rest(failing_sweep):
    """`mlflow server` on the project's sqlite store; the sweep's children found through the REST API."""
    cwd, _ = failing_sweep
    with mlflow_server(cwd / "mlruns") as base:

        def post(path: str, body: dict) -> dict:
            request = urllib.request.Request(
                f"{base}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())

        experiment = json.loads(
            urllib.request.urlopen(
                f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=popfair", timeout=30
            ).read()
        )
        experiment_id = experiment["experiment"]["experiment_id"]
        parents = post(
            "/api/2.0/mlflow/runs/search",
            {"experiment_ids": [experiment_id], "filter": "tags.`popfair.sweep` = 'parent'"},
        )["runs"]
        assert len(parents) == 1
        parent_id = parents[0]["info"]["run_id"]
        children = post(
            "/api/2.0/mlflow/runs/search",
            {"experiment_ids": [experiment_id], "filter": f"tags.mlflow.parentRunId = '{parent_id}'"},
        )["runs"]
        assert sorted(r["info"]["status"] for r in children) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]
        local = runs_of(cwd)
        assert {r["info"]["run_id"] for r in children} == set(
            local.loc[local["tags.mlflow.parentRunId"] == parent_id, "run_id"]
        )
        # the report reads the same sweep through the server
        from popfair.report.runs import load_runs

        served = load_runs(base, parent_run_id=parent_id)
        assert sorted(served["status"]) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]


def test_dry_run_plans_every_case_and_calls_nothing(tmp_path):
    """A priced screener whose key is unset and whose screen() would fail: the dry run still plans
    every case (built keyless), prints per-case plans and per-model totals."""
    env_free = {k: v for k, v in os.environ.items() if k != "POPFAIR_TEST_KEY"}
    out = popfair_in_process(
        "-m",
        "dry_run=true",
        "occupation=nurse",
        "protected_attr=gender,race",
        "population.n=200",
        "screener._target_=tests.sweep_support.CountingScreener",
        cwd=tmp_path,
        env=env_free,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("\nplan ") + out.stdout.startswith("plan ") == 2
    assert "dry run: 2 cases planned, nothing called" in out.stdout
    assert not (tmp_path / "mlruns").exists()  # nothing logged either
    folder = sweep_dir(tmp_path)
    plans = pd.read_csv(folder / "plan.csv")
    # the default counterfactual design re-screens a tenth of the applicants in its worlds, and at 200
    # applicants at least MIN_PER_GROUP of the smaller group: more than the applicants, less than twice
    assert len(plans) == 2 and (plans["calls"] > 200).all() and (plans["calls"] < 2 * 200).all()
    totals = pd.read_csv(folder / "plan_totals.csv", index_col=0)
    assert totals.loc["TOTAL", "calls"] == plans["calls"].sum()
    assert totals.loc["TOTAL", "cost_usd"] == pytest.approx(plans["cost_usd"].sum())
    # a document planned in an earlier case counts as a cache hit later on
    assert (plans["new_calls"] <= plans["calls"]).all()
    assert (
        plans.loc[plans["case_name"].str.startswith("nurse-gender"), "new_calls"].item()
        == plans.loc[plans["case_name"].str.startswith("nurse-gender"), "calls"].item()
    )


def test_a_missing_key_fails_naming_the_variable_unless_dry_run(monkeypatch, tmp_path):
    monkeypatch.delenv("POPFAIR_TEST_KEY", raising=False)
    cfg = compose_config(["screener._target_=tests.sweep_support.CountingScreener"], tmp_path=tmp_path)
    with pytest.raises(MissingSecretError, match="POPFAIR_TEST_KEY"):
        PopulationCase.from_config(cfg)
    assert PopulationCase.from_config(cfg, dry_run=True).screener.name == "counting"
    cfg = compose_config([f"screener._target_={EXPLODING}"], tmp_path=tmp_path)
    # a screener without a keyless mode keeps its own behaviour
    assert PopulationCase.from_config(cfg, dry_run=True).screener.name == "exploding"


@pytest.mark.parametrize(
    "experiment,cases",
    [("popresume_grid", 120), ("callback_panel", 27), ("popresume_grid_offline", 40), ("callback_panel_offline", 6)],
)
def test_experiment_grids_have_the_papers_case_counts(experiment, cases):
    params = yaml.safe_load((Path(CONF_DIR) / "experiment" / f"{experiment}.yaml").read_text())["hydra"]["sweeper"][
        "params"
    ]
    varying, count = sweep_grid([f"experiment={experiment}"], params)
    assert count == cases
    for group in ("format_model", "panel_cell"):
        for option in varying.get(group, []):
            assert (Path(CONF_DIR) / group / f"{option}.yaml").is_file(), option


@pytest.mark.parametrize(
    "launcher,target",
    [
        ("basic", "BasicLauncher"),
        ("joblib", "JoblibLauncher"),
        ("submitit_slurm", "SlurmLauncher"),
        ("submitit_local", "LocalLauncher"),
        ("slurm", "SlurmLauncher"),
        ("slurm_local", "LocalLauncher"),
    ],
)
def test_launchers_are_installed_and_compose(launcher, target):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=CONF_DIR):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(target)
    assert cfg.hydra.callbacks.popfair_sweep._target_ == "popfair.sweep.callbacks.SweepCallback"


def _dry_sweep(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    """A dry-run sweep with every API key variable removed from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN")) and not k.startswith("AWS_")}
    cwd.mkdir(parents=True, exist_ok=True)
    out = popfair_in_process("dry_run=true", *args, cwd=cwd, env=env)  # what it prints and writes: in process
    assert out.returncode == 0, out.stderr[-3000:]
    return out, pd.read_csv(sweep_dir(cwd) / "plan.csv")


def test_callback_panel_dry_run_plans_27_cases_without_keys(tmp_path):
    # a grid preset sweeps without -m (hydra.mode: MULTIRUN); 14 race + 13 gender models, as the paper
    out, plans = _dry_sweep(tmp_path, "experiment=callback_panel", "occupation.n_postings=30")
    assert "dry run: 27 cases planned, nothing called" in out.stdout
    assert plans["screener"].nunique() == 14 and len(plans) == 27
    assert sorted(set(plans["case_name"].str.split("-").str[1])) == ["gender", "race"]
    race = plans[plans["case_name"].str.contains("-race-")]
    gender = plans[plans["case_name"].str.contains("-gender-")]
    assert (race["documents"] == 30 * 4 * 2).all() and (gender["documents"] == 30 * 4 * 4).all()
    assert (plans["calls"] > 0).all() and (plans["cost_usd"] > 0).all()
    assert not (tmp_path / "mlruns").exists()


def test_the_popfair_sweeper_plans_what_hydras_basic_sweeper_plans(tmp_path):
    """The default sweeper composes each case once and plans from memoised documents and prompt
    tables; Hydra's basic sweeper (hydra/sweeper=basic) gives the same cases and the same figures."""
    (tmp_path / "popfair").mkdir()
    (tmp_path / "basic").mkdir()
    grid = (
        "experiment=callback_panel",
        "occupation.n_postings=12",
        "panel_cell=race-gpt4o_mini,gender-glm51,race-glm51",
    )
    from popfair.case import compose

    (tmp_path / "launcher").mkdir()
    compose._PLANNING_PARTS.clear()  # each of the two runs compared below builds (and logs) its parts itself
    printed, ours = _dry_sweep(tmp_path / "popfair", *grid)
    out, basic = _dry_sweep(tmp_path / "basic", *grid, "hydra/sweeper=basic")
    assert "dry run: 3 cases planned" in out.stdout
    columns = [c for c in basic.columns if c != "seconds"]
    pd.testing.assert_frame_equal(
        ours[columns].sort_values("case_name").reset_index(drop=True),
        basic[columns].sort_values("case_name").reset_index(drop=True),
    )
    # planned in this process (no .hydra/ per case) or through Hydra's launcher: the same printed plan
    compose._PLANNING_PARTS.clear()
    launched, _ = _dry_sweep(tmp_path / "launcher", *grid, "hydra.sweeper.plan_in_process=false")
    assert not list(sweep_dir(tmp_path / "popfair").glob("*/.hydra"))
    assert len(list(sweep_dir(tmp_path / "launcher").glob("*/.hydra"))) == 3

    def masked(stdout: str, cwd: Path) -> str:
        stdout = re.sub(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\]", "[time]", stdout.replace(str(cwd), "<cwd>"))
        stdout = re.sub(r"multirun/[\d-]+/[\d-]+", "multirun/<sweep>", stdout)
        return re.sub(r"checked in [\d.]+ s", "checked in <t> s", stdout)

    assert "plan entry_level_postings-race-json-gpt4o_mini-paired_gap" in printed.stdout
    assert masked(printed.stdout, tmp_path / "popfair") == masked(launched.stdout, tmp_path / "launcher")


def test_api_screener_is_built_keyless_for_dry_runs_and_refuses_to_screen(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = compose_config(
        ["screener=gpt4o_mini", "screener.route=openai", f"cache_dir={tmp_path}/cache"], tmp_path=tmp_path
    )
    with pytest.raises(MissingSecretError, match="OPENAI_API_KEY"):
        PopulationCase.from_config(cfg)
    screener = PopulationCase.from_config(cfg, dry_run=True).screener
    with pytest.raises(MissingSecretError, match="OPENAI_API_KEY"):
        screener.screen({}, [], "score")


def test_popresume_grid_sweeps_120_cases():
    """The full grid's composition, counted without building it (the dry run below plans one
    occupation's 24 cases; the other four occupations differ only in their config file)."""
    params = yaml.safe_load((Path(CONF_DIR) / "experiment" / "popresume_grid.yaml").read_text())["hydra"]["sweeper"][
        "params"
    ]
    varying, count = sweep_grid(["experiment=popresume_grid"], params)
    assert count == 120 and len(varying["format_model"]) == 12
    assert sorted(varying["occupation"]) == sorted(
        ["nurse", "teacher", "software_developer", "accountant", "construction_laborer"]
    )
    assert sorted(varying["protected_attr"]) == ["gender", "race"]
    for occupation in varying["occupation"]:
        assert compose_config([f"occupation={occupation}"]).occupation.key == occupation


def test_popresume_grid_dry_run_plans_its_cases_without_keys_or_photos(tmp_path):
    out, plans = _dry_sweep(tmp_path, "experiment=popresume_grid", "occupation=nurse", "population.n=40")
    assert "dry run: 24 cases planned, nothing called" in out.stdout
    parts = plans["case_name"].str.split("-", expand=True)
    assert set(parts[0]) == {"nurse"} and set(parts[1]) == {"gender", "race"}
    assert plans.groupby(parts[2])["screener"].nunique().to_dict() == {"text": 4, "image": 4, "image_photo": 4}
    # the counterfactual design: every applicant's factual resume, and five worlds for a tenth of them
    assert (plans["estimator_documents"] > 0).all() and (plans["documents"] == 40 + plans["estimator_documents"]).all()
    assert (plans["calls"] > 40).all() and (plans["calls"] < plans["documents"]).all()  # own worlds are factual
    # image pages cost more input tokens than the same resumes as text (the VLM shared by both)
    flash = plans[plans["screener"] == "gemini25_flash_lite"]
    text_tokens = flash.loc[flash["renderer"] == "text", "input_tokens"].mean()
    assert flash.loc[flash["renderer"] == "image", "input_tokens"].mean() > text_tokens
    assert plans["image_estimated_from_text"].sum() == 16  # the 8 image cells x 2 attributes
    # the second protected attribute re-uses the first one's factual documents: it pays only its worlds
    race = plans[parts[1] == "race"]
    assert (race["new_calls"] <= race["calls"] - 40).all()


def test_offline_callback_panel_sweep_reports_the_panel(tmp_path):
    """The offline twin of the panel, narrowed to two local screeners on 40 postings: child runs
    under one parent, the panel tables per axis with Bonferroni over 2 models, and the charts."""
    out = popfair_in_process(
        "-m",
        "experiment=callback_panel_offline",
        "screener=tfidf,simulated_paired",
        "occupation.n_postings=40",
        "estimator.n_bootstrap=200",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = runs_of(tmp_path)
    parent_id = runs.loc[runs["tags.popfair.sweep"] == "parent", "run_id"].item()
    children = runs[runs["tags.mlflow.parentRunId"] == parent_id]
    assert len(children) == 4 and (children["status"] == "FINISHED").all()
    assert set(children["tags.sweep.protected_attr"]) == {"race", "gender"}
    report = sweep_dir(tmp_path) / "report"
    for axis in ("race", "gender"):
        table = pd.read_csv(report / f"panel_{axis}.csv")
        assert sorted(table["model"]) == ["simulated_paired", "tfidf"]
        assert (table["bonferroni_alpha"] == 0.025).all()
        run = children[(children["tags.protected_attr"] == axis) & (children["tags.screener"] == "tfidf")]
        assert table.loc[table["model"] == "tfidf", "gap_pp"].item() == pytest.approx(
            run["metrics.gap.estimate"].item()
        )
    assert (report / "plots" / "panel_gaps.png").is_file() and (report / "plots" / "race_vs_gender.png").is_file()


@pytest.fixture
def headshots(tmp_path) -> Path:
    """A photo folder for renderer image_photo: one plain-colour square per gender x race x age band."""
    from PIL import Image

    folder = tmp_path / "headshots"
    folder.mkdir()
    rows = []
    for i, (gender, race, band) in enumerate(
        (g, r, b)
        for g in ("female", "male")
        for r in ("black", "white", "hispanic", "api", "other")
        for b in ("18-29", "30-44")
    ):
        name = f"{gender}_{race}_{band}.png"
        Image.new("RGB", (60, 72), (40 + 10 * i, 90, 160)).save(folder / name)
        rows.append({"gender": gender, "race": race, "age_band": band, "file": name})
    pd.DataFrame(rows).to_csv(folder / "manifest.csv", index=False)
    return folder


def test_offline_popresume_grid_image_cells_report_photo_vs_no_photo(tmp_path, headshots):
    """The offline PopResume twin narrowed to one occupation, gender and the two image cells: PSE
    effects per case, forest plots, the pattern tally, and the photo vs no-photo NDE pair."""
    out = popfair_in_process(
        "-m",
        "experiment=popresume_grid_offline",
        "occupation=nurse",
        "protected_attr=gender",
        "format_model=image-simulated,image_photo-simulated",
        f"photos_dir={headshots}",
        "population.n=300",
        # 300 nurses hold too few men for the NDE to be identified (tests/test_identification.py): the
        # report would rightly have no pair; this test checks the report's plumbing on the numbers
        "estimator.gate=false",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    runs = runs_of(tmp_path)
    children = runs.dropna(subset=["tags.mlflow.parentRunId"])
    assert sorted(children["tags.choice.renderer"]) == ["image", "image_photo"]
    assert (children["status"] == "FINISHED").all()
    report = sweep_dir(tmp_path) / "report"
    cases = pd.read_csv(report / "popresume_cases.csv")
    assert {"TE", "NDE", "NIE", "BIE", "RIE"} <= set(cases.columns) and len(cases) == 2
    assert len(list((report / "plots" / "forest").glob("*.png"))) == 2
    pairs = pd.read_csv(report / "photo_vs_no_photo_nde.csv")
    assert len(pairs) == 1 and pairs.loc[0, "model"] == "simulated"
    nde = children.set_index("tags.choice.renderer")["metrics.NDE.estimate"]
    assert pairs.loc[0, "estimate_image"] == pytest.approx(nde["image"])
    assert pairs.loc[0, "estimate_image_photo"] == pytest.approx(nde["image_photo"])
    assert (report / "plots" / "photo_vs_no_photo.png").is_file()


def test_the_sweep_parent_description_leaves_figures_out_with_their_captions(tmp_path):
    """The parent run's description (MLflow shows Markdown without images): tables and their text,
    no figure, no caption of a figure, no heading left empty."""
    from popfair.report.document import Block
    from popfair.report.sweep import comparison_markdown

    blocks = [
        Block("h2", "All cases at a glance"),
        Block("text", "One cell per case x effect: the heatmap below."),
        Block("figure", tmp_path / "overview.png"),
        Block("h2", "Effects per case"),
        Block("text", "Each case's five effects."),
        Block("table", pd.DataFrame({"case": ["nurse"], "TE": [0.1]})),
        Block("h3", "Forest plots per case"),
        Block("figure", tmp_path / "forest.png"),
    ]
    text = comparison_markdown("Sweep", blocks, tmp_path)
    assert "Effects per case" in text and "Each case's five effects." in text and "nurse" in text
    assert "heatmap" not in text and "All cases at a glance" not in text and "Forest plots" not in text
    assert ".png" not in text
