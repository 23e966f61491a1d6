"""The simulated structural screener: effects recovered by regression, exact expected values,
deterministic noise, validation errors that name the key or column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from omegaconf import OmegaConf
from scipy import integrate, special, stats

from popfair.case.compose import build
from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, DataError
from popfair.core.types import Document, Job
from popfair.screen.simulated import SimulatedScreener
from tests.conftest import compose_config

JOBS = {"nurse": Job(job_id="nurse", title="Registered nurse", description="Care for patients.")}


def profile_table(n: int, seed: int = 0) -> pd.DataFrame:
    """Synthetic profiles with the agreed PopResume columns (grouped ones included)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "applicant_id": [f"a{i:06d}" for i in range(n)],
            "job_id": "nurse",
            "gender": rng.choice(["female", "male"], n),
            "race": rng.choice(["black", "white", "hispanic", "api", "other"], n),
            "edu_group": rng.choice(["low", "medium", "high"], n),
            "exp_year": rng.integers(0, 20, n),
            "surname_race_typicality": rng.choice(["asian", "black", "white", "neutral"], n),
            "name_gender_typicality": rng.choice(["male", "female", "neutral"], n),
        }
    )


def documents(table: pd.DataFrame) -> list[Document]:
    return [
        Document(
            applicant_id=row["applicant_id"],
            job_id=row["job_id"],
            kind="text",
            text=f"Resume of {row['applicant_id']}",
            profile=row,
        )
        for row in table.to_dict("records")
    ]


COEFS = {
    "gender": {"male": 3.0},
    "race": {"white": 2.0, "hispanic": -1.0},
    "surname_race_typicality": {"black": -4.0},
    "edu_group": {"medium": 5.0, "high": 10.0},
    "exp_year": 0.5,
}


def test_regression_recovers_every_configured_coefficient():
    table = profile_table(20_000)
    screener = SimulatedScreener(intercept=50.0, coefficients=COEFS, noise_sd=5.0, seed=1)
    table["y"] = [r.value for r in screener.screen(JOBS, documents(table), "score")]
    fit = smf.ols(
        "y ~ C(gender, Treatment('female')) + C(race, Treatment('black'))"
        " + C(surname_race_typicality, Treatment('neutral')) + C(edu_group, Treatment('low'))"
        " + exp_year + C(name_gender_typicality)",
        data=table,
    ).fit()
    truth = {
        "Intercept": 50.0,
        "C(gender, Treatment('female'))[T.male]": 3.0,
        "C(race, Treatment('black'))[T.white]": 2.0,
        "C(race, Treatment('black'))[T.hispanic]": -1.0,
        "C(race, Treatment('black'))[T.api]": 0.0,
        "C(surname_race_typicality, Treatment('neutral'))[T.black]": -4.0,
        "C(surname_race_typicality, Treatment('neutral'))[T.white]": 0.0,
        "C(edu_group, Treatment('low'))[T.medium]": 5.0,
        "C(edu_group, Treatment('low'))[T.high]": 10.0,
        "exp_year": 0.5,
        "C(name_gender_typicality)[T.male]": 0.0,
    }
    for term, value in truth.items():
        assert abs(fit.params[term] - value) < 4 * fit.bse[term], term
    assert np.sqrt(fit.scale) == pytest.approx(5.0, rel=0.03)  # residual sd = noise_sd


def test_expected_score_is_the_exact_mean_of_the_clipped_score():
    screener = SimulatedScreener(
        intercept=92.0, coefficients={"edu_group": {"high": 10.0, "low": -95.0}}, noise_sd=8.0, seed=3
    )
    table = profile_table(30_000, seed=2)
    expected = screener.expected(table)
    for level, index in {"high": 102.0, "medium": 92.0, "low": -3.0}.items():
        numeric, _ = integrate.quad(
            lambda e, index=index: np.clip(index + e, 0, 100) * stats.norm.pdf(e, 0, 8.0), -80, 80
        )
        assert expected[(table["edu_group"] == level).to_numpy()] == pytest.approx(numeric, abs=1e-6)
    y = np.array([r.value for r in screener.screen(JOBS, documents(table), "score")])
    assert y.min() == 0.0 and y.max() == 100.0  # clipping is in play
    for level in ("high", "medium", "low"):
        group = (table["edu_group"] == level).to_numpy()
        se = y[group].std(ddof=1) / np.sqrt(group.sum())
        assert abs(y[group].mean() - expected[group].mean()) < 4 * se, level


def test_noise_free_expected_score_is_the_clipped_index():
    screener = SimulatedScreener(intercept=90.0, coefficients={"exp_year": 1.0}, noise_sd=0.0)
    table = profile_table(200)
    np.testing.assert_allclose(screener.expected(table), np.clip(90.0 + table["exp_year"], 0, 100))
    y = [r.value for r in screener.screen(JOBS, documents(table), "score")]
    np.testing.assert_allclose(y, screener.expected(table))


def test_callbacks_follow_the_logistic_link():
    table = profile_table(40_000, seed=5)
    screener = SimulatedScreener(
        intercept=50.0, coefficients=COEFS, callback_threshold=58.0, callback_scale=4.0, seed=2
    )
    table["callback"] = [r.value for r in screener.screen(JOBS, documents(table), "callback")]
    assert set(table["callback"].unique()) == {0.0, 1.0}
    p = screener.expected(table, "callback")
    np.testing.assert_allclose(p, special.expit((screener.linear_index(table) - 58.0) / 4.0))
    for gender in ("female", "male"):
        group = (table["gender"] == gender).to_numpy()
        se = np.sqrt(p[group].mean() * (1 - p[group].mean()) / group.sum())
        assert abs(table["callback"][group].mean() - p[group].mean()) < 4 * se
    fit = smf.logit(
        "callback ~ C(gender, Treatment('female')) + C(edu_group, Treatment('low')) + exp_year"
        " + C(race, Treatment('black')) + C(surname_race_typicality, Treatment('neutral'))",
        data=table,
    ).fit(disp=0)
    for term, slope in {
        "C(gender, Treatment('female'))[T.male]": 3.0,
        "exp_year": 0.5,
        "C(edu_group, Treatment('low'))[T.high]": 10.0,
    }.items():
        assert abs(fit.params[term] - slope / 4.0) < 4 * fit.bse[term], term


def test_noise_is_a_deterministic_function_of_job_text_and_seed():
    table = profile_table(3_000)
    docs = documents(table)
    screener = SimulatedScreener(coefficients=COEFS, seed=7)
    first = [r.value for r in screener.screen(JOBS, docs, "score")]
    shuffled = np.random.default_rng(0).permutation(len(docs))
    again = [r.value for r in screener.screen(JOBS, [docs[i] for i in shuffled], "score")]
    np.testing.assert_array_equal(np.array(first)[shuffled], again)  # per document, not per position
    other_seed = [r.value for r in SimulatedScreener(coefficients=COEFS, seed=8).screen(JOBS, docs, "score")]
    assert np.mean(np.array(first) == np.array(other_seed)) < 0.01
    renamed = [
        Document(applicant_id=f"x{i}", job_id=d.job_id, kind="text", text=d.text, profile=d.profile)
        for i, d in enumerate(docs[:50])
    ]
    assert [r.value for r in screener.screen(JOBS, renamed, "score")] == first[:50]
    u = screener.uniforms(pd.Series([d.text for d in docs]), "score")
    assert stats.kstest(u, "uniform").pvalue > 1e-3 and 0 < u.min() and u.max() < 1


def test_null_coefficient_switches_that_effect_off():
    table = profile_table(100)
    with_race = SimulatedScreener(coefficients={"race": {"white": 5.0}, "exp_year": 1.0})
    without = SimulatedScreener(coefficients={"race": None, "exp_year": 1.0})
    assert without.columns == ["exp_year"]
    white = (table["race"] == "white").to_numpy()
    np.testing.assert_allclose(with_race.linear_index(table) - without.linear_index(table), 5.0 * white)


def test_plan_makes_no_calls():
    table = profile_table(10)
    assert SimulatedScreener().plan(JOBS, documents(table), "score").calls == 0


@pytest.mark.parametrize(
    "kwargs,key",
    [
        ({"noise_sd": -1.0}, "screener.noise_sd"),
        ({"callback_scale": 0.0}, "screener.callback_scale"),
        ({"intercept": float("nan")}, "screener.intercept"),
        ({"seed": "abc"}, "screener.seed"),
        ({"coefficients": {"gender": {"male": "big"}}}, "screener.coefficients.gender.male"),
        ({"coefficients": {"gender": {"man": 1.0}}}, "screener.coefficients.gender"),
        ({"coefficients": {"race": {"White": 1.0}}}, "screener.coefficients.race"),
        ({"coefficients": {"exp_year": [1, 2]}}, "screener.coefficients.exp_year"),
        ({"coefficients": {"edu_group": {}}}, "screener.coefficients.edu_group"),
        ({"coefficients": ["gender"]}, "screener.coefficients"),
    ],
)
def test_bad_config_fails_at_construction_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as info:
        SimulatedScreener(**kwargs)
    assert str(info.value).startswith(key.removeprefix("screener.") + ":")
    node = OmegaConf.create({"_target_": "popfair.screen.simulated.SimulatedScreener", **kwargs})
    with pytest.raises(ConfigError) as info:  # the builder names the config path
        build(node, "screener")
    assert str(info.value).startswith(key + ":")


def test_unknown_gender_level_error_lists_the_allowed_levels():
    with pytest.raises(ConfigError, match=r"\['female', 'male'\]"):
        SimulatedScreener(coefficients={"gender": {"men": 1.0}})


def test_missing_profile_column_names_the_column_and_the_available_ones():
    table = profile_table(20).drop(columns=["edu_group"])
    screener = SimulatedScreener(coefficients={"edu_group": {"high": 1.0}, "exp_year": 1.0})
    with pytest.raises(DataError) as info:
        screener.screen(JOBS, documents(table), "score")
    message = str(info.value)
    assert "'edu_group'" in message and "'exp_year'" in message and "screener.coefficients" in message


def test_non_numeric_values_under_a_slope_are_a_data_error():
    table = profile_table(20).assign(exp_year="ten")
    with pytest.raises(DataError, match="'exp_year'.*'ten'"):
        SimulatedScreener(coefficients={"exp_year": 1.0}).screen(JOBS, documents(table), "score")


def test_documents_without_profiles_are_refused():
    docs = [Document(applicant_id="a1", job_id="nurse", kind="text", text="resume")]
    with pytest.raises(DataError, match="Document.profile"):
        SimulatedScreener().screen(JOBS, docs, "score")


def test_default_config_has_direct_proxy_and_qualification_effects():
    screener = build(compose_config(["screener=simulated"]).screener, "screener")
    assert set(screener.categorical) >= {
        "gender",
        "race",
        "surname_race_typicality",
        "name_gender_typicality",
        "edu_group",
    }
    assert "exp_year" in screener.numeric
    table = profile_table(10)
    assert np.all(np.isfinite(screener.expected(table)))


def test_case_with_simulated_screener_estimates_the_true_gap(tmp_path):
    """End to end on the bundled population: the outcome gap matches the gap implied by the
    screener's own expected scores (its truth), within 4 standard errors."""
    cfg = compose_config(
        [
            "population.n=3000",
            "estimator=outcome_gap",
            "estimator.n_bootstrap=200",
            "screener=simulated",
            "~screener.coefficients",
            "+screener.coefficients={gender: {male: 4.0}, exp_year: 0.5}",
            "screener.noise_sd=6.0",
            "tracking=none",
        ],
        tmp_path=tmp_path,
    )
    experiment = PopulationCase.from_config(cfg)
    result = experiment.run()
    scored = result.scored
    assert scored["error"].isna().all() and scored["y"].between(0, 100).all()
    truth_by_row = experiment.screener.expected(scored)
    male = (scored["gender"] == "male").to_numpy()
    truth = truth_by_row[male].mean() - truth_by_row[~male].mean()
    row = result.effects.table.loc["gap"]
    assert abs(row["estimate"] - truth) < 4 * row["se"]
    assert truth == pytest.approx(4.0 + 0.5 * (scored["exp_year"][male].mean() - scored["exp_year"][~male].mean()))


def test_default_config_on_the_population_gives_known_path_effects(tmp_path):
    """The default screener runs on the real PopResume population, and its expected scores over the
    population's counterfactual tables (issue 9's recipe) give the configured direct effect exactly."""
    cfg = compose_config(
        ["population.n=1500", "screener=simulated", "estimator.n_bootstrap=200", "tracking=none"], tmp_path=tmp_path
    )
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, seed=0)
    documents_ = [
        Document(
            applicant_id=r["applicant_id"], job_id=r["job_id"], kind="text", text=str(r["applicant_id"]), profile=r
        )
        for r in profiles.table.to_dict("records")
    ]
    results = experiment.screener.screen(profiles.jobs, documents_, "score")
    assert all(r.error is None and 0 <= r.value <= 100 for r in results)

    def world(x_y: str, x_b: str, x_r: str) -> float:
        table = experiment.population.counterfactual(profiles, x_y=x_y, x_b=x_b, x_r=x_r, seed=5)
        return float(experiment.screener.expected(table).mean())

    nde = world("male", "female", "female") - world("female", "female", "female")
    assert nde == pytest.approx(2.0, abs=0.05)  # gender: {male: 2.0}; clipping barely binds


def test_paired_preset_callback_gap_matches_its_truth(tmp_path):
    """simulated_paired on the paired race audit: the estimated callback gap (pp) agrees with the
    gap implied by the screener's callback probabilities."""
    cfg = compose_config(
        [
            "experiment=paired_race",
            "screener=simulated_paired",
            "occupation.n_postings=600",
            "estimator.n_bootstrap=200",
            "tracking=none",
        ],
        tmp_path=tmp_path,
    )
    experiment = PopulationCase.from_config(cfg)
    result = experiment.run()
    scored = result.scored
    assert scored["error"].isna().all() and set(scored["y"].unique()) == {0.0, 1.0}
    p = experiment.screener.expected(scored, "callback")
    white = (scored["race"] == "white").to_numpy()
    truth = 100 * (p[white].mean() - p[~white].mean())
    row = result.effects.table.loc["gap"]
    assert abs(row["estimate"] - truth) < 4 * row["se"]
    assert truth > 0.5  # the preset's race coefficient favours White-coded names
