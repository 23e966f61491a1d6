"""What an auditor sees of a case: the MLflow run page (its description holds the effects table, "not
identified" is a readable tag and never a number or a significance flag, the effects are a table
artifact, the population is the run's dataset input, the run's name says what differs from the
defaults), the auditor's report a population case writes by default (its run id, popfair's version,
no local path), units on every effect and the power line on the screener's own score scale."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from popfair.sweep.run_case import run_name_for
from popfair.track.headline import logged_metrics
from tests.conftest import popfair_in_process

GROUPS = {"population", "occupation", "renderer", "screener", "estimator", "protected_attr", "outcome_audit"}


@pytest.fixture(scope="module")
def default_case(tmp_path_factory):
    """`python -m popfair population.n=300`: the default case, every other setting its default."""
    tmp = tmp_path_factory.mktemp("default_case")
    done = popfair_in_process("population.n=300", f"cache_dir={tmp}/cache", cwd=tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    client = mlflow.MlflowClient(f"sqlite:///{tmp}/mlruns/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("popfair").experiment_id])
    artifacts = Path(client.download_artifacts(run.info.run_id, "", str(tmp / "downloaded")))
    return tmp, done.stdout, run, artifacts


def test_the_run_description_holds_the_effects_table(default_case):
    _, _, run, artifacts = default_case
    effects = pd.read_csv(artifacts / "effects.csv", index_col=0)
    description = run.data.tags["mlflow.note.content"]
    assert "| effect | estimate | 95% CI |" in description
    assert f"**Pattern:** {run.data.tags['pattern']}" in description
    identified = effects["identified"].astype(bool) if "identified" in effects else pd.Series(True, effects.index)
    for effect, row in effects.iterrows():
        if identified[effect]:
            assert f"| {effect} | {row['estimate']:+.4g} | [{row['ci_low']:.4g}, {row['ci_high']:.4g}] |" in description
        else:
            assert f"| {effect} | not identified |" in description
    assert f"**popfair:** {run.data.tags['popfair_version']}" in description
    assert run.data.tags["unit"] == ", ".join(dict.fromkeys(effects["unit"]))  # a sweep labels its axes with it


def test_not_identified_is_a_tag_never_a_number_or_a_significance_flag(default_case):
    tmp, stdout, run, artifacts = default_case
    effects = pd.read_csv(artifacts / "effects.csv", index_col=0)
    client = mlflow.MlflowClient(f"sqlite:///{tmp}/mlruns/mlflow.db")
    metrics, tags = logged_metrics(client, run), run.data.tags  # headline + tables
    hidden = [e for e in effects.index if "identified" in effects and not bool(effects.loc[e, "identified"])]
    for effect in effects.index:
        if effect in hidden:
            assert f"{effect}.significant" not in metrics and f"{effect}.estimate" not in metrics
            assert tags[f"{effect}.identified"].startswith("no: not identified at n=")
        else:
            assert f"{effect}.significant" in metrics and tags.get(f"{effect}.identified", "yes") == "yes"
    assert not [k for k in metrics if k.endswith(".identified")]  # one way to say it: the tags
    # the MLflow UI shows a tag's key whole at most 15 characters long, or key and value at most 30
    assert all(len(k) <= 15 or len(k) + len(tags[k]) <= 30 for k in tags if k.endswith(".identified"))
    if hidden:
        assert set(hidden) <= set(tags["not_identified"].split(", "))
    for effect in hidden:  # the console says it where the run says it
        assert any(line.startswith(effect) and "not identified" in line for line in stdout.splitlines())


def test_effects_carry_their_unit_and_go_in_as_a_table_and_the_population_as_the_dataset(default_case):
    _, stdout, run, artifacts = default_case
    effects = pd.read_csv(artifacts / "effects.csv", index_col=0)
    assert set(effects["unit"]) == {"points"}  # differences of scores, in the screener's points
    header = next(line for line in stdout.splitlines() if line.lstrip().startswith("estimate"))
    assert "unit" in header.split()
    table = json.loads((artifacts / "effects_table.json").read_text())
    assert [row[0] for row in table["data"]] == list(effects.index)
    assert "unit" in table["columns"]
    (dataset,) = run.inputs.dataset_inputs
    profile = json.loads(dataset.dataset.profile)
    assert profile["num_rows"] == 300 and dataset.dataset.digest == profile["sha256"][:16]
    assert {t.key: t.value for t in dataset.tags}["mlflow.data.context"] == "population"


def test_the_power_line_is_on_the_screeners_own_scale(default_case):
    tmp, _, run, artifacts = default_case
    scores = pd.read_parquet(artifacts / "scored.parquet")["y"]
    assumptions = run.data.tags["plan.assumptions"]
    # an offline screener's run states its line on its own variance: what its own SEs can detect
    assert assumptions.startswith("the variance of this run's combined estimate")
    client = mlflow.MlflowClient(f"sqlite:///{tmp}/mlruns/mlflow.db")
    logged = logged_metrics(client, run)
    assert logged["plan.mde"] < scores.max() - scores.min()  # not more than the range
    # the plan pools the redraw noise over the groups, the run estimates it per group: a few % apart
    assert logged["plan.mde.TE"] == pytest.approx(2.8016 * logged["TE.se"], rel=0.05)


def test_a_population_case_writes_the_auditors_report_by_default(default_case):
    tmp, _, run, artifacts = default_case
    page = (artifacts / "audit_report" / "report.html").read_text()
    assert run.info.run_id in page and f"popfair {run.data.tags['popfair_version']}" in page
    (dataset,) = run.inputs.dataset_inputs  # the report names the applicants by the digest the run carries
    assert f"sha256 of the applicant rows {dataset.dataset.digest}" in page
    for local in (str(tmp), os.path.expanduser("~"), str(Path.cwd())):
        assert local not in page
    order = ["Effect of gender", "Identification", "Discrimination pattern", "Summary of results (NYC Local Law 144)"]
    assert [page.index(h) for h in order] == sorted(page.index(h) for h in order)
    pdf = (artifacts / "audit_report" / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF")


def test_no_tag_or_param_holds_a_local_path(default_case):
    """What the run page shows names no folder of this machine: not the case's, not the checkout's
    (MLflow's own source tag is the entry point's name: `python -m popfair` from the command line)."""
    tmp, _, run, _ = default_case
    roots = (str(tmp), str(Path(__file__).resolve().parents[1]), os.path.expanduser("~"))
    logged = {**run.data.tags, **run.data.params}
    typed = {k for k in logged if k.endswith("cache_dir")}  # the fixture's own cache_dir override, as typed
    assert not {k: v for k, v in logged.items() if k not in typed and any(root in v for root in roots)}


def test_the_runs_source_is_the_command_not_the_checkouts_path(tmp_path, monkeypatch):
    """MLflow's source tag is sys.argv[0]: for `python -m popfair` the absolute path of
    popfair/__main__.py; the run says `python -m popfair`, a script its file name."""
    from popfair.track import background

    monkeypatch.setattr(background, "_NICED", True)  # creating a run renices its process: not the test's
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for entry, shown in (
        (Path(background.__file__).parents[1] / "__main__.py", "python -m popfair"),
        (tmp_path / "nightly.py", "nightly.py"),
    ):
        monkeypatch.setattr("sys.argv", [str(entry)])
        run_id, _ = background.start_run(shown, uri, ("popfair", str(tmp_path / "artifacts")), None, {})
        assert mlflow.MlflowClient(uri).get_run(run_id).data.tags["mlflow.source.name"] == shown


LEAD = [("screener", "tfidf"), ("occupation", "nurse"), ("protected_attr", "gender"), ("renderer", "text"),
        ("estimator", "pse_dml")]  # fmt: skip


def test_run_names_say_what_differs_from_the_defaults():
    small = run_name_for(LEAD, ["population.n=1000"], GROUPS)
    large = run_name_for(LEAD, ["population.n=2000"], GROUPS)
    assert small == "tfidf-nurse-gender-text-pse_dml population.n=1000" and small != large
    # group options are in the case name already; where the run is kept is not what it found
    same = ["occupation=nurse", "tracking.uri=sqlite:///x.db", "cache_dir=/tmp/c", "seed=3"]
    assert run_name_for("c", same, GROUPS) == "c seed=3"


def test_run_names_differ_in_every_result_changing_override_and_early_within_a_sweep():
    columns = ["table.columns.outcome=advanced", "table.columns.sex=gender"]
    plain = run_name_for("table-sample_decisions-impact_ratio", columns, GROUPS)
    clustered = run_name_for("table-sample_decisions-impact_ratio", [*columns, "table.columns.cluster=req"], GROUPS)
    assert plain != clustered and plain.startswith("table-sample_decisions-impact_ratio #")
    # a sweep over the design, over n, over the screener: the first 24 characters differ
    for key, values, make in (
        ("estimator", ["pse_dml", "counterfactual"], lambda v: [*LEAD[:4], ("estimator", v)]),
        ("population.n", ["1000", "2000"], lambda v: LEAD),
        ("screener", ["tfidf", "simulated"], lambda v: [("screener", v), *LEAD[1:]]),
    ):
        names = [run_name_for(make(v), [f"{key}={v}"], GROUPS, [key]) for v in values]
        assert names[0][:24] != names[1][:24], names


def test_two_cases_differing_only_in_population_n_get_different_run_names(tmp_path):
    for n in (1000, 2000):
        done = popfair_in_process(
            f"population.n={n}", "estimator=outcome_gap", "outcome_audit=null", "audit_report=false", cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr[-3000:]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("popfair").experiment_id])
    names = sorted(r.info.run_name for r in runs)
    assert names == [
        "tfidf-nurse-gender-text-outcome_gap population.n=1000",
        "tfidf-nurse-gender-text-outcome_gap population.n=2000",
    ]


def test_a_sweep_reads_back_what_the_run_says_is_not_identified():
    """The sweep report reads the run's tags: the reason of each effect, and the rows of the coarser
    split, which only the `not_identified` list names (their cells read "not identified", not blank)."""
    from popfair.report.run_page import not_identified_reasons

    tags = {
        "TE.identified": "yes",
        "NDE.identified": "no: not identified at n=400: E[Y_x1,W_x0]: effective sample size 3 (need 200)",
        "not_identified": "NDE, coarse.BIE_coarse",
        "unit": "points",
    }
    assert not_identified_reasons(tags) == {
        "NDE": "not identified at n=400: E[Y_x1,W_x0]: effective sample size 3 (need 200)",
        "coarse.BIE_coarse": "not identified",
    }
