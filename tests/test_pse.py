"""DML-UCA path-specific effects against the known truth of simulated structural causal models."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xgboost as xgb
from matplotlib.figure import Figure
from scipy import stats

from popfair.case.compose import build
from popfair.core.errors import ConfigError, EstimationError
from popfair.core.types import Roles
from popfair.estimate.pse import settings as dml_settings
from popfair.estimate.pse.dml import estimator as pse
from popfair.estimate.pse.dml import scores as dml
from popfair.estimate.pse.dml.estimator import PseDml, PseOverlapWarning, estimate_pse
from popfair.estimate.pse.nuisances import models as nuisances
from popfair.estimate.pse.sfm import EFFECTS, pattern_labels
from popfair.estimate.pse.simulate import SimulatedSFM
from popfair.track.figures import draw
from tests.conftest import compose_config

# A reduced grid keeps the suite fast; the paper's full grid runs in benchmarks/. Truth checks use
# 99% CIs (five effects per check must all cover); 95% coverage is measured by
# benchmarks/coverage_pse.py over 100 replications.
SMALL_GRID = {"n_estimators": [20, 50, 100], "max_depth": [1, 2], "reg_lambda": [1.0]}
ALPHA = 0.01
FAST = {"grid": SMALL_GRID, "n_bootstrap": 300, "alpha": ALPHA}


def run(sim: SimulatedSFM, data: pd.DataFrame, swapped: bool = False, **kwargs) -> pse.PseResult:
    x0, x1 = (sim.x1, sim.x0) if swapped else (sim.x0, sim.x1)
    options = {**FAST, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        return estimate_pse(
            data, x="gender", x0=x0, x1=x1, z=sim.roles["z"], b=sim.roles["b"], r=sim.roles["r"], y="y", **options
        )


def assert_covers(table: pd.DataFrame, truth: pd.Series) -> None:
    for effect in EFFECTS:
        lo, hi = table.loc[effect, ["ci_low", "ci_high"]]
        assert lo <= truth[effect] <= hi, f"{effect}: truth {truth[effect]:.3f} outside [{lo:.3f}, {hi:.3f}]"


@pytest.fixture(scope="module")
def score_case():
    sim = SimulatedSFM()
    data = sim.sample(8000, seed=11)
    return sim, data, run(sim, data, seed=3)


def test_cis_cover_true_effects_for_scores(score_case):
    sim, _, result = score_case
    truth = sim.truth()
    assert_covers(result.table, truth)
    # effects are estimated, not just bracketed by wide intervals
    width = result.table["ci_high"] - result.table["ci_low"]
    assert (width < 2.5).all(), width
    assert result.table.loc["TE", "significant"] and result.table.loc["NDE", "significant"]


def test_decomposition_identities_hold_exactly(score_case):
    _, _, result = score_case
    est = result.table["estimate"]
    assert est["TE"] == pytest.approx(est["NDE"] + est["NIE"], abs=1e-10)
    assert est["NIE"] == pytest.approx(est["BIE"] + est["RIE"], abs=1e-10)
    means = result.means["estimate"]
    assert est["TE"] == pytest.approx(means["E[Y_x1]"] - means["E[Y_x0]"], abs=1e-10)


def test_influence_function_se_matches_statsmodels(score_case):
    _, _, result = score_case
    te_scores = result.scores["E[Y_x1]"] - result.scores["E[Y_x0]"]
    ols = sm.OLS(te_scores.to_numpy(), np.ones(len(te_scores))).fit()
    assert result.table.loc["TE", "se"] == pytest.approx(ols.bse[0], rel=1e-9)
    assert result.table.loc["TE", "estimate"] == pytest.approx(ols.params[0], rel=1e-12)
    # the bootstrap CI of the mean score agrees with the normal-theory interval
    lo, hi = result.table.loc["TE", ["ci_low", "ci_high"]]
    assert (hi - lo) == pytest.approx(2 * stats.norm.ppf(1 - ALPHA / 2) * ols.bse[0], rel=0.15)


def test_swapping_levels_flips_signs(score_case):
    sim, data, result = score_case
    swapped = run(sim, data, swapped=True, seed=3)
    truth = sim.truth(swapped=True)
    assert_covers(swapped.table, truth)
    for effect in EFFECTS:
        if result.table.loc[effect, "significant"]:
            assert np.sign(swapped.table.loc[effect, "estimate"]) == -np.sign(result.table.loc[effect, "estimate"])
    assert swapped.table.loc["TE", "estimate"] == pytest.approx(-result.table.loc["TE", "estimate"], abs=0.3)


def test_no_direct_effect_gives_nde_ci_covering_zero():
    sim = SimulatedSFM(direct=0.0)
    result = run(sim, sim.sample(8000, seed=21), seed=1)
    assert_covers(result.table, sim.truth())
    nde = result.table.loc["NDE"]
    assert nde["ci_low"] <= 0 <= nde["ci_high"]
    assert not any(label.startswith("Case 1") for label in result.labels)


def test_callbacks_0_1_cover_truth():
    sim = SimulatedSFM(outcome="callback", direct=4.0)
    data = sim.sample(8000, seed=7)
    assert set(data["y"].unique()) == {0.0, 1.0}
    result = run(sim, data, seed=2)
    assert_covers(result.table, sim.truth())
    assert result.means["estimate"].between(0, 1).all()


def test_case_labels_follow_section_5_2():
    def table(sig: dict[str, bool], est: dict[str, float]) -> pd.DataFrame:
        return pd.DataFrame({"estimate": est, "significant": sig}).loc[list(EFFECTS)]

    zero = dict.fromkeys(EFFECTS, 0.0)
    masked = table(
        {"TE": False, "NDE": True, "NIE": True, "BIE": True, "RIE": False},
        {**zero, "NDE": 2.0, "NIE": -2.0, "BIE": -2.0},
    )
    assert [label[:6] for label in pattern_labels(masked)] == ["Case 1", "Case 2"]
    qualif = table({"TE": True, "NDE": False, "NIE": True, "BIE": True, "RIE": False}, {**zero, "BIE": 1.0})
    assert [label[:6] for label in pattern_labels(qualif)] == ["Case 3"]
    proxies = table({"TE": True, "NDE": False, "NIE": True, "BIE": False, "RIE": True}, {**zero, "RIE": 1.0})
    assert [label[:6] for label in pattern_labels(proxies)] == ["Case 4"]
    mixed = table({"TE": True, "NDE": False, "NIE": True, "BIE": True, "RIE": True}, {**zero, "RIE": 1.0})
    assert [label[:6] for label in pattern_labels(mixed)] == ["Case 5"]
    same_sign = table(
        {"TE": False, "NDE": True, "NIE": True, "BIE": False, "RIE": False}, {**zero, "NDE": 1.0, "NIE": 1.0}
    )
    assert [label[:6] for label in pattern_labels(same_sign)] == ["Case 1"]
    assert pattern_labels(table(dict.fromkeys(EFFECTS, False), zero)) == []


def test_tuning_is_cached_in_memory_and_on_disk(tmp_path):
    sim = SimulatedSFM()
    data = sim.sample(1500, seed=8)
    pse.clear_tuning_cache()
    first = run(sim, data, cache_dir=str(tmp_path))
    assert not first.tuning["from_cache"].any()
    assert (tmp_path / "nuisances.sqlite").is_file()
    second = run(sim, data, cache_dir=str(tmp_path))
    assert second.tuning["from_cache"].all() and second.timings["tune"] < first.timings["tune"]
    pse.clear_tuning_cache()
    from_disk = run(sim, data, cache_dir=str(tmp_path))
    assert from_disk.tuning["from_cache"].all()
    pd.testing.assert_frame_equal(first.table, from_disk.table)
    in_memory = run(sim, data)  # no cache_dir: tuned anew, then kept in memory
    assert not in_memory.tuning["from_cache"].any()
    assert run(sim, data).tuning["from_cache"].all()
    other = run(sim, data.assign(y=data["y"] + 1.0), cache_dir=str(tmp_path))  # new Y: outcome chain tuned anew
    propensity = other.tuning.index.str.startswith("p_")
    assert other.tuning["from_cache"][propensity].all() and not other.tuning["from_cache"][~propensity].any()


def test_tree_count_search_matches_separately_trained_models():
    """One fit per (depth, lambda) scored at each n_estimators equals fitting each tree count."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(600, 3)).astype(np.float32)
    target = features[:, 0] - features[:, 1] ** 2 + rng.normal(size=600)
    grid = dml_settings.TuningGrid(n_estimators=(5, 20, 50), max_depth=(1, 3), reg_lambda=(1.0, 5.0))
    settings = dml_settings.PseSettings(n_bootstrap=100, grid=grid, early_stopping=False, prune_lambda_at=None)
    train, valid = np.arange(480), np.arange(480, 600)
    best, _ = nuisances.search(features, target, "regressor", train, valid, settings)
    losses = separate_fit_losses(features, target, train, valid, grid)
    chosen = min(losses, key=losses.get)
    assert (best["max_depth"], best["reg_lambda"], best["n_estimators"]) == chosen
    assert best["loss"] == pytest.approx(losses[chosen], rel=1e-5)


def separate_fit_losses(features, target, train, valid, grid) -> dict[tuple[int, float, int], float]:
    """Validation MSE of an XGBRegressor trained for each grid point on its own."""
    losses = {}
    for depth in grid.max_depth:
        for lam in grid.reg_lambda:
            for trees in grid.n_estimators:
                model = xgb.XGBRegressor(
                    n_estimators=trees,
                    max_depth=depth,
                    reg_lambda=lam,
                    tree_method="hist",
                    max_bin=64,
                    n_jobs=1,
                    random_state=0,
                )
                model.fit(features[train], target[train])
                losses[(depth, lam, trees)] = np.mean((model.predict(features[valid]) - target[valid]) ** 2)
    return losses


def test_early_stopping_stops_each_model_at_its_first_rise():
    """With early stopping (the default), a (depth, lambda) model is scored at the grid's tree counts
    up to the first whose validation loss is above the previous one's: the selection is the best of
    those counts of separately trained models, and the chosen model holds only the trees it grew."""
    rng = np.random.default_rng(1)
    features = rng.normal(size=(500, 4)).astype(np.float32)
    target = features[:, 0] + rng.normal(scale=2.0, size=500)  # noisy: deep models overfit early
    grid = dml_settings.TuningGrid(n_estimators=(5, 20, 50, 100), max_depth=(1, 5), reg_lambda=(0.5,))
    train, valid = np.arange(400), np.arange(400, 500)
    losses = separate_fit_losses(features, target, train, valid, grid)
    scored = {}
    for depth in grid.max_depth:
        curve = [losses[(depth, 0.5, trees)] for trees in grid.n_estimators]
        rise = next((i for i in range(1, len(curve)) if curve[i] > curve[i - 1]), len(curve) - 1)
        scored.update({(depth, 0.5, trees): curve[i] for i, trees in enumerate(grid.n_estimators[: rise + 1])})
    assert len(scored) < len(losses)  # some model did stop early, so the rule is exercised
    best, model = nuisances.search(features, target, "regressor", train, valid, dml_settings.PseSettings(grid=grid))
    chosen = min(scored, key=scored.get)
    assert (best["max_depth"], best["reg_lambda"], best["n_estimators"]) == chosen
    assert best["loss"] == pytest.approx(scored[chosen], rel=1e-5)
    grown = max(trees for depth, _, trees in scored if depth == chosen[0])
    assert model.booster.num_boosted_rounds() == grown


def test_lambda_rung_is_the_largest_grid_count_up_to_the_setting():
    grid = dml_settings.TuningGrid(n_estimators=(5, 10, 20, 50, 100))
    rung = {v: dml_settings.PseSettings(grid=grid, prune_lambda_at=v).lambda_rung() for v in (10, 7, 3, 1000, None)}
    assert rung == {10: 10, 7: 5, 3: 5, 1000: 100, None: 100}


@pytest.mark.parametrize("early_stopping", [True, False])
def test_lambda_pruning_grows_only_each_depths_best_lambda(early_stopping):
    """With `prune_lambda_at`, every (depth, lambda) model is scored up to the rung; per depth, the
    lambda with the lowest loss there (of the models early stopping has not ended) is scored on.
    The selection is the best of those grid points of separately trained models."""
    rng = np.random.default_rng(3)
    features = rng.normal(size=(500, 4)).astype(np.float32)
    target = features[:, 0] - features[:, 1] ** 2 + rng.normal(scale=1.5, size=500)
    grid = dml_settings.TuningGrid(n_estimators=(5, 10, 20, 50), max_depth=(1, 2, 4), reg_lambda=(0.5, 5.0, 50.0))
    train, valid = np.arange(400), np.arange(400, 500)
    losses = separate_fit_losses(features, target, train, valid, grid)

    def scored_counts(curve: list[float], last: int) -> int:
        """How many of the first `last` + 1 counts a model is scored at (early stopping: up to its first rise)."""
        if not early_stopping:
            return last + 1
        return next((i + 1 for i in range(1, last + 1) if curve[i] > curve[i - 1]), last + 1)

    rung = grid.n_estimators.index(10)
    scored, grown = {}, {}
    for depth in grid.max_depth:
        curves = {lam: [losses[(depth, lam, trees)] for trees in grid.n_estimators] for lam in grid.reg_lambda}
        counts = {lam: scored_counts(curve, rung) for lam, curve in curves.items()}
        on = [
            lam
            for lam in grid.reg_lambda
            if counts[lam] == rung + 1 and not (early_stopping and curves[lam][rung] > curves[lam][rung - 1])
        ]
        if on:
            keep = min(on, key=lambda lam: curves[lam][rung])
            counts[keep] = scored_counts(curves[keep], len(grid.n_estimators) - 1)
        for lam, count in counts.items():
            scored.update({(depth, lam, trees): curves[lam][i] for i, trees in enumerate(grid.n_estimators[:count])})
            grown[(depth, lam)] = grid.n_estimators[count - 1]
    assert len(scored) < len(losses)  # pruning did leave grid points unscored
    settings = dml_settings.PseSettings(grid=grid, early_stopping=early_stopping, prune_lambda_at=10)
    best, model = nuisances.search(features, target, "regressor", train, valid, settings)
    chosen = min(scored, key=scored.get)
    assert (best["max_depth"], best["reg_lambda"], best["n_estimators"]) == chosen
    assert best["loss"] == pytest.approx(scored[chosen], rel=1e-5)
    assert model.booster.num_boosted_rounds() == grown[chosen[:2]]
    threaded, _ = nuisances.search(features, target, "regressor", train, valid, settings, nuisances.Runner(2))
    assert threaded == best


def test_threaded_tuning_selects_the_serial_hyperparameters():
    """n_jobs spreads grid points, searches and folds over threads; the selection, the scores and
    the effects table are those of the serial search (paper's depths and lambdas, 3 tree counts)."""
    sim = SimulatedSFM()
    data = sim.sample(1500, seed=21)
    grid = {"n_estimators": [5, 20, 50], "max_depth": [1, 2, 3, 4, 5], "reg_lambda": [0.5, 1.0, 2.0, 5.0]}
    results = {}
    for n_jobs in (1, 3):
        dml.clear_tuning_cache()
        results[n_jobs] = run(sim, data, grid=grid, n_bootstrap=100, n_jobs=n_jobs)
    serial, threaded = results[1], results[3]
    assert not threaded.tuning["from_cache"].any()
    pd.testing.assert_frame_equal(serial.tuning, threaded.tuning)
    assert serial.tuning["max_depth"].nunique() > 1  # the grid is really searched
    pd.testing.assert_frame_equal(serial.scores, threaded.scores)
    pd.testing.assert_frame_equal(serial.table, threaded.table)


def test_cluster_resampling_uses_cluster_robust_se():
    sim = SimulatedSFM()
    data = sim.sample(3000, seed=4)
    data["office"] = np.arange(len(data)) % 60
    data["y"] = np.clip(data["y"] + 6.0 * np.random.default_rng(1).normal(size=60)[data["office"]], 0, 100)
    result = run(sim, data, cluster="office", seed=0)
    assert result.n_clusters == 60
    te = result.scores["E[Y_x1]"] - result.scores["E[Y_x0]"]
    ols = sm.OLS(te.to_numpy(), np.ones(len(te))).fit(cov_type="cluster", cov_kwds={"groups": data["office"]})
    assert result.table.loc["TE", "se"] == pytest.approx(ols.bse[0], rel=1e-8)
    plain = run(sim, data, seed=0)
    assert result.means.loc["E[Y_x0]", "se"] > 1.5 * plain.means.loc["E[Y_x0]", "se"]
    width = result.means.loc["E[Y_x0]", "ci_high"] - result.means.loc["E[Y_x0]", "ci_low"]
    assert width == pytest.approx(2 * stats.norm.ppf(1 - ALPHA / 2) * result.means.loc["E[Y_x0]", "se"], rel=0.25)


def test_string_columns_are_encoded_and_high_cardinality_pooled():
    sim = SimulatedSFM()
    data = sim.sample(1500, seed=9)
    data["surname"] = [f"name{i % 200}" for i in range(len(data))]
    result = estimate_pse(
        data,
        x="gender",
        x0="female",
        x1="male",
        z=["race", "age"],
        b=["edu_group", "exp_year"],
        r=["surname", "region"],
        y="y",
        max_categories=10,
        **FAST,
    )
    assert any("surname: 200 levels" in note for note in result.notes)
    assert np.isfinite(result.table[["estimate", "se", "ci_low", "ci_high"]].to_numpy()).all()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.drop(columns="region"), r"lacks columns \['region'\]"),
        (lambda d: d.assign(gender="female"), r"no rows with level 'male'"),
        (lambda d: d.assign(y=50.0), r"outcome 'y' is constant"),
        (lambda d: d.assign(y="high"), r"non-numeric"),
        (lambda d: d.assign(age=d["age"].where(d.index > 3)), r"missing values \{'age': 4\}"),
        (
            lambda d: pd.concat([d[d.gender == "female"], d[d.gender == "male"].head(3)]),
            r"folds \[.*\] of 5 have no rows with gender='male' \(only 3 such rows\)",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(change, message):
    sim = SimulatedSFM()
    data = change(sim.sample(400, seed=0))
    with pytest.raises(EstimationError, match=message):
        run(sim, data)


def test_a_column_in_two_roles_is_rejected():
    data = SimulatedSFM().sample(300, seed=0)
    with pytest.raises(EstimationError, match="both as z and as b"):
        estimate_pse(data, x="gender", x0="female", x1="male", z=["age"], b=["age"], r=["region"], y="y", **FAST)


def test_bad_settings_raise_errors_naming_the_key():
    def build_estimator(*overrides):  # the builder names the config path of every setting
        return build(compose_config(["tracking=none", *overrides]).estimator, "estimator")

    with pytest.raises(ConfigError, match="^estimator.folds: must be an integer >= 2"):
        build_estimator("estimator.folds=1")
    with pytest.raises(ConfigError, match="^estimator.grid.max_depth"):
        build_estimator("estimator.grid.max_depth=[0]")
    with pytest.raises(ConfigError, match="^estimator.observational.folds: must be an integer >= 2"):
        build_estimator("estimator=both", "estimator.observational.folds=1")
    with pytest.raises(ConfigError, match="^folds: must be an integer >= 2"):
        PseDml(folds=1)
    with pytest.raises(ConfigError, match="^grid.max_depth"):
        PseDml(grid={"max_depth": [0]})
    with pytest.raises(ConfigError, match="unknown keys \\['eta'\\]"):
        PseDml(grid={"eta": [0.1]})
    with pytest.raises(ConfigError, match="^clip"):
        PseDml(clip=0.5)
    with pytest.raises(EstimationError, match="n_bootstrap: must be an integer >= 100"):
        estimate_pse(pd.DataFrame(), x="g", x0="a", x1="b", z=[], b=["e"], r=["r"], y="y", n_bootstrap=10)


def test_poor_overlap_is_reported_and_warned():
    sim = SimulatedSFM(x_to_r=2.4)  # name typicality nearly determines gender
    data = sim.sample(3000, seed=2)
    with pytest.warns(PseOverlapWarning, match="poor overlap"):
        result = estimate_pse(
            data,
            **sim.role_kwargs,
            clip=0.05,
            **FAST,
        )
    props = result.overlap[result.overlap["kind"] == "propensity"]
    assert props.loc["p_rz", "share_clipped"] > 0.01
    # The gate: effects resting on the means the data cannot reach are reported as not identified,
    # with the reason, and no number or label; TE (only the two factual means) stays.
    table = result.table
    assert bool(table.loc["TE", "identified"]) and np.isfinite(table.loc["TE", "estimate"])
    hidden = table[~table["identified"]]
    assert set(hidden.index) >= {"NDE", "NIE"}
    assert hidden[["estimate", "se", "ci_low", "ci_high", "p_value"]].isna().all().all()
    assert not hidden["significant"].any()
    assert hidden["reason"].str.startswith("not identified at n=3000").all()
    assert "E[Y_x1,W_x0]" in hidden.loc["NDE", "reason"]
    assert not any(label.startswith("Case 1") for label in result.labels)
    assert not result.identification.loc["E[Y_x1,W_x0]", "identified"]
    # gate=False keeps the would-be numbers (for diagnosis), with the same verdict in `identification`
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        ungated = estimate_pse(data, **sim.role_kwargs, clip=0.05, gate=False, **FAST)
    assert np.isfinite(ungated.table["estimate"]).all() and ungated.table["identified"].all()
    assert not ungated.identification.loc["E[Y_x1,W_x0]", "identified"]
    sens = result.sensitivity
    assert set(sens["clip"]) >= {0.001, 0.01, 0.05} and set(sens["effect"]) == set(result.table.index)
    assert sens.loc[sens["case_clip"], "estimate"].notna().all()


def test_estimator_returns_effects_with_labels_plot_and_metrics():
    sim = SimulatedSFM()
    data = sim.sample(3000, seed=6)
    roles = Roles(x="gender", x0="female", x1="male", z=sim.roles["z"], b=sim.roles["b"], r=sim.roles["r"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        effects = PseDml(n_bootstrap=200, grid=SMALL_GRID).estimate(data, roles, "y")
    assert list(effects.table.index) == list(EFFECTS)
    assert list(effects.table.columns[:4]) == ["estimate", "se", "ci_low", "ci_high"]
    assert effects.labels and effects.pattern == effects.table["pattern"].iloc[0]
    assert not hasattr(effects, "case")  # the deprecated alias is gone (CHANGELOG)
    assert isinstance(draw(effects.artifacts["pse_forest.png"]), Figure)
    assert {"pse_means.csv", "pse_overlap.csv", "pse_tuning.csv"} <= set(effects.artifacts)
    assert effects.metrics["pse.n"] == 3000 and effects.metrics["time.pse_tune_s"] > 0
