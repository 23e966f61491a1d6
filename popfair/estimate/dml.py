"""The DML-UCA algorithm behind `estimate_pse`: its settings, encoding the SFM roles, stratified
cross-fitting folds and the per-row doubly robust scores. The XGBoost nuisances are fit in
`popfair.estimate.nuisances` and kept for reuse in `popfair.estimate.nuisance_cache`.

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
score (classifiers) or MSE (regressors). Propensities do not involve Y: their tuning and their
cross-fitted predictions are reused by every case on the same applicants; the outcome chain's
tuning is reused by a rerun of the same case.

Overlap: propensities are clipped to [clip, 1 - clip] before they enter any ratio; the number of
clipped predictions and the largest weights pi1, pi2, pi3 are reported (`overlap_table`), and a
`PseOverlapWarning` is issued when clipping touches more than 1% of rows or a weight exceeds
`1 / clip ** 2`.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from popfair.constraints import Constraint, Interval, ListOf, Options, ParameterError, Rules, Text, validate
from popfair.constraints import Path as PathRule
from popfair.errors import EstimationError
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED
from popfair.estimate.nuisance_cache import NuisanceCache, clear_memory_cache
from popfair.estimate.nuisances import (
    FEATURE_SETS,
    OUTCOME,
    PROPENSITIES,
    PROPENSITY,
    Runner,
    fit_outcome_chain,
    fit_propensity,
    nuisance_names,
    tune,
)
from popfair.estimate.sfm import TARGETS
from popfair.types import Roles

log = logging.getLogger("popfair.pse")

BINARY_SPLITS = 5  # n_splits="auto" for a 0/1 outcome


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
    `estimator=pse_dml` config take these names (conf/estimator/pse_dml.yaml documents each).

    Parameters
    ----------
    folds : int, default 5
        Cross-fitting folds L.
    n_splits : int or "auto", default "auto"
        Fold assignments cross-fit and averaged (mean-aggregation variance of Chernozhukov et al.
        2018, 3.4); "auto": 1 for scores (the paper's single split), 5 for 0/1 outcomes.
    n_bootstrap : int, default 500
        Bootstrap resamples of the score rows (or clusters).
    seed : int, default 0
        Seeds folds, tuning split and bootstrap.
    alpha : float, default 0.05
        1 - CI level.
    clip : float, default 0.01
        Propensities are clipped to [clip, 1 - clip].
    grid : TuningGrid
        XGBoost hyperparameter grid (the paper's C.5).
    validation_fraction : float, default 0.2
        Share of rows held out to choose hyperparameters.
    max_categories : int, default 32
        One-hot levels kept per categorical column (rarer levels pooled).
    max_bin : int, default 64
        XGBoost histogram bins.
    n_jobs : int or None, default 1
        Threads for independent XGBoost fits (None: every CPU this process may use).
    cluster : str, optional
        Column whose values are resampled whole (cluster-robust SEs).
    cache_dir : str or Path, optional
        Where reusable nuisances are kept (None: memory only).
    cache_url : str, optional
        A database URL for them instead (the server cache of a sweep over machines); wins over
        `cache_dir`.
    """

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
    cache_dir: str | Path | None = (
        None  # where reusable nuisances are kept (popfair.estimate.nuisance_cache; None: memory)
    )
    cache_url: str | None = None  # a database URL for them instead; wins over cache_dir

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> PseSettings:
        """Settings from keyword values, checked against `PSE_CONSTRAINTS`.

        Parameters
        ----------
        values : Mapping
            Setting name -> value; a bad value raises ParameterError naming the key, an unknown
            key a TypeError, as for any function.

        Returns
        -------
        PseSettings
            The checked settings.
        """
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
    "cache_url": [None, Text()],
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

    with NuisanceCache.open(design, roles, settings, settings.cache_url or settings.cache_dir) as cache:
        clock = time.perf_counter()
        params, from_cache = {}, {}
        for family in (OUTCOME, PROPENSITY):
            found = cache.tuning(family)
            from_cache[family] = found is not None
            params.update(found or {})
        missing = [family for family, cached in from_cache.items() if not cached]
        if missing:
            tuned = tune(design, settings, missing)
            for family in missing:
                cache.store_tuning(family, {name: tuned[name] for name in nuisance_names((family,))})
            params.update(tuned)
        timings["tune"] = time.perf_counter() - clock

        clock = time.perf_counter()
        fits = [_cross_fit(design, folds, split, params, settings, cache) for split, folds in enumerate(fold_of)]
        phi_splits = np.stack([phi for phi, _ in fits])
        overlap = [row for _, rows in fits for row in rows]
        timings["cross_fit"] = time.perf_counter() - clock
    names = nuisance_names()
    tuning = pd.DataFrame.from_dict({name: params[name] for name in names}, orient="index").rename_axis("nuisance")
    tuning["from_cache"] = [from_cache[PROPENSITY if name in PROPENSITIES else OUTCOME] for name in names]
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


def _cross_fit(
    design: _Design,
    fold_of: np.ndarray,
    split: int,
    params: Mapping[str, Mapping[str, float]],
    settings: PseSettings,
    cache: NuisanceCache,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Per-row scores phi (n x 5 targets), each row scored by nuisances fit without its fold.
    Per fold, the outcome chain is one task and each propensity model another, all on one pool;
    the propensities' predictions come from the cache when this design's fold assignment `split`
    is there."""
    n = len(design.y)
    phi = np.empty((n, len(TARGETS)))
    overlap: list[dict[str, Any]] = []
    raw = cache.propensities(settings.folds, split)
    with closing(Runner(settings.n_jobs)) as runner:
        tasks = [
            (
                runner.submit(fit_outcome_chain, design, fold_of, fold, params, settings),
                []
                if raw is not None
                else [
                    runner.submit(fit_propensity, design, fold_of, fold, name, params, settings)
                    for name in PROPENSITIES
                ],
            )
            for fold in range(settings.folds)
        ]
        if raw is None:
            raw = np.empty((len(PROPENSITIES), n), np.float32)
            for fold, (_, propensities) in enumerate(tasks):
                for row, future in zip(raw, propensities):
                    row[fold_of == fold] = future.result()
            cache.store_propensities(settings.folds, split, raw)
        for fold, (outcomes, _) in enumerate(tasks):
            held = fold_of == fold
            prob1, diagnostics = {}, []
            for name, predictions in zip(PROPENSITIES, raw):
                prob1[name], diagnostic = _clipped(predictions[held], name, settings.clip)
                diagnostics.append(diagnostic)
            held_rows, scores, weights = _fold_scores(design, fold_of, fold, outcomes.result(), prob1)
            phi[held_rows] = scores
            overlap.extend({**row, "fold": fold} for row in diagnostics + weights)
    return phi, overlap


def _clipped(raw: np.ndarray, name: str, clip: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Held-out propensities clipped to [clip, 1 - clip], and their range and clipped count."""
    clipped = (raw < clip) | (raw > 1 - clip)
    diagnostics = {
        "kind": "propensity",
        "name": name,
        "min": float(raw.min()),
        "max": float(raw.max()),
        "n_clipped": int(clipped.sum()),
        "n": len(raw),
    }
    return np.clip(raw, clip, 1 - clip), diagnostics


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


def clear_tuning_cache() -> None:
    """Forget the nuisances (tuned hyperparameters, propensity predictions) kept in memory by
    estimates without a `cache_dir`; on-disk caches are left alone."""
    clear_memory_cache()
