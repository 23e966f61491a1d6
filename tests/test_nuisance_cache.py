"""Nuisances fitted once per data: the propensities (and their tuning) of one set of applicants are
reused by every outcome scored on them, and a cached estimate is the uncached one, to the bit."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from popfair.estimate.pse.dml.estimator import PseOverlapWarning, PseResult, clear_tuning_cache, estimate_pse
from popfair.estimate.pse.nuisances import cache as nuisance_cache
from popfair.estimate.pse.nuisances.cache import STORE_NAME
from popfair.estimate.pse.simulate import SimulatedSFM
from popfair.store.blobs import open_blob_store

GRID = {"n_estimators": [10, 30], "max_depth": [1, 2], "reg_lambda": [1.0]}
SIM = SimulatedSFM()


def estimate(data: pd.DataFrame, cache_dir: Path | None, **settings) -> PseResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        return estimate_pse(
            data, **SIM.role_kwargs, **{"grid": GRID, "n_bootstrap": 200, "cache_dir": cache_dir, **settings}
        )


def uncached(data: pd.DataFrame, **settings) -> PseResult:
    """Every nuisance tuned and fit: nothing in memory, an empty folder on disk."""
    clear_tuning_cache()
    return estimate(data, None, **settings)


def assert_identical(a: PseResult, b: PseResult) -> None:
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    pd.testing.assert_frame_equal(a.means, b.means, check_exact=True)
    pd.testing.assert_frame_equal(a.scores, b.scores, check_exact=True)
    pd.testing.assert_frame_equal(a.overlap, b.overlap, check_exact=True)
    pd.testing.assert_frame_equal(a.tuning.drop(columns="from_cache"), b.tuning.drop(columns="from_cache"))


def entries(cache_dir: Path) -> int:
    """Blobs in the nuisance store under cache_dir."""
    with open_blob_store(cache_dir, STORE_NAME) as store:
        return store.count()


@pytest.fixture(scope="module")
def applicants() -> pd.DataFrame:
    return SIM.sample(1200, seed=5)


def test_a_second_screener_on_the_same_applicants_reuses_the_propensities_bit_for_bit(applicants, tmp_path):
    other_screener = applicants.assign(y=np.clip(applicants["y"] * 0.7 + 12.0, 0, 100))
    first = estimate(applicants, tmp_path)
    assert not first.tuning["from_cache"].any()
    written = entries(tmp_path)
    # propensity tuning, outcome tuning, propensity and outcome-chain predictions of the one split
    assert written == 4
    second = estimate(other_screener, tmp_path)
    propensity = second.tuning.index.str.startswith("p_")
    assert second.tuning["from_cache"][propensity].all() and not second.tuning["from_cache"][~propensity].any()
    assert entries(tmp_path) - written == 2  # only the new outcome's tuning and chain: no propensity was refit
    assert_identical(second, uncached(other_screener))
    assert_identical(first, uncached(applicants))


def test_a_rerun_in_a_new_process_reads_everything_from_disk(applicants, tmp_path):
    first = estimate(applicants, tmp_path)
    clear_tuning_cache()  # what a new process has in memory
    again = estimate(applicants, tmp_path)
    assert again.tuning["from_cache"].all()
    assert_identical(first, again)


def test_binary_outcomes_share_the_first_fold_assignment_with_scores(applicants, tmp_path):
    """n_splits=auto cross-fits 5 fold assignments for a 0/1 callback and 1 for a score: the
    first one's propensities are the same nuisance and are reused."""
    estimate(applicants, tmp_path)
    callback = applicants.assign(y=(applicants["y"] > applicants["y"].median()).astype(float))
    before = entries(tmp_path)
    cached = estimate(callback, tmp_path)
    # outcome tuning, propensity predictions of splits 1-4, outcome-chain predictions of splits 0-4
    assert entries(tmp_path) - before == 1 + 4 + 5
    assert_identical(cached, uncached(callback))


@pytest.mark.parametrize(
    "change",
    ["column", "seed", "grid", "folds", "library"],
)
def test_a_changed_input_is_not_served_from_the_cache(applicants, tmp_path, monkeypatch, change):
    estimate(applicants, tmp_path)
    data, settings = applicants, {}
    if change == "column":  # one confounder value of one applicant
        data = applicants.copy()
        data.loc[data.index[0], "age"] = data["age"].iloc[0] + 1
    elif change == "seed":
        settings = {"seed": 1}
    elif change == "grid":
        settings = {"grid": {**GRID, "max_depth": [1, 3]}}
    elif change == "folds":
        settings = {"folds": 4}
    else:
        versions = {**nuisance_cache.library_versions(), "xgboost": "0.0-other"}
        monkeypatch.setattr(nuisance_cache, "library_versions", lambda: versions)
    before = entries(tmp_path)
    result = estimate(data, tmp_path, **settings)
    new = entries(tmp_path) - before
    if change == "folds":  # the tuning split does not depend on the folds; the cross-fit does
        assert result.tuning["from_cache"].all() and new == 2
    else:
        assert not result.tuning["from_cache"].any() and new == 4
    monkeypatch.undo()
    assert_identical(result, uncached(data, **settings))


def test_a_server_cache_url_keeps_the_nuisances_for_every_machine(applicants, tmp_path, pg_url):
    """cache_url (a sweep over machines) wins over cache_dir: the nuisances go to the server."""
    first = estimate(applicants, tmp_path, cache_url=pg_url)
    assert entries(tmp_path) == 0
    with open_blob_store(pg_url, STORE_NAME) as server:
        assert server.count() == 4
    clear_tuning_cache()  # another machine: nothing in memory, no folder of its own
    again = estimate(applicants, None, cache_url=pg_url)
    assert again.tuning["from_cache"].all()
    assert_identical(first, again)


def test_the_config_passes_the_server_cache_to_the_estimator():
    from popfair.case.compose import build
    from tests.conftest import compose_config

    url = "postgresql+psycopg://popfair@db.internal:5432/popfair"
    estimator = build(compose_config([f"cache_url={url}", "estimator=pse_dml"]).estimator, "estimator")
    assert estimator.settings.cache_url == url
    # the default (the counterfactual design) passes it to DML-UCA, which it runs beside its own estimate
    default = build(compose_config([f"cache_url={url}"]).estimator, "estimator")
    assert default.observational.settings.cache_url == url
