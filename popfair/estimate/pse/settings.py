"""The settings of DML-UCA (`PseSettings`, config `estimator=pse_dml`): cross-fitting, clipping,
the XGBoost tuning grid (paper C.5), bootstrap, and their declared constraints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from popfair.core.constraints import (
    Boolean,
    Constraint,
    Interval,
    ListOf,
    Options,
    ParameterError,
    Rules,
    Text,
    validate,
)
from popfair.core.constraints import Path as PathRule
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED

BINARY_SPLITS = 5  # n_splits="auto" for a 0/1 outcome


class PseOverlapWarning(UserWarning):
    """Propensities near 0 or 1: some weights are large and estimates may be unstable."""


@dataclass(frozen=True)
class TuningGrid:
    """Hyperparameter grid for every XGBoost nuisance (the paper's C.5 by default).

    One model per (max_depth, reg_lambda) is fit with up to max(n_estimators) trees and evaluated at
    each tree count as the trees are added, so the grid costs len(max_depth) * len(reg_lambda) fits
    (with `PseSettings.early_stopping`, each stops at the first count whose validation loss rose)."""

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
    early_stopping : bool, default True
        A (max_depth, reg_lambda) model of the search stops growing at the first grid tree count
        whose validation loss is above the previous count's (False: score every grid point).
    prune_lambda_at : int or None, default 10
        Each max_depth grows its reg_lambda models to this tree count (`lambda_rung`), then only
        the one with the lowest validation loss there (None: every model grows to the end).
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
    gate : bool, default True
        Report effects the data do not identify as not identified (`popfair.estimate.pse.identification`).
    max_mass_error, min_ess, min_crossing : float, float, int
        The identification rule's thresholds (0.1, 200, 50).
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
    # A (depth, lambda) model stops at the first grid tree count whose validation loss rose (False:
    # every grid point is scored, the paper's exhaustive search; benchmarks/bench_pse.py --vs-reference).
    early_stopping: bool = True
    # Lambda pruning (`lambda_rung`): the paper's lambdas (0.5-5) barely shrink leaves of hundreds of
    # rows, so the models of one depth differ far less than the depths do; growing only each depth's
    # best at 10 trees to 100 trees cuts the search's rounds by 64% and moves the simulated SFM's
    # effects by at most 0.01 (docs/performance.md). None: every (depth, lambda) model grows to the end.
    prune_lambda_at: int | None = 10
    validation_fraction: float = 0.2  # tuning split
    max_categories: int = 32  # one-hot levels kept per categorical column
    max_bin: int = 64  # XGBoost histogram bins
    n_jobs: int | None = 1  # threads for independent XGBoost fits (None: every CPU this process may use)
    cluster: str | None = None  # column whose values are resampled whole (cluster-robust SEs)
    cache_dir: str | Path | None = (
        None  # where reusable nuisances are kept (popfair.estimate.pse.nuisances.cache; None: memory)
    )
    cache_url: str | None = None  # a database URL for them instead; wins over cache_dir
    # Identification gate (popfair.estimate.pse.identification, docs/concepts/identification.md): an effect
    # whose means fail it is reported as not identified, without numbers or labels. gate=False: report all.
    gate: bool = True
    max_mass_error: float = 0.1  # |mean weight - 1| allowed for pi3 and pi2 of each counterfactual mean
    min_ess: float = 200.0  # effective sample size of each mean's pi3 weights
    min_crossing: int = 50  # applicants of x_y whose covariates look like the other group, per mixing mean

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

    def lambda_rung(self) -> int:
        """The tree count at which the search keeps one reg_lambda per max_depth: the grid's largest
        count up to `prune_lambda_at` (its smallest if none is), or its largest with None (no pruning)."""
        counts = self.grid.n_estimators
        if self.prune_lambda_at is None:
            return max(counts)
        return max((n for n in counts if n <= self.prune_lambda_at), default=min(counts))


def resolve_splits(n_splits: int | str, y: np.ndarray) -> int:
    """The number of fold assignments: as set, or for "auto" BINARY_SPLITS when Y is 0/1, else 1."""
    if n_splits != "auto":
        return int(n_splits)
    return BINARY_SPLITS if np.isin(y, (0.0, 1.0)).all() else 1


PSE_CONSTRAINTS: Rules = {
    "folds": Interval(int, 2, None),
    "n_splits": [Options(["auto"]), Interval(int, 1, 50)],
    "n_bootstrap": N_BOOTSTRAP,
    "seed": SEED,
    "alpha": ALPHA,
    "clip": Interval(float, 0, 0.1, closed="neither"),
    "grid": GridRule(),
    "early_stopping": Boolean(),
    "prune_lambda_at": [None, Interval(int, 1, None)],
    "validation_fraction": Interval(float, 0.05, 0.5),
    "max_categories": Interval(int, 2, None),
    "max_bin": Interval(int, 2, 1024),
    "n_jobs": [None, Interval(int, 1, None)],
    "cluster": [None, Text()],
    "cache_dir": [None, PathRule()],
    "cache_url": [None, Text()],
    "gate": Boolean(),
    "max_mass_error": Interval(float, 0, 1, closed="neither"),
    "min_ess": Interval(float, 1, None),
    "min_crossing": Interval(int, 0, None),
}
