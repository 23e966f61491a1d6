"""estimator=pse_paper, the PopResume authors' estimator: its search selects what sklearn's GridSearchCV
selects, self-normalisation does what it says, its tuning is cached, and on nurses with the simulated
screener its effects cover the interventional truth (race) and it says how far its weights are from 1
(gender)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn.model_selection import GridSearchCV

from popfair.case.population import PopulationCase
from popfair.core.constraints import ParameterError
from popfair.core.errors import EstimationError
from popfair.core.types import Roles, WorldRequest
from popfair.estimate.pse.design.interventional import expected_effects
from popfair.estimate.pse.nuisances.models import Runner
from popfair.estimate.pse.paper.estimator import PsePaper, estimate_pse_paper, target_weights
from popfair.estimate.pse.paper.estimator import counterfactual_means as paper_means
from popfair.estimate.pse.paper.tuning import Grouped, PaperData, cv_search, fit, fit_grouped, predict
from popfair.estimate.pse.settings import TuningGrid
from popfair.estimate.pse.sfm import EFFECTS, TARGETS
from popfair.estimate.pse.simulate import SimulatedSFM
from popfair.population.worlds import draw_worlds
from tests.conftest import compose_config

SMALL_GRID = {"n_estimators": [20, 50], "max_depth": [2, 3], "reg_lambda": [1.0]}
FAST = [
    "estimator=pse_paper",
    "estimator.n_bootstrap=12",
    "estimator.grid={n_estimators:[20,50],max_depth:[2,3],reg_lambda:[1.0]}",
]


def _toy(n: int = 400, seed: int = 0) -> tuple[pd.DataFrame, PaperData]:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "group": rng.choice(["a", "b", "c", "d", "e"], n),
            "age": rng.integers(18, 45, n),
            "region": rng.choice(["N", "S", "E", "W"], n),
            "years": rng.integers(0, 20, n),
        }
    )
    x = (rng.random(n) < 0.3 + 0.1 * (frame["region"] == "S")).astype(int)
    y = 40 + 5 * x + 2 * (frame["group"] == "b") + 0.5 * frame["years"] + rng.normal(0, 5, n)
    roles = Roles(x="x", x0="0", x1="1", z=("group", "age"), b=("years",), r=("region",))
    return frame.assign(x=x, y=y), PaperData.from_rows(frame, roles, x, y.to_numpy())


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_search_selects_what_gridsearchcv_selects(kind):
    frame, data = _toy()
    grid = {"n_estimators": [5, 10, 20], "max_depth": [1, 2, 3], "reg_lambda": [0.5, 5.0]}
    target = data.a.astype(float) if kind == "classifier" else data.y
    model = (xgb.XGBClassifier if kind == "classifier" else xgb.XGBRegressor)(
        tree_method="hist", enable_categorical=True, n_jobs=1, verbosity=0
    )
    features = frame[["group", "age", "region"]].astype({"group": "category", "region": "category"})
    scoring = "neg_brier_score" if kind == "classifier" else "neg_mean_squared_error"
    reference = GridSearchCV(model, grid, scoring=scoring, cv=5).fit(features, target)
    ours = cv_search(data, np.arange(len(target)), "rz", target, kind, TuningGrid.build(grid), 5, 0, Runner(1))
    assert {k: ours[k] for k in grid} == pytest.approx(reference.best_params_)
    assert ours["loss"] == pytest.approx(-reference.best_score_, rel=1e-5)


@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_a_fit_on_the_distinct_rows_is_the_fit_on_the_rows(kind):
    """A bootstrap resample (rows repeated) grown as one weighted row per distinct feature vector gives
    the row-by-row model's trees and, up to float32 rounding, its predictions; predicting each
    distinct row once gives every row exactly its own prediction."""
    _, data = _toy(2000, seed=5)
    rows = np.random.default_rng(1).integers(0, len(data.y), len(data.y))
    target = data.a[rows].astype(float) if kind == "classifier" else data.y[rows]
    hp = {"max_depth": 3, "n_estimators": 30, "reg_lambda": 1.0}
    grouped_matrix, _ = data.grouped(rows, "brz", target)
    assert grouped_matrix.num_row() < 0.8 * len(rows)  # the resample's repeats are one row each
    rowwise = fit(data, rows, "brz", target, kind, hp, 0)
    grouped = fit_grouped(data, rows, "brz", target, kind, hp, 0)

    def splits(model):  # each tree without its leaf values, gains and covers
        return [re.sub(r"(leaf|gain|cover)=[-0-9.e+]+", "", tree) for tree in model.get_dump(with_stats=True)]

    assert splits(grouped) == splits(rowwise)
    held_out = np.arange(0, len(data.y), 3)
    expected = predict(rowwise, data, held_out, "brz")
    np.testing.assert_allclose(predict(grouped, data, held_out, "brz"), expected, rtol=1e-5, atol=1e-6)
    assert np.array_equal(Grouped(data, held_out).predict(rowwise, "brz"), expected)  # bit for bit


def test_columns_with_more_values_than_bins_are_fit_row_by_row():
    """Over 256 values in a column, XGBoost's cuts are quantiles that weights could move: no grouping."""
    frame, data = _toy(2000, seed=6)
    roles = Roles(x="x", x0="0", x1="1", z=("group", "age"), b=("income",), r=("region",))
    income = np.random.default_rng(0).normal(50, 10, len(frame)).round(1)
    wide = PaperData.from_rows(frame.assign(income=income), roles, data.a, data.y)
    rows = np.concatenate([np.arange(200), np.arange(200)])
    matrix, where = wide.grouped(rows, "brz", wide.y[rows])
    assert wide.distinct("brz") is None and matrix.num_row() == len(rows) and matrix.get_weight().size == 0
    assert np.array_equal(where, np.arange(len(rows)))
    assert wide.distinct("rz") is not None  # the role sets without it still group


def test_self_normalised_means_ignore_a_common_scale_of_the_weights():
    rng = np.random.default_rng(3)
    n = 500
    a = (rng.random(n) < 0.4).astype(int)
    y = rng.normal(50, 10, n)
    p = [np.clip(rng.random(n), 0.05, 0.95) for _ in range(3)]
    nuisance = {
        name: rng.normal(50, 5, n)
        for name in ("y_zx0", "y_zx1", "mu2_ne", "mu1_ne", "mu3_v", "mu2_vde", "mu1_vde", "mu2_wde", "mu1_wde")
    }
    weights = target_weights(a, *p)
    halved = {t: (pi3 / 2, pi2 / 2, pi1 / 2, c) for t, (pi3, pi2, pi1, c) in weights.items()}
    np.testing.assert_allclose(paper_means(weights, nuisance, y, True), paper_means(halved, nuisance, y, True))
    # unnormalised, halving the weights halves every weighted correction term: the means move
    assert not np.allclose(paper_means(weights, nuisance, y, False), paper_means(halved, nuisance, y, False))
    # with every outcome model exact (y itself), each mean is the outcome mean, either way
    exact = dict.fromkeys(nuisance, y)
    np.testing.assert_allclose(paper_means(weights, exact, y, True), np.full(5, y.mean()))


def test_tuning_is_searched_once_and_read_back_from_the_cache(tmp_path):
    sim = SimulatedSFM()
    data = sim.sample(1500, seed=2)
    kwargs = dict(x0="female", x1="male", y="y", n_bootstrap=2, grid=SMALL_GRID, cache_dir=tmp_path, **sim.roles)
    first = estimate_pse_paper(data, **kwargs)
    second = estimate_pse_paper(data, **kwargs)
    assert not first.tuning["from_cache"].any() and second.tuning["from_cache"].all()
    pd.testing.assert_frame_equal(first.table, second.table)
    # another outcome on the same applicants: the propensities' search is reused, the outcome's is not
    third = estimate_pse_paper(data.assign(y=data["y"] + np.arange(len(data)) % 3), **kwargs)
    assert third.tuning.loc["px_z", "from_cache"] and not third.tuning.loc["y_zx0", "from_cache"]


def test_bad_settings_and_data_fail_with_the_key_named():
    with pytest.raises(ParameterError, match="n_bootstrap"):
        PsePaper(n_bootstrap=1)
    with pytest.raises(ParameterError, match="clip"):
        PsePaper(clip=0.5)
    sim = SimulatedSFM()
    data = sim.sample(60, seed=1)
    with pytest.raises(EstimationError, match="nested regressions need at least"):
        estimate_pse_paper(data, x0="female", x1="male", y="y", n_bootstrap=2, **sim.roles)


def nurse_case(attribute: str, tmp):
    """pse_paper on 5,000 nurses scored by the simulated screener, and the interventional truth over
    every applicant of the same draw (the screener's expected score in their five worlds)."""
    overrides = [
        "screener=simulated",
        f"protected_attr={attribute}",
        "population.n=5000",
        "population.diagnostics=false",
        "tracking=none",
        *FAST,
    ]
    experiment = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp))
    result = experiment.run()
    worlds = draw_worlds(experiment.population, result.profiles, WorldRequest(worlds=TARGETS, n=None, seed=0))
    truth = expected_effects(worlds, experiment.screener.expected(worlds, result.profiles.outcome))
    return result, truth


@pytest.fixture(scope="module")
def race_case(tmp_path_factory):
    return nurse_case("race", tmp_path_factory.mktemp("paper_race"))


@pytest.fixture(scope="module")
def gender_case(tmp_path_factory):
    return nurse_case("gender", tmp_path_factory.mktemp("paper_gender"))


def test_race_effects_cover_the_interventional_truth(race_case):
    result, truth = race_case
    table = result.effects.table
    for effect in EFFECTS:
        low, high = table.loc[effect, ["ci_low", "ci_high"]]
        assert low <= truth[effect] <= high, (effect, truth[effect], low, high)
    assert (table["popfair_rule"] == "identified").all()
    assert table["raw_weight_mean"].sub(1).abs().max() < 0.15  # raw weights near 1: self-normalising moves little


def test_gender_output_says_how_far_its_weights_are_from_one(gender_case):
    result, _ = gender_case
    table = result.effects.table
    assert np.isfinite(table["estimate"]).all()  # no gate: every number is printed
    assert abs(table.loc["NDE", "raw_weight_mean"] - 1) > 0.1  # the crossing men are too few
    assert table.loc["NDE", "popfair_rule"] == "not identified" and table.loc["TE", "popfair_rule"] == "identified"
    notes = "\n".join(result.effects.notes)
    assert "raw weights average" in notes and "self-normalisation multiplies them by" in notes
    assert "would report" in notes and "as not identified" in notes
    diagnostics = result.effects.artifacts["pse_paper_diagnostics.csv"]
    assert diagnostics.loc["E[Y_x1,W_x0]", "mass_pi3"] == pytest.approx(table.loc["NDE", "raw_weight_mean"])
