"""The counterfactual design's estimator: every factual answer and the world sample, combined.

Every eligible applicant i (X in {x0, x1}, factual score Y_i) was screened once; a simple random
sample S of them (n of the N) was also screened in the five worlds w of `sfm.TARGETS`. The target is
the mean over the N applicants of each world's expected score, theta_w, and the effects are its
contrasts (`sfm.CONTRASTS`). docs/concepts/counterfactual_design.md derives what follows.

- Own worlds are answered for everyone. An applicant of group g (x0 or x1) in world (g, g, g) shows
  its factual document, so Y_i(w) = Y_i for all N_g applicants of the group, not only the sampled.
- Cross worlds are estimated by a difference (prediction-powered) estimator within each group. The
  working model predicts each applicant's change D_i(w) = Y_i(w) - Y_i from what is known for all
  N_g: the factual score and the roles' covariates (ridge regression, cross-fitted on S_g). The
  group mean is

      theta_wg = mean_{U_g}(Y_i + m_i) + mean_{S_g}(D_i - m_i)

  with out-of-fold predictions m_i for the sampled applicants. The sample's residual mean corrects
  whatever the model misses, so the estimate is unbiased whatever the model (exactly for a model
  that does not depend on S; with cross-fitting, as cross-prediction-powered inference); the model
  only decides the variance.
- theta_w = sum_g (N_g / N) theta_wg. One applicant's five worlds are correlated, so inference
  clusters by applicant: an applicant's residuals in all five worlds enter every contrast together.
  Two estimands, two variances (`inference`):
  - "finite" (default): the effects over the N applicants drawn, what screening every one of them in
    every world would give. Only the world sample is random (a stratified simple random sample
    without replacement), so the variance is the survey-sampling one with its finite population
    correction: SE_c^2 = sum_g (N_g / N)^2 (1 - n_g / N_g) s_g^2(r . c) / n_g, with r the sampled
    applicants' residual vectors. With every applicant sampled it is 0: the full design is known.
  - "superpopulation": the effects under the population model, averaged over draws of N applicants.
    Each applicant's contribution to the five means is one vector psi_i, the estimate is their
    mean, and SE_c = sd_i(psi_i . c) / sqrt(N), an influence-function variance that adds the
    between-applicant spread of the N drawn.
  CIs are t intervals with n - 1 degrees of freedom.

`sample_only` is the world sample alone (`interventional.paired_effects`), reported beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.core.errors import EstimationError
from popfair.core.types import Roles
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS

MAX_LEVELS = 32  # one-hot levels per categorical covariate; rarer levels are pooled
MIN_MODEL_ROWS = 20  # a group's sampled applicants below this: no working model (the plain difference)
RIDGE_ALPHAS = np.logspace(-3, 5, 17)  # ridge penalties searched (generalised cross-validation)
ZERO = 1e-9  # a contrast whose estimate and SE are both below this is exactly 0 (identical documents)
INFERENCE = ("finite", "superpopulation")  # the estimand whose variance is reported (module docstring)


@dataclass
class Combined:
    """What `combine` returns.

    table: effects (estimate, se, ci_low, ci_high, p_value, significant, n).
    means: the five world means with the same columns.
    psi: per applicant (rows: the N applicants) its contribution to each world mean (columns TARGETS).
    world_variance: per effect, the world sample's variance times n, before the finite population
    correction (W_e: the variance is W_e (1/n - 1/N) for the N applicants, W_e / n + F_e under the
    population model); fixed_variance: F_e, the between-applicant part (superpopulation only).
    inference: which of the two the table's SEs are (module docstring).
    n, n_eligible, n_by_group, eligible_by_group: the sample and the population it was drawn from.
    r2: per group and cross world, the working model's out-of-fold R^2 on the sample."""

    table: pd.DataFrame
    means: pd.DataFrame
    psi: pd.DataFrame
    world_variance: pd.Series
    fixed_variance: pd.Series
    n: int
    n_eligible: int
    n_by_group: dict[str, int]
    eligible_by_group: dict[str, int]
    r2: pd.DataFrame
    inference: str = "finite"


def covariates(frame: pd.DataFrame, roles: Roles, y: str) -> np.ndarray:
    """The working model's features: the factual score and the roles' columns (numeric as they are,
    categorical one-hot over their most frequent levels), standardised."""
    parts = [frame[[y]].astype(float)]
    for column in dict.fromkeys([*roles.z, *roles.b, *roles.r]):
        values = frame[column]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            parts.append(values.astype(float).to_frame(column))
            continue
        text = values.astype(str)
        top = text.value_counts().index[:MAX_LEVELS]
        parts.append(pd.get_dummies(text.where(text.isin(top), "other"), prefix=column, drop_first=True, dtype=float))
    features = pd.concat(parts, axis=1).to_numpy(float)
    spread = features.std(axis=0)
    keep = spread > 0
    return (features[:, keep] - features[:, keep].mean(axis=0)) / spread[keep]


def _fit_predict(train_x: np.ndarray, train_y: np.ndarray, predict_x: np.ndarray) -> np.ndarray:
    """Ridge predictions (penalty by generalised cross-validation, per target) for `predict_x`;
    a target constant in the training rows predicts that constant (exactly: no rounding noise where
    a world shows every applicant the same document it was scored on)."""
    out = np.empty((len(predict_x), train_y.shape[1]))
    constant = np.ptp(train_y, axis=0) == 0
    out[:, constant] = train_y[0, constant]
    if (~constant).any():
        from sklearn.linear_model import RidgeCV

        model = RidgeCV(alphas=RIDGE_ALPHAS, alpha_per_target=True).fit(train_x, train_y[:, ~constant])
        out[:, ~constant] = model.predict(predict_x).reshape(len(predict_x), -1)
    return out


def cross_fitted(
    features: np.ndarray, sampled: np.ndarray, target: np.ndarray, folds: int, ids: pd.Series, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Predictions of `target` (sampled rows x k) for every row of `features`: out-of-fold for the
    sampled rows (`sampled`: their positions), the mean of the fold models for the others. Returns
    (predictions for all rows, out-of-fold predictions for the sampled rows). Identical target
    columns are fitted once, so contrasts between them are exactly 0."""
    unique, inverse = np.unique(target, axis=1, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    everyone = np.zeros((len(features), unique.shape[1]))
    own = np.zeros((len(sampled), unique.shape[1]))
    # folds keyed by applicant: an applicant keeps its fold when the budget grows
    keys = np.asarray([f"{seed}/cf_fold/{i}" for i in ids.iloc[sampled]], dtype=object)
    fold = (pd.util.hash_array(keys) % np.uint64(folds)).astype(int)
    others = np.ones(len(features), bool)
    others[sampled] = False
    for k in range(folds):
        held = fold == k
        if not held.any():
            continue
        rows = sampled[held]
        train = sampled[~held]
        predictions = _fit_predict(features[train], unique[~held], np.vstack([features[rows], features[others]]))
        own[held] = predictions[: len(rows)]
        everyone[others] += predictions[len(rows) :] / len(np.unique(fold))
    everyone[sampled] = own
    return everyone[:, inverse], own[:, inverse]


def combine(
    factual: pd.DataFrame,
    outcomes: pd.DataFrame,
    roles: Roles,
    y: str = "y",
    *,
    alpha: float = 0.05,
    folds: int = 5,
    seed: int = 0,
    inference: str = "finite",
) -> Combined:
    """The combined estimate (module docstring).

    factual: one row per applicant (`applicant_id`, the roles' columns, `y`); rows whose X is neither
    x0 nor x1 or whose score is missing are not in the target population.
    outcomes: the world sample, indexed by applicant_id, one column per world (TARGETS), complete.
    inference: "finite" (the N applicants drawn) or "superpopulation" (module docstring)."""
    if inference not in INFERENCE:
        raise EstimationError(f"combine: inference must be one of {list(INFERENCE)}, got {inference!r}")
    eligible = factual[factual[roles.x].isin([roles.x0, roles.x1]) & factual[y].notna()].reset_index(drop=True)
    position = pd.Series(np.arange(len(eligible)), index=eligible["applicant_id"].to_numpy())
    # a hash lookup: Index.isin boxes every one of pandas' Arrow string ids (0.13 s on 19,000)
    outcomes = outcomes[position.index.get_indexer(outcomes.index) >= 0]
    names = list(TARGETS)
    values = outcomes[names].to_numpy(float)
    if np.isnan(values).any():
        raise EstimationError("combine: the world sample has missing outcomes; pass complete applicants only")
    n_all = len(eligible)
    features = covariates(eligible, roles, y)
    factual_y = eligible[y].to_numpy(float)
    group = (eligible[roles.x] == roles.x1).to_numpy().astype(int)
    psi = np.repeat(factual_y[:, None], len(names), axis=1)  # own worlds: the factual answer
    world_part = np.zeros_like(psi)  # the sample's residual terms (the part that shrinks with n)
    r2_rows = []
    sample_pos = position.loc[outcomes.index].to_numpy()
    n_by_group, eligible_by_group = {}, {}
    strata = []  # per group: (N_g / N, n_g / N_g, the sampled applicants' residuals in all five worlds)
    for g, level in enumerate((roles.x0, roles.x1)):
        members = np.flatnonzero(group == g)
        in_group = group[sample_pos] == g
        sampled_pos, sampled_values = sample_pos[in_group], values[in_group]
        n_g, big_n = len(sampled_pos), len(members)
        n_by_group[str(level)], eligible_by_group[str(level)] = n_g, big_n
        if n_g < 2:
            raise EstimationError(
                f"counterfactual design: {n_g} sampled {roles.x}={level} applicants have all five worlds "
                f"scored, of {big_n}; need at least 2 in each group (raise estimator.n)"
            )
        cross = np.array([j for j, levels in enumerate(TARGETS.values()) if levels != (g, g, g)])
        change = sampled_values[:, cross] - factual_y[sampled_pos][:, None]  # D_i(w) = Y_i(w) - Y_i
        local = pd.Series(np.arange(big_n), index=members)
        if n_g >= MIN_MODEL_ROWS:
            predicted, held_out = cross_fitted(
                features[members],
                local.loc[sampled_pos].to_numpy(),
                change,
                folds,
                eligible["applicant_id"].iloc[members],
                seed,
            )
        else:  # too few to fit: the plain difference of means (model 0)
            predicted, held_out = np.zeros((big_n, len(cross))), np.zeros_like(change)
        residual = change - held_out
        centred = residual - residual.mean(axis=0)
        psi[np.ix_(members, cross)] += predicted + residual.mean(axis=0)
        world_part[np.ix_(sampled_pos, cross)] += (big_n / n_g) * centred
        residuals = np.zeros((n_g, len(names)))
        residuals[:, cross] = residual
        strata.append((big_n / n_all, n_g / big_n, residuals))
        total = ((change - change.mean(axis=0)) ** 2).sum(axis=0)
        explained = np.where(total > 0, 1 - (residual**2).sum(axis=0) / np.where(total > 0, total, 1), np.nan)
        r2_rows += [{"group": str(level), "world": names[j], "r2": float(r)} for j, r in zip(cross, explained)]
    n = len(outcomes)
    scores = psi + world_part
    contrasts_fixed = psi @ CONTRASTS.T
    fixed = pd.Series(contrasts_fixed.var(axis=0, ddof=1) / n_all, index=list(EFFECTS))
    world = pd.Series(n * _sample_variance(strata, CONTRASTS, corrected=False), index=list(EFFECTS))
    if inference == "finite":
        effect_se = np.sqrt(_sample_variance(strata, CONTRASTS, corrected=True))
        mean_se = np.sqrt(_sample_variance(strata, np.eye(len(names)), corrected=True))
    else:
        effect_se = (scores @ CONTRASTS.T).std(axis=0, ddof=1) / np.sqrt(n_all)
        mean_se = scores.std(axis=0, ddof=1) / np.sqrt(n_all)
    table = _inference(scores.mean(axis=0) @ CONTRASTS.T, effect_se, list(EFFECTS), n, alpha)
    means = _inference(scores.mean(axis=0), mean_se, names, n, alpha)
    return Combined(
        table=table,
        means=means,
        psi=pd.DataFrame(scores, columns=names, index=eligible["applicant_id"].to_numpy()),
        world_variance=world,
        fixed_variance=fixed,
        n=n,
        n_eligible=n_all,
        n_by_group=n_by_group,
        eligible_by_group=eligible_by_group,
        r2=pd.DataFrame(r2_rows),
        inference=inference,
    )


def _sample_variance(
    strata: list[tuple[float, float, np.ndarray]], contrasts: np.ndarray, *, corrected: bool
) -> np.ndarray:
    """Variance of each contrast's estimate from the world sample: sum over groups of
    (N_g / N)^2 s_g^2(r . c) / n_g, times the finite population correction 1 - n_g / N_g if
    `corrected`. An applicant's residuals in all five worlds enter each contrast together (the
    applicant is the cluster)."""
    total = np.zeros(len(contrasts))
    for weight, fraction, residuals in strata:
        spread = (residuals @ contrasts.T).var(axis=0, ddof=1)
        total += weight**2 * spread / len(residuals) * ((1 - fraction) if corrected else 1.0)
    return total


def _inference(estimate: np.ndarray, se: np.ndarray, index: list[str], n: int, alpha: float) -> pd.DataFrame:
    """Estimates with their SEs: t interval and test with n - 1 df (n: the world sample, whose
    residuals carry the estimate's sampling error)."""
    from scipy import stats

    estimate, se = np.asarray(estimate, float), np.asarray(se, float)
    exact = (np.abs(estimate) < ZERO) & (se < ZERO)
    estimate, se = np.where(exact, 0.0, estimate), np.where(se < ZERO, 0.0, se)
    quantile = stats.t.ppf(1 - alpha / 2, df=max(n - 1, 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = np.where(se > 0, estimate / np.where(se > 0, se, 1.0), np.where(estimate == 0, 0.0, np.inf))
    p_value = 2 * stats.t.sf(np.abs(statistic), df=max(n - 1, 1))
    low, high = estimate - quantile * se, estimate + quantile * se
    return pd.DataFrame(
        {
            "estimate": estimate,
            "se": se,
            "ci_low": low,
            "ci_high": high,
            "p_value": p_value,
            "significant": (low > 0) | (high < 0),
            "n": n,
        },
        index=pd.Index(index, name="effect"),
    )
