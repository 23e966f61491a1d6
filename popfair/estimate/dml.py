"""The DML-UCA algorithm behind `estimate_pse`: encoding the SFM roles, stratified cross-fitting
folds, XGBoost nuisances (tuned once, cached) and the per-row doubly robust scores.

For each counterfactual mean psi(x_y, x_b, x_r) (`popfair.estimate.sfm.TARGETS`) the score is
(PopResume, arXiv 2603.22714, Table 1 and C.2):

    mu3(B,R,X,Z) = E[Y | B,R,X,Z];  mu2(R,X,Z) = E[mu3(B,R,x_y,Z) | R,X,Z];  mu1(X,Z) = E[mu2(R,x_b,Z) | X,Z]
    pi1 = 1[X=x_r] / P(x_r|Z)
    pi2 = 1[X=x_b] / P(x_b|R,Z) * P(x_r|R,Z) / P(x_r|Z)
    pi3 = 1[X=x_y] / P(x_y|B,R,Z) * P(x_b|B,R,Z) / P(x_b|R,Z) * P(x_r|R,Z) / P(x_r|Z)
    phi = pi3 (Y - mu3) + pi2 (mu3(B,R,x_y,Z) - mu2) + pi1 (mu2(R,x_b,Z) - mu1) + mu1(x_r,Z)

Nuisances are XGBoost models fit with L-fold cross-fitting: mu3 and the three propensity models
P(X|Z), P(X|R,Z), P(X|B,R,Z) once per fold and shared by all five psi's; mu2 (one per x_y) and mu1
(one per (x_y, x_b)) are nested regressions on the fold's training rows. Hyperparameters come from
the paper's grid (C.5), chosen once per nuisance on a stratified train/validation split by Brier
score (classifiers) or MSE (regressors), and cached by a hash of the data and settings.

Overlap: propensities are clipped to [clip, 1 - clip] before they enter any ratio; the number of
clipped predictions and the largest weights pi1, pi2, pi3 are reported (`overlap_table`), and a
`PseOverlapWarning` is issued when clipping touches more than 1% of rows or a weight exceeds
`1 / clip ** 2`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb

from popfair.constraints import Constraint, Interval, ListOf, Options, ParameterError, Rules, Text, validate
from popfair.constraints import Path as PathRule
from popfair.errors import EstimationError
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED
from popfair.estimate.sfm import TARGETS
from popfair.types import Roles

log = logging.getLogger("popfair.pse")

# Feature blocks of each nuisance (b, r, x, z); "x" is the 0/1 indicator of X = x1.
FEATURE_SETS = {"mu3": "brxz", "mu2": "rxz", "mu1": "xz", "p_z": "z", "p_rz": "rz", "p_brz": "brz"}
PROPENSITIES = ("p_z", "p_rz", "p_brz")
MU2_KEYS = (0, 1)  # x_y
MU1_KEYS = ((0, 0), (1, 1), (1, 0))  # (x_y, x_b) used by TARGETS
CACHE_VERSION = "pse-tuning-v1"
BINARY_SPLITS = 5  # n_splits="auto" for a 0/1 outcome
_MEMORY_CACHE: dict[str, dict[str, dict[str, float]]] = {}


class PseOverlapWarning(UserWarning):
    """Propensities near 0 or 1: some weights are large and estimates may be unstable."""


@dataclass(frozen=True)
class TuningGrid:
    """Hyperparameter grid for every XGBoost nuisance (the paper's C.5 by default).

    One model per (max_depth, reg_lambda) is fit with max(n_estimators) trees and evaluated at each
    tree count through `iteration_range`, so the grid costs len(max_depth) * len(reg_lambda) fits."""

    n_estimators: tuple[int, ...] = (5, 10, 20, 50, 100)
    max_depth: tuple[int, ...] = (1, 2, 3, 4, 5)
    reg_lambda: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)

    @classmethod
    def build(cls, grid: TuningGrid | Mapping[str, Sequence[float]] | None) -> TuningGrid:
        """A grid from a mapping (config, checked by `GridRule`) or None (the paper's grid)."""
        if grid is None:
            return cls()
        if isinstance(grid, TuningGrid):
            return grid
        GridRule().check("grid", grid)
        values = {name: tuple(grid.get(name, getattr(cls(), name))) for name in GRID_KEYS}
        return cls(
            n_estimators=tuple(sorted(set(values["n_estimators"]))),
            max_depth=tuple(sorted(set(values["max_depth"]))),
            reg_lambda=tuple(sorted({float(v) for v in values["reg_lambda"]})),
        )


GRID_KEYS = ("n_estimators", "max_depth", "reg_lambda")


class GridRule(Constraint):
    """null, a TuningGrid, or a mapping of some of n_estimators, max_depth (non-empty lists of
    integers >= 1) and reg_lambda (non-empty list of numbers >= 0); errors name the sub-key."""

    ITEMS = {
        "n_estimators": ListOf(Interval(int, 1, None), "integers >= 1", non_empty=True),
        "max_depth": ListOf(Interval(int, 1, None), "integers >= 1", non_empty=True),
        "reg_lambda": ListOf(Interval(float, 0, None), "numbers >= 0", non_empty=True),
    }

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            self.check("grid", value)
        except ParameterError:
            return False
        return True

    def check(self, name: str, value: Any) -> None:
        if value is None or isinstance(value, TuningGrid):
            return
        if not isinstance(value, Mapping):
            raise ParameterError(name, f"must be {self}, got {value!r}")
        unknown = sorted(set(value) - set(GRID_KEYS))
        if unknown:
            raise ParameterError(name, f"unknown keys {unknown}; allowed: {', '.join(GRID_KEYS)}")
        for key, rule in self.ITEMS.items():
            if key in value and not rule.is_satisfied_by(value[key]):
                raise ParameterError(f"{name}.{key}", f"must be {rule}, got {list(value[key])!r}")

    def __str__(self) -> str:
        return "null or a mapping with keys n_estimators, max_depth, reg_lambda"


@dataclass(frozen=True)
class PseSettings:
    """Every setting of a DML-UCA estimate, written once: `estimate_pse(**settings)` and the
    `estimator=pse_dml` config take these names (conf/estimator/pse_dml.yaml documents each)."""

    folds: int = 5  # cross-fitting folds L
    # Fold assignments cross-fit and averaged; the variance is Chernozhukov et al.'s (2018, 3.4) mean
    # aggregation (each split's variance plus its squared deviation from the mean). "auto": 1 for scores
    # (the paper's single split), BINARY_SPLITS for 0/1 outcomes, whose NIE/BIE depend on the fold
    # assignment and under-cover with one split (benchmarks/coverage_pse.py, docs/replication.md P6b).
    n_splits: int | str = "auto"
    n_bootstrap: int = 500  # bootstrap resamples of the score rows (or clusters)
    seed: int = 0
    alpha: float = 0.05  # 1 - CI level
    clip: float = 0.01  # propensities clipped to [clip, 1 - clip]
    grid: TuningGrid = field(default_factory=TuningGrid)  # XGBoost hyperparameter grid (paper's C.5)
    validation_fraction: float = 0.2  # tuning split
    max_categories: int = 32  # one-hot levels kept per categorical column
    max_bin: int = 64  # XGBoost histogram bins
    n_jobs: int | None = 1  # threads for independent XGBoost fits (None: every CPU this process may use)
    cluster: str | None = None  # column whose values are resampled whole (cluster-robust SEs)
    cache_dir: str | Path | None = None  # on-disk cache of tuned hyperparameters (None: memory only)

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> PseSettings:
        """Settings from keyword values, checked against `PSE_CONSTRAINTS` (ParameterError naming
        the key; unknown keys are a TypeError, as for any function)."""
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise TypeError(f"unknown PSE settings {unknown}; allowed: {sorted(cls.__dataclass_fields__)}")
        validate(PSE_CONSTRAINTS, values)
        return cls(**{**values, "grid": TuningGrid.build(values.get("grid"))})


PSE_CONSTRAINTS: Rules = {
    "folds": Interval(int, 2, None),
    "n_splits": [Options(["auto"]), Interval(int, 1, 50)],
    "n_bootstrap": N_BOOTSTRAP,
    "seed": SEED,
    "alpha": ALPHA,
    "clip": Interval(float, 0, 0.1, closed="neither"),
    "grid": GridRule(),
    "validation_fraction": Interval(float, 0.05, 0.5),
    "max_categories": Interval(int, 2, None),
    "max_bin": Interval(int, 2, 1024),
    "n_jobs": [None, Interval(int, 1, None)],
    "cluster": [None, Text()],
    "cache_dir": [None, PathRule()],
}


def resolve_splits(n_splits: int | str, y: np.ndarray) -> int:
    """The number of fold assignments: as set, or for "auto" BINARY_SPLITS when Y is 0/1, else 1."""
    if n_splits != "auto":
        return int(n_splits)
    return BINARY_SPLITS if np.isin(y, (0.0, 1.0)).all() else 1


@dataclass
class DmlScores:
    """Cross-fitted doubly robust scores: one row per estimation row, one column per TARGETS mean."""

    phi_splits: np.ndarray  # n_splits x n x len(TARGETS): one cross-fit per fold assignment
    cluster: np.ndarray | None  # cluster code per row (0..G-1) when settings.cluster is set
    overlap: pd.DataFrame  # propensity ranges, clipped shares and largest weights
    tuning: pd.DataFrame  # chosen hyperparameters per nuisance, with `from_cache`
    timings: dict[str, float]
    n_excluded: int  # rows whose X is neither x0 nor x1 or whose Y is missing
    notes: list[str]  # encoding caveats (pooled levels)

    @property
    def phi(self) -> np.ndarray:
        """n x len(TARGETS): the scores averaged over the fold assignments."""
        return self.phi_splits.mean(axis=0)


def dml_scores(data: pd.DataFrame, roles: Roles, y: str, settings: PseSettings) -> DmlScores:
    """Encode the roles, assign folds, tune (or reuse cached) nuisances and cross-fit the scores."""
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    design, n_excluded, notes = _Design.from_frame(
        data, roles, y, cluster=settings.cluster, max_categories=settings.max_categories
    )
    fold_of = [
        _assign_folds(design.a, settings.folds, settings.seed, x=roles.x, levels=(roles.x0, roles.x1), split=s)
        for s in range(resolve_splits(settings.n_splits, design.y))
    ]
    timings["encode"] = time.perf_counter() - clock

    clock = time.perf_counter()
    key = _cache_key(design, settings)
    params, from_cache = _cached_params(key, settings.cache_dir)
    if params is None:
        params = _tune_all(design, settings)
        _store_params(key, params, settings.cache_dir)
    timings["tune"] = time.perf_counter() - clock

    clock = time.perf_counter()
    fits = [_cross_fit(design, folds, params, settings) for folds in fold_of]
    phi_splits = np.stack([phi for phi, _ in fits])
    overlap = [row for _, rows in fits for row in rows]
    timings["cross_fit"] = time.perf_counter() - clock
    tuning = pd.DataFrame.from_dict(params, orient="index").rename_axis("nuisance")
    tuning["from_cache"] = from_cache
    return DmlScores(
        phi_splits=phi_splits,
        cluster=design.cluster,
        overlap=_overlap_table(overlap, settings.clip, settings.folds),
        tuning=tuning,
        timings=timings,
        n_excluded=n_excluded,
        notes=notes,
    )


@dataclass
class _Design:
    """Numeric blocks of the SFM roles (float32), the 0/1 treatment indicator, outcome and clusters."""

    blocks: dict[str, np.ndarray]
    a: np.ndarray
    y: np.ndarray
    cluster: np.ndarray | None
    _factual: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def from_frame(
        cls, data: pd.DataFrame, sfm: Roles, y: str, *, cluster: str | None, max_categories: int
    ) -> tuple[_Design, int, list[str]]:
        if not isinstance(data, pd.DataFrame):
            raise EstimationError(f"data must be a pandas DataFrame, got {type(data).__name__}")
        x, x0, x1 = sfm.x, sfm.x0, sfm.x1
        roles = {"z": list(sfm.z), "b": list(sfm.b), "r": list(sfm.r)}
        for role in ("b", "r"):
            if not roles[role]:
                raise EstimationError(f"role {role} is empty; the B/R decomposition needs at least one column each")
        named = [x, y] + roles["z"] + roles["b"] + roles["r"] + ([cluster] if cluster else [])
        missing = [c for c in dict.fromkeys(named) if c not in data.columns]
        if missing:
            raise EstimationError(f"data lacks columns {missing} (has {list(data.columns)})")
        seen: dict[str, str] = {}
        for role, cols in [("x", [x]), ("y", [y])] + list(roles.items()):
            for col in cols:
                if col in seen:
                    raise EstimationError(
                        f"column {col!r} is given both as {seen[col]} and as {role}; each column plays one role"
                    )
                seen[col] = role
        if x0 == x1:
            raise EstimationError(f"x0 and x1 must differ, both are {x0!r}")
        present = data[x].astype(object).where(data[x].isna(), data[x].astype(str))  # levels compared as text
        levels = sorted(map(str, present.dropna().unique()))
        for level in (x0, x1):
            if not (present == level).any():
                raise EstimationError(
                    f"{x} has no rows with level {level!r} (levels present: {levels}); "
                    "both contrasted levels are needed"
                )
        outcome = pd.to_numeric(data[y], errors="coerce") if data[y].dtype != bool else data[y].astype(float)
        if data[y].notna().sum() != outcome.notna().sum():
            raise EstimationError(f"outcome {y!r} has non-numeric values; expected a 0-100 score or a 0/1 callback")
        keep = present.isin([x0, x1]) & outcome.notna()
        rows = data.loc[keep]
        n_excluded = int((~keep).sum())
        yv = outcome[keep].to_numpy(dtype=float)
        if not np.isfinite(yv).all():
            raise EstimationError(f"outcome {y!r} has infinite values")
        if len(yv) == 0 or np.ptp(yv) == 0:
            raise EstimationError(
                f"outcome {y!r} is constant ({yv[0] if len(yv) else 'no rows'}) over the "
                f"{len(yv)} rows with {x} in ({x0!r}, {x1!r}); there is no effect to decompose"
            )
        role_cols = roles["z"] + roles["b"] + roles["r"] + ([cluster] if cluster else [])
        nan_cols = [c for c in role_cols if rows[c].isna().any()]
        if nan_cols:
            counts = {c: int(rows[c].isna().sum()) for c in nan_cols}
            raise EstimationError(f"role columns have missing values {counts}; impute them or drop those rows")
        notes: list[str] = []
        blocks = {}
        for role, cols in roles.items():
            parts = [_encode_column(rows[c], max_categories, notes) for c in cols]
            blocks[role] = (
                np.column_stack(parts).astype(np.float32) if parts else np.zeros((len(rows), 1), np.float32)
            )  # empty Z: intercept-only models
        a = (present[keep] == x1).to_numpy(dtype=np.float32)
        blocks["x"] = a[:, None]
        clusters = pd.factorize(rows[cluster])[0] if cluster else None
        if clusters is not None and clusters.max() + 1 < 2:
            raise EstimationError(f"cluster column {cluster!r} has a single cluster; need at least 2")
        return cls(blocks=blocks, a=a.astype(int), y=yv, cluster=clusters), n_excluded, notes

    def features(self, name: str, a_value: int | None = None) -> np.ndarray:
        """Feature matrix of nuisance `name`, with X set to `a_value` when given (counterfactual).
        The factual matrices are built once and shared (read-only) by every fit."""
        if a_value is None:
            cached = self._factual.get(name)
            if cached is None:
                cached = self._factual[name] = self._stack(name, None)
                cached.flags.writeable = False
            return cached
        return self._stack(name, a_value)

    def _stack(self, name: str, a_value: int | None) -> np.ndarray:
        parts = []
        for block in FEATURE_SETS[name]:
            if block == "x" and a_value is not None:
                parts.append(np.full((len(self.y), 1), a_value, np.float32))
            else:
                parts.append(self.blocks[block])
        return np.hstack(parts)


def _encode_column(column: pd.Series, max_categories: int, notes: list[str]) -> np.ndarray:
    """Numeric columns as floats; strings/categories/bools one-hot over the most frequent levels."""
    if pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column):
        return column.to_numpy(dtype=np.float32)[:, None]
    text = column.astype(str)
    counts = text.value_counts()
    levels = sorted(counts.index)
    if len(levels) > max_categories:
        kept = set(counts.sort_values(ascending=False, kind="stable").index[: max_categories - 1])
        notes.append(
            f"{column.name}: {len(levels)} levels; kept the {max_categories - 1} most frequent and "
            f"pooled the other {len(levels) - len(kept)} as 'other' (group high-cardinality columns "
            "first, as the paper's C.4 does)"
        )
        levels = sorted(kept)
        text = text.where(text.isin(kept), "\x00other")
        levels.append("\x00other")
    codes = pd.Categorical(text, categories=levels).codes
    return (codes[:, None] == np.arange(len(levels))[None, :]).astype(np.float32)


def _assign_folds(
    a: np.ndarray, folds: int, seed: int, *, x: str, levels: tuple[str, str], split: int = 0
) -> np.ndarray:
    """Fold id per row, stratified by X so every fold holds both levels when that is possible;
    `split` numbers the fold assignments of repeated cross-fitting (0: the single-split one)."""
    rng = np.random.default_rng([seed, 1] if split == 0 else [seed, 1, split])
    fold_of = np.empty(len(a), dtype=int)
    for value in (0, 1):
        idx = np.flatnonzero(a == value)
        fold_of[rng.permutation(idx)] = (np.arange(len(idx)) + rng.integers(folds)) % folds
    for value, level in zip((0, 1), levels):
        present = np.bincount(fold_of[a == value], minlength=folds)
        if (present == 0).any():
            empty = np.flatnonzero(present == 0).tolist()
            raise EstimationError(
                f"cross-fitting folds {empty} of {folds} have no rows with {x}={level!r} (only "
                f"{int((a == value).sum())} such rows); every fold needs both levels: lower `folds` or add data"
            )
    return fold_of


# --------------------------------------------------------------------------------------------
# XGBoost nuisances: tuning (cached) and cross-fitting


def _xgb_params(kind: str, depth: int, lam: float, settings: PseSettings) -> dict[str, Any]:
    # nthread=1: on small tabular data XGBoost's threading costs more than it gains (measured 6x).
    return {
        "objective": "binary:logistic" if kind == "classifier" else "reg:squarederror",
        "max_depth": int(depth),
        "reg_lambda": float(lam),
        "tree_method": "hist",
        "max_bin": settings.max_bin,
        "nthread": 1,
        "seed": settings.seed,
        "verbosity": 0,
    }


def _kind(name: str) -> str:
    return "classifier" if name in PROPENSITIES else "regressor"


@dataclass
class _Fit:
    booster: xgb.Booster
    n_estimators: int

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.booster.inplace_predict(features, iteration_range=(0, self.n_estimators))


class _Runner:
    """Runs independent XGBoost fits: in the calling thread when n_jobs == 1, else on a thread pool
    (XGBoost releases the GIL while training; concurrent fits may share one DMatrix). Results never
    depend on n_jobs: every fit is deterministic and results are combined in submission order."""

    def __init__(self, n_jobs: int | None) -> None:
        if n_jobs is None:
            n_jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.pool = ThreadPoolExecutor(max_workers=n_jobs) if n_jobs > 1 else None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        if self.pool is not None:
            return self.pool.submit(fn, *args)
        done: Future = Future()
        done.set_result(fn(*args))
        return done

    def close(self) -> None:
        """Wait for running fits; drop queued ones (after an error)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _matrix(
    features: np.ndarray, target: np.ndarray, settings: PseSettings, ref: xgb.QuantileDMatrix | None = None
) -> xgb.QuantileDMatrix:
    """Training matrix. `ref` (a matrix built from the same features) lends its histogram cuts,
    which skips sketching and gives the same cuts, hence the same trees. The label is passed as
    float32, the type XGBoost stores it in (the same values): a float64 label nearly doubles the
    matrix's construction time (about 25 ms of 55 ms on 14,000 x 26)."""
    label = np.asarray(target, dtype=np.float32)
    return xgb.QuantileDMatrix(features, label, max_bin=settings.max_bin, nthread=1, ref=ref)


def _update_one_iter() -> Callable[[xgb.Booster, int, xgb.DMatrix], None] | None:
    """XGBoost's one-round update without `Booster.update`'s per-call feature-name checks (about
    35 us a round, which holds the GIL: 0.7 s of a default case's 20,000 rounds); None when this
    XGBoost does not expose it, and `Booster.update` is used."""
    lib = getattr(getattr(xgb, "core", None), "_LIB", None)
    update = getattr(lib, "XGBoosterUpdateOneIter", None)
    check = getattr(getattr(xgb, "core", None), "_check_call", None)
    if update is None or check is None:
        return None
    import ctypes

    def one_iter(booster: xgb.Booster, iteration: int, dtrain: xgb.DMatrix) -> None:
        check(update(booster.handle, ctypes.c_int(iteration), dtrain.handle))

    return one_iter


_ONE_ITER = _update_one_iter()


def _train(
    params: Mapping[str, Any],
    dtrain: xgb.DMatrix,
    rounds: int,
    checkpoints: Sequence[int] = (),
    on_checkpoint: Callable[[xgb.Booster, int], None] | None = None,
) -> xgb.Booster:
    """`xgb.train(params, dtrain, rounds)` (the same trees: one `Booster`, one update per round)
    without its per-round callback machinery; `on_checkpoint(booster, rounds)` runs after each round count
    in `checkpoints` (the search scores its validation rows there). The training caches are
    released at the end, as `xgb.train` does."""
    booster = xgb.Booster(dict(params), [dtrain])
    wanted = set(checkpoints)
    for i in range(rounds):
        if i == 0 or _ONE_ITER is None:
            booster.update(dtrain, iteration=i)  # the first round also records the feature names
        else:
            _ONE_ITER(booster, i, dtrain)
        if on_checkpoint is not None and i + 1 in wanted:
            on_checkpoint(booster, i + 1)
    return booster.reset()


def _fit(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    params: Mapping[str, float],
    settings: PseSettings,
    ref: xgb.QuantileDMatrix | None = None,
) -> tuple[_Fit, xgb.QuantileDMatrix]:
    dtrain = _matrix(features, target, settings, ref)
    booster = _train(
        _xgb_params(kind, int(params["max_depth"]), params["reg_lambda"], settings),
        dtrain,
        int(params["n_estimators"]),
    )
    return _Fit(booster, int(params["n_estimators"])), dtrain


def _search(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    train: np.ndarray,
    valid: np.ndarray,
    settings: PseSettings,
    runner: _Runner | None = None,
    ref: xgb.QuantileDMatrix | None = None,
) -> tuple[dict[str, float], _Fit]:
    """Best (max_depth, reg_lambda, n_estimators) by validation Brier/MSE; ties keep the smaller model."""
    return _start_search(features, target, kind, train, valid, settings, runner or _Runner(1), ref)[0]()


def _start_search(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    train: np.ndarray,
    valid: np.ndarray,
    settings: PseSettings,
    runner: _Runner,
    ref: xgb.QuantileDMatrix | None = None,
) -> tuple[Callable[[], tuple[dict[str, float], _Fit]], xgb.QuantileDMatrix]:
    """Submit one fit per (max_depth, reg_lambda) to `runner`; returns a function that waits for
    them and picks the best grid point exactly as a serial loop over the grid would, and the
    training matrix (a `ref` for searches on the same features)."""
    grid = settings.grid
    dtrain = _matrix(features[train], target[train], settings, ref)
    x_valid, y_valid = features[valid], target[valid]

    def fit(depth: int, lam: float) -> tuple[xgb.Booster, list[float]]:
        # The validation rows are scored as the trees are added: predicting a DMatrix with the
        # whole model reuses XGBoost's prediction cache, so each tree is evaluated once (100 tree
        # evaluations instead of 5 + 10 + 20 + 50 + 100), and the sums are the same floats, in the
        # same order, as `inplace_predict(x_valid, iteration_range=(0, n_trees))` gives.
        dvalid = xgb.DMatrix(x_valid, nthread=1)
        losses: dict[int, float] = {}

        def score(booster: xgb.Booster, n_trees: int) -> None:
            losses[n_trees] = float(np.mean((booster.predict(dvalid) - y_valid) ** 2))

        booster = _train(
            _xgb_params(kind, depth, lam, settings), dtrain, max(grid.n_estimators), grid.n_estimators, score
        )
        return booster, [losses[n_trees] for n_trees in grid.n_estimators]

    pending = [(depth, lam, runner.submit(fit, depth, lam)) for depth in grid.max_depth for lam in grid.reg_lambda]

    def best() -> tuple[dict[str, float], _Fit]:
        chosen: tuple[float, dict[str, float], _Fit] | None = None
        for depth, lam, future in pending:
            booster, losses = future.result()
            for n_trees, loss in zip(grid.n_estimators, losses):
                if chosen is None or loss < chosen[0] - 1e-12:
                    chosen = (
                        loss,
                        {"max_depth": depth, "reg_lambda": lam, "n_estimators": n_trees},
                        _Fit(booster, n_trees),
                    )
        assert chosen is not None
        loss, params, model = chosen
        return {**params, "loss": loss}, model

    return best, dtrain


def _tune_all(design: _Design, settings: PseSettings) -> dict[str, dict[str, float]]:
    """Grid search for every nuisance on one stratified train/validation split of all rows.

    The nested regressions are tuned on pseudo-outcomes from the tuned model one level up, exactly as
    they are built during cross-fitting. All grid points of all searches go to one pool: the
    propensity searches fill the threads while the outcome chain (mu3, then mu2, then mu1) waits
    for its previous level; searches on the same features share histogram cuts."""
    rng = np.random.default_rng([settings.seed, 2])
    valid_mask = np.zeros(len(design.y), bool)
    for value in (0, 1):
        idx = rng.permutation(np.flatnonzero(design.a == value))
        valid_mask[idx[: max(1, round(settings.validation_fraction * len(idx)))]] = True
    train, valid = np.flatnonzero(~valid_mask), np.flatnonzero(valid_mask)
    lo, hi = design.y.min(), design.y.max()

    with closing(_Runner(settings.n_jobs)) as runner:

        def start(name: str, target: np.ndarray, ref: xgb.QuantileDMatrix | None = None):
            return _start_search(design.features(name), target, _kind(name), train, valid, settings, runner, ref)

        out: dict[str, dict[str, float]] = {}
        mu3_search, _ = start("mu3", design.y)
        propensity = {name: start(name, design.a.astype(np.float32))[0] for name in PROPENSITIES}
        out["mu3"], mu3 = mu3_search()
        mu2_searches, ref = {}, None
        for x_y in MU2_KEYS:
            mu2_searches[x_y], ref = start("mu2", np.clip(mu3.predict(design.features("mu3", x_y)), lo, hi), ref)
        mu1_searches, ref = {}, None
        for x_y in MU2_KEYS:
            out[f"mu2[x_y={x_y}]"], mu2 = mu2_searches[x_y]()
            for key in MU1_KEYS:
                if key[0] == x_y:
                    pseudo = np.clip(mu2.predict(design.features("mu2", key[1])), lo, hi)
                    mu1_searches[key], ref = start("mu1", pseudo, ref)
        for key, search in mu1_searches.items():
            out[f"mu1[x_y={key[0]},x_b={key[1]}]"] = search()[0]
        for name, search in propensity.items():
            out[name] = search()[0]
    return {name: out[name] for name in _nuisance_names()}


def _nuisance_names() -> list[str]:
    return (
        ["mu3"]
        + [f"mu2[x_y={v}]" for v in MU2_KEYS]
        + [f"mu1[x_y={v},x_b={w}]" for v, w in MU1_KEYS]
        + list(PROPENSITIES)
    )


def _cross_fit(
    design: _Design, fold_of: np.ndarray, params: Mapping[str, Mapping[str, float]], settings: PseSettings
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per-row scores phi (n x 5 targets), each row scored by nuisances fit without its fold.
    Per fold, the outcome chain is one task and each propensity model another, all on one pool."""
    n = len(design.y)
    phi = np.empty((n, len(TARGETS)))
    overlap: list[dict[str, Any]] = []
    with closing(_Runner(settings.n_jobs)) as runner:
        tasks = [
            (
                runner.submit(_fold_outcomes, design, fold_of, fold, params, settings),
                [
                    runner.submit(_fold_propensity, design, fold_of, fold, name, params, settings)
                    for name in PROPENSITIES
                ],
            )
            for fold in range(settings.folds)
        ]
        for fold, (outcomes, propensities) in enumerate(tasks):
            prob1, diagnostics = {}, []
            for name, future in zip(PROPENSITIES, propensities):
                prob1[name], diag = future.result()
                diagnostics.append(diag)
            held, scores, weights = _fold_scores(design, fold_of, fold, outcomes.result(), prob1)
            phi[held] = scores
            overlap.extend({**row, "fold": fold} for row in diagnostics + weights)
    return phi, overlap


def _fold_outcomes(
    design: _Design, fold_of: np.ndarray, fold: int, params: Mapping[str, Mapping[str, float]], settings: PseSettings
) -> tuple[dict, dict, dict]:
    """The fold's outcome chain: mu3 at x_y, mu2 at (x_y, x_b) on every row, mu1 at (x_y, x_b, x_r)
    on the held-out rows, each nested model fit on the training rows' pseudo-outcomes."""
    train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
    y = design.y
    lo, hi = y[train].min(), y[train].max()

    def predict(model: _Fit, name: str, x_value: int, rows: np.ndarray | None = None) -> np.ndarray:
        features = design.features(name, x_value)
        return np.clip(model.predict(features if rows is None else features[rows]), lo, hi)

    mu3, _ = _fit(design.features("mu3")[train], y[train], "regressor", params["mu3"], settings)
    mu3_at = {v: predict(mu3, "mu3", v) for v in MU2_KEYS}
    mu2_at: dict[tuple[int, int], np.ndarray] = {}
    features, ref = design.features("mu2")[train], None
    for v in MU2_KEYS:
        mu2, ref = _fit(features, mu3_at[v][train], "regressor", params[f"mu2[x_y={v}]"], settings, ref)
        for w in sorted({w for vv, w in MU1_KEYS if vv == v}):
            mu2_at[(v, w)] = predict(mu2, "mu2", w)
    mu1_at: dict[tuple[int, int, int], np.ndarray] = {}
    features, ref = design.features("mu1")[train], None
    for v, w in MU1_KEYS:
        mu1, ref = _fit(features, mu2_at[(v, w)][train], "regressor", params[f"mu1[x_y={v},x_b={w}]"], settings, ref)
        for u in sorted({t[2] for t in TARGETS.values() if t[:2] == (v, w)}):
            mu1_at[(v, w, u)] = predict(mu1, "mu1", u, held)
    return mu3_at, mu2_at, mu1_at


def _fold_propensity(
    design: _Design,
    fold_of: np.ndarray,
    fold: int,
    name: str,
    params: Mapping[str, Mapping[str, float]],
    settings: PseSettings,
) -> tuple[np.ndarray, dict[str, Any]]:
    """P(X = x1 | .) of one propensity model on the fold's held-out rows, clipped, and its range."""
    train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
    features = design.features(name)
    model, _ = _fit(features[train], design.a[train].astype(np.float32), "classifier", params[name], settings)
    raw = model.predict(features[held])
    clipped = (raw < settings.clip) | (raw > 1 - settings.clip)
    diagnostics = {
        "kind": "propensity",
        "name": name,
        "min": float(raw.min()),
        "max": float(raw.max()),
        "n_clipped": int(clipped.sum()),
        "n": len(held),
    }
    return np.clip(raw, settings.clip, 1 - settings.clip), diagnostics


def _fold_scores(
    design: _Design, fold_of: np.ndarray, fold: int, outcomes: tuple[dict, dict, dict], prob1: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The held-out rows' doubly robust scores from the fold's nuisances, and the weights' ranges."""
    held = np.flatnonzero(fold_of == fold)
    mu3_at, mu2_at, mu1_at = outcomes

    def prob(name: str, level: int) -> np.ndarray:
        return prob1[name] if level == 1 else 1.0 - prob1[name]

    a_h, y_h = design.a[held], design.y[held]
    scores = np.empty((len(held), len(TARGETS)))
    diagnostics: list[dict[str, Any]] = []
    for j, (target, (v, w, u)) in enumerate(TARGETS.items()):
        ratio_r = prob("p_rz", u) / prob("p_z", u)
        pi1 = (a_h == u) / prob("p_z", u)
        pi2 = (a_h == w) / prob("p_rz", w) * ratio_r
        pi3 = (a_h == v) / prob("p_brz", v) * prob("p_brz", w) / prob("p_rz", w) * ratio_r
        m3, m2, m1 = mu3_at[v][held], mu2_at[(v, w)][held], mu1_at[(v, w, u)]
        scores[:, j] = pi3 * (y_h - m3) + pi2 * (m3 - m2) + pi1 * (m2 - m1) + m1
        for term, weight in (("pi1", pi1), ("pi2", pi2), ("pi3", pi3)):
            diagnostics.append(
                {
                    "kind": "weight",
                    "name": f"{term} {target}",
                    "min": float(weight.min()),
                    "max": float(weight.max()),
                    "n_clipped": 0,
                    "n": len(held),
                }
            )
    return held, scores, diagnostics


def _overlap_table(rows: list[dict[str, Any]], clip: float, folds: int) -> pd.DataFrame:
    """Across folds: propensity ranges and clipped shares, largest weights; warn when overlap is poor."""
    frame = pd.DataFrame(rows)
    table = frame.groupby(["kind", "name"], sort=False).agg(
        min=("min", "min"), max=("max", "max"), n_clipped=("n_clipped", "sum"), n=("n", "sum")
    )
    table["share_clipped"] = table["n_clipped"] / table["n"]
    table = table.reset_index().set_index("name")
    problems = []
    props = table[table["kind"] == "propensity"]
    if (props["share_clipped"] > 0.01).any():
        worst = props["share_clipped"].idxmax()
        problems.append(
            f"{props.loc[worst, 'share_clipped']:.1%} of held-out propensities of {worst} were "
            f"clipped to [{clip}, {1 - clip}]"
        )
    weights = table[table["kind"] == "weight"]
    if (weights["max"] > 1 / clip**2).any():
        worst = weights["max"].idxmax()
        problems.append(f"largest weight {weights.loc[worst, 'max']:.0f} ({worst})")
    if problems:
        warnings.warn(
            "poor overlap between x0 and x1 given the covariates: "
            + "; ".join(problems)
            + "; estimates may be unstable (see PseResult.overlap)",
            PseOverlapWarning,
            stacklevel=5,
        )
    return table


# --------------------------------------------------------------------------------------------
# Tuning cache (in memory, optionally on disk)


def _cache_key(design: _Design, settings: PseSettings) -> str:
    digest = hashlib.sha256(CACHE_VERSION.encode())
    for name in ("b", "r", "x", "z"):
        block = np.ascontiguousarray(design.blocks[name])
        digest.update(f"{name}{block.shape}".encode())
        digest.update(block.tobytes())
    digest.update(np.ascontiguousarray(design.y).tobytes())
    digest.update(
        json.dumps(
            {
                "grid": asdict(settings.grid),
                "seed": settings.seed,
                "max_bin": settings.max_bin,
                "validation_fraction": settings.validation_fraction,
                "xgboost": xgb.__version__,
            },
            sort_keys=True,
        ).encode()
    )
    return digest.hexdigest()[:32]


def _cached_params(key: str, cache_dir: str | Path | None) -> tuple[dict[str, dict[str, float]] | None, bool]:
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key], True
    if cache_dir is not None:
        path = Path(cache_dir) / f"pse_tuning_{key}.json"
        if path.is_file():
            try:
                params = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                log.warning("ignoring unreadable tuning cache %s: %s", path, exc)
            else:
                if set(params) == set(_nuisance_names()):
                    _MEMORY_CACHE[key] = params
                    return params, True
    return None, False


def _store_params(key: str, params: dict[str, dict[str, float]], cache_dir: str | Path | None) -> None:
    _MEMORY_CACHE[key] = params
    if cache_dir is not None:
        path = Path(cache_dir)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f".pse_tuning_{key}.json.tmp"
        tmp.write_text(json.dumps(params, indent=1))
        tmp.replace(path / f"pse_tuning_{key}.json")


def clear_tuning_cache() -> None:
    """Forget in-memory tuned hyperparameters (on-disk caches are left alone)."""
    _MEMORY_CACHE.clear()
