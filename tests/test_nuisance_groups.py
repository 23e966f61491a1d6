"""DML nuisances fit on their distinct rows (weighted by count, labelled with the mean target) are the
fits of the rows themselves: the same histogram cuts, the same search selection, predictions equal
up to the order of floating-point sums."""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb

from popfair.core.types import Roles
from popfair.estimate import inference
from popfair.estimate.pse import settings as dml_settings
from popfair.estimate.pse.nuisances import models as nuisances
from popfair.estimate.pse.nuisances.encoding import NumericRoles
from popfair.estimate.pse.simulate import SimulatedSFM


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


def _synthetic(rng: np.random.Generator, n: int, distinct: list[int]) -> NumericRoles:
    """Roles whose Z columns have the given numbers of distinct values (B, R, X: 0/1)."""
    z = np.column_stack([rng.choice(rng.normal(size=k) * 10, size=n) for k in distinct]).astype(np.float32)
    a = rng.integers(0, 2, n)
    blocks = {
        "z": z,
        "b": rng.integers(0, 2, (n, 2)).astype(np.float32),
        "r": rng.integers(0, 2, (n, 2)).astype(np.float32),
    }
    return NumericRoles(blocks={**blocks, "x": a[:, None].astype(np.float32)}, a=a, y=rng.normal(size=n), cluster=None)


@pytest.mark.parametrize("seed", range(4))
def test_a_matrix_of_the_distinct_values_lends_the_rows_cuts(seed):
    """`cut_ref`: with every column at most max_bin values, all present in the rows, a matrix of one row
    per value has the cuts that sketching the (weighted) rows gives, and the same trees grow."""
    settings = dml_settings.PseSettings(max_bin=16)
    rng = np.random.default_rng(seed)
    encoded = _synthetic(rng, 3000, [1, 2, 5, 16])
    rows = np.flatnonzero(rng.random(3000) < 0.8)
    features, target = encoded.features("mu3")[rows], encoded.y[rows]
    weight = rng.integers(1, 6, len(rows)).astype(np.float32)
    ref = nuisances.cut_ref(encoded, "mu3", rows, settings)
    assert ref is not None and ref.num_row() == 16
    plain = xgb.QuantileDMatrix(features, target, weight=weight, max_bin=16, nthread=1)
    lent = xgb.QuantileDMatrix(features, target, weight=weight, max_bin=16, nthread=1, ref=ref)
    for cut_plain, cut_lent in zip(plain.get_quantile_cut(), lent.get_quantile_cut()):
        np.testing.assert_array_equal(cut_plain, cut_lent)
    params = nuisances.xgb_params("regressor", 4, 1.0, settings)
    assert nuisances._train(params, plain, 30).save_raw() == nuisances._train(params, lent, 30).save_raw()


def test_no_cut_matrix_where_the_rows_cuts_are_not_the_values():
    settings = dml_settings.PseSettings(max_bin=16)
    rng = np.random.default_rng(9)
    encoded = _synthetic(
        rng, 3000, [3, 17]
    )  # 17 values > max_bin: the cuts are a sketch's choice, not promised to be every value
    assert nuisances.cut_ref(encoded, "mu3", np.arange(3000), settings) is None
    assert nuisances.cut_ref(encoded, "mu1", np.arange(3000), dml_settings.PseSettings(max_bin=17)) is not None
    z = encoded.blocks["z"][:, 0]
    rows = np.flatnonzero(z != z.max())  # a value the rows lack: their cuts would lack it too
    assert nuisances.cut_ref(encoded, "mu1", rows, dml_settings.PseSettings(max_bin=17)) is None


def test_the_estimator_uses_lent_cuts_on_the_benchmark_roles(encoded):
    """Every training matrix of the simulated SFM can borrow its cuts (all columns have few values)."""
    train = np.flatnonzero(np.random.default_rng(3).random(len(encoded.y)) < 0.8)
    settings = dml_settings.PseSettings()
    for name in ("mu3", "mu2", "mu1", *nuisances.PROPENSITIES):
        ref = nuisances.cut_ref(encoded, name, train, settings)
        assert ref is not None
        plain = xgb.QuantileDMatrix(encoded.features(name)[train], encoded.y[train], max_bin=64, nthread=1)
        for cut_plain, cut_lent in zip(plain.get_quantile_cut(), ref.get_quantile_cut()):
            np.testing.assert_array_equal(cut_plain, cut_lent)
