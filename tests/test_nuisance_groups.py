"""DML nuisances fit on their distinct rows (weighted by count, labelled with the mean target) are the
fits of the rows themselves: the same histogram cuts, the same search selection, predictions equal
up to the order of floating-point sums."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from popfair.core.types import Roles
from popfair.estimate import dml_settings, inference, nuisances
from popfair.estimate.dml_encoding import NumericRoles
from popfair.estimate.sfm_sim import SimulatedSFM


@pytest.fixture(scope="module")
def encoded() -> NumericRoles:
    sim = SimulatedSFM()
    kw = sim.role_kwargs
    roles = Roles(x=kw["x"], x0=kw["x0"], x1=kw["x1"], z=kw["z"], b=kw["b"], r=kw["r"])
    return NumericRoles.from_frame(sim.sample(4000, seed=5), roles, "y", cluster=None, max_categories=32)[0]


def test_groups_only_where_rows_repeat_and_cuts_are_every_value(encoded):
    codes = encoded.groups("mu1", 64)  # X and Z (race, age): a few hundred distinct rows
    assert codes is not None and codes.max() + 1 < len(codes) // 4
    features = encoded.features("mu1")
    for code in np.unique(codes)[:20]:  # a code stands for one feature vector
        assert (features[codes == code] == features[codes == code][0]).all()
    assert encoded.groups("mu1", 8) is None  # age has more than 8 values: cuts could differ, not grouped
    assert encoded.groups("mu3", 64) is None  # nearly every row distinct: nothing to gain


@pytest.mark.parametrize(("name", "kind"), [("mu1", "regressor"), ("p_z", "classifier")])
def test_a_grouped_fit_is_the_fit_of_the_rows(encoded, name, kind):
    settings = dml_settings.PseSettings()
    features, codes = encoded.features(name), encoded.groups(name, settings.max_bin)
    assert codes is not None
    rng = np.random.default_rng(0)
    target = encoded.a.astype(np.float32) if kind == "classifier" else features @ rng.normal(size=features.shape[1])
    target = target + (0 if kind == "classifier" else rng.normal(size=len(target)))
    train = np.flatnonzero(rng.random(len(target)) < 0.8)
    params = {"max_depth": 3, "reg_lambda": 1.0, "n_estimators": 50}
    rows, rows_matrix = nuisances.fit(features[train], target[train], kind, params, settings)
    grouped, grouped_matrix = nuisances.fit(features[train], target[train], kind, params, settings, None, codes[train])
    assert grouped_matrix.num_row() < rows_matrix.num_row() // 4
    for cut_rows, cut_grouped in zip(rows_matrix.get_quantile_cut(), grouped_matrix.get_quantile_cut()):
        np.testing.assert_array_equal(cut_rows, cut_grouped)
    np.testing.assert_allclose(
        nuisances.predict_rows(grouped, features, codes), rows.predict(features), rtol=1e-5, atol=1e-5
    )
    grid = dml_settings.TuningGrid(n_estimators=(5, 20, 50), max_depth=(1, 2, 4), reg_lambda=(0.5, 5.0))
    valid = np.setdiff1d(np.arange(len(target)), train)
    searched = dml_settings.PseSettings(grid=grid)
    best_rows, _ = nuisances.search(features, target, kind, train, valid, searched)
    best_grouped, _ = nuisances.search(features, target, kind, train, valid, searched, groups=codes)
    assert {k: v for k, v in best_rows.items() if k != "loss"} == {k: v for k, v in best_grouped.items() if k != "loss"}
    assert best_grouped["loss"] == pytest.approx(best_rows["loss"], rel=1e-5)


def test_bootstrap_counts_are_the_draws_counted():
    """Counting one replicate at a time gives the counts of the indices the generator draws."""
    unit_class = np.random.default_rng(1).permutation(500)
    counts = np.vstack(list(inference.bootstrap_counts(np.random.default_rng(7), unit_class, 500, 30)))
    draws = np.random.default_rng(7).integers(0, 500, size=(30, 500), dtype=np.int32)
    expected = np.stack([np.bincount(unit_class[row], minlength=500) for row in draws])
    np.testing.assert_array_equal(counts, expected)
    assert counts.dtype == float and (counts.sum(axis=1) == 500).all()


def test_xgboost_weights_stand_for_repeated_rows():
    """The premise: a row of weight k grows the trees k copies of it grow (squared error)."""
    rng = np.random.default_rng(2)
    distinct = rng.integers(0, 2, size=(40, 3)).astype(np.float32)
    repeats = rng.integers(1, 5, size=40)
    labels = rng.normal(size=40).astype(np.float32)
    params = {"objective": "reg:squarederror", "max_depth": 2, "tree_method": "hist", "nthread": 1}
    copies = xgb.train(params, xgb.DMatrix(np.repeat(distinct, repeats, 0), np.repeat(labels, repeats)), 10)
    weighted = xgb.train(params, xgb.DMatrix(distinct, labels, weight=repeats.astype(np.float32)), 10)
    np.testing.assert_allclose(weighted.inplace_predict(distinct), copies.inplace_predict(distinct), rtol=1e-5)
