"""Interventional path-specific effects and estimator=both: paired inference against scipy, coverage
of the simulated screener's true effects, agreement with DML-UCA, MLflow logging, dry-run cost."""

from __future__ import annotations

import dataclasses

import mlflow
import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats

from popfair.case.compose import build
from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, EstimationError
from popfair.core.types import FACTUAL, WORLD, Roles
from popfair.estimate.pse.design.interventional import Interventional, expected_effects, paired_effects
from popfair.estimate.pse.design.side_by_side import SideBySide, compare
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS
from popfair.population.worlds import draw_worlds, sample_applicants
from popfair.render.base import render_all
from popfair.track.headline import logged_metrics
from tests.conftest import compose_config

# A zero-variance contrast (NDE of a text that never shows X: both documents are identical, so
# are their noise draws) has a zero-width CI at the per-applicant value; its expectation differs
# from it only through the rare clipping at 0 or 100 (about 2e-4 points here).
CLIP_TOLERANCE = 1e-3
FAST_DML = [
    "estimator.observational.n_bootstrap=200",
    "estimator.observational.grid={n_estimators:[20,50,100],max_depth:[2,3],reg_lambda:[1.0]}",
]


@pytest.fixture(scope="module", params=["gender", "race"])
def simulated_both(request, tmp_path_factory):
    """One `estimator=both` case per protected attribute on 5,000 nurses with the simulated screener."""
    tmp = tmp_path_factory.mktemp(f"both_{request.param}")
    overrides = [
        "screener=simulated",
        "estimator=both",
        f"protected_attr={request.param}",
        "population.n=5000",
        "population.diagnostics=false",
        *FAST_DML,
    ]
    experiment = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp))
    result = experiment.run()
    # the truth over every x0/x1 applicant (the finite population the estimate samples), same seed
    everyone = dataclasses.replace(experiment.estimator.counterfactuals, n=None)
    worlds = draw_worlds(experiment.population, result.profiles, everyone)
    truth = expected_effects(worlds, experiment.screener.expected(worlds, result.profiles.outcome))
    return experiment, result, truth, tmp


def test_interventional_cis_cover_the_simulated_truth(simulated_both):
    _, result, truth, _ = simulated_both
    table = result.effects.table
    # One replication: a 95% interval misses by design 1 time in 20 per effect (seed 0 of the race
    # case with CA/TX transported lands RIE at z = 2.15; seed 1 at z = 0.42), so this bias check uses
    # 99.9% intervals from the reported SEs; the 95% coverage rate itself is what
    # benchmarks/coverage_interventional.py measures over many replications.
    z = stats.norm.ppf(1 - 0.001 / 2)
    for effect in EFFECTS:
        est, se = table.loc[effect, "intv_estimate"], table.loc[effect, "intv_se"]
        lo, hi = est - z * se, est + z * se
        assert lo - CLIP_TOLERANCE <= truth[effect] <= hi + CLIP_TOLERANCE, (effect, lo, hi, truth[effect])
        # the reported 95% interval is the t interval of the same SE (not a wider one)
        assert table.loc[effect, "intv_ci_high"] - table.loc[effect, "intv_ci_low"] <= 2 * 2.0 * se + 1e-9
    # informative, not just wide: the screener's direct +2 and the qualification/proxy paths show
    assert table.loc["NDE", "intv_estimate"] == pytest.approx(2.0, abs=0.01)
    assert (table["intv_ci_high"] - table["intv_ci_low"]).max() < 1.5
    assert table.loc["TE", "intv_significant"]


def test_dml_cis_agree_with_the_interventional_ones(simulated_both):
    experiment, result, truth, _ = simulated_both
    table = result.effects.table
    # Race: every effect agrees. Gender: first names nearly reveal gender (most held-out
    # P(x | B, R, Z) are clipped), a positivity violation that pulls the observational NDE into
    # RIE at this n; only TE, which needs no mediator model, is held to agreement there.
    # The gate reports those as not identified (no numbers, nothing to compare); race keeps all five.
    # (At 5,000 nurses a race mean may fall under min_ess; the full-size race case reports all five,
    # tests/test_identification.py.) Every effect DML reports agrees with the measured one.
    agreeing = list(table.index[table["identified"]]) if experiment.protected.name == "race" else ["TE"]
    assert "TE" in agreeing
    assert table.loc[agreeing, "ci_overlap"].all(), table
    assert table.loc[agreeing, "identified"].all()
    if experiment.protected.name == "gender":
        assert not table.loc[["NDE", "NIE", "RIE"], "identified"].any(), table
        assert table.loc[~table["identified"], "estimate"].isna().all()
    np.testing.assert_array_equal(table["difference"], table["estimate"] - table["intv_estimate"])
    assert table.loc["TE", "ci_low"] <= truth["TE"] <= table.loc["TE", "ci_high"]


def test_interventional_effects_decompose_exactly(simulated_both):
    _, result, _, _ = simulated_both
    est = result.effects.table["intv_estimate"]
    assert est["TE"] == pytest.approx(est["NDE"] + est["NIE"], abs=1e-9)
    assert est["NIE"] == pytest.approx(est["BIE"] + est["RIE"], abs=1e-9)


def test_own_world_documents_are_the_factual_ones(simulated_both):
    _, result, _, _ = simulated_both
    metrics = result.effects.metrics
    assert metrics["intv.consistency"] == 1.0
    assert metrics["intv.n"] == metrics["intv.n_sampled"] == 2000
    assert metrics["intv.documents"] == 5 * 2000
    assert metrics["intv.n_eligible"] <= 5000
    # the observational estimate used the factual applicants only, none of the 10,000 world rows
    assert metrics["pse.n"] + metrics["pse.n_excluded"] == len(result.scored) == 5000


def test_both_gives_its_observational_part_only_the_factual_rows():
    seen = {}

    class Recording:
        name, design = "pse_dml", None

        def estimate(self, data, roles, y="y"):
            seen["data"] = data
            raise EstimationError("recorded")

    both = SideBySide(Recording(), Interventional(n=10))
    data = pd.DataFrame({"gender": ["female", "male"] * 2, "y": 1.0, WORLD: [FACTUAL, FACTUAL, "E[Y_x0]", "E[Y_x1]"]})
    with pytest.raises(EstimationError, match="recorded"):
        both.estimate(data, Roles(x="gender", x0="female", x1="male", z=(), b=(), r=()))
    assert len(seen["data"]) == 2 and WORLD not in seen["data"].columns


def test_both_is_logged_to_mlflow_with_table_and_plot(simulated_both):
    experiment, result, _, tmp = simulated_both
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    run = mlflow.get_run(result.run_id)
    metrics = logged_metrics(mlflow.MlflowClient(), run)  # the headline metrics and the tables' cells
    table = result.effects.table
    assert metrics["RIE.intv_estimate"] == pytest.approx(table.loc["RIE", "intv_estimate"])
    assert metrics["TE.estimate"] == pytest.approx(table.loc["TE", "estimate"])
    assert metrics["compare.ci_overlap_count"] == table["ci_overlap"].sum()
    assert run.data.tags["estimator"] == "both"
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id)}
    assert {
        "side_by_side.csv",
        "side_by_side_forest.png",
        "interventional_means.csv",
        "interventional_outcomes.parquet",
        "pse_forest.png",
        "interventional_pattern.txt",
    } <= names
    local = mlflow.artifacts.download_artifacts(
        run_id=result.run_id, artifact_path="side_by_side.csv", dst_path=str(tmp / "dl")
    )
    back = pd.read_csv(local, index_col="effect")
    assert list(back.index) == list(EFFECTS)
    np.testing.assert_allclose(back["intv_estimate"], table["intv_estimate"])


def test_paired_t_interval_matches_scipy():
    rng = np.random.default_rng(3)
    outcomes = rng.normal(50, 10, size=(300, 5)) + rng.normal(0, 5, size=(300, 1))
    effects, means = paired_effects(outcomes, alpha=0.1)
    contrasts = outcomes @ CONTRASTS.T
    for j, effect in enumerate(EFFECTS):
        test = stats.ttest_1samp(contrasts[:, j], 0.0)
        ci = test.confidence_interval(0.9)
        assert effects.loc[effect, "ci_low"] == pytest.approx(ci.low)
        assert effects.loc[effect, "ci_high"] == pytest.approx(ci.high)
        assert effects.loc[effect, "p_value"] == pytest.approx(test.pvalue)
    np.testing.assert_allclose(means["estimate"], outcomes.mean(axis=0))
    # BIE/RIE are the symmetric averages of the definition
    psi = dict(zip(TARGETS, outcomes.mean(axis=0)))
    bie = 0.5 * ((psi["E[Y_x1]"] - psi["E[Y_x1,B_x0R_x1,R_x1]"]) + (psi["E[Y_x1,B_x1R_x0,R_x0]"] - psi["E[Y_x1,W_x0]"]))
    assert effects.loc["BIE", "estimate"] == pytest.approx(bie)


def test_bootstrap_interval_is_close_to_the_t_interval():
    rng = np.random.default_rng(4)
    outcomes = rng.normal(50, 10, size=(2000, 5))
    t_table, _ = paired_effects(outcomes, ci="t")
    boot, _ = paired_effects(outcomes, ci="bootstrap", n_bootstrap=2000, seed=1)
    width = t_table["ci_high"] - t_table["ci_low"]
    assert ((boot["ci_low"] - t_table["ci_low"]).abs() < 0.1 * width).all()
    assert ((boot["ci_high"] - t_table["ci_high"]).abs() < 0.1 * width).all()


@pytest.mark.parametrize(
    "outcomes, message",
    [
        (np.ones((10, 4)), "applicants x 5"),
        (np.array([[1.0, 2, 3, 4, np.nan], [1, 2, 3, 4, 5]]), "missing"),
        (np.ones((1, 5)), "at least 2"),
    ],
)
def test_paired_effects_rejects_bad_outcomes(outcomes, message):
    with pytest.raises(EstimationError, match=message):
        paired_effects(outcomes)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"n": 1}, "estimator.n"),
        ({"n": 2.5}, "estimator.n"),
        ({"ci": "wald"}, "estimator.ci"),
        ({"n_bootstrap": 10}, "estimator.n_bootstrap"),
        ({"alpha": 0.7}, "estimator.alpha"),
        ({"seed": "x"}, "estimator.seed"),
    ],
)
def test_bad_config_fails_at_construction_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=rf"^{key.removeprefix('estimator.')}: "):
        Interventional(**kwargs)
    node = OmegaConf.create({"_target_": "popfair.estimate.pse.design.interventional.Interventional", **kwargs})
    with pytest.raises(ConfigError, match=rf"^{key.replace('.', '[.]')}: "):  # the builder names the config path
        build(node, "estimator")


def test_nested_config_errors_name_the_nested_key():
    cfg = compose_config(["estimator=both", "estimator.interventional.ci=wald", "tracking=none"])
    with pytest.raises(ConfigError, match=r"estimator\.interventional\.ci"):
        PopulationCase.from_config(cfg)


def test_both_needs_the_pse_estimator_as_observational_part():
    from popfair.estimate.gap.outcome_gap import OutcomeGap

    with pytest.raises(ConfigError, match=r"^observational: must be the pse_dml estimator"):
        SideBySide(OutcomeGap(), Interventional())
    with pytest.raises(ConfigError, match=r"^interventional: must be"):
        SideBySide(
            PopulationCase.from_config(compose_config(["tracking=none", "estimator=pse_dml"])).estimator, OutcomeGap()
        )


def test_population_without_counterfactuals_fails_before_any_work():
    cfg = compose_config(["experiment=paired_race", "estimator=interventional", "tracking=none"])
    # the paired design draws no counterfactual worlds: its own check names the estimators it takes
    with pytest.raises(
        ConfigError, match=r"'interventional' does not apply to the paired design; choose one of paired_gap"
    ):
        PopulationCase.from_config(cfg)


def test_estimate_needs_the_world_rows_of_the_scored_table():
    estimator = Interventional(n=10)
    data = pd.DataFrame({"gender": ["female", "male"] * 3, "y": 1.0})
    roles = Roles(x="gender", x0="female", x1="male", z=(), b=(), r=())
    with pytest.raises(EstimationError, match="no counterfactual world rows"):
        estimator.estimate(data, roles)
    with pytest.raises(EstimationError, match="no counterfactual world rows"):
        estimator.estimate(data.assign(world=FACTUAL), roles)


def test_compare_flags_overlap_and_conclusions():
    observed = pd.DataFrame(
        {
            "estimate": [1.0, 0.1, 0.0, 2.0, -1.0],
            "se": 0.1,
            "ci_low": [0.5, -0.2, -0.1, 1.5, -1.5],
            "ci_high": [1.5, 0.4, 0.1, 2.5, -0.5],
        },
        index=list(EFFECTS),
    )
    measured = pd.DataFrame(
        {
            "estimate": [1.2, 1.0, 0.0, 0.0, -1.2],
            "se": 0.1,
            "ci_low": [1.1, 0.8, -0.2, -0.1, -1.4],
            "ci_high": [1.3, 1.2, 0.2, 0.1, -1.0],
        },
        index=list(EFFECTS),
    )
    table = compare(observed, measured)
    assert table["ci_overlap"].tolist() == [True, False, True, False, True]
    assert table["same_conclusion"].tolist() == [True, False, True, False, True]
    np.testing.assert_allclose(table["difference"], [-0.2, -0.9, 0.0, 2.0, 0.2])
    with pytest.raises(EstimationError, match="lacks effects"):
        compare(observed.drop(index="RIE"), measured)


def test_population_draws_the_declared_worlds_and_each_distinct_row_is_rendered_once():
    experiment = PopulationCase.from_config(
        compose_config(
            [
                "estimator=interventional",
                "estimator.n=300",
                "population.n=1000",
                "population.diagnostics=false",
                "tracking=none",
            ]
        )
    )
    design = experiment.estimator.counterfactuals
    profiles = experiment.sample()
    worlds = profiles.worlds
    assert len(worlds) == 5 * 300 and list(pd.unique(worlds[WORLD])) == list(TARGETS)
    # worlds sharing (x_b, x_r) share one draw: identical to asking the population for each
    sampled = sample_applicants(profiles, design)
    drawn = worlds[worlds[WORLD] == "E[Y_x1,W_x0]"].drop(columns=WORLD).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        drawn,
        experiment.population.counterfactual(sampled, "male", "female", "female", design.seed).reset_index(drop=True),
    )
    assert (worlds.loc[worlds[WORLD] == "E[Y_x0]", "gender"] == "female").all()
    assert (worlds.loc[worlds[WORLD] == "E[Y_x1]", "gender"] == "male").all()
    # one render pass over factual and world rows: rows identical to an earlier one are rendered once,
    # and the documents are those of rendering each row
    rows = profiles.rows().drop(columns=WORLD)
    documents = render_all(experiment.renderer, rows, profiles.jobs, progress=False)
    naive = [experiment.renderer.render(row, profiles.jobs[row["job_id"]]) for row in rows.to_dict("records")]
    assert [(d.applicant_id, d.text, dict(d.profile)) for d in documents] == [
        (d.applicant_id, d.text, dict(d.profile)) for d in naive
    ]
    factual = {(d.job_id, d.text) for d in documents[:1000]}
    counterfactual = {(d.job_id, d.text) for d in documents[1000:]}
    # about 5 new documents per applicant at most; own-world documents are factual ones, and the
    # text resume never shows X, so worlds differing only in x_y share a document
    assert 1.5 * 300 < len(counterfactual - factual) < 5 * 300


def test_llm_screener_scores_counterfactuals_through_its_cache(tmp_path, monkeypatch):
    """An API screener (real openai SDK, local stub): the dry-run plan of the case (factual and
    counterfactual documents) is exactly what the run then asks, every distinct prompt once; own-world
    documents are the factual ones, answered once."""
    from popfair.sweep.plan import plan_case
    from tests.llm_stub import StubServer
    from tests.screen_helpers import make_screener

    cfg = compose_config(
        [
            "estimator=interventional",
            "estimator.n=40",
            "population.n=150",
            "population.diagnostics=false",
            "outcome_audit=null",
            "tracking=none",
        ]
    )
    base = PopulationCase.from_config(cfg)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)
        experiment = dataclasses.replace(base, screener=screener)
        planned = plan_case(experiment)
        assert stub.state.requests == 0  # planning calls nothing
        assert planned.estimator_documents == 5 * 40

        result = experiment.run()
        answered = stub.state.answered
        assert sum(answered.values()) == len(answered)  # every distinct prompt paid once
        assert len(answered) == planned.calls
        assert result.screening["screen.rows"] == 150 + 5 * 40
        metrics = result.effects.metrics
        assert metrics["intv.consistency"] == 1.0  # each applicant's own world is its factual resume
        assert metrics["intv.distinct_documents"] < 5 * 40
    table = result.effects.table
    assert table.loc["NDE", "estimate"] == 0.0  # same resume, same cached answer: no direct effect


def test_dry_run_plans_the_counterfactual_documents(monkeypatch, tmp_path):
    """A keyless dry run of an API screener: the interventional case plans its ~5 counterfactual
    resumes per sampled applicant on top of the factual ones (duplicates not counted twice)."""
    from popfair.sweep.plan import plan_case

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    common = [
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"cache_dir={tmp_path}/cache",
        "population.n=300",
        "population.diagnostics=false",
        "tracking=none",
    ]
    plain = plan_case(PopulationCase.from_config(compose_config(common + ["estimator=outcome_gap"]), dry_run=True))
    audit = plan_case(
        PopulationCase.from_config(
            compose_config(common + ["estimator=interventional", "estimator.n=50"]), dry_run=True
        )
    )
    assert plain.estimator_documents == 0 and audit.estimator_documents == 5 * 50
    assert audit.documents == plain.documents + 5 * 50
    extra_calls = audit.calls - plain.calls
    assert 1.5 * 50 < extra_calls < 5 * 50  # own worlds are factual resumes; x_y-only worlds share text
    assert audit.cost_usd > plain.cost_usd
    assert "250 for the estimator" in audit.line()
