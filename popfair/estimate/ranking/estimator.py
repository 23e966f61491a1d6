"""Estimates of a ranking audit, each with trial-clustered inference (config `estimator=ranking`).

- Top-1 rate per group and LL144 impact ratios against the most-selected group, with CIs that
  re-choose the reference in every bootstrap replicate over trials and a test of "no group differs"
  that accounts for that choice (popfair.estimate.impact_ratio.inference; trial = cluster).
- Mean rank per group (1 = first); a candidate a partial ranking leaves out gets the mean of the
  ranks left over.
- P(group ranked above the reference group), and for every pair of groups (artifact).
- Position effects: the top-1 rate of the candidate shown at each position.
- A rank-ordered (exploded Plackett-Luce) conditional logit of the whole ranking on group and shown
  position: log-worths of each group against the reference group and of each position against the
  reference position, with trial-clustered (sandwich) or model standard errors, and Wald tests
  of "no group differs" and "no position effect".

Mean ranks, pairwise and position rates are means of one value per trial (each trial shows every
group and every position once), so their standard errors are those of a mean of independent trials.

The logit and the trial arrays are in `popfair.estimate.ranking.model`."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy import stats

from popfair.core.constraints import Interval, Options, Rules, validate
from popfair.core.errors import EstimationError
from popfair.core.types import Effects, Plot, Profiles, Roles
from popfair.estimate.impact_ratio.inference import RatioInference, impact_ratio_inference
from popfair.estimate.ranking.model import (
    GROUP,
    SE_KINDS,
    TRIAL,
    RankTrials,
    fit_rank_logit,
    slug,
    trial_mean,
)

# --- the rank-ordered logit ---------------------------------------------------------------------------


# --- the estimator ------------------------------------------------------------------------------------


RANKING_UNITS = (  # effect-name prefixes of the ranking estimator's rows and their units
    ("top1_position.", "proportion"),
    ("top1.", "proportion"),
    ("impact_ratio.", "ratio"),
    ("mean_rank.", "rank"),
    ("above.", "probability"),
    ("logit.", "log-worth"),
)


class RankingEstimator:
    """Every ranking estimate of a case (see module docstring), as one effects table.

    Parameters
    ----------
    reference : str
        The group the logit's and pairwise contrasts compare with (default "white male"; one of the
        trials' groups).
    reference_position : str
        first | last: the shown position the logit's position effects compare with.
    se : str
        cluster (trial-clustered sandwich, default) | model standard errors of the logit.
    n_bootstrap, n_permutations, alpha, flag_below, seed
        The impact-ratio inference (popfair.estimate.impact_ratio.inference) and the CI level of all.
    power_effect, power
        The dry-run plan reports the trials needed to detect a log-worth difference of
        `power_effect` between two groups with this power (top-1 only vs the whole ranking).

    Examples
    --------
    >>> import numpy as np
    >>> from popfair import RankingEstimator
    >>> from popfair.estimate.ranking.top1_power import simulate_rankings
    >>> trials = simulate_rankings(800, [0.5, 0.0, 0.0, 0.0], [0.3, 0, 0, 0], np.random.default_rng(0))
    >>> rows = pd.DataFrame({"trial_id": np.repeat(np.arange(800), 4), "group": np.tile(trials.groups, 800),
    ...                      "position": trials.position.ravel(), "rank": trials.rank.ravel()})
    >>> table = RankingEstimator(reference="g1", n_bootstrap=200).estimate(rows, roles=None).table
    >>> bool(table.loc["logit.group.g0", "ci_low"] > 0)
    True
    """

    name = "ranking"
    counterfactuals = None  # no counterfactual worlds (popfair.core.types.WorldRequest)
    parameter_constraints: ClassVar[Rules] = {
        "reference_position": Options(["first", "last"]),
        "se": Options(list(SE_KINDS)),
        "n_bootstrap": Interval(int, 100, None),
        "alpha": Interval(float, 0, 0.5, closed="neither"),
        "flag_below": Interval(float, 0, 1, closed="neither"),
        "power_effect": Interval(float, 0, None, closed="neither"),
        "power": Interval(float, 0, 1, closed="neither"),
        "seed": Interval(int, None, None),
    }

    def effect_unit(self, effect: str, outcome: str) -> str:
        """Each row's own unit, by its name's prefix (`DeclaresUnits`, RANKING_UNITS)."""
        return next((unit for prefix, unit in RANKING_UNITS if effect.startswith(prefix)), "proportion")

    def __init__(
        self,
        reference: str = "white male",
        reference_position: str = "last",
        se: str = "cluster",
        n_bootstrap: int = 2000,
        n_permutations: int | None = None,
        alpha: float = 0.05,
        flag_below: float = 0.8,
        power_effect: float = 0.2,
        power: float = 0.8,
        seed: int = 0,
    ) -> None:
        validate(
            self.parameter_constraints,
            {
                "reference_position": reference_position,
                "se": se,
                "n_bootstrap": n_bootstrap,
                "alpha": alpha,
                "flag_below": flag_below,
                "power_effect": power_effect,
                "power": power,
                "seed": seed,
            },
        )
        self.reference, self.reference_position, self.se = reference, reference_position, se
        self.n_bootstrap, self.n_permutations, self.alpha = n_bootstrap, n_permutations, alpha
        self.flag_below, self.power_effect, self.power, self.seed = flag_below, power_effect, power, seed

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        trials = RankTrials.from_rows(data)
        return ranking_effects(
            trials,
            reference=self.reference,
            reference_position=1 if self.reference_position == "first" else trials.k,
            se=self.se,
            n_bootstrap=self.n_bootstrap,
            n_permutations=self.n_permutations,
            alpha=self.alpha,
            flag_below=self.flag_below,
            seed=self.seed,
        )

    def plan_note(self, profiles: Profiles) -> str:
        """The trials needed to detect `power_effect` from the winner alone and from the whole ranking
        (for a dry run's plan), beside the trials the case has."""
        from popfair.estimate.ranking.top1_power import trials_needed

        k, n = profiles.table[GROUP].nunique(), profiles.table[TRIAL].nunique()

        top1 = trials_needed(self.power_effect, k, alpha=self.alpha, power=self.power, stages=1)
        full = trials_needed(self.power_effect, k, alpha=self.alpha, power=self.power, stages=None)
        return (
            f"trials to detect a log-worth difference of {self.power_effect:g} between two of {k} groups "
            f"(power {self.power:g}, alpha {self.alpha:g}): {top1:,} from the top-1 choice, {full:,} from the "
            f"whole ranking; the case has {n:,}"
        )


class _EffectRows(list):
    """The rows of the effects table, added effect by effect."""

    def add(self, effect: str, estimate: float, se: float, low: float, high: float, null: float, **extra: Any) -> None:
        """One effect; `null` is its value when no group or position matters."""
        self.append(
            {"effect": effect, "estimate": estimate, "se": se, "ci_low": low, "ci_high": high, "null": null, **extra}
        )

    def table(self) -> pd.DataFrame:
        """One verdict per row: `significant` where the CI excludes the null, which each row's p-value
        inverts (normal rows: the same z; top-1 shares: Clopper-Pearson and the central binomial test);
        an impact ratio is significant where both its reference-aware test and its CI say so."""
        table = pd.DataFrame(self).set_index("effect")
        by_ci = (table["ci_low"] > table["null"]) | (table["ci_high"] < table["null"])
        own = table["significant"] if "significant" in table else pd.Series(np.nan, index=table.index)
        table["significant"] = own.where(own.notna(), by_ci).astype(bool)
        return table


def normal_p(estimate: np.ndarray, se: np.ndarray, null: float) -> np.ndarray:
    """Two-sided p of estimate = null under the normal law: the test a mean +/- z se CI inverts."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * stats.norm.sf(np.abs((np.asarray(estimate) - null) / np.asarray(se)))


def binomial_share(selected: int, n: int, null: float, alpha: float) -> tuple[float, float, float, float, float]:
    """A share selected/n against `null`: (share, se, Clopper-Pearson CI, central two-sided exact
    binomial p): the null lies outside the CI exactly when p <= alpha."""
    share = selected / n if n else np.nan
    se = float(np.sqrt(share * (1 - share) / n)) if n else np.nan
    low = float(stats.beta.ppf(alpha / 2, selected, n - selected + 1)) if selected > 0 else 0.0
    high = float(stats.beta.ppf(1 - alpha / 2, selected + 1, n - selected)) if selected < n else 1.0
    tails = min(float(stats.binom.cdf(selected, n, null)), float(stats.binom.sf(selected - 1, n, null)))
    return share, se, low, high, min(1.0, 2 * tails)


def ranking_effects(
    trials: RankTrials,
    *,
    reference: str,
    reference_position: int,
    se: str = "cluster",
    n_bootstrap: int = 2000,
    n_permutations: int | None = None,
    alpha: float = 0.05,
    flag_below: float = 0.8,
    seed: int = 0,
) -> Effects:
    """All ranking estimates of `trials` as an Effects table (index: effect names)."""
    groups = trials.groups
    if reference not in groups:
        raise EstimationError(f"estimator.reference: {reference!r} is not one of the groups {groups}")
    rows = _EffectRows()
    ratios = _top1_effects(
        trials,
        rows,
        n_bootstrap=n_bootstrap,
        n_permutations=n_permutations,
        alpha=alpha,
        flag_below=flag_below,
        seed=seed,
    )
    pairwise = _rank_effects(trials, rows, reference, alpha)
    _position_effects(trials, rows, alpha)
    fit = fit_rank_logit(trials, reference=reference, reference_position=reference_position, se=se)
    z = stats.norm.ppf(1 - alpha / 2)
    for name, b, s in zip(fit.names, fit.params, fit.se):
        rows.add(f"logit.{name}", b, s, b - z * s, b + z * s, 0.0, p_value=2 * stats.norm.sf(abs(b / s)))
    effects_table = rows.table()
    group_chi2, group_df, group_p = fit.wald("group")
    position_chi2, position_df, position_p = fit.wald("position")
    metrics = {
        "ranking.trials": float(len(trials.rank)),
        "ranking.partial_trials": float((np.isfinite(trials.rank).sum(axis=1) < trials.k).sum()),
        "ranking.logit_stages": float(fit.n_stages),
        "ranking.logit_converged": float(fit.converged),
        "ranking.no_group_differs_logit_p": group_p,
        "ranking.no_group_differs_logit_chi2": group_chi2,
        "ranking.no_position_effect_logit_p": position_p,
        "ranking.no_group_differs_top1_p": float(ratios.p_value),
        "ranking.min_impact_ratio": float(ratios.min_ratio),
        "ranking.null_flag_rate": float(ratios.null_flag_rate),
    }
    labels = []
    if group_p <= alpha:
        labels.append(f"groups differ in the ranking (logit Wald p={group_p:.3g}, df={group_df})")
    if position_p <= alpha:
        labels.append(f"position effect (logit Wald p={position_p:.3g}, df={position_df})")
    table = ratios.table
    flagged = table.index[table["flag_survives"].fillna(False).astype(bool)].tolist()
    if flagged:
        labels.append(f"impact ratio below {flag_below:g} survives the test: {', '.join(flagged)}")
    forest = effects_table.loc[[i for i in effects_table.index if i.startswith("logit.")]]
    artifacts: dict[str, Any] = {
        "ranking/impact_ratios.csv": table,
        "ranking/pairwise.csv": pairwise,
        "ranking/logit_forest.png": Plot(
            "forest",
            forest,
            f"Rank-ordered logit: log-worth vs {reference} / position {reference_position}",
        ),
        "ranking/impact_ratios.txt": ratios.explain(),
    }
    return Effects(table=effects_table, labels=labels, metrics=metrics, artifacts=artifacts)


def _top1_effects(trials: RankTrials, rows: _EffectRows, **inference: Any) -> RatioInference:
    """Top-1 rates and impact ratios, a trial being a cluster (reference-choice-aware inference)."""
    k, n, groups = trials.k, len(trials.rank), trials.groups
    counts = pd.DataFrame(
        {
            "cluster": np.repeat(np.arange(n), k),
            "category": np.tile(np.array(groups, dtype=object), n),
            "n": 1,
            "selected": (trials.rank == 1).ravel().astype(np.int64),
        }
    )
    ratios = impact_ratio_inference(counts, **inference)
    table = ratios.table
    alpha = float(inference.get("alpha", 0.05))
    for g in groups:
        r = table.loc[g]  # each trial has one top-1 candidate: the group's count is binomial under the null
        share, se, low, high, p = binomial_share(int(r["selected"]), int(r["n"]), 1 / k, alpha)
        rows.add(f"top1.{slug(g)}", share, se, low, high, 1 / k, p_value=p)
    for g in groups:
        r = table.loc[g]
        p_adjusted = float(r["p_adjusted"])
        rows.add(
            f"impact_ratio.{slug(g)}",
            r["impact_ratio"],
            r["ratio_se"],
            r["ci_low"],
            r["ci_high"],
            1.0,
            flag=bool(r["flag"]),
            p_value=p_adjusted,
            # the reference-aware test and the simultaneous CI agree, or it is not called significant
            significant=bool(p_adjusted <= alpha and r["ci_high"] < 1),
        )
    return ratios


def _rank_effects(trials: RankTrials, rows: _EffectRows, reference: str, alpha: float) -> pd.DataFrame:
    """Mean ranks, and P(ranked above the reference); returns every pair's P(row above column)."""
    k, n, groups = trials.k, len(trials.rank), trials.groups
    filled = trials.filled_rank()
    mean, se, low, high = trial_mean(filled, alpha)
    p = normal_p(mean, se, (k + 1) / 2)
    for i, g in enumerate(groups):
        rows.add(f"mean_rank.{slug(g)}", mean[i], se[i], low[i], high[i], (k + 1) / 2, p_value=p[i])
    ref = groups.index(reference)
    above = (filled[:, :, None] < filled[:, None, :]) + 0.5 * (filled[:, :, None] == filled[:, None, :])
    pair_mean, pair_se, pair_low, pair_high = trial_mean(above.reshape(n, k * k).astype(float), alpha)
    for i, g in enumerate(groups):
        if i != ref:
            j = i * k + ref
            p_pair = float(normal_p(pair_mean[j], pair_se[j], 0.5))
            rows.add(
                f"above.{slug(g)}_vs_{slug(reference)}",
                pair_mean[j],
                pair_se[j],
                pair_low[j],
                pair_high[j],
                0.5,
                p_value=p_pair,
            )
    pairwise = pd.DataFrame(pair_mean.reshape(k, k), index=groups, columns=groups)
    pairwise.index.name = "P(row ranked above column)"
    return pairwise


def _position_effects(trials: RankTrials, rows: _EffectRows, alpha: float) -> None:
    """Position effects: the share of winners shown at each position."""
    k, n = trials.k, len(trials.rank)
    winner = trials.rank == 1
    shown_first = np.zeros((n, k))
    rows_won, groups_won = np.nonzero(winner)
    shown_first[rows_won, trials.position[rows_won, groups_won] - 1] = 1.0
    mean, se, low, high = trial_mean(shown_first[winner.any(axis=1)], alpha)
    p_values = normal_p(mean, se, 1 / k)
    for p in range(k):
        rows.add(f"top1_position.{p + 1}", mean[p], se[p], low[p], high[p], 1 / k, p_value=p_values[p])
