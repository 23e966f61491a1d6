"""The PopResume authors' nuisances for `estimator=pse_paper`: XGBoost with native categorical splits,
fit per group (outcome models on the rows of one X level) and tuned by a 5-fold grid search.

As their published estimator (`3_causal_estimation/causal_effect.py` of the authors' repository,
read for its facts): every nuisance's hyperparameters come from the paper's grid (C.5: n_estimators
{5,10,20,50,100} x max_depth {1..5} x reg_lambda {0.5,1,2,5}) by sklearn-style 5-fold CV (stratified
folds for the classifiers, plain folds for the regressors, no shuffling), Brier score for P(X|.) and
MSE for E[Y|.], searched once on all rows and reused by every bootstrap iteration. The nested
regressions are searched on pseudo-outcomes built on random halves and thirds of the rows, as they
are refit. What they searched but the five effects never read (the "biased" TE, the NIE* variant)
is not searched here.

Speed without changing a selection: one booster per (max_depth, reg_lambda) and CV fold grows 100
trees and its validation rows are scored at 5, 10, 20, 50 and 100 trees (`iteration_range`); a
booster's first k trees are the k-tree model (boosting is sequential and `hist` without subsampling
is deterministic), so 100 fits replace the 500 of an exhaustive search with the same losses. The
search's CV fits and every bootstrap fit are grown on one row per distinct feature vector, weighted by
its count and labelled with the mean target of its rows (`PaperData.grouped`, as pse_dml's
nuisances): squared error and log loss give each node the same gradient and hessian sums, so the
trees are those of the rows up to the order of floating-point sums (losses within 1e-6 relative, the
same selections on the nurse case), on a fraction of the rows (129 distinct Z of 18,963 nurses). The
chosen hyperparameters are kept beside popfair's own tuning (`popfair.store.blobs`, store
"nuisances"): the propensities' under a key without Y (every screener of the same applicants shares
them), the outcome models' under a key with Y."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.model_selection import KFold, StratifiedKFold

from popfair.core.errors import EstimationError
from popfair.core.types import Roles
from popfair.estimate.pse.nuisances.models import Runner, distinct_rows
from popfair.estimate.pse.settings import TuningGrid
from popfair.store.blobs import NUISANCES, content_key, installed_versions, open_blob_store

SCHEMA = "pse-paper-tuning-v1"  # bump when what a cached selection stands for changes
PROPENSITY_MODELS = {"px_z": "z", "px_wz": "rz", "px_wvz": "brz"}  # the authors' names -> roles fit on
# Outcome models, by the authors' names: the per-group first level, then the nested regressions
# (mu2_zx0 serves both the NDE's and the W-order's outer regression: the authors' search of the
# second is skipped because the first set that name, and popfair keeps that).
OUTCOME_MODELS = ("y_zx0", "y_zx1", "y_wvzx1", "mu2_zx0", "mu3_wzx0", "mu2_zx1", "mu3_wzx1")
MAX_BIN = 256  # XGBoost's default histogram bins (xgb_params leaves it): fewer values, and each is a cut
HALVES_SEED, THIRDS_SEED = 1001, 1043  # the searches' split seeds (the authors' numbers, a numpy Generator here)


@dataclass(frozen=True)
class PaperData:
    """The role columns as XGBoost input: numeric columns as they are, the others as categorical
    codes (XGBoost's native categorical splits, as the authors' `enable_categorical=True`)."""

    values: np.ndarray  # rows x columns, float32
    kinds: tuple[str, ...]  # "c" (categorical codes) or "q" (numeric), per column
    blocks: Mapping[str, tuple[int, ...]]  # role ("z", "r", "b") -> its column positions
    a: np.ndarray  # 1 where X = x1, else 0
    y: np.ndarray
    columns: tuple[str, ...]
    # per role set ("z", "rz", "brz"): its distinct rows and each data row's position among them (`distinct`)
    _distinct: dict[str, tuple[np.ndarray, np.ndarray] | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_rows(cls, rows: pd.DataFrame, roles: Roles, a: np.ndarray, y: np.ndarray) -> PaperData:
        columns = list(roles.z) + list(roles.r) + list(roles.b)
        parts, kinds, blocks, at = [], [], {}, 0
        for role, cols in (("z", roles.z), ("r", roles.r), ("b", roles.b)):
            for col in cols:
                series = rows[col]
                numeric = pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)
                # categories sorted as pandas orders them (astype("category")): the same codes
                parts.append(series.to_numpy(float) if numeric else pd.factorize(series.astype(str), sort=True)[0])
                kinds.append("q" if numeric else "c")
            blocks[role] = tuple(range(at, at + len(cols)))
            at += len(cols)
        values = np.column_stack(parts).astype(np.float32) if parts else np.zeros((len(rows), 0), np.float32)
        return cls(values, tuple(kinds), blocks, np.asarray(a, int), np.asarray(y, float), tuple(columns))

    def cols(self, roles: str) -> list[int]:
        """Column positions of the roles named (e.g. "brz"), Z first, then R, then B."""
        return [i for role in "zrb" if role in roles for i in self.blocks[role]]

    def matrix(self, rows: np.ndarray, roles: str, label: np.ndarray | None = None) -> xgb.DMatrix:
        cols = self.cols(roles)
        return xgb.DMatrix(
            self.values[np.ix_(rows, np.asarray(cols))],
            label=None if label is None else np.asarray(label, np.float32),
            feature_types=[self.kinds[i] for i in cols],
            enable_categorical=True,
            nthread=1,
        )

    def distinct(self, roles: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The distinct rows of the roles' columns (bit for bit) and each data row's position among
        them, computed once per role set; None where a column has more than MAX_BIN values (then
        `hist`'s cuts are quantiles, which weights could move) or the roles have no column."""
        if roles not in self._distinct:
            block = np.ascontiguousarray(self.values[:, self.cols(roles)])
            if block.shape[1] == 0 or any(len(np.unique(column)) > MAX_BIN for column in block.T):
                self._distinct[roles] = None
            else:
                as_bytes = block.view(np.dtype((np.void, block.dtype.itemsize * block.shape[1]))).ravel()
                _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
                self._distinct[roles] = (block[first], inverse.ravel())
        return self._distinct[roles]

    def grouped(self, rows: np.ndarray, roles: str, label: np.ndarray | None = None) -> tuple[xgb.DMatrix, np.ndarray]:
        """`rows` as one row per distinct feature vector, weighted by how many of `rows` have it and
        labelled with their mean label, and where each of `rows` sits among them. Boosting on it is
        boosting on `rows`: every gradient and hessian sum is the same sum (up to rounding), and
        `hist`'s cuts of columns with at most MAX_BIN values are those values either way; it has a
        fraction of the rows to histogram. Where a column has more values: `matrix`, row by row."""
        found = self.distinct(roles)
        if found is None:
            return self.matrix(rows, roles, label), np.arange(len(rows))
        distinct, ids = found
        first, where = distinct_rows(ids[rows])  # the groups present, in the order of their ids
        counts = np.bincount(where)
        cols = self.cols(roles)
        matrix = xgb.DMatrix(
            distinct[ids[rows][first]],
            label=None if label is None else (np.bincount(where, weights=label) / counts).astype(np.float32),
            weight=None if label is None else counts.astype(np.float32),
            feature_types=[self.kinds[i] for i in cols],
            enable_categorical=True,
            nthread=1,
        )
        return matrix, where


def xgb_params(kind: str, depth: int, lam: float, seed: int) -> dict[str, Any]:
    """XGBClassifier / XGBRegressor defaults (learning rate 0.3, 256 bins) with the grid's values."""
    return {
        "objective": "binary:logistic" if kind == "classifier" else "reg:squarederror",
        "tree_method": "hist",
        "max_depth": int(depth),
        "reg_lambda": float(lam),
        "nthread": 1,
        "seed": seed,
        "verbosity": 0,
    }


def boost(params: dict[str, Any], dtrain: xgb.DMatrix, rounds: int) -> xgb.Booster:
    """`xgb.train(params, dtrain, rounds)` without its callbacks and its closing `reset` (which only
    frees the booster's prediction cache): the same `Booster.update` calls, so the same trees, for
    about a sixth less time on the bootstrap's small fits (0.5 ms a fit and 8 us a tree)."""
    booster = xgb.Booster(params, [dtrain])
    for i in range(rounds):
        booster.update(dtrain, i)
    return booster


def fit(
    data: PaperData, rows: np.ndarray, roles: str, target: np.ndarray, kind: str, hp: Mapping[str, float], seed: int
) -> xgb.Booster:
    """One nuisance on `rows` with the chosen hyperparameters."""
    dtrain = data.matrix(rows, roles, target)
    return boost(xgb_params(kind, int(hp["max_depth"]), float(hp["reg_lambda"]), seed), dtrain, int(hp["n_estimators"]))


def predict(model: xgb.Booster, data: PaperData, rows: np.ndarray, roles: str) -> np.ndarray:
    return model.predict(data.matrix(rows, roles)).astype(float)


class Grouped:
    """Rows to predict on, as `PaperData.grouped` (one matrix per role set, built once): each
    distinct row is predicted once and its prediction given to every row that has it, the same
    numbers as predicting row by row."""

    def __init__(self, data: PaperData, rows: np.ndarray) -> None:
        self.data, self.rows = data, rows
        self.matrices: dict[str, tuple[xgb.DMatrix, np.ndarray]] = {}

    def predict(self, model: xgb.Booster, roles: str) -> np.ndarray:
        if roles not in self.matrices:
            self.matrices[roles] = self.data.grouped(self.rows, roles)
        matrix, where = self.matrices[roles]
        return model.predict(matrix).astype(float)[where]


def fit_grouped(
    data: PaperData, rows: np.ndarray, roles: str, target: np.ndarray, kind: str, hp: Mapping[str, float], seed: int
) -> xgb.Booster:
    """`fit` on the distinct rows of `rows`, weighted by their counts (`PaperData.grouped`): the same
    model up to floating-point rounding, grown on a fraction of the rows."""
    dtrain, _ = data.grouped(rows, roles, np.asarray(target, float))
    return boost(xgb_params(kind, int(hp["max_depth"]), float(hp["reg_lambda"]), seed), dtrain, int(hp["n_estimators"]))


def cv_search(
    data: PaperData,
    rows: np.ndarray,
    roles: str,
    target: np.ndarray,
    kind: str,
    grid: TuningGrid,
    folds: int,
    seed: int,
    runner: Runner,
) -> dict[str, float]:
    """The grid point with the lowest mean CV loss (Brier or MSE over `folds` unshuffled folds, each
    fold's mean weighted equally, as GridSearchCV); ties keep the first in GridSearchCV's order
    (max_depth, then n_estimators, then reg_lambda, each ascending)."""
    target = np.asarray(target, float)
    if len(rows) < folds:
        raise EstimationError(f"pse_paper: a tuning search has {len(rows)} rows, fewer than its {folds} CV folds")
    splitter = StratifiedKFold(folds) if kind == "classifier" else KFold(folds)
    splits = list(splitter.split(np.zeros(len(rows)), target if kind == "classifier" else None))
    matrices = [  # grown on the distinct training rows, each distinct validation row predicted once
        (data.grouped(rows[train], roles, target[train])[0], *data.grouped(rows[valid], roles), target[valid])
        for train, valid in splits
    ]
    counts = sorted(grid.n_estimators)

    def losses(depth: int, lam: float) -> np.ndarray:
        out = np.zeros(len(counts))
        for dtrain, dvalid, where, truth in matrices:
            booster = boost(xgb_params(kind, depth, lam, seed), dtrain, max(counts))
            for j, k in enumerate(counts):
                predicted = booster.predict(dvalid, iteration_range=(0, k))[where]
                out[j] += np.mean((predicted - truth) ** 2)
        return out / len(matrices)

    pending = {
        (d, lam): runner.submit(losses, d, lam) for d in sorted(grid.max_depth) for lam in sorted(grid.reg_lambda)
    }
    best: tuple[float, dict[str, float]] | None = None
    for depth in sorted(grid.max_depth):
        for j, k in enumerate(counts):
            for lam in sorted(grid.reg_lambda):
                loss = float(pending[(depth, lam)].result()[j])
                if best is None or loss < best[0]:
                    best = (loss, {"max_depth": depth, "n_estimators": k, "reg_lambda": lam, "loss": loss})
    assert best is not None
    return best[1]


def _split(n: int, parts: int, seed: int, tag: int) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng([seed, tag]).permutation(n), parts)


def tune_outcomes(data: PaperData, grid: TuningGrid, folds: int, seed: int, runner: Runner) -> dict[str, dict]:
    """The outcome models' selections, nested ones on pseudo-outcomes built as they are refit."""
    a, y, n = data.a, data.y, len(data.y)
    every = np.arange(n)
    first_level = {"y_zx0": (every[a == 0], "z"), "y_zx1": (every[a == 1], "z"), "y_wvzx1": (every[a == 1], "brz")}
    out = {
        name: cv_search(data, rows, roles, y[rows], "regressor", grid, folds, seed, runner)
        for name, (rows, roles) in first_level.items()
    }
    top = out["y_wvzx1"]
    mu, ns = _split(n, 2, seed, HALVES_SEED)  # NDE: E[Y | W,V,Z, x1] regressed on Z among x0
    first = fit(data, mu[a[mu] == 1], "brz", y[mu[a[mu] == 1]], "regressor", top, seed)
    rows = ns[a[ns] == 0]
    out["mu2_zx0"] = cv_search(
        data, rows, "z", predict(first, data, rows, "brz"), "regressor", grid, folds, seed, runner
    )
    mu, ns1, ns2 = _split(n, 3, seed, THIRDS_SEED)  # the W/V orders: E[Y | W,V,Z, x1], then on W,Z, then on Z
    first = fit(data, mu[a[mu] == 1], "brz", y[mu[a[mu] == 1]], "regressor", top, seed)
    rows = ns1[a[ns1] == 0]
    pseudo = predict(first, data, rows, "brz")
    out["mu3_wzx0"] = cv_search(data, rows, "rz", pseudo, "regressor", grid, folds, seed, runner)
    middle = fit(data, rows, "rz", pseudo, "regressor", out["mu3_wzx0"], seed)
    outer = ns2[a[ns2] == 1]
    out["mu2_zx1"] = cv_search(
        data, outer, "z", predict(middle, data, outer, "rz"), "regressor", grid, folds, seed, runner
    )
    rows = ns1[a[ns1] == 1]
    out["mu3_wzx1"] = cv_search(
        data, rows, "rz", predict(first, data, rows, "brz"), "regressor", grid, folds, seed, runner
    )
    return {name: out[name] for name in OUTCOME_MODELS}


def tune_propensities(data: PaperData, grid: TuningGrid, folds: int, seed: int, runner: Runner) -> dict[str, dict]:
    every = np.arange(len(data.a))
    return {
        name: cv_search(data, every, roles, data.a.astype(float), "classifier", grid, folds, seed, runner)
        for name, roles in PROPENSITY_MODELS.items()
    }


def tuned(
    data: PaperData,
    roles: Roles,
    grid: TuningGrid,
    folds: int,
    seed: int,
    runner: Runner,
    location: str | Path | None,
) -> tuple[dict[str, dict], dict[str, bool]]:
    """Every nuisance's hyperparameters, from the cache where this search ran before on the same
    rows (and, for the outcome models, the same Y); returns them and which came from the cache."""
    learner = {
        "schema": SCHEMA,
        "grid": asdict(grid),
        "folds": folds,
        "seed": seed,
        "libraries": installed_versions("xgboost", "numpy", "scikit-learn"),
        "classifier": xgb_params("classifier", 0, 0.0, seed),
        "regressor": xgb_params("regressor", 0, 0.0, seed),
    }
    described = [roles.as_dict(), data.columns, data.kinds, data.values, data.a]
    families = {
        "propensity": (content_key("paper-propensity", learner, *described), tune_propensities, set(PROPENSITY_MODELS)),
        "outcome": (content_key("paper-outcome", learner, *described, data.y), tune_outcomes, set(OUTCOME_MODELS)),
    }
    params: dict[str, dict] = {}
    cached: dict[str, bool] = {}
    with open_blob_store(location, NUISANCES) as store:
        for family, (key, search, names) in families.items():
            blob = store.get_many([key]).get(key)
            found = None if blob is None else json.loads(blob)
            cached[family] = found is not None and set(found) == names
            if not cached[family]:
                found = search(data, grid, folds, seed, runner)
                store.put_many([(key, json.dumps(found).encode())])
            params.update(found or {})
    return params, cached
