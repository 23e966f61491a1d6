"""The ranking audit's data and model: trials as arrays, the balanced position layout, and the
rank-ordered (exploded Plackett-Luce) conditional logit fitted by statsmodels' maximum likelihood.

The logit is statsmodels' maximum-likelihood machinery (`GenericLikelihoodModel`, Newton steps) on
the exploded choice sets: choosing the first-ranked candidate from all k, the second from the
remaining k-1, ... (a partial ranking contributes the choices it makes; the last, forced choice
none). Its log-likelihood, score and Hessian are vectorised over the trials x stages x candidates
array, where statsmodels' own `ConditionalLogit` walks the choice sets one by one in Python (about
a minute for 100,000 trials); the two give identical fits (tests/test_ranking.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.core.errors import EstimationError


def williams_square(k: int) -> np.ndarray:
    """Rows of a balanced Latin square (Williams 1949): each symbol once per row and column, and each
    ordered pair of symbols adjacent once (k even) or twice over the 2k rows (k odd)."""
    first = [0]
    low, high = 1, k - 1
    for i in range(1, k):
        if i % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = (np.array(first)[None, :] + np.arange(k)[:, None]) % k
    return rows if k % 2 == 0 else np.vstack([rows, rows[:, ::-1]])


TRIAL, GROUP, POSITION, RANK = "trial_id", "group", "position", "rank"


def slug(group: str) -> str:
    """A group's name as it appears in effect names (MLflow metric keys: letters, digits, _ . -)."""
    return "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in group)


SE_KINDS = ("cluster", "model")


@dataclass(frozen=True)
class RankTrials:
    """The rankings of n trials of the same k groups, as arrays: rank[t, g] (1 = first, NaN = not
    ranked) and position[t, g] (1-based place shown) of group g in trial t."""

    groups: list[str]
    rank: np.ndarray
    position: np.ndarray
    trial_ids: np.ndarray

    @classmethod
    def from_rows(cls, data: pd.DataFrame, groups: Sequence[str] | None = None) -> RankTrials:
        """One row per candidate (columns trial_id, group, position, rank); every trial must show
        every group once."""
        missing = [c for c in (TRIAL, GROUP, POSITION, RANK) if c not in data.columns]
        if missing:
            raise EstimationError(f"ranking: the scored table lacks columns {missing} (not a ranking design?)")
        if data.empty:
            raise EstimationError("ranking: no trial was ranked (every trial failed?)")
        trial_code, trial_ids = pd.factorize(data[TRIAL])
        group_values = data[GROUP].astype(str)
        groups = list(groups) if groups is not None else sorted(group_values.unique())
        group_code = pd.Categorical(group_values, categories=groups).codes
        if (group_code < 0).any():
            raise EstimationError(f"ranking: group {group_values[group_code < 0].iloc[0]!r} is not one of {groups}")
        n, k = len(trial_ids), len(groups)
        counts = np.bincount(trial_code * k + group_code, minlength=n * k)
        if (counts != 1).any():
            bad = trial_ids[np.flatnonzero(counts != 1)[0] // k]
            raise EstimationError(f"ranking: trial {bad!r} does not show each of the {k} groups exactly once")
        rank = np.full((n, k), np.nan)
        position = np.zeros((n, k), dtype=np.int64)
        rank[trial_code, group_code] = pd.to_numeric(data[RANK], errors="coerce").to_numpy(float)
        position[trial_code, group_code] = data[POSITION].to_numpy(np.int64)
        return cls(groups, rank, position, np.asarray(trial_ids))

    @property
    def k(self) -> int:
        return len(self.groups)

    def filled_rank(self) -> np.ndarray:
        """Ranks with the candidates a partial ranking leaves out at the mean of the ranks left over."""
        ranked = np.isfinite(self.rank).sum(axis=1, keepdims=True)
        leftover = (ranked + 1 + self.k) / 2.0
        return np.where(np.isfinite(self.rank), self.rank, leftover)


def trial_mean(values: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, se, CI of the mean over trials (axis 0) of per-trial values (NaN rows skipped)."""
    n = np.isfinite(values).sum(axis=0)
    mean = np.nanmean(values, axis=0)
    from scipy import stats  # at first use: the prompts import this module, a dry run needs no scipy.stats

    se = np.nanstd(values, axis=0, ddof=1) / np.sqrt(n)
    z = stats.norm.ppf(1 - alpha / 2)
    return mean, se, mean - z * se, mean + z * se


def design_matrix(trials: RankTrials, reference: str, reference_position: int) -> tuple[np.ndarray, list[str]]:
    """X[t, g, :]: dummies of group g (reference group left out) and of the position g is shown at
    in trial t (reference position left out)."""
    k = trials.k
    others = [g for g in trials.groups if g != reference]
    group_part = np.zeros((k, len(others)))
    for j, g in enumerate(others):
        group_part[trials.groups.index(g), j] = 1.0
    positions = [p for p in range(1, k + 1) if p != reference_position]
    position_part = (trials.position[:, :, None] == np.array(positions)[None, None, :]).astype(float)
    n = len(trials.rank)
    x = np.concatenate([np.broadcast_to(group_part, (n, k, len(others))), position_part], axis=2)
    names = [f"group.{slug(g)}" for g in others] + [f"position.{p}" for p in positions]
    return x, names


class ExplodedLogit:
    """The exploded (rank-ordered) logit's likelihood on a trials x candidates array: stage j of
    trial t chooses the candidate ranked j among those ranked j or later or not ranked; stages
    1..min(ranked, k - 1) count. `stages` caps the stages used (1 = the winner only)."""

    def __init__(self, x: np.ndarray, rank: np.ndarray, stages: int | None = None) -> None:
        n, k, _ = x.shape
        ranked = np.isfinite(rank).sum(axis=1)
        depth = min(k - 1, stages or k - 1)
        j = np.arange(1, depth + 1)[None, :, None]
        r = np.where(np.isfinite(rank), rank, np.inf)[:, None, :]
        self.x = x
        self.in_set = r >= j  # (n, J, k)
        self.chosen = (r == j).astype(float)
        self.active = (j[:, :, 0] <= np.minimum(ranked, k - 1)[:, None]).astype(float)  # (n, J)
        self.n_stages = int(self.active.sum())
        self._last: tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    def _probabilities(self, params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Utilities (shifted), choice probabilities per stage and the stages' denominators; the
        last call's are kept (a Newton step asks loglike, score and Hessian at the same point)."""
        if self._last is not None and np.array_equal(self._last[0], params):
            return self._last[1]
        v = self.x @ params  # (n, k)
        v = v - v.max(axis=1, keepdims=True)
        ev = np.exp(v)[:, None, :] * self.in_set  # (n, J, k)
        total = ev.sum(axis=2)
        total = np.where(total > 0, total, 1.0)
        out = (v, ev / total[:, :, None], total)
        self._last = (params.copy(), out)
        return out

    def loglike(self, params: np.ndarray) -> float:
        v, _, total = self._probabilities(params)
        chosen_v = (self.chosen @ v[:, :, None])[:, :, 0]  # (n, J)
        return float((self.active * (chosen_v - np.log(total))).sum())

    def trial_scores(self, params: np.ndarray) -> np.ndarray:
        """(n, p): each trial's score contribution."""
        _, p, _ = self._probabilities(params)
        weights = ((self.chosen - p) * self.active[:, :, None]).sum(axis=1)  # (n, k)
        return (weights[:, None, :] @ self.x)[:, 0, :]

    def score(self, params: np.ndarray) -> np.ndarray:
        return self.trial_scores(params).sum(axis=0)

    def hessian(self, params: np.ndarray) -> np.ndarray:
        _, p, _ = self._probabilities(params)
        p = p * self.active[:, :, None]
        n, k, q = self.x.shape
        mean_x = (p @ self.x).reshape(-1, q)  # (n J, q): E[x] of each stage
        flat = self.x.reshape(n * k, q)
        second = (flat * p.sum(axis=1).reshape(n * k, 1)).T @ flat
        return -(second - mean_x.T @ mean_x)


@dataclass
class LogitFit:
    names: list[str]
    params: np.ndarray
    cov: np.ndarray
    n_trials: int
    n_stages: int
    loglike: float
    converged: bool
    se_kind: str

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))

    def wald(self, prefix: str) -> tuple[float, int, float]:
        """chi2, df and p-value of "every coefficient named prefix.<...> is 0"."""
        idx = [i for i, name in enumerate(self.names) if name.startswith(prefix + ".")]
        if not idx:
            return float("nan"), 0, float("nan")
        b, v = self.params[idx], self.cov[np.ix_(idx, idx)]
        chi2 = float(b @ np.linalg.solve(v, b))
        from scipy import stats

        return chi2, len(idx), float(stats.chi2.sf(chi2, len(idx)))


def fit_rank_logit(
    trials: RankTrials,
    *,
    reference: str,
    reference_position: int,
    se: str = "cluster",
    stages: int | None = None,
) -> LogitFit:
    """Fit the exploded logit with statsmodels (Newton steps on the vectorised likelihood).
    se = cluster: sandwich with trials as clusters (G/(G-1) small-sample factor); model: inverse
    information."""
    from statsmodels.base.model import GenericLikelihoodModel

    x, names = design_matrix(trials, reference, reference_position)
    likelihood = ExplodedLogit(x, trials.rank, stages)
    if likelihood.n_stages == 0:
        raise EstimationError("ranking: no trial ranks two or more candidates; the logit has no choice to fit")

    n = len(trials.rank)
    # statsmodels reads endog/exog only for bookkeeping (nobs, parameter names): one row per trial
    model = GenericLikelihoodModel(
        np.zeros(n),
        pd.DataFrame(np.zeros((n, len(names))), columns=names),
        loglike=likelihood.loglike,
        score=likelihood.score,
        hessian=likelihood.hessian,
    )
    model.k_constant, model.df_model, model.df_resid = 0, len(names), n - len(names)
    result = model.fit(start_params=np.zeros(len(names)), method="newton", disp=0, maxiter=100)
    params = np.asarray(result.params, dtype=float)
    hessian = likelihood.hessian(params)
    try:
        bread = np.linalg.inv(-hessian)
    except np.linalg.LinAlgError:
        raise EstimationError(
            "ranking: the logit's information matrix is singular (a group or position never ranked "
            "above another, or too few trials)"
        ) from None
    if se == "cluster":
        scores = likelihood.trial_scores(params)
        cov = bread @ (scores.T @ scores) @ bread * n / max(n - 1, 1)
    else:
        cov = bread
    converged = bool(result.mle_retvals.get("converged", True))
    return LogitFit(names, params, cov, n, likelihood.n_stages, float(likelihood.loglike(params)), converged, se)
