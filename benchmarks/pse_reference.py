"""An untuned, fixed-parameter DML-UCA of the five path-specific means: the reference `bench_pse.py
--vs-reference` times popfair's tuned estimator against.

Written apart from popfair's estimator (no shared encoding, folds, fits or scores): the columns are
one-hot encoded by pandas, the folds are scikit-learn's `StratifiedKFold` on X, and every nuisance is
an XGBoost scikit-learn model with the library's default hyperparameters (100 trees, depth 6,
learning rate 0.3, lambda 1, 256 bins), as a user who does not tune would fit them, each fit on one
thread and the folds' fits on `threads` threads (as popfair's are). Only
the estimand comes from popfair (`popfair.estimate.pse.sfm`: which counterfactual means, which contrasts).

The nuisances and the score are those of PopResume (arXiv 2603.22714, Table 1 and C.2), cross-fitted
on `folds` folds:

    mu3(B,R,X,Z) = E[Y | B,R,X,Z];  mu2(R,X,Z) = E[mu3(B,R,x_y,Z) | R,X,Z];  mu1(X,Z) = E[mu2(R,x_b,Z) | X,Z]
    pi1 = 1[X=x_r] / P(x_r|Z);  pi2 = 1[X=x_b] / P(x_b|R,Z) * P(x_r|R,Z) / P(x_r|Z)
    pi3 = 1[X=x_y] / P(x_y|B,R,Z) * P(x_b|B,R,Z) / P(x_b|R,Z) * P(x_r|R,Z) / P(x_r|Z)
    phi = pi3 (Y - mu3) + pi2 (mu3(B,R,x_y,Z) - mu2) + pi1 (mu2(R,x_b,Z) - mu1) + mu1(x_r,Z)

with the propensities clipped to [clip, 1 - clip]. Point estimates and influence-function SEs only
(no bootstrap: the comparison is of the estimates).

`column_order_seed` puts each one-hot block's columns in another order: the same data, folds and
learners, so the estimates move only by how XGBoost breaks ties between equally good splits. How far
the reference moves from itself that way is the most a comparison with it can ask of another
implementation of the same computation (`bench_pse.py --vs-reference`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.model_selection import StratifiedKFold

from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS


def _onehot(frame: pd.DataFrame, order: np.random.Generator | None = None) -> np.ndarray:
    encoded = pd.get_dummies(frame, dtype=np.float32).to_numpy(np.float32)
    return encoded if order is None else encoded[:, order.permutation(encoded.shape[1])]


def reference_pse(
    data: pd.DataFrame,
    *,
    x: str,
    x0: str,
    x1: str,
    z: Sequence[str],
    b: Sequence[str],
    r: Sequence[str],
    y: str,
    folds: int | np.ndarray = 5,
    clip: float = 0.01,
    seed: int = 0,
    params: Mapping[str, Any] | None = None,
    threads: int = 1,
    column_order_seed: int | None = None,
) -> pd.DataFrame:
    """Effects TE, NDE, NIE, BIE, RIE (positive favours x1) x estimate, se from fixed-parameter nuisances.
    `folds`: a number of stratified folds, or a fold id per kept row (to cross-fit on the same
    assignment as another estimator, so that a comparison sees the nuisances alone); `params`:
    XGBoost scikit-learn keywords over the library's defaults (each fit single-threaded); `threads`:
    folds' fits run at once; `column_order_seed`: each one-hot block's columns shuffled with this seed
    (None: pandas' order)."""
    rows = data[data[x].astype(str).isin([x0, x1])]
    a = (rows[x].astype(str) == x1).to_numpy(int)
    outcome = rows[y].to_numpy(float)
    order = None if column_order_seed is None else np.random.default_rng(column_order_seed)
    zb, bb, rb = (_onehot(rows[list(columns)], order) for columns in (z, b, r))
    fixed = {"random_state": seed, "n_jobs": 1, **(params or {})}

    def with_x(value: np.ndarray | int, *blocks: np.ndarray) -> np.ndarray:
        column = np.broadcast_to(np.asarray(value, np.float32), (len(a),))[:, None]
        return np.hstack([*blocks, column])

    def regress(features: np.ndarray, target: np.ndarray) -> xgb.XGBRegressor:
        return xgb.XGBRegressor(**fixed).fit(features, target)

    def propensity(features: np.ndarray, train: np.ndarray, held: np.ndarray) -> np.ndarray:
        model = xgb.XGBClassifier(**fixed).fit(features[train], a[train])
        return np.clip(model.predict_proba(features[held])[:, 1], clip, 1 - clip)

    def outcome_chain(train: np.ndarray, held: np.ndarray) -> tuple[dict, dict, dict]:
        lo, hi = outcome[train].min(), outcome[train].max()
        mu3 = regress(with_x(a, bb, rb, zb)[train], outcome[train])
        mu3_at = {v: np.clip(mu3.predict(with_x(v, bb, rb, zb)), lo, hi) for v in (0, 1)}
        mu2_at, mu1_at = {}, {}
        for v in (0, 1):
            mu2 = regress(with_x(a, rb, zb)[train], mu3_at[v][train])
            for w in (0, 1):
                mu2_at[v, w] = np.clip(mu2.predict(with_x(w, rb, zb)), lo, hi)
        for v, w in sorted({(v, w) for v, w, _ in TARGETS.values()}):
            mu1 = regress(with_x(a, zb)[train], mu2_at[v, w][train])
            for u in (0, 1):
                mu1_at[v, w, u] = np.clip(mu1.predict(with_x(u, zb)[held]), lo, hi)
        return mu3_at, mu2_at, mu1_at

    def propensities(train: np.ndarray, held: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "z": propensity(zb, train, held),
            "rz": propensity(np.hstack([rb, zb]), train, held),
            "brz": propensity(np.hstack([bb, rb, zb]), train, held),
        }

    if isinstance(folds, int):
        splits = list(StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(np.zeros(len(a)), a))
    else:
        splits = [(np.flatnonzero(folds != k), np.flatnonzero(folds == k)) for k in np.unique(folds)]
    # Each fold's outcome chain and its propensity models are two tasks on `threads` threads, every
    # fit single-threaded (XGBoost releases the GIL): two cores are used without OpenMP's threads,
    # which spin and stall on a loaded machine.
    with ThreadPoolExecutor(max_workers=threads) as pool:
        tasks = [(pool.submit(outcome_chain, *split), pool.submit(propensities, *split)) for split in splits]
        fitted = [(chain.result(), props.result()) for chain, props in tasks]
    phi = np.empty((len(a), len(TARGETS)))
    for (_, held), ((mu3_at, mu2_at, mu1_at), p1) in zip(splits, fitted):

        def p(name: str, level: int, p1: dict[str, np.ndarray] = p1) -> np.ndarray:
            return p1[name] if level == 1 else 1.0 - p1[name]

        a_h, y_h = a[held], outcome[held]
        for j, (v, w, u) in enumerate(TARGETS.values()):
            ratio_r = p("rz", u) / p("z", u)
            pi1 = (a_h == u) / p("z", u)
            pi2 = (a_h == w) / p("rz", w) * ratio_r
            pi3 = (a_h == v) / p("brz", v) * p("brz", w) / p("rz", w) * ratio_r
            m3, m2, m1 = mu3_at[v][held], mu2_at[v, w][held], mu1_at[v, w, u]
            phi[held, j] = pi3 * (y_h - m3) + pi2 * (m3 - m2) + pi1 * (m2 - m1) + m1
    effects = phi @ CONTRASTS.T
    return pd.DataFrame(
        {"estimate": effects.mean(axis=0), "se": effects.std(axis=0, ddof=1) / np.sqrt(len(a))},
        index=pd.Index(EFFECTS, name="effect"),
    )
