"""Repeated cross-fitting (n_splits): the variance is Chernozhukov et al.'s mean aggregation (each
split's variance plus its squared deviation from the mean, averaged), the bootstrap carries the same
mixture, and one split reproduces the single-split inference exactly."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from popfair.core.errors import ConfigError
from popfair.estimate.inference import mean_inference
from popfair.estimate.pse.dml.estimator import PseDml, PseOverlapWarning, estimate_pse
from popfair.estimate.pse.settings import BINARY_SPLITS
from popfair.estimate.pse.simulate import SimulatedSFM

SMALL_GRID = {"n_estimators": [10], "max_depth": [2], "reg_lambda": [1.0]}


def test_one_split_is_the_single_split_inference():
    scores = np.random.default_rng(0).normal(size=(500, 3))
    flat, _ = mean_inference(scores, list("abc"), alpha=0.05, n_bootstrap=300, rng=np.random.default_rng(1))
    stacked, _ = mean_inference(scores[None], list("abc"), alpha=0.05, n_bootstrap=300, rng=np.random.default_rng(1))
    assert flat.equals(stacked)


def test_split_spread_is_added_to_the_se_and_carried_by_the_bootstrap():
    rng = np.random.default_rng(2)
    common = rng.normal(size=(4000, 1))
    shifts = np.array([-0.06, -0.02, 0.0, 0.03, 0.05])  # split-to-split spread of the estimates
    scale = np.array([1.0, 0.9, 1.1, 1.0, 1.2])  # and of each split's own variance
    scores = common[None] * scale[:, None, None] + shifts[:, None, None]
    table, _ = mean_inference(scores, ["m"], alpha=0.05, n_bootstrap=4000, rng=np.random.default_rng(3))
    thetas = common.mean() * scale + shifts
    ses = common.std(ddof=1) * scale / np.sqrt(len(common))
    expected = np.sqrt(np.mean(ses**2 + (thetas - thetas.mean()) ** 2))  # Chernozhukov et al. (2018) 3.4
    assert table.loc["m", "estimate"] == pytest.approx(thetas.mean())
    assert table.loc["m", "se"] == pytest.approx(expected)
    width = table.loc["m", "ci_high"] - table.loc["m", "ci_low"]
    assert width == pytest.approx(2 * 1.96 * expected, rel=0.08)  # the percentile CI has that spread


@pytest.mark.parametrize("outcome,splits", [("callback", 3), ("score", 1)])
def test_estimates_average_the_splits(outcome, splits):
    sim = SimulatedSFM(outcome=outcome)
    data = sim.sample(400, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        result = estimate_pse(
            data,
            **sim.role_kwargs,
            folds=2,
            n_bootstrap=100,
            grid=SMALL_GRID,
            n_splits=splits,
            gate=False,  # 400 rows: the gate reports the mixing means as not identified; this tests averaging
        )
    assert result.n_splits == splits
    table = result.table
    assert ((table["ci_low"] <= table["estimate"]) & (table["estimate"] <= table["ci_high"])).all()
    effects = table["estimate"]
    assert effects["TE"] == pytest.approx(effects["NDE"] + effects["NIE"])
    assert effects["TE"] == pytest.approx(result.scores["E[Y_x1]"].mean() - result.scores["E[Y_x0]"].mean())


def test_bad_n_splits_names_the_key():
    with pytest.raises(ConfigError, match=r"^n_splits: must be one of \['auto'\] or an integer in \[1, 50\], got 0"):
        PseDml(n_splits=0)


@pytest.mark.parametrize("outcome,expected", [("callback", BINARY_SPLITS), ("score", 1)])
def test_auto_splits_average_five_fold_assignments_for_callbacks_and_keep_one_for_scores(outcome, expected):
    sim = SimulatedSFM(outcome=outcome)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        result = estimate_pse(sim.sample(400, seed=5), **sim.role_kwargs, folds=2, n_bootstrap=100, grid=SMALL_GRID)
    assert result.n_splits == expected
