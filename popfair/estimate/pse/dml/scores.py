"""The DML-UCA algorithm behind `estimate_pse`: cross-fitting and the per-row doubly robust scores
(settings in `popfair.estimate.pse.settings`, the roles as numbers in `popfair.estimate.pse.nuisances.encoding`). The XGBoost nuisances are fit in
`popfair.estimate.pse.nuisances.models` and kept for reuse in `popfair.estimate.pse.nuisances.cache`.

For each counterfactual mean psi(x_y, x_b, x_r) (`popfair.estimate.pse.sfm.TARGETS`) the score is
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
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.types import Roles
from popfair.estimate.pse.identification import mean_diagnostics, worst
from popfair.estimate.pse.nuisances.cache import NuisanceCache, clear_memory_cache
from popfair.estimate.pse.nuisances.encoding import NumericRoles, assign_folds
from popfair.estimate.pse.nuisances.models import (
    OUTCOME,
    PROPENSITIES,
    PROPENSITY,
    Runner,
    fit_outcome_chain,
    fit_propensity,
    nuisance_names,
    tune,
)
from popfair.estimate.pse.settings import PseOverlapWarning, PseSettings, resolve_splits
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS

log = logging.getLogger("popfair.pse")
SENSITIVITY_CLIPS = (0.001, 0.005, 0.01, 0.02, 0.05)  # clipping bounds the sensitivity table re-scores


@dataclass
class DmlScores:
    """Cross-fitted doubly robust scores: one row per estimation row, one column per TARGETS mean."""

    phi_splits: np.ndarray  # n_splits x n x len(TARGETS): one cross-fit per fold assignment
    cluster: np.ndarray | None  # cluster code per row (0..G-1) when settings.cluster is set
    overlap: pd.DataFrame  # propensity ranges, clipped shares and largest weights
    identification: pd.DataFrame  # per TARGETS mean: weight masses, ESS, crossing rows (worst over splits)
    sensitivity: pd.DataFrame  # clip x effect: estimate, se, per-mean diagnostics (first fold assignment)
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
    encoded, n_excluded, notes = NumericRoles.from_frame(
        data, roles, y, cluster=settings.cluster, max_categories=settings.max_categories
    )
    fold_of = [
        assign_folds(encoded.a, settings.folds, settings.seed, x=roles.x, levels=(roles.x0, roles.x1), split=s)
        for s in range(resolve_splits(settings.n_splits, encoded.y))
    ]
    timings["encode"] = time.perf_counter() - clock

    with NuisanceCache.open(encoded, roles, settings, settings.cache_url or settings.cache_dir) as cache:
        clock = time.perf_counter()
        params, from_cache = {}, {}
        for family in (OUTCOME, PROPENSITY):
            found = cache.tuning(family)
            from_cache[family] = found is not None
            params.update(found or {})
        missing = [family for family, cached in from_cache.items() if not cached]
        if missing:
            tuned = tune(encoded, settings, missing)
            for family in missing:
                cache.store_tuning(family, {name: tuned[name] for name in nuisance_names((family,))})
            params.update(tuned)
        timings["tune"] = time.perf_counter() - clock

        clock = time.perf_counter()
        fits = [_cross_fit(encoded, folds, split, params, settings, cache) for split, folds in enumerate(fold_of)]
        phi_splits = np.stack([fit[0] for fit in fits])
        overlap = [row for fit in fits for row in fit[1]]
        timings["cross_fit"] = time.perf_counter() - clock
    names = nuisance_names()
    tuning = pd.DataFrame.from_dict({name: params[name] for name in names}, orient="index").rename_axis("nuisance")
    tuning["from_cache"] = [from_cache[PROPENSITY if name in PROPENSITIES else OUTCOME] for name in names]
    return DmlScores(
        phi_splits=phi_splits,
        cluster=encoded.cluster,
        overlap=_overlap_table(overlap, settings.clip, settings.folds),
        identification=worst([fit[2] for fit in fits]),
        sensitivity=fits[0][3],
        tuning=tuning,
        timings=timings,
        n_excluded=n_excluded,
        notes=notes,
    )


def _cross_fit(
    encoded: NumericRoles,
    fold_of: np.ndarray,
    split: int,
    params: Mapping[str, Mapping[str, float]],
    settings: PseSettings,
    cache: NuisanceCache,
) -> tuple[np.ndarray, list[dict[str, Any]], pd.DataFrame, pd.DataFrame]:
    """Per-row scores phi (n x 5 targets), each row scored by nuisances fit without its fold.
    Per fold, the outcome chain is one task and each propensity model another, all on one pool;
    the propensities' predictions come from the cache when this encoding's fold assignment `split`
    is there, the outcome chain's when this case (same Y, same hyperparameters) ran before."""
    n = len(encoded.y)
    phi = np.empty((n, len(TARGETS)))
    overlap: list[dict[str, Any]] = []
    weight_rows = {key: np.empty((n, len(TARGETS))) for key in ("pi2", "pi3", "crossing")}
    raw = cache.propensities(settings.folds, split)
    held_rows_of = cache.outcomes(settings.folds, split, params)  # a rerun of the same case
    names = ([] if raw is not None else list(PROPENSITIES)) + (
        [] if held_rows_of is not None else ["mu3", "mu2", "mu1"]
    )
    # each nuisance's distinct rows and values, found here once rather than raced for by the fits' threads
    for name in names:
        encoded.groups(name, settings.max_bin), encoded.levels(name, settings.max_bin)
    with closing(Runner(settings.n_jobs)) as runner:
        # Every fold's outcome chain (six sequential fits, the longest tasks) is queued before the
        # propensity models, so the threads end together instead of one finishing a chain alone.
        chains = [
            None
            if held_rows_of is not None
            else runner.submit(fit_outcome_chain, encoded, fold_of, fold, params, settings)
            for fold in range(settings.folds)
        ]
        propensities = [
            []
            if raw is not None
            else [
                runner.submit(fit_propensity, encoded, fold_of, fold, name, params, settings) for name in PROPENSITIES
            ]
            for fold in range(settings.folds)
        ]
        tasks = list(zip(chains, propensities))
        if raw is None:
            raw = np.empty((len(PROPENSITIES), n), np.float32)
            for fold, (_, fold_propensities) in enumerate(tasks):
                for row, future in zip(raw, fold_propensities):
                    row[fold_of == fold] = future.result()
            cache.store_propensities(settings.folds, split, raw)
        if held_rows_of is None:
            held_rows_of = _held_out(fold_of, [outcomes.result() for outcomes, _ in tasks if outcomes is not None])
            cache.store_outcomes(settings.folds, split, params, held_rows_of)
    fitted = _per_fold(fold_of, settings.folds, held_rows_of)
    for fold, outcome_fits in enumerate(fitted):
        held = fold_of == fold
        prob1, diagnostics = {}, []
        for name, predictions in zip(PROPENSITIES, raw):
            prob1[name], diagnostic = _clipped(predictions[held], name, settings.clip)
            diagnostics.append(diagnostic)
        held_rows, scores, weights, per_row = _fold_scores(encoded, fold_of, fold, outcome_fits, prob1)
        phi[held_rows] = scores
        for key, values in per_row.items():
            weight_rows[key][held_rows] = values
        overlap.extend({**row, "fold": fold} for row in diagnostics + weights)
    clipped_rows = np.asarray(((raw < settings.clip) | (raw > 1 - settings.clip)).any(axis=0))
    diagnostics_frame = mean_diagnostics(
        encoded.a,
        weight_rows["pi2"],
        weight_rows["pi3"],
        weight_rows["crossing"].astype(bool),
        np.repeat(clipped_rows[:, None], len(TARGETS), axis=1),
    )
    sensitivity = _clip_sensitivity(encoded, fold_of, fitted, raw, settings)
    return phi, overlap, diagnostics_frame, sensitivity


def _held_out(fold_of: np.ndarray, fitted: list[tuple[dict, dict, dict]]) -> dict[str, np.ndarray]:
    """The outcome chain's predictions that the scores read, one value per row from the chain fit
    without that row's fold: mu3 at x_y, mu2 at (x_y, x_b), mu1 at (x_y, x_b, x_r) (the nuisance cache's
    entry)."""
    rows: dict[str, np.ndarray] = {}
    for fold, levels in enumerate(fitted):
        held = fold_of == fold
        for prefix, at in zip(("mu3", "mu2", "mu1"), levels):
            for key, values in at.items():
                name = "_".join([prefix, *map(str, key if isinstance(key, tuple) else (key,))])
                column = rows.setdefault(name, np.empty(len(fold_of), np.asarray(values).dtype))
                column[held] = values if prefix == "mu1" else values[held]  # mu1 is predicted on held rows only
    return rows


def _per_fold(fold_of: np.ndarray, folds: int, rows: Mapping[str, np.ndarray]) -> list[tuple[dict, dict, dict]]:
    """`_held_out` back as each fold's (mu3_at, mu2_at, mu1_at), as `_fold_scores` reads them (mu3 and
    mu2 indexed by the held-out rows, mu1 given on them)."""
    out = []
    for fold in range(folds):
        held = fold_of == fold
        levels: tuple[dict, dict, dict] = ({}, {}, {})
        for name, column in rows.items():
            prefix, *key = name.split("_")
            codes = tuple(int(k) for k in key)
            index = ("mu3", "mu2", "mu1").index(prefix)
            levels[index][codes[0] if index == 0 else codes] = column[held] if index == 2 else column
        out.append(levels)
    return out


def _clip_sensitivity(
    encoded: NumericRoles, fold_of: np.ndarray, fitted: list, raw: np.ndarray, settings: PseSettings
) -> pd.DataFrame:
    """Each effect's estimate and influence-function SE, and each mean's diagnostics, re-scored with
    the same nuisances at every clipping bound of `SENSITIVITY_CLIPS` (and the case's own)."""
    frames = []
    for clip in sorted({*SENSITIVITY_CLIPS, settings.clip}):
        phi = np.empty((len(encoded.y), len(TARGETS)))
        rows = {key: np.empty((len(encoded.y), len(TARGETS))) for key in ("pi2", "pi3", "crossing")}
        for fold, outcome_fits in enumerate(fitted):
            prob1 = {name: np.clip(p[fold_of == fold], clip, 1 - clip) for name, p in zip(PROPENSITIES, raw)}
            held_rows, scores, _, per_row = _fold_scores(encoded, fold_of, fold, outcome_fits, prob1)
            phi[held_rows] = scores
            for key, values in per_row.items():
                rows[key][held_rows] = values
        clipped = np.asarray(((raw < clip) | (raw > 1 - clip)).any(axis=0))
        diag = mean_diagnostics(
            encoded.a,
            rows["pi2"],
            rows["pi3"],
            rows["crossing"].astype(bool),
            np.repeat(clipped[:, None], len(TARGETS), axis=1),
        )
        effects = phi @ CONTRASTS.T
        frames.append(
            pd.DataFrame(
                {
                    "clip": clip,
                    "effect": list(EFFECTS),
                    "estimate": effects.mean(axis=0),
                    "se": effects.std(axis=0, ddof=1) / np.sqrt(len(effects)),
                }
            ).assign(diagnostics=[diag] * len(EFFECTS))
        )
    return pd.concat(frames, ignore_index=True)


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
    encoded: NumericRoles,
    fold_of: np.ndarray,
    fold: int,
    outcomes: tuple[dict, dict, dict],
    prob1: Mapping[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]], dict[str, np.ndarray]]:
    """The held-out rows' doubly robust scores from the fold's nuisances, the weights' ranges, and
    per row and TARGETS mean the weights pi2, pi3 and whether the row is a crossing applicant
    (`popfair.estimate.pse.identification`)."""
    held = np.flatnonzero(fold_of == fold)
    mu3_at, mu2_at, mu1_at = outcomes

    def prob(name: str, level: int) -> np.ndarray:
        return prob1[name] if level == 1 else 1.0 - prob1[name]

    a_h, y_h = encoded.a[held], encoded.y[held]
    share = {1: float(encoded.a.mean()), 0: 1.0 - float(encoded.a.mean())}
    scores = np.empty((len(held), len(TARGETS)))
    rows = {key: np.empty((len(held), len(TARGETS))) for key in ("pi2", "pi3", "crossing")}
    diagnostics: list[dict[str, Any]] = []
    for j, (target, (v, w, u)) in enumerate(TARGETS.items()):
        ratio_r = prob("p_rz", u) / prob("p_z", u)
        pi1 = (a_h == u) / prob("p_z", u)
        pi2 = (a_h == w) / prob("p_rz", w) * ratio_r
        pi3 = (a_h == v) / prob("p_brz", v) * prob("p_brz", w) / prob("p_rz", w) * ratio_r
        m3, m2, m1 = mu3_at[v][held], mu2_at[(v, w)][held], mu1_at[(v, w, u)]
        scores[:, j] = pi3 * (y_h - m3) + pi2 * (m3 - m2) + pi1 * (m2 - m1) + m1
        # crossing: a row of x_v whose covariates are more typical of the other group than average
        # (its held-out probability of that group above the group's share of all rows)
        looks_other = prob("p_brz", w) > share[w] if v != w else prob("p_rz", u) > share[u]
        rows["pi2"][:, j], rows["pi3"][:, j], rows["crossing"][:, j] = pi2, pi3, (a_h == v) & looks_other
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
    return held, scores, diagnostics, rows


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
