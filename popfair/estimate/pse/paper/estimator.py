"""`estimator=pse_paper`: the PopResume authors' estimator as they published it, beside popfair's
diagnostics of what its numbers rest on.

Implemented from the description of their `3_causal_estimation/causal_effect.py` (read for its
facts, not copied): the same five counterfactual means as `pse_dml` (`popfair.estimate.pse.sfm.TARGETS`,
the same contrasts), estimated differently:

- Self-normalised weights. Each weight vector (the residual's pi3, the middle term's pi2, the outer
  term's pi1) is divided by its own mean over the rows before it weights anything; the paper reports
  these self-normalised effects. Correct weights average 1, so the division changes nothing where the
  propensities are right; where the crossing applicants are too few (nurse x gender), the raw weights
  average far below 1 and the division scales them back up, hiding the shortfall.
- BIE and RIE as the average of the two decomposition orders (CONTRASTS, as pse_dml).
- Outcome models per group: E[Y | Z] and E[Y | W,V,Z] fit on the rows of one X level; the nested
  regressions are fit on random halves (NDE) and thirds (the two W/V orders) of each training fold,
  the pseudo-outcome of one part regressed on the next (`popfair.estimate.pse.paper.tuning`).
- Hyperparameters from the paper's grid by 5-fold CV, searched once on all rows (cached).
- Propensities clipped to [clip, 1 - clip], clip = 0.01 by default (their README's command for the
  paper; their script's own default is 1e-4).
- Resample-and-refit bootstrap: each iteration draws n rows with replacement, cross-fits every
  nuisance on them (5 folds) and computes the effects; the point estimate is the mean over
  iterations, the interval its percentiles, the SE its standard deviation.

No identification gate hides a number. Beside each effect it prints popfair's diagnostics of the
same weights, before self-normalisation (`popfair.estimate.pse.identification`): how far each mean's
raw weights average from 1, their effective sample size, the crossing applicants, the clipped share,
and whether popfair's rule would report the effect. That is the side-by-side: the paper's number and
what it rests on."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Boolean, Interval, ParameterError, Rules, Text, validate
from popfair.core.constraints import Path as PathRule
from popfair.core.errors import EstimationError
from popfair.core.types import Effects, Plot, Roles
from popfair.estimate.base import EFFECT_COLUMNS, factual_rows
from popfair.estimate.inference import ALPHA, SEED, bootstrap_se, percentile_ci
from popfair.estimate.pse.identification import IdentificationRule, mean_diagnostics, mean_problems
from popfair.estimate.pse.nuisances.encoding import NumericRoles
from popfair.estimate.pse.nuisances.models import Runner
from popfair.estimate.pse.paper.progress import FITS_PER_ITERATION, IterationProgress, keep_timing, price
from popfair.estimate.pse.paper.tuning import Grouped, PaperData, fit_grouped, tuned
from popfair.estimate.pse.settings import GridRule, TuningGrid
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS, pattern_labels

log = logging.getLogger("popfair.pse")
DIAGNOSTICS = ("mass_pi3", "mass_pi2", "mass_pi1", "ess", "crossing", "share_clipped")


@dataclass(frozen=True)
class PaperSettings:
    """The settings of `estimator=pse_paper` (conf/estimator/pse_paper.yaml documents each)."""

    folds: int = 5  # cross-fitting folds inside each bootstrap iteration
    cv_folds: int = 5  # folds of the hyperparameter search
    n_bootstrap: int = 500  # resample-and-refit iterations
    clip: float = 0.01  # propensities clipped to [clip, 1 - clip]
    alpha: float = 0.05
    seed: int = 0
    grid: TuningGrid = field(default_factory=TuningGrid)
    n_jobs: int | None = 1  # threads: bootstrap iterations and grid points run side by side
    cache_dir: str | Path | None = None
    cache_url: str | None = None
    self_normalise: bool = True  # False: the unnormalised means (the authors compute both, report these)
    max_mass_error: float = 0.1  # popfair's identification rule, for the diagnostics only
    min_ess: float = 200.0
    min_crossing: int = 50

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> PaperSettings:
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise TypeError(f"unknown pse_paper settings {unknown}; allowed: {sorted(cls.__dataclass_fields__)}")
        validate(PAPER_CONSTRAINTS, values)
        return cls(**{**values, "grid": TuningGrid.build(values.get("grid"))})


PAPER_CONSTRAINTS: Rules = {
    "folds": Interval(int, 2, None),
    "cv_folds": Interval(int, 2, None),
    "n_bootstrap": Interval(int, 2, None),  # the paper's 500 is the default; a few for a quick look
    "clip": Interval(float, 0, 0.1, closed="neither"),
    "alpha": ALPHA,
    "seed": SEED,
    "grid": GridRule(),
    "n_jobs": [None, Interval(int, 1, None)],
    "cache_dir": [None, PathRule()],
    "cache_url": [None, Text()],
    "self_normalise": Boolean(),
    "max_mass_error": Interval(float, 0, 1, closed="neither"),
    "min_ess": Interval(float, 1, None),
    "min_crossing": Interval(int, 0, None),
}


@dataclass
class PaperResult:
    """`table`: effects x estimate (mean over iterations), se (their SD), percentile CI, p_value,
    significant, and popfair's diagnostics of the raw weights; `means`: the five counterfactual means;
    `iterations`: per iteration the effects, means (self-normalised and not) and weight diagnostics;
    `diagnostics`: per mean, the diagnostics averaged over iterations with popfair's verdict."""

    table: pd.DataFrame
    means: pd.DataFrame
    iterations: pd.DataFrame
    diagnostics: pd.DataFrame
    tuning: pd.DataFrame
    labels: list[str]
    notes: list[str]
    timings: dict[str, float]
    n: int
    n_excluded: int


def estimate_pse_paper(
    data: pd.DataFrame, *, x: str, x0: str, x1: str, z: Any, b: Any, r: Any, y: str, **settings: Any
) -> PaperResult:
    """TE, NDE, NIE, BIE, RIE of X on Y as the PopResume authors estimate them (module docstring).
    Settings: the fields of `PaperSettings`."""
    try:
        checked = PaperSettings.build(settings)
    except ParameterError as exc:
        raise EstimationError(str(exc)) from None
    roles = Roles(x=x, x0=x0, x1=x1, z=tuple(z), b=tuple(b), r=tuple(r))
    return _estimate(data, roles, y, checked)


def _rows(data: pd.DataFrame, roles: Roles, y: str) -> tuple[PaperData, int]:
    """The x0 / x1 rows with an outcome, checked as pse_dml checks them, as XGBoost input."""
    encoded, n_excluded, _ = NumericRoles.from_frame(data, roles, y, cluster=None, max_categories=2)
    present = data[roles.x].astype(object).where(data[roles.x].isna(), data[roles.x].astype(str))
    outcome = pd.to_numeric(data[y], errors="coerce") if data[y].dtype != bool else data[y].astype(float)
    rows = data.loc[present.isin([roles.x0, roles.x1]) & outcome.notna()]
    return PaperData.from_rows(rows, roles, encoded.a, encoded.y), n_excluded


def _estimate(data: pd.DataFrame, roles: Roles, y: str, settings: PaperSettings) -> PaperResult:
    clock = time.perf_counter()
    paper, n_excluded = _rows(data, roles, y)
    for level, name in ((0, roles.x0), (1, roles.x1)):
        if (paper.a == level).sum() < 3 * settings.folds * settings.cv_folds:
            raise EstimationError(
                f"pse_paper: {roles.x}={name!r} has {(paper.a == level).sum()} rows; its nested regressions "
                f"need at least {3 * settings.folds * settings.cv_folds} (folds x thirds x CV folds)"
            )
    timings = {"encode": time.perf_counter() - clock}
    with closing(Runner(settings.n_jobs)) as runner:
        log.info(
            "pse_paper: the grid search's selections (cached), then %d resample-and-refit iterations of %d XGBoost "
            "fits each, %d side by side; the minutes they take are printed after the first",
            settings.n_bootstrap,
            FITS_PER_ITERATION * settings.folds,
            runner.workers,
        )
        log.info("%s", price(settings, len(paper.y)))
        clock = time.perf_counter()
        params, cached = tuned(
            paper,
            roles,
            settings.grid,
            settings.cv_folds,
            settings.seed,
            runner,
            settings.cache_url or settings.cache_dir,
        )
        timings["tune"] = time.perf_counter() - clock
        clock = time.perf_counter()
        futures = [runner.submit(_iteration, paper, params, settings, i) for i in range(settings.n_bootstrap)]
        done = []
        progress = IterationProgress(settings.n_bootstrap, runner.workers)
        for future in futures:
            done.append(future.result())
            progress.step()
        progress.close()
        timings["bootstrap"] = time.perf_counter() - clock
        keep_timing(settings, len(paper.y), timings["bootstrap"], settings.n_bootstrap, runner.workers)
    iterations = pd.DataFrame([row for row, _ in done])
    diagnostics = pd.concat([diag for _, diag in done]).groupby(level=0, sort=False).mean().reindex(list(TARGETS))
    rule = IdentificationRule(settings.max_mass_error, settings.min_ess, settings.min_crossing)
    problems = mean_problems(diagnostics, rule, (str(roles.x0), str(roles.x1)))
    diagnostics["popfair_rule"] = [problems.get(t, "identified") for t in diagnostics.index]
    table, means = _summary(iterations, diagnostics, problems, settings)
    labels = pattern_labels(table)
    table["pattern"] = "; ".join(labels) if labels else "none"
    tuning = pd.DataFrame.from_dict(params, orient="index").rename_axis("nuisance")
    tuning["from_cache"] = [cached["propensity" if name.startswith("px") else "outcome"] for name in tuning.index]
    return PaperResult(
        table=table,
        means=means,
        iterations=iterations,
        diagnostics=diagnostics,
        tuning=tuning,
        labels=labels,
        notes=weight_notes(diagnostics, problems, roles, settings),
        timings=timings,
        n=len(paper.y),
        n_excluded=n_excluded,
    )


def _iteration(
    data: PaperData, params: Mapping[str, Mapping[str, float]], settings: PaperSettings, i: int
) -> tuple[dict[str, float], pd.DataFrame]:
    """One resample-and-refit iteration: the effects and means, and the raw weights' diagnostics."""
    n, seed = len(data.y), settings.seed
    rows = np.random.default_rng([seed, 52, i]).integers(0, n, n)  # n rows drawn with replacement
    a, y = data.a[rows], data.y[rows]
    nuisance = {name: np.empty(n) for name in NUISANCE_COLUMNS}
    raw = np.empty((3, n))
    parts = np.array_split(np.random.default_rng([seed, 3, i]).permutation(n), settings.folds)  # shuffled K-fold
    for k, ts in enumerate(parts):
        tr = np.concatenate(parts[:k] + parts[k + 1 :])
        _fold(data, rows, a, y, tr, ts, params, seed, i, nuisance, raw)
    prob = np.clip(raw, settings.clip, 1 - settings.clip)
    weights = target_weights(a, *prob)
    row: dict[str, float] = {"iteration": float(i)}
    means = {sn: counterfactual_means(weights, nuisance, y, sn) for sn in (True, False)}
    for sn, values in means.items():
        suffix = "" if sn == settings.self_normalise else ("_sn" if sn else "_raw")
        row.update({f"{t}{suffix}": v for t, v in zip(TARGETS, values)})
        row.update({f"{e}{suffix}": v for e, v in zip(EFFECTS, CONTRASTS @ values)})
    return row, _diagnostics(a, weights, prob, raw, settings.clip)


NUISANCE_COLUMNS = ("y_zx0", "y_zx1", "mu2_ne", "mu1_ne", "mu3_v", "mu2_vde", "mu1_vde", "mu2_wde", "mu1_wde")


def _fold(
    data: PaperData,
    rows: np.ndarray,
    a: np.ndarray,
    y: np.ndarray,
    tr: np.ndarray,
    ts: np.ndarray,
    params: Mapping[str, Mapping[str, float]],
    seed: int,
    i: int,
    out: dict[str, np.ndarray],
    raw: np.ndarray,
) -> None:
    """The fold's nuisances, fit on the training positions `tr` of the resample and predicted on its
    held-out positions `ts` (positions index the resample; `rows[p]` is the data row). Each model is
    grown on the distinct rows of its training rows, weighted by their counts, and predicts each
    distinct row once (`paper_tuning.PaperData.grouped`): the same models as row by row, faster."""
    test = Grouped(data, rows[ts])

    def fit_on(positions: np.ndarray, roles: str, target: np.ndarray, name: str, kind: str = "regressor"):
        return fit_grouped(data, rows[positions], roles, target, kind, params[name], seed)

    def on(model: Any, positions: np.ndarray, roles: str) -> np.ndarray:
        return Grouped(data, rows[positions]).predict(model, roles)

    for j, (name, roles) in enumerate((("px_z", "z"), ("px_wz", "rz"), ("px_wvz", "brz"))):
        raw[j, ts] = test.predict(fit_on(tr, roles, a[tr].astype(float), name, "classifier"), roles)
    for level in (0, 1):
        group = tr[a[tr] == level]
        out[f"y_zx{level}"][ts] = test.predict(fit_on(group, "z", y[group], f"y_zx{level}"), "z")
    # NDE: E[Y | W,V,Z, x1] on one half, regressed on Z among the other half's x0 rows
    mu, ns = np.array_split(np.random.default_rng([seed, 1, i]).permutation(tr), 2)
    top = fit_on(mu[a[mu] == 1], "brz", y[mu[a[mu] == 1]], "y_wvzx1")
    inner = ns[a[ns] == 0]
    out["mu2_ne"][ts] = test.predict(top, "brz")
    out["mu1_ne"][ts] = test.predict(fit_on(inner, "z", on(top, inner, "brz"), "mu2_zx0"), "z")
    # the two W/V orders share one E[Y | W,V,Z, x1] (on the first third): V drawn at x0 given W drawn
    # at x1 (middle on x0 rows, outer on x1 rows), and V at x1 given W at x0 (the other way round)
    mu, ns1, ns2 = np.array_split(np.random.default_rng([seed, 2, i]).permutation(tr), 3)
    top = fit_on(mu[a[mu] == 1], "brz", y[mu[a[mu] == 1]], "y_wvzx1")
    out["mu3_v"][ts] = test.predict(top, "brz")
    for order, (middle_level, middle_name, outer_name) in {
        "vde": (0, "mu3_wzx0", "mu2_zx1"),
        "wde": (1, "mu3_wzx1", "mu2_zx0"),
    }.items():
        middle_rows = ns1[a[ns1] == middle_level]
        middle = fit_on(middle_rows, "rz", on(top, middle_rows, "brz"), middle_name)
        outer_rows = ns2[a[ns2] == 1 - middle_level]
        out[f"mu2_{order}"][ts] = test.predict(middle, "rz")
        outer = fit_on(outer_rows, "z", on(middle, outer_rows, "rz"), outer_name)
        out[f"mu1_{order}"][ts] = test.predict(outer, "z")


def target_weights(a: np.ndarray, p_z: np.ndarray, p_rz: np.ndarray, p_brz: np.ndarray) -> dict[str, tuple]:
    """Per TARGETS mean psi(x_y, x_b, x_r): the raw weights (pi3, pi2, pi1) of its residual, middle and
    outer terms (`popfair.estimate.pse.dml.scores`'s formulas), and its crossing applicants: rows of x_y whose
    held-out propensity gives the other group more than its share of the rows."""

    def prob(p: np.ndarray, level: int) -> np.ndarray:
        return p if level == 1 else 1.0 - p

    share = {1: float(a.mean()), 0: 1.0 - float(a.mean())}
    out = {}
    for target, (v, w, u) in TARGETS.items():
        ratio_r = prob(p_rz, u) / prob(p_z, u)
        pi1 = (a == u) / prob(p_z, u)
        pi2 = (a == w) / prob(p_rz, w) * ratio_r
        pi3 = (a == v) / prob(p_brz, v) * prob(p_brz, w) / prob(p_rz, w) * ratio_r
        looks_other = prob(p_brz, w) > share[w] if v != w else prob(p_rz, u) > share[u]
        out[target] = (pi3, pi2, pi1, (a == v) & looks_other)
    return out


def counterfactual_means(
    weights: Mapping[str, tuple], nuisance: Mapping[str, np.ndarray], y: np.ndarray, sn: bool
) -> np.ndarray:
    """The five means: each term's weights divided by their mean when `sn` (self-normalised)."""
    norm = (lambda w: w / w.mean()) if sn else (lambda w: w)
    chains = {  # per target: (outcome regression at the rows, middle, outer); None where a term collapses
        "E[Y_x0]": (nuisance["y_zx0"], None, None),
        "E[Y_x1]": (nuisance["y_zx1"], None, None),
        "E[Y_x1,W_x0]": (nuisance["mu2_ne"], None, nuisance["mu1_ne"]),
        "E[Y_x1,B_x0R_x1,R_x1]": (nuisance["mu3_v"], nuisance["mu2_vde"], nuisance["mu1_vde"]),
        "E[Y_x1,B_x1R_x0,R_x0]": (nuisance["mu3_v"], nuisance["mu2_wde"], nuisance["mu1_wde"]),
    }
    values = []
    for target, (m3, m2, m1) in chains.items():
        pi3, pi2, pi1, _ = weights[target]
        if m1 is None:  # E[Y_x]: AIPW with the per-group E[Y | Z] (pi3 = 1[X=x] / P(x | Z))
            values.append(np.mean(norm(pi3) * (y - m3)) + np.mean(m3))
        elif m2 is None:  # E[Y_x1,W_x0]: the middle term collapses (x_b = x_r); its weight is pi1's
            values.append(np.mean(norm(pi3) * (y - m3)) + np.mean(norm(pi1) * (m3 - m1)) + np.mean(m1))
        else:
            values.append(
                np.mean(norm(pi3) * (y - m3))
                + np.mean(norm(pi2) * (m3 - m2))
                + np.mean(norm(pi1) * (m2 - m1))
                + np.mean(m1)
            )
    return np.array(values)


def _diagnostics(
    a: np.ndarray, weights: Mapping[str, tuple], prob: np.ndarray, raw: np.ndarray, clip: float
) -> pd.DataFrame:
    """popfair's per-mean diagnostics of one iteration's raw weights, plus the outer weight's mass."""
    pi3, pi2, pi1, crossing = (np.column_stack([weights[t][k] for t in TARGETS]) for k in range(4))
    clipped = np.asarray(((raw < clip) | (raw > 1 - clip)).any(axis=0))
    frame = mean_diagnostics(a, pi2, pi3, crossing, np.repeat(clipped[:, None], len(TARGETS), axis=1))
    frame["mass_pi1"] = pi1.mean(axis=0)
    return frame[list(DIAGNOSTICS)]


def _summary(
    iterations: pd.DataFrame, diagnostics: pd.DataFrame, problems: Mapping[str, str], settings: PaperSettings
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Effects and means: mean over iterations, their SD, percentile CI and the same bootstrap's p-value."""
    frames = []
    for names in (list(EFFECTS), list(TARGETS)):
        boot = iterations[names].to_numpy(float)
        lo, hi = percentile_ci(boot, settings.alpha)
        p_value = np.minimum(1.0, 2 * np.minimum((boot <= 0).mean(axis=0), (boot >= 0).mean(axis=0)))
        frames.append(
            pd.DataFrame(
                {
                    "estimate": boot.mean(axis=0),
                    "se": bootstrap_se(boot),
                    "ci_low": lo,
                    "ci_high": hi,
                    "p_value": p_value,
                    "significant": (lo > 0) | (hi < 0),
                },
                index=pd.Index(names, name="effect"),
            )
        )
    table, means = frames
    # each effect beside its worst mean's raw weights: how far they average from 1 and their ESS
    needs = {e: [t for t, c in zip(TARGETS, row) if c != 0] for e, row in zip(EFFECTS, CONTRASTS)}
    table["raw_weight_mean"] = [
        float(diagnostics.loc[needs[e], "mass_pi3"].iloc[np.argmax(np.abs(diagnostics.loc[needs[e], "mass_pi3"] - 1))])
        for e in EFFECTS
    ]
    table["ess"] = [float(diagnostics.loc[needs[e], "ess"].min()) for e in EFFECTS]
    table["popfair_rule"] = [
        "not identified" if any(t in problems for t in needs[e]) else "identified" for e in EFFECTS
    ]
    return table, means


def weight_notes(
    diagnostics: pd.DataFrame, problems: Mapping[str, str], roles: Roles, settings: PaperSettings
) -> list[str]:
    """What the self-normalised numbers rest on, in words: each mean's raw weight mass and how much
    self-normalisation rescales it, and the effects popfair's rule would not report."""
    lines = [
        f"pse_paper: the PopResume authors' estimator ({'self-normalised' if settings.self_normalise else 'unnormalised'} "
        f"weights, per-group nested outcome models, clip {settings.clip:g}, {settings.n_bootstrap} resample-and-refit "
        "iterations; estimate = their mean, CI = their percentiles). No identification gate: popfair's diagnostics "
        "of the raw weights, averaged over the iterations, are printed beside it."
    ]
    for target, row in diagnostics.iterrows():
        mass = float(row["mass_pi3"])
        scale = f"; self-normalisation multiplies them by {1 / mass:.2f}" if abs(mass - 1) > 0.05 and mass > 0 else ""
        crossing = "" if not np.isfinite(row["crossing"]) else f", {row['crossing']:.0f} crossing applicants"
        lines.append(
            f"  {target}: raw weights average {mass:.2f} (1 when the propensities are right){scale}; "
            f"ESS {row['ess']:.0f}{crossing}, clipped share {row['share_clipped']:.1%}"
        )
    if problems:
        failing = [
            e for e, row in zip(EFFECTS, CONTRASTS) if any(c != 0 and t in problems for t, c in zip(TARGETS, row))
        ]
        lines.append(
            f"  popfair's rule (pse_dml) would report {', '.join(failing)} of {roles.x} as not identified at this n: "
            + " | ".join(problems.values())
        )
    return lines


class PsePaper:
    """`estimator=pse_paper`: the PopResume authors' estimator (module docstring); takes the
    `PaperSettings` fields as keywords."""

    name = "pse_paper"
    counterfactuals = None  # a function of the factual scored table alone
    parameter_constraints: ClassVar[Rules] = PAPER_CONSTRAINTS

    def __init__(self, **settings: Any) -> None:
        self.settings = PaperSettings.build(settings)

    def price(self, n_rows: int) -> str:
        """What the estimate will cost on this machine, in one line (popfair doctor)."""
        return price(self.settings, n_rows)

    def plan_note(self, profiles: Any) -> str:
        """The dry run's line: the price for the case's applicants."""
        return self.price(len(profiles.table))

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        result = _estimate(factual_rows(data), roles, y, self.settings)
        metrics = {"pse_paper.n": float(result.n), "pse_paper.n_excluded": float(result.n_excluded)}
        metrics.update({f"time.pse_paper_{k}_s": v for k, v in result.timings.items()})
        for target, row in result.diagnostics.iterrows():
            key = re.sub(r"[^0-9A-Za-z]+", "_", str(target)).strip("_")
            metrics[f"pse_paper.mass_pi3.{key}"] = float(row["mass_pi3"])
            metrics[f"pse_paper.ess.{key}"] = float(row["ess"])
        metrics["pse_paper.popfair_identified"] = float((result.table["popfair_rule"] == "identified").sum())
        title = f"{roles.x}: {roles.x1} vs {roles.x0} (pse_paper; positive favours {roles.x1})"
        artifacts: dict[str, Any] = {
            "pse_paper_forest.png": Plot("forest", result.table, title),
            "pse_paper_means.csv": result.means,
            "pse_paper_iterations.csv": result.iterations,
            "pse_paper_diagnostics.csv": result.diagnostics,
            "pse_paper_tuning.csv": result.tuning,
            "pse_paper_notes.txt": "\n".join(result.notes),
        }
        table = result.table[EFFECT_COLUMNS + [c for c in result.table if c not in EFFECT_COLUMNS]]
        return Effects(table=table, labels=result.labels, metrics=metrics, artifacts=artifacts, notes=result.notes)
