"""The DML-UCA nuisances as XGBoost models: the hyperparameter search on the paper's grid (C.5) and
the per-fold fits of cross-fitting.

Outcome chain (involves Y, fit per case): mu3 = E[Y | B,R,X,Z], then per x_y the nested regression
mu2 on the pseudo-outcome mu3(B,R,x_y,Z), then per (x_y, x_b) mu1 on mu2(R,x_b,Z). Propensities
(do not involve Y, so every case on the same applicants shares them: `popfair.estimate.pse.nuisances.cache`):
P(X=x1 | Z), P(X=x1 | R,Z), P(X=x1 | B,R,Z). Hyperparameters are chosen per nuisance on one
stratified train/validation split by Brier score (classifiers) or MSE (regressors)."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import xgboost as xgb

from popfair.estimate.pse.nuisances.encoding import NumericRoles
from popfair.estimate.pse.sfm import TARGETS

if TYPE_CHECKING:
    from popfair.estimate.pse.settings import PseSettings

PROPENSITIES = ("p_z", "p_rz", "p_brz")
MU2_KEYS = (0, 1)  # x_y
MU1_KEYS = ((0, 0), (1, 1), (1, 0))  # (x_y, x_b) used by TARGETS
OUTCOME, PROPENSITY = "outcome", "propensity"  # the two families: tuned, cached and fit apart


def xgb_params(kind: str, depth: int, lam: float, settings: PseSettings) -> dict[str, Any]:
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
class Fit:
    booster: xgb.Booster
    n_estimators: int

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.booster.inplace_predict(features, iteration_range=(0, self.n_estimators))


class Runner:
    """Runs independent XGBoost fits: in the calling thread when n_jobs == 1, else on a thread pool
    (XGBoost releases the GIL while training; concurrent fits may share one DMatrix). Results never
    depend on n_jobs: every fit is deterministic and results are combined in submission order."""

    def __init__(self, n_jobs: int | None) -> None:
        if n_jobs is None:
            n_jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.pool = ThreadPoolExecutor(max_workers=n_jobs) if n_jobs > 1 else None
        self.workers = n_jobs  # fits that run side by side

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
    features: np.ndarray,
    target: np.ndarray,
    settings: PseSettings,
    ref: xgb.QuantileDMatrix | None = None,
    groups: np.ndarray | None = None,
) -> xgb.QuantileDMatrix:
    """Training matrix. `ref` (a matrix built from the same features) lends its histogram cuts,
    which skips sketching and gives the same cuts, hence the same trees. The label is passed as
    float32, the type XGBoost stores it in (the same values): a float64 label nearly doubles the
    matrix's construction time (about 25 ms of 55 ms on 14,000 x 26). With `groups` (a code per
    row, equal for identical rows: `NumericRoles.groups`), one row per distinct feature vector is
    kept, weighted by its count and labelled with its rows' mean target: squared error and log
    loss give it its rows' gradient and hessian sums, so the trees are those of the rows (up to
    the order of floating-point sums), fit on a fraction of them."""
    if groups is None:
        return xgb.QuantileDMatrix(
            features, np.asarray(target, dtype=np.float32), max_bin=settings.max_bin, nthread=1, ref=ref
        )
    first, position = distinct_rows(groups)
    weight = np.bincount(position).astype(np.float64)
    label = np.bincount(position, weights=np.asarray(target, np.float64)) / weight
    return xgb.QuantileDMatrix(
        features[first],
        label.astype(np.float32),
        weight=weight.astype(np.float32),
        max_bin=settings.max_bin,
        nthread=1,
        ref=ref,
    )


def cut_ref(encoded: NumericRoles, name: str, rows: np.ndarray, settings: PseSettings) -> xgb.QuantileDMatrix | None:
    """A `ref` for a training matrix of nuisance `name` on `rows`, or None: when those rows hold
    every distinct value of each column and no column has more than `max_bin`
    (`NumericRoles.levels`), their histogram cuts are those values, so a matrix of one row per value
    has them too. Lending it skips sketching the rows (about half of a 14,000-row matrix's build)
    and cannot change a cut: `tests/test_nuisance_groups.py` compares the cuts and the trees."""
    levels = encoded.levels(name, settings.max_bin, rows)
    if levels is None:
        return None
    size = max(map(len, levels))
    table = np.column_stack([np.resize(values, size) for values in levels]).astype(np.float32)
    return xgb.QuantileDMatrix(table, np.zeros(size, np.float32), max_bin=settings.max_bin, nthread=1)


def distinct_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For group codes of some rows: the first of those rows of each group present (indices into
    `codes`) and each row's position among them (`values[first][position]` is every row's value)."""
    present, position = np.unique(codes, return_inverse=True)
    first = np.empty(len(present), np.intp)
    first[position[::-1]] = np.arange(len(codes) - 1, -1, -1)
    return first, position.ravel()


def predict_rows(model: Fit, features: np.ndarray, groups: np.ndarray | None) -> np.ndarray:
    """`model.predict(features)`, predicting each distinct row once when `groups` codes the rows
    (identical rows get identical predictions: the same values)."""
    if groups is None:
        return model.predict(features)
    first, position = distinct_rows(groups)
    return model.predict(features[first])[position]


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
    on_checkpoint: Callable[[xgb.Booster, int], bool] | None = None,
    booster: xgb.Booster | None = None,
) -> xgb.Booster:
    """`xgb.train(params, dtrain, rounds)` (the same trees: one `Booster`, one update per round)
    without its per-round callback machinery; `on_checkpoint(booster, rounds)` runs after each round count
    in `checkpoints` (the search scores its validation rows there) and stops the training when it
    returns False. `booster` (trained by this function on `dtrain`) is grown on from its rounds to
    `rounds`: the trees of one uninterrupted training. Unlike `xgb.train`, the booster is not
    `reset()`: that re-serialises the model (about 5 ms a fit, 225 fits a case) to free the training
    caches, which these short-lived models free when they are dropped; predictions are the same."""
    start = 0 if booster is None else booster.num_boosted_rounds()
    booster = xgb.Booster(dict(params), [dtrain]) if booster is None else booster
    wanted = set(checkpoints)
    for i in range(start, rounds):
        if i == 0 or _ONE_ITER is None:
            booster.update(dtrain, iteration=i)  # the first round also records the feature names
        else:
            _ONE_ITER(booster, i, dtrain)
        if on_checkpoint is not None and i + 1 in wanted and not on_checkpoint(booster, i + 1):
            break
    return booster


def fit(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    params: Mapping[str, float],
    settings: PseSettings,
    ref: xgb.QuantileDMatrix | None = None,
    groups: np.ndarray | None = None,
) -> tuple[Fit, xgb.QuantileDMatrix]:
    """One nuisance fit with the chosen hyperparameters (`groups`: `_matrix`)."""
    dtrain = _matrix(features, target, settings, ref, groups)
    booster = _train(
        xgb_params(kind, int(params["max_depth"]), params["reg_lambda"], settings),
        dtrain,
        int(params["n_estimators"]),
    )
    return Fit(booster, int(params["n_estimators"])), dtrain


def search(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    train: np.ndarray,
    valid: np.ndarray,
    settings: PseSettings,
    runner: Runner | None = None,
    ref: xgb.QuantileDMatrix | None = None,
    groups: np.ndarray | None = None,
) -> tuple[dict[str, float], Fit]:
    """Best (max_depth, reg_lambda, n_estimators) by validation Brier/MSE; ties keep the smaller model.
    With `settings.early_stopping`, a (max_depth, reg_lambda) model stops growing at the first tree
    count of the grid whose validation loss is above the previous count's, and the larger counts
    are not candidates. With `settings.prune_lambda_at`, each max_depth grows all its reg_lambda
    models to that tree count (`PseSettings.lambda_rung`) and only the best of them beyond it."""
    return _start_search(features, target, kind, train, valid, settings, runner or Runner(1), ref, groups)[0]()


def _start_search(
    features: np.ndarray,
    target: np.ndarray,
    kind: str,
    train: np.ndarray,
    valid: np.ndarray,
    settings: PseSettings,
    runner: Runner,
    ref: xgb.QuantileDMatrix | None = None,
    groups: np.ndarray | None = None,
) -> tuple[Callable[[], tuple[dict[str, float], Fit]], xgb.QuantileDMatrix]:
    """Submit one fit per (max_depth, reg_lambda), or per max_depth when pruning, to `runner`; returns a function that waits for
    them and picks the best grid point exactly as a serial loop over the grid would, and the
    training matrix (a `ref` for searches on the same features). Early stopping (`search`) is
    decided inside each fit from its own losses, so the selection does not depend on n_jobs."""
    grid = settings.grid
    dtrain = _matrix(features[train], target[train], settings, ref, None if groups is None else groups[train])
    y_valid = target[valid]
    # Identical validation rows get identical predictions: each distinct one is predicted once.
    first, position = (np.arange(len(valid)), None) if groups is None else distinct_rows(groups[valid])
    x_valid = features[valid[first]]

    # One validation matrix for the search's fits: they only read it (concurrent predictions from
    # several boosters are safe; each keeps its own prediction cache for it).
    dvalid = xgb.DMatrix(x_valid, nthread=1)

    def grow(
        depth: int, lam: float, rounds: int, state: tuple[xgb.Booster, dict[int, float]] | None = None
    ) -> tuple[xgb.Booster, dict[int, float]]:
        # The validation rows are scored as the trees are added: predicting a DMatrix with the
        # whole model reuses XGBoost's prediction cache, so each tree is evaluated once (100 tree
        # evaluations instead of 5 + 10 + 20 + 50 + 100), and the sums are the same floats, in the
        # same order, as `inplace_predict(x_valid, iteration_range=(0, n_trees))` gives.
        # Early stopping: a loss above the previous tree count's ends the fit (the rounds after it
        # are never trained; on the paper's grid and the simulated SFM this skips about 30% of the
        # rounds, the deepest, without changing a selection); unscored counts get an infinite loss.
        # `state` (a booster and its losses) is grown on to `rounds`.
        losses: dict[int, float] = {} if state is None else state[1]

        def score(booster: xgb.Booster, n_trees: int) -> bool:
            predicted = booster.predict(dvalid)
            if position is not None:
                predicted = predicted[position]
            loss = float(np.mean((predicted - y_valid) ** 2))
            previous = losses[max(losses)] if losses else np.inf
            losses[n_trees] = loss
            return not (settings.early_stopping and loss > previous)

        params = xgb_params(kind, depth, lam, settings)
        booster = _train(params, dtrain, rounds, grid.n_estimators, score, None if state is None else state[0])
        return booster, losses

    top, rung = max(grid.n_estimators), settings.lambda_rung()
    prune = rung < top and len(grid.reg_lambda) > 1

    def fit(depth: int, lams: Sequence[float]) -> list[tuple[xgb.Booster, list[float]]]:
        # Pruning (`settings.prune_lambda_at`): every lambda's model grows to the rung, then only
        # the one with the lowest loss there (ties: the smaller lambda) that has not stopped.
        models = [grow(depth, lam, rung if prune else top) for lam in lams]
        growing = [i for i, (_, losses) in enumerate(models) if rung in losses and not _rose(losses, settings)]
        if prune and growing:
            keep = min(growing, key=lambda i: models[i][1][rung])
            models[keep] = grow(depth, lams[keep], top, models[keep])
        return [(booster, [losses.get(n, np.inf) for n in grid.n_estimators]) for booster, losses in models]

    batches = [tuple(grid.reg_lambda)] if prune else [(lam,) for lam in grid.reg_lambda]
    pending = [(depth, lams, runner.submit(fit, depth, lams)) for depth in grid.max_depth for lams in batches]

    def best() -> tuple[dict[str, float], Fit]:
        chosen: tuple[float, dict[str, float], Fit] | None = None
        for depth, lams, future in pending:
            for lam, (booster, losses) in zip(lams, future.result()):
                for n_trees, loss in zip(grid.n_estimators, losses):
                    if chosen is None or loss < chosen[0] - 1e-12:
                        params = {"max_depth": depth, "reg_lambda": lam, "n_estimators": n_trees}
                        chosen = (loss, params, Fit(booster, n_trees))
        assert chosen is not None
        loss, params, model = chosen
        return {**params, "loss": loss}, model

    return best, dtrain


def _rose(losses: Mapping[int, float], settings: PseSettings) -> bool:
    """Whether early stopping ended a model: its last loss is above the one before."""
    values = [losses[n] for n in sorted(losses)]
    return settings.early_stopping and len(values) > 1 and values[-1] > values[-2]


def tune(
    encoded: NumericRoles, settings: PseSettings, families: Collection[str] = (OUTCOME, PROPENSITY)
) -> dict[str, dict[str, float]]:
    """Grid search for every nuisance of `families` on one stratified train/validation split of all rows.

    The nested regressions are tuned on pseudo-outcomes from the tuned model one level up, exactly as
    they are built during cross-fitting. All grid points of all searches go to one pool: the
    propensity searches fill the threads while the outcome chain (mu3, then mu2, then mu1) waits
    for its previous level; searches on the same features share histogram cuts. Each search is
    deterministic and none depends on another family's, so tuning one family alone selects what
    tuning both does."""
    rng = np.random.default_rng([settings.seed, 2])
    valid_mask = np.zeros(len(encoded.y), bool)
    for value in (0, 1):
        idx = rng.permutation(np.flatnonzero(encoded.a == value))
        valid_mask[idx[: max(1, round(settings.validation_fraction * len(idx)))]] = True
    train, valid = np.flatnonzero(~valid_mask), np.flatnonzero(valid_mask)
    lo, hi = encoded.y.min(), encoded.y.max()

    with closing(Runner(settings.n_jobs)) as runner:

        def start(name: str, target: np.ndarray, ref: xgb.QuantileDMatrix | None = None):
            features, groups = encoded.features(name), encoded.groups(name, settings.max_bin)
            ref = ref if ref is not None else cut_ref(encoded, name, train, settings)
            return _start_search(features, target, _kind(name), train, valid, settings, runner, ref, groups)

        out: dict[str, dict[str, float]] = {}
        mu3_search = start("mu3", encoded.y)[0] if OUTCOME in families else None
        propensity = (
            {name: start(name, encoded.a.astype(np.float32))[0] for name in PROPENSITIES}
            if PROPENSITY in families
            else {}
        )
        if mu3_search is not None:
            out["mu3"], mu3 = mu3_search()
            mu2_searches, ref = {}, None
            for x_y in MU2_KEYS:
                pseudo = predict_rows(mu3, encoded.features("mu3", x_y), encoded.groups("mu3", settings.max_bin))
                mu2_searches[x_y], ref = start("mu2", np.clip(pseudo, lo, hi), ref)
            mu1_searches, ref = {}, None
            for x_y in MU2_KEYS:
                out[f"mu2[x_y={x_y}]"], mu2 = mu2_searches[x_y]()
                for key in MU1_KEYS:
                    if key[0] == x_y:
                        pseudo = predict_rows(
                            mu2, encoded.features("mu2", key[1]), encoded.groups("mu2", settings.max_bin)
                        )
                        pseudo = np.clip(pseudo, lo, hi)
                        mu1_searches[key], ref = start("mu1", pseudo, ref)
            for key, search in mu1_searches.items():
                out[f"mu1[x_y={key[0]},x_b={key[1]}]"] = search()[0]
        for name, search in propensity.items():
            out[name] = search()[0]
    return {name: out[name] for name in nuisance_names(families)}


def nuisance_names(families: Collection[str] = (OUTCOME, PROPENSITY)) -> list[str]:
    """The nuisances of `families`, outcome chain first."""
    outcome = ["mu3"] + [f"mu2[x_y={v}]" for v in MU2_KEYS] + [f"mu1[x_y={v},x_b={w}]" for v, w in MU1_KEYS]
    return (outcome if OUTCOME in families else []) + (list(PROPENSITIES) if PROPENSITY in families else [])


def fit_outcome_chain(
    encoded: NumericRoles,
    fold_of: np.ndarray,
    fold: int,
    params: Mapping[str, Mapping[str, float]],
    settings: PseSettings,
) -> tuple[dict, dict, dict]:
    """The fold's outcome chain: mu3 at x_y, mu2 at (x_y, x_b) on every row, mu1 at (x_y, x_b, x_r)
    on the held-out rows, each nested model fit on the training rows' pseudo-outcomes."""
    train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
    y = encoded.y
    lo, hi = y[train].min(), y[train].max()

    def groups(name: str, rows: np.ndarray | None = None) -> np.ndarray | None:
        return encoded.groups(name, settings.max_bin, rows)

    def predict(model: Fit, name: str, x_value: int, rows: np.ndarray | None = None) -> np.ndarray:
        # Rows identical in the factual features are identical with X set to x_value: each group
        # is predicted once (`predict_rows`).
        features = encoded.features(name, x_value)
        features = features if rows is None else features[rows]
        return np.clip(predict_rows(model, features, groups(name, rows)), lo, hi)

    mu3, _ = fit(
        encoded.features("mu3")[train],
        y[train],
        "regressor",
        params["mu3"],
        settings,
        cut_ref(encoded, "mu3", train, settings),
        groups("mu3", train),
    )
    mu3_at = {v: predict(mu3, "mu3", v) for v in MU2_KEYS}
    mu2_at: dict[tuple[int, int], np.ndarray] = {}
    features, ref = encoded.features("mu2")[train], cut_ref(encoded, "mu2", train, settings)
    for v in MU2_KEYS:
        mu2, ref = fit(
            features, mu3_at[v][train], "regressor", params[f"mu2[x_y={v}]"], settings, ref, groups("mu2", train)
        )
        for w in sorted({w for vv, w in MU1_KEYS if vv == v}):
            mu2_at[(v, w)] = predict(mu2, "mu2", w)
    mu1_at: dict[tuple[int, int, int], np.ndarray] = {}
    features, ref = encoded.features("mu1")[train], cut_ref(encoded, "mu1", train, settings)
    for v, w in MU1_KEYS:
        target = mu2_at[(v, w)][train]
        mu1, ref = fit(
            features, target, "regressor", params[f"mu1[x_y={v},x_b={w}]"], settings, ref, groups("mu1", train)
        )
        for u in sorted({t[2] for t in TARGETS.values() if t[:2] == (v, w)}):
            mu1_at[(v, w, u)] = predict(mu1, "mu1", u, held)
    return mu3_at, mu2_at, mu1_at


def fit_propensity(
    encoded: NumericRoles,
    fold_of: np.ndarray,
    fold: int,
    name: str,
    params: Mapping[str, Mapping[str, float]],
    settings: PseSettings,
) -> np.ndarray:
    """P(X = x1 | .) of one propensity model, fit without the fold, on the fold's held-out rows
    (unclipped: what the nuisance cache keeps)."""
    train, held = np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)
    features = encoded.features(name)
    target = encoded.a[train].astype(np.float32)
    train_groups = encoded.groups(name, settings.max_bin, train)
    ref = cut_ref(encoded, name, train, settings)
    model, _ = fit(features[train], target, "classifier", params[name], settings, ref, train_groups)
    return predict_rows(model, features[held], encoded.groups(name, settings.max_bin, held))
