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
  Three estimands, three variances (`inference`):
  - "applicants" (default): the effects on the N applicants drawn, averaged over the worlds' random
    redraws (a world redraws names, states and qualifications within each factual value's interval,
    with the seed). Two parts, as in two-phase sampling: the world sample's, with the finite
    population correction, SE_1^2 = sum_g (N_g / N)^2 (1 - n_g / N_g) s_g^2(r . c) / n_g, with r the
    sampled applicants' residual vectors; and the redraw noise of the full design, which does not
    vanish when every applicant is sampled, SE_2^2 = sum_g (N_g / N)^2 sigma_g^2(c) / N_g. sigma_g^2
    is the mean over applicants of the variance of their contrast between two independent redraws:
    a second set of worlds (`redraw`) for a keyed, nested subsample Q_g of S_g gives it as
    mean_{Q_g} (c . (Y_i(s) - Y_i(s')))^2 / 2. t intervals with Satterthwaite's degrees of freedom,
    each part's stability measured (`_two_phase`).
  - "worlds": the effects over the N applicants in these worlds only (this seed's redraw), what
    screening every one of them in every world of this seed would give: SE_1 alone, 0 with every
    applicant sampled. t intervals with n - 1 degrees of freedom.
  - "superpopulation": the effects under the population model, averaged over draws of N applicants
    (and of their worlds). Each applicant's contribution to the five means is one vector psi_i, the
    estimate is their mean, and SE_c = sd_i(psi_i . c) / sqrt(N), an influence-function variance
    that adds the between-applicant spread of the N drawn.
- Exactness is declared, not inferred (`exact`): a contrast whose two worlds show the same document
  to a screener that reads only the document (NDE on text resumes) is 0 by design, printed with SE
  0 when the answers agree. Any other contrast whose variance comes out 0 (a sample without spread)
  gets a floor (`_unseen_floor`): an unseen share of at most 1 - 0.05^(1/m_g) of the group's
  applicants (m_g world draws seen, none differing) differing by as much as the contrast's size.

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
ZERO = 1e-9  # a declared-exact contrast whose answers differ by less than this is exactly 0 (identical documents)
INFERENCE = ("applicants", "worlds", "superpopulation")  # the estimand whose variance is reported (module docstring)
UNSEEN_LEVEL = 0.05  # the zero-spread floor: the share of unseen movers bounded at this level (rule of three)


@dataclass
class Combined:
    """What `combine` returns.

    table: effects (estimate, se, ci_low, ci_high, p_value, significant, n).
    means: the five world means with the same columns.
    psi: per applicant (rows: the N applicants) its contribution to each world mean (columns TARGETS).
    world_variance: per effect, the world sample's variance times n, before the finite population
    correction (W_e: the variance is W_e (1/n - 1/N) over these worlds, W_e / n + F_e under the
    population model); fixed_variance: F_e, the between-applicant part (superpopulation only);
    redraw_variance: R_e, N times the redraw noise's variance (the default estimand's variance is
    W_e (1/n - 1/N) + R_e / N; NaN without the second set of worlds).
    inference: which of the three the table's SEs are (module docstring).
    n, n_eligible, n_by_group, eligible_by_group: the sample and the population it was drawn from;
    n_redraw: per group, the applicants with a second set of worlds.
    exact: the effects that are exactly 0 by design (declared, and the answers agree).
    floor: per effect, the variance a sample without spread is given (`_unseen_floor`; 0 where exact).
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
    inference: str = "applicants"
    redraw_variance: pd.Series | None = None
    n_redraw: dict[str, int] | None = None
    exact: tuple[str, ...] = ()
    floor: pd.Series | None = None


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
    inference: str = "applicants",
    redraw: pd.DataFrame | None = None,
    exact: frozenset[str] | set[str] = frozenset(),
) -> Combined:
    """The combined estimate (module docstring).

    factual: one row per applicant (`applicant_id`, the roles' columns, `y`); rows whose X is neither
    x0 nor x1 or whose score is missing are not in the target population.
    outcomes: the world sample, indexed by applicant_id, one column per world (TARGETS), complete.
    inference: "applicants" (the N applicants drawn, averaged over the worlds' redraws), "worlds"
    (these worlds only) or "superpopulation" (module docstring).
    redraw: the second, independent set of worlds for a subsample of `outcomes`' applicants (same
    layout); required by "applicants", whose redraw noise it measures.
    exact: effects whose two worlds show the same document to a screener that reads only the
    document (declared by the case: NDE on text resumes)."""
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
    replicate: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # positions, answers in both sets
    if redraw is not None:  # the redraw subsample: applicants of the sample with both sets complete
        redraw = redraw[outcomes.index.get_indexer(redraw.index) >= 0]
        redraw = redraw[redraw[names].notna().all(axis=1)]
        replicate = (
            position.loc[redraw.index].to_numpy(),
            values[outcomes.index.get_indexer(redraw.index)],
            redraw[names].to_numpy(float),
        )
    if inference == "applicants" and replicate is None:
        raise EstimationError(
            "combine: inference='applicants' needs the second set of worlds (redraw) to measure their redraw "
            "noise; pass redraw, or choose inference='worlds' (these worlds only)"
        )
    n_all = len(eligible)
    features = covariates(eligible, roles, y)
    factual_y = eligible[y].to_numpy(float)
    group = (eligible[roles.x] == roles.x1).to_numpy().astype(int)
    psi = np.repeat(factual_y[:, None], len(names), axis=1)  # own worlds: the factual answer
    world_part = np.zeros_like(psi)  # the sample's residual terms (the part that shrinks with n)
    r2_rows = []
    sample_pos = position.loc[outcomes.index].to_numpy()
    n_by_group, eligible_by_group, redraw_by_group = {}, {}, {}
    strata = []  # per group: Stratum (weights, the sampled residuals, the redraw differences)
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
        moves = [np.abs(change).max(initial=0.0)]
        differences = None
        if replicate is not None:
            in_redraw = group[replicate[0]] == g
            differences = replicate[1][in_redraw] - replicate[2][in_redraw]  # Y_i(w, s) - Y_i(w, s')
            redraw_by_group[str(level)] = int(in_redraw.sum())
            moves.append(np.abs(replicate[2][in_redraw] - factual_y[replicate[0][in_redraw]][:, None]).max(initial=0.0))
        strata.append(Stratum(big_n / n_all, n_g, big_n, residuals, differences, max(moves), sampled_values))
        total = ((change - change.mean(axis=0)) ** 2).sum(axis=0)
        explained = np.where(total > 0, 1 - (residual**2).sum(axis=0) / np.where(total > 0, total, 1), np.nan)
        r2_rows += [{"group": str(level), "world": names[j], "r2": float(r)} for j, r in zip(cross, explained)]
    n = len(outcomes)
    scores = psi + world_part
    contrasts_fixed = psi @ CONTRASTS.T
    fixed = pd.Series(contrasts_fixed.var(axis=0, ddof=1) / n_all, index=list(EFFECTS))
    world = pd.Series(n * _sample_variance(strata, CONTRASTS, corrected=False), index=list(EFFECTS))
    redrawn = None if replicate is None else pd.Series(n_all * _redraw_variance(strata, CONTRASTS), index=list(EFFECTS))
    identity = np.eye(len(names))
    if inference == "superpopulation":
        effect_var = (scores @ CONTRASTS.T).var(axis=0, ddof=1) / n_all
        mean_var = scores.var(axis=0, ddof=1) / n_all
        effect_df = np.full(len(EFFECTS), max(n - 1, 1.0))
        mean_df = np.full(len(names), max(n - 1, 1.0))
    else:
        with_redraw = inference == "applicants"
        effect_var, effect_df = _two_phase(strata, CONTRASTS, with_redraw)
        mean_var, mean_df = _two_phase(strata, identity, with_redraw)
    estimate = scores.mean(axis=0) @ CONTRASTS.T
    # exactness is declared: the contrast's two worlds show every applicant the same document and
    # the screener reads only the document; it holds when every sampled answer agrees
    answers = [values, *(() if replicate is None else (replicate[2],))]
    exact_by_design = tuple(
        e
        for k, e in enumerate(EFFECTS)
        if e in exact and all(np.abs(a @ CONTRASTS[k]).max(initial=0.0) < ZERO for a in answers)
    )
    is_exact = np.array([e in exact_by_design for e in EFFECTS])
    estimate = np.where(is_exact, 0.0, estimate)
    effect_var = np.where(is_exact, 0.0, effect_var)
    # elsewhere a variance of 0 is a sample without spread, not a known answer: the unseen-share floor
    known = inference == "worlds" and n == n_all  # these worlds, every applicant: the full design itself
    floor = np.zeros(len(EFFECTS))
    if not known:
        floor = np.where(is_exact, 0.0, _unseen_floor(strata, CONTRASTS))
        effect_var = np.where(effect_var < ZERO**2, floor, effect_var)
        mean_var = np.where(mean_var < ZERO**2, _unseen_floor(strata, identity), mean_var)
    table = _inference(estimate, np.sqrt(effect_var), list(EFFECTS), n, effect_df, alpha)
    means = _inference(scores.mean(axis=0), np.sqrt(mean_var), names, n, mean_df, alpha)
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
        redraw_variance=redrawn,
        n_redraw=redraw_by_group or None,
        exact=exact_by_design,
        floor=pd.Series(floor, index=list(EFFECTS)),
    )


@dataclass
class Stratum:
    """One group's part of the variance: its weight N_g / N, its sample n_g of N_g, the sampled
    applicants' residuals in all five worlds, their contrasts between the two sets of worlds for the
    redraw subsample (None without it), the largest change any world made to a factual answer, and
    the sampled applicants' answers in the five worlds."""

    weight: float
    n: int
    size: int
    residuals: np.ndarray
    differences: np.ndarray | None
    largest_move: float
    values: np.ndarray


def _sample_variance(strata: list[Stratum], contrasts: np.ndarray, *, corrected: bool) -> np.ndarray:
    """Variance of each contrast's estimate from the world sample: sum over groups of
    (N_g / N)^2 s_g^2(r . c) / n_g, times the finite population correction 1 - n_g / N_g if
    `corrected`. An applicant's residuals in all five worlds enter each contrast together (the
    applicant is the cluster)."""
    total = np.zeros(len(contrasts))
    for stratum in strata:
        spread = (stratum.residuals @ contrasts.T).var(axis=0, ddof=1)
        total += stratum.weight**2 * spread / stratum.n * ((1 - stratum.n / stratum.size) if corrected else 1.0)
    return total


def _redraw_variance(strata: list[Stratum], contrasts: np.ndarray) -> np.ndarray:
    """Variance of each contrast's full design over the worlds' redraws: sum over groups of
    (N_g / N)^2 sigma_g^2(c) / N_g, sigma_g^2 the mean of half the squared difference between an
    applicant's two independent redraws (its within-applicant redraw variance)."""
    total = np.zeros(len(contrasts))
    for stratum in strata:
        if stratum.differences is not None and len(stratum.differences):
            within = np.square(stratum.differences @ contrasts.T).mean(axis=0) / 2
            total += stratum.weight**2 * within / stratum.size
    return total


def _two_phase(strata: list[Stratum], contrasts: np.ndarray, with_redraw: bool) -> tuple[np.ndarray, np.ndarray]:
    """The variance of each contrast's estimate and its t degrees of freedom: the world sample's
    (finite population correction; n - 1 df alone), plus the redraw noise's with `with_redraw`.
    With the redraw noise the df are Satterthwaite's, 2 V^2 / sum_k a_k^2 Var(v_k), over the
    groups' variance parts a_k v_k, with each part's sampling variance measured, not assumed normal:
    var((x - xbar)^2) / n_g for a sample variance, var(d^2 / 2) / q_g for a mean of halved squared
    redraw differences. Most redraws leave an applicant's document as it was, so the squared
    differences are a few large values among zeros, and their mean is far less stable than q_g
    normal draws would make it; the df say so."""
    parts, noise = [], []
    for stratum in strata:
        values = stratum.residuals @ contrasts.T
        spread = values.var(axis=0, ddof=1)
        scale = stratum.weight**2 * (1 - stratum.n / stratum.size) / stratum.n
        parts.append(scale * spread)
        squares = np.square(values - values.mean(axis=0))
        noise.append(scale**2 * squares.var(axis=0, ddof=1) / stratum.n if stratum.n > 1 else 0 * spread)
        if with_redraw and stratum.differences is not None and len(stratum.differences):
            halves = np.square(stratum.differences @ contrasts.T) / 2
            scale = stratum.weight**2 / stratum.size
            parts.append(scale * halves.mean(axis=0))
            q = len(halves)
            noise.append(scale**2 * (halves.var(axis=0, ddof=1) if q > 1 else np.square(halves[0])) / q)
    variance = np.sum(parts, axis=0)
    n_total = sum(stratum.n for stratum in strata)
    if not with_redraw:
        return variance, np.full(len(contrasts), max(n_total - 1, 1.0))
    unstable = np.sum(noise, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(unstable > 0, 2 * np.square(variance) / np.where(unstable > 0, unstable, 1), n_total - 1)
    return variance, np.clip(df, 1.0, max(n_total - 1, 1.0))


def _unseen_floor(strata: list[Stratum], contrasts: np.ndarray) -> np.ndarray:
    """The variance floor of a contrast no sampled answer moved: in each group at most a share
    p_g = 1 - 0.05^(1/m_g) of the applicants (m_g the world draws seen: the sample and the redraw
    subsample) could differ unseen, each by as much as the contrast's largest sampled value (the
    effect vanishing or doubling for them), or, where the contrast is 0 for every sampled applicant,
    by the largest change any world made to a factual answer of the group; the floor is
    sum_g (N_g / N)^2 p_g d_g^2 / n_g."""
    total = np.zeros(len(contrasts))
    for stratum in strata:
        seen = stratum.n + (0 if stratum.differences is None else len(stratum.differences))
        share = 1 - UNSEEN_LEVEL ** (1 / max(seen, 1))
        size = np.abs(stratum.values @ contrasts.T).max(axis=0, initial=0.0)
        size = np.where(size > ZERO, size, stratum.largest_move)
        total += stratum.weight**2 * share * np.square(size) / stratum.n
    return total


def _inference(
    estimate: np.ndarray, se: np.ndarray, index: list[str], n: int, df: np.ndarray, alpha: float
) -> pd.DataFrame:
    """Estimates with their SEs: t interval and test with `df` degrees of freedom (per row; n: the
    world sample)."""
    from scipy import stats

    estimate, se, df = np.asarray(estimate, float), np.asarray(se, float), np.asarray(df, float)
    se = np.where(se < ZERO, 0.0, se)
    quantile = stats.t.ppf(1 - alpha / 2, df=df)
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = np.where(se > 0, estimate / np.where(se > 0, se, 1.0), np.where(estimate == 0, 0.0, np.inf))
    p_value = 2 * stats.t.sf(np.abs(statistic), df=df)
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
