"""A whole case on a small sample: runs, logs to MLflow, reads back, and is reproducible."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest

from popfair.case.population import PopulationCase
from popfair.core.types import FACTUAL, WORLD
from popfair.estimate.pse.estimand import OBSERVED_PREFIX
from popfair.estimate.pse.sfm import EFFECTS
from tests.conftest import compose_config


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    # the paper's estimator: its identification gate is what this case checks
    cfg = compose_config(["population.n=400", "estimator=pse_dml", "estimator.n_bootstrap=200"], tmp_path=tmp)
    experiment = PopulationCase.from_config(cfg)
    return experiment, experiment.run(), tmp


def test_case_runs_end_to_end(small_run):
    _, result, _ = small_run
    assert len(result.scored) == 400
    assert result.scored["y"].between(0, 100).all()
    assert set(result.effects.table.columns) >= {"estimate", "se", "ci_low", "ci_high"}
    table = result.effects.table
    shown = table[table["identified"]]
    assert ((shown["ci_low"] <= shown["estimate"]) & (shown["estimate"] <= shown["ci_high"])).all()
    # 400 nurses hold about 40 men, too few for the means that need men with female-typical names
    # (docs/concepts/identification.md): those effects are reported as not identified, without numbers
    hidden = table[~table["identified"]]
    assert {"NDE", "NIE"} <= set(hidden.index)
    assert hidden["estimate"].isna().all() and hidden["reason"].str.startswith("not identified at n=").all()


def test_mlflow_round_trip(small_run):
    experiment, result, tmp = small_run
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    runs = mlflow.search_runs(experiment_names=["popfair"])
    assert result.run_id in set(runs["run_id"])
    run = mlflow.get_run(result.run_id)
    assert run.data.params["population.n"] == "400"
    assert run.data.params["occupation.key"] == "nurse"
    assert run.data.metrics["n_rows"] == 400
    table = result.effects.table
    for effect in table.index:
        if table.loc[effect, "identified"]:
            assert run.data.metrics[f"{effect}.estimate"] == pytest.approx(table.loc[effect, "estimate"])
        else:  # not identified: no number and no significance flag logged, the reason as a readable tag
            assert not [k for k in run.data.metrics if k.startswith(f"{effect}.")]
            assert f"{effect}.significant" not in run.data.metrics
            assert run.data.tags[f"{effect}.identified"].startswith("no: not identified at n=400")
            assert effect in run.data.tags["not_identified"].split(", ")
    assert run.data.tags["pattern"] == result.effects.pattern
    assert run.data.tags["popfair_version"]
    assert run.data.tags["case_name"] == experiment.case_name()
    assert "CA/TX transported" in run.data.tags["population.source"]  # which population the run used
    assert run.data.tags["population.table3"].startswith("resampled to n=400")
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id)}
    assert {"config.yaml", "scored.parquet", "effects.csv", "pse_forest.png"} <= names
    assert {
        "population_composition.csv",
        "population_age_vs_experience.png",
        "population_transport.csv",
        "population_experience_race_gap.csv",
        "population_experience_fit_nlsy97.csv",
    } <= names  # Profiles.artifacts
    local = mlflow.artifacts.download_artifacts(
        run_id=result.run_id, artifact_path="scored.parquet", dst_path=str(tmp / "dl")
    )
    back = pd.read_parquet(local)
    pd.testing.assert_series_equal(back["y"], result.scored["y"], check_names=False)


def test_same_seed_gives_identical_results(small_run, tmp_path):
    _, first, _ = small_run
    cfg = compose_config(["population.n=400", "estimator=pse_dml", "estimator.n_bootstrap=200"], tmp_path=tmp_path)
    second = PopulationCase.from_config(cfg).run()
    pd.testing.assert_frame_equal(first.scored, second.scored)
    pd.testing.assert_frame_equal(first.effects.table, second.effects.table)


def test_different_seed_gives_different_applicants(small_run, tmp_path):
    _, first, _ = small_run
    cfg = compose_config(
        ["population.n=400", "estimator=pse_dml", "estimator.n_bootstrap=200", "seed=1"], tmp_path=tmp_path
    )
    other = PopulationCase.from_config(cfg).sample()  # the population stage alone: applicants are drawn there
    assert len(other.table) == len(first.scored) == 400
    assert (
        not first.scored["first_name"].reset_index(drop=True).equals(other.table["first_name"].reset_index(drop=True))
    )


def test_tfidf_scores_a_document_the_same_in_any_later_batch():
    """The vocabulary is fit on the first call, so re-screening a subset (as counterfactual
    worlds do) gives each document exactly the score it had in the case's own batch."""
    from popfair.core.types import Document, Job
    from popfair.screen.tfidf import TfidfScreener

    job = Job(
        job_id="j",
        title="Nurse",
        description="registered nurse acute care patient assessment medication administration electronic health record",
    )
    texts = [
        "registered nurse with acute care experience",
        "medication administration and patient care",
        "software engineer python cloud",
        "electronic health record documentation nurse",
    ]
    docs = [Document(applicant_id=str(i), job_id="j", kind="text", text=t) for i, t in enumerate(texts)]
    screener = TfidfScreener()
    first = [r.value for r in screener.screen({"j": job}, docs, "score")]
    again = [r.value for r in screener.screen({"j": job}, docs[1:3], "score")]
    assert again == pytest.approx(first[1:3], abs=1e-12)
    assert first[2] < first[0]  # the off-topic resume matches worst


def test_tfidf_counts_words_unseen_when_it_was_fit():
    """A rare word first seen in a later batch still lowers the match (it is not dropped)."""
    from popfair.core.types import Document, Job
    from popfair.screen.tfidf import TfidfScreener

    job = Job(job_id="j", title="Nurse", description="registered nurse acute care patient assessment")
    base = [Document(applicant_id="a", job_id="j", kind="text", text="registered nurse acute care")]
    screener = TfidfScreener()
    plain = screener.screen({"j": job}, base, "score")[0].value
    padded = Document(applicant_id="b", job_id="j", kind="text", text="registered nurse acute care zyxwvut qwertyuiop")
    assert screener.screen({"j": job}, [padded], "score")[0].value < plain


def test_tfidf_scores_a_factual_applicant_alike_with_or_without_its_worlds():
    """The IDF is fit on the first call's applicants, each once (its first document): a call that
    also holds counterfactual worlds (the same applicant and job ids, after the factual documents)
    scores the factual documents exactly as a call of the factual documents alone."""
    from popfair.core.types import Document, Job
    from popfair.screen.tfidf import TfidfScreener, fitted_rows

    job = Job(job_id="j", title="Nurse", description="registered nurse acute care patient assessment")
    texts = ["registered nurse acute care", "patient assessment and care", "software engineer python cloud"]
    factual = [Document(applicant_id=str(i), job_id="j", kind="text", text=t) for i, t in enumerate(texts)]
    worlds = [Document(applicant_id="0", job_id="j", kind="text", text="acute care nurse zyxwvut zyxwvut")] * 3
    alone = [r.value for r in TfidfScreener().screen({"j": job}, factual, "score")]
    together = [r.value for r in TfidfScreener().screen({"j": job}, factual + worlds, "score")]
    assert together[: len(factual)] == alone  # the same floats, not approximately
    assert fitted_rows(1, factual + worlds).tolist() == [0, 1, 2, 3]  # the job and the three applicants


def test_tfidf_weighs_a_document_of_its_fit_leaving_it_out():
    """Against a dense implementation from the definition (two jobs): a document of the fit is scored
    with the smooth IDF of the fit without it (its vector and its job's), sublinear tf; that is the
    score a matcher fit without it gives; an unseen document is scored as sklearn's
    TfidfTransformer would."""
    from sklearn.feature_extraction.text import TfidfTransformer

    from popfair.core.types import Document, Job
    from popfair.screen.tfidf import TfidfScreener

    jobs = {
        "j": Job(job_id="j", title="Nurse", description="registered nurse acute care patient assessment care plan"),
        "k": Job(job_id="k", title="Developer", description="software engineer python cloud services patient data"),
    }
    texts = [
        "registered nurse acute care zyxwvut",
        "patient assessment and care planning",
        "registered nurse patient care qwertyuiop",
        "software engineer python cloud",
        "python data engineer patient records",
    ]
    job_of = ["j", "j", "j", "k", "k"]
    factual = [Document(applicant_id=str(i), job_id=job_of[i], kind="text", text=t) for i, t in enumerate(texts)]
    screener = TfidfScreener()
    got = np.array([r.value for r in screener.screen(jobs, factual, "score")])
    counts = screener._count([jobs["j"].description, jobs["k"].description, *texts]).toarray()
    present = counts > 0
    n, tf = len(counts), np.where(present, 1 + np.log(np.where(present, counts, 1)), 0.0)
    for i in range(len(texts)):
        df = present.sum(axis=0) - present[2 + i]  # the fit without the document itself
        idf = np.log(n / (1 + df)) + 1
        doc, jd = tf[2 + i] * idf, tf["jk".index(job_of[i])] * idf
        assert got[i] == pytest.approx(100 * doc @ jd / np.linalg.norm(doc) / np.linalg.norm(jd), rel=1e-12)
    # resume 0 scored by a matcher whose fit never saw it
    unseen = TfidfScreener()
    unseen.screen(jobs, factual[1:], "score")
    assert unseen.screen(jobs, factual[:1], "score")[0].value == pytest.approx(got[0], rel=1e-12)
    # an unseen document: sklearn's own weighting
    other = Document(applicant_id="0", job_id="j", kind="text", text="registered nurse acute care vutsrqp")
    fitted = TfidfTransformer(sublinear_tf=True).fit(counts)
    vectors = fitted.transform(screener._count([jobs["j"].description, other.text])).toarray()
    assert screener.screen(jobs, [other], "score")[0].value == pytest.approx(100 * vectors[0] @ vectors[1], rel=1e-12)


def test_tfidf_factual_scores_and_dml_do_not_depend_on_the_worlds_screened(tmp_path):
    """estimator=counterfactual screens the world sample in the same call as the factual applicants;
    the tfidf screener's factual scores, and DML-UCA beside the design, are those of estimator=pse_dml
    alone. Each case has its own cache directory: no score of one is read by the other."""
    fast = ["population.n=400", "tracking=none", "screener=tfidf", "estimator.n_bootstrap=200"]
    fast += ["estimator.grid={n_estimators:[20,50],max_depth:[2,3],reg_lambda:[1.0]}"]
    runs = {}
    for estimator in ("counterfactual", "pse_dml"):
        cfg = compose_config([*fast, f"estimator={estimator}"], tmp_path=tmp_path / estimator)
        runs[estimator] = PopulationCase.from_config(cfg).run()
    design, dml = runs["counterfactual"], runs["pse_dml"]
    assert design.scored_worlds is not None and (design.scored_worlds[WORLD] != FACTUAL).any()
    pd.testing.assert_frame_equal(design.scored, dml.scored)  # every factual score, exactly
    beside, alone = design.effects.table, dml.effects.table.reindex(list(EFFECTS))
    for column in ("estimate", "se", "ci_low", "ci_high"):
        np.testing.assert_array_equal(beside[OBSERVED_PREFIX + column].to_numpy(), alone[column].to_numpy(float))
    np.testing.assert_array_equal(beside[OBSERVED_PREFIX + "identified"], alone["identified"].astype(bool))
