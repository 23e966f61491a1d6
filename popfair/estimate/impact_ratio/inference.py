"""Honest inference for impact ratios whose reference category is chosen from the data.

An LL144 impact ratio divides each category's selection rate by the rate of the *most selected*
category, a choice made on noisy rates: under pure chance the chosen reference's rate is biased up
and every other ratio down (8 equal categories, 1,000 trials: some category falls under the
four-fifths line in about two samples of three). Two answers, both computed from cluster x category
counts so that their cost grows with clusters, not applicants:

- CIs from a bootstrap over clusters (applicants, without a cluster column) that recomputes every
  rate in each replicate and lets any category be the reference: each pair of categories gets an
  interval for the ratio of their rates, all pairs at once (max-t), and a category's impact ratio, the
  smallest of its ratios to every category, lies between the smallest bounds
  (`simultaneous_ratio_ci`). They hold when categories tie, where the percentile interval of the
  re-chosen ratio does not;
- a test of "no category differs": the null distribution of the lowest impact ratio when categories
  are exchangeable within each cluster (a permutation of the category labels within clusters, which
  keeps each cluster's size, composition and number selected). A category's flag survives when its
  ratio is below what the lowest of all ratios reaches in `alpha` of the null samples (a single-step
  max-T adjustment, Westfall & Young 1993): it accounts for the choice of reference and for looking
  at every category at once.

The permutation distribution is drawn exactly where that is affordable: clusters with nobody or
everybody selected are constant; clusters with one selected (or one not selected), as in ranking
trials, give multinomial counts; other clusters are drawn category by category from hypergeometric
distributions. Where the normal law is accurate for those other clusters (each category's total
within `NORMAL_ERROR` of it in CDF, estimated from the data's skewness and lattice: many clusters,
none dominating), their sum is drawn from the normal distribution with its exact permutation mean and
covariance (a central limit over many independent clusters, as in the Cochran-Mantel-Haenszel test);
`null_method` says which. The choice depends on the data only: more replicates never switch paths.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from popfair.core.errors import DataError
from popfair.estimate.impact_ratio.resampling import Units, bootstrap_totals, permutation_totals
from popfair.estimate.inference import bootstrap_se, percentile_ci

TIES = 1e-9  # ratios this close count as equal when comparing with the null


@dataclass
class RatioInference:
    """Impact ratios of one set of categories with reference-aware inference
    (returned by `impact_ratio_inference`).

    Attributes
    ----------
    table : DataFrame
        Indexed by category: n, selected, rate (+ rate_ci_low, rate_ci_high), status (included /
        excluded), is_reference, impact_ratio (+ ratio_se, ci_low, ci_high), flag (ratio <
        flag_below), flag_ci (the CI's upper end below it too), p_adjusted (the probability, with no
        category differing, that the *lowest* ratio is at most this category's) and flag_survives
        (flag and p_adjusted <= alpha).
    p_value : float
        The test of "no category differs": the lowest ratio against its permutation distribution.
    min_ratio : float
        The lowest impact ratio.
    null_flag_rate : float
        How often the four-fifths rule flags some category when no category differs, in this design.
    null_method : str
        "exact", or "normal approximation over N clusters (CDF error about E)" (see the module docstring).
    n_clusters : int or None
        Clusters resampled (None: independent applicants).
    n_bootstrap, n_permutations : int
        Replicates of the bootstrap and of the permutation test.
    alpha, flag_below : float
        1 - CI level (and the test's level); the four-fifths line.
    """

    table: pd.DataFrame
    p_value: float
    min_ratio: float
    null_flag_rate: float
    null_method: str
    n_clusters: int | None
    n_bootstrap: int
    n_permutations: int
    alpha: float
    flag_below: float

    def explain(self, label: Callable[[str], str] = str) -> str:
        """The test and the flags in plain words (for reports next to the four-fifths flags);
        `label` turns a category into the name the report shows."""
        table = self.table
        if (table["status"] == "included").sum() < 2:
            return "Fewer than two categories are compared, so there is no impact ratio to test."
        flagged = table[table["flag"]]
        survive = flagged[flagged["flag_survives"]]
        design = f"{self.n_clusters} clusters" if self.n_clusters else "independent applicants"
        lines = [
            f"The reference is the category with the highest rate, chosen from noisy data, so even when "
            f"no category differs the other ratios come out below 1: in this design ({design}, the same "
            f"categories and sizes) the four-fifths rule would flag at least one category in "
            f"{self.null_flag_rate:.0%} of samples by chance alone."
        ]
        if not np.isfinite(self.p_value):
            lines.append("The test of 'no category differs' is undefined here (no category was selected).")
            return " ".join(lines)
        lines.append(
            f"The lowest impact ratio here is {self.min_ratio:.3f}; with no category differing, a ratio "
            f"this low or lower occurs with probability p = {self.p_value:.3g} "
            f"({'significant' if self.p_value <= self.alpha else 'not significant'} at {self.alpha:g})."
        )
        if len(flagged):
            kept = ", ".join(label(str(c)) for c in survive.index) or "none"
            lines.append(
                f"Of the {len(flagged)} {'category' if len(flagged) == 1 else 'categories'} flagged under "
                f"{self.flag_below:g}, the flags that survive this test (adjusted p <= {self.alpha:g}, and a CI below 1): {kept}."
            )
        return " ".join(lines)


def ratio_block(
    categories: Sequence[str],
    n_cat: np.ndarray,
    s_cat: np.ndarray,
    boot_n: np.ndarray,
    boot_s: np.ndarray,
    null_n: np.ndarray,
    null_s: np.ndarray,
    included: np.ndarray,
    *,
    alpha: float,
    flag_below: float,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rates, ratios, bootstrap CIs and the permutation test of one set of categories.

    `boot_*`: replicates x categories of the bootstrap; `null_s`: replicates x included categories
    selected under the null, of `null_n` applicants each."""
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = s_cat / n_cat
        boot_rate = boot_s / boot_n
    top = float(np.max(rate[included])) if included.any() else np.nan
    reference = int(np.flatnonzero(included)[np.argmax(rate[included])]) if included.any() else -1
    defined = np.isfinite(top) and top > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(included, rate / top, np.nan) if defined else np.full(len(rate), np.nan)
        boot_top = _nanmax(np.where(included[None, :], boot_rate, np.nan))
        boot_ratio = np.where(included[None, :] & (boot_top[:, None] > 0), boot_rate / boot_top[:, None], np.nan)
    rate_ci = percentile_ci(boot_rate, alpha)
    ratio_ci = simultaneous_ratio_ci(rate, boot_rate, n_cat, included, alpha) if defined else (ratio, ratio)
    flag = included & (ratio < flag_below)
    null_min = _lowest_ratio(null_s / null_n)
    p_adjusted = np.full(len(rate), np.nan)
    min_ratio = float(np.nanmin(ratio)) if defined else np.nan
    if defined and included.sum() > 1:
        below = (null_min[None, :] <= ratio[included][:, None] + TIES).sum(axis=1)
        p_adjusted[included] = (1 + below) / (1 + len(null_min))
    tests = {
        "p_value": float(np.nanmin(p_adjusted)) if np.isfinite(p_adjusted).any() else np.nan,
        "min_ratio": min_ratio,
        "null_flag_rate": float(np.mean(null_min < flag_below)) if included.sum() > 1 else np.nan,
    }
    table = pd.DataFrame(
        {
            "n": n_cat,
            "selected": s_cat,
            "rate": rate,
            "rate_ci_low": rate_ci[0],
            "rate_ci_high": rate_ci[1],
            "status": np.where(included, "included", "excluded"),
            "is_reference": np.arange(len(rate)) == reference,
            "impact_ratio": ratio,
            "ratio_se": bootstrap_se(boot_ratio),
            "ci_low": ratio_ci[0],
            "ci_high": ratio_ci[1],
            "flag": flag,
            "flag_ci": flag & (ratio_ci[1] < flag_below),
            "p_adjusted": p_adjusted,
            # one verdict per row: the permutation test rejects AND the simultaneous CI excludes 1
            # (each holds its level; a flag both confirm holds it too). Where the two disagree the
            # row's `verdict_note` says so (`verdict_notes`)
            "flag_survives": flag & (p_adjusted <= alpha) & (ratio_ci[1] < 1),
        },
        index=pd.Index(list(categories), name="category"),
    )
    table["verdict_note"] = verdict_notes(table, alpha)
    return table, tests


def verdict_notes(table: pd.DataFrame, alpha: float) -> list[str]:
    """Per category, one sentence where the reference-aware permutation test and the simultaneous
    bootstrap CI disagree about "no difference" (else ""): the flag survives only where both reject."""
    notes = []
    for row in table.itertuples():
        rejects = bool(row.p_adjusted <= alpha)
        excludes = bool(row.ci_high < 1)
        if row.flag and rejects and not excludes:
            notes.append(
                f"the permutation test rejects no difference (adjusted p {row.p_adjusted:.3g}), but the CI, "
                "simultaneous over every pair of categories and so wider, reaches 1: the flag is not confirmed"
            )
        elif row.flag and excludes and not rejects and np.isfinite(row.p_adjusted):
            notes.append(
                f"the CI excludes 1, but the permutation test (adjusted p {row.p_adjusted:.3g}), which "
                "accounts for the lowest of all ratios being chosen, does not reject: the flag is not confirmed"
            )
        else:
            notes.append("")
    return notes


def simultaneous_ratio_ci(
    rate: np.ndarray, boot_rate: np.ndarray, n: np.ndarray, included: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Intervals for every included category's impact ratio that hold together in at least 1 - alpha
    of samples, whichever category truly has the highest rate (ties included).

    A category's impact ratio is the smallest of its rate ratios to every category (the ratio to the
    most selected one). Each pair's log rate ratio gets a bootstrap interval, the critical value
    taken from the bootstrap distribution of the largest standardized deviation over all pairs
    (max-t, so all pair intervals hold at once); the ratio then lies between the smallest lower and
    the smallest upper bound. The percentile interval of the re-chosen ratio itself covers far too
    rarely when categories tie (the maximum is not smooth there: about 70% for 8 equal categories)."""
    lo, hi = np.full(len(rate), np.nan), np.full(len(rate), np.nan)
    index = np.flatnonzero(included)
    if len(index) == 1:
        lo[index], hi[index] = 1.0, 1.0
    if len(index) <= 1:
        return lo, hi
    floor = 0.5 / n[index]  # a zero rate counts as half an applicant in the logs
    log_rate = np.log(np.maximum(rate[index], floor))
    with np.errstate(invalid="ignore", divide="ignore"):
        boot_log = np.log(np.maximum(boot_rate[:, index], floor))
    pair = log_rate[:, None] - log_rate[None, :]
    boot_pair = boot_log[:, :, None] - boot_log[:, None, :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # replicates without a category are NaN
        se = np.nanstd(boot_pair, axis=0, ddof=1)
        off = ~np.eye(len(index), dtype=bool)
        spread = np.abs(boot_pair - pair)[:, off] / np.where(se[off] > 0, se[off], np.inf)
        critical = float(np.nanquantile(np.nanmax(spread, axis=1), 1 - alpha))
    lower, upper = np.exp(pair - critical * se), np.exp(pair + critical * se)
    np.fill_diagonal(lower, 1.0)
    np.fill_diagonal(upper, 1.0)
    lo[index], hi[index] = lower.min(axis=1), np.minimum(1.0, upper.min(axis=1))
    lo[index] = np.where(rate[index] > 0, lo[index], 0.0)
    return lo, hi


def _lowest_ratio(rates: np.ndarray) -> np.ndarray:
    """Per replicate: the lowest rate over the highest (1 when nobody is selected, or no category is
    in the ratios, e.g. a table without a race column: no difference)."""
    if rates.shape[1] == 0:
        return np.ones(len(rates))
    rates = np.clip(rates, 0.0, None)
    top = rates.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(top > 0, rates.min(axis=1) / top, 1.0)


def _nanmax(matrix: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows stay NaN
        return np.nanmax(matrix, axis=1) if matrix.shape[1] else np.full(len(matrix), np.nan)


# One BLAS thread: the products here are skinny (a few dozen columns x 200,000 clusters), and
# OpenBLAS's threads spin on them on a busy machine (4-7x the CPU, 10x the wall time at load 10,
# for the same exact sums of counts); a single thread does each in milliseconds.
@threadpool_limits.wrap(limits=1)
def infer_groupings(
    units: Units,
    groupings: Sequence[tuple[np.ndarray, Sequence[str], np.ndarray]],
    *,
    n_bootstrap: int,
    n_permutations: int,
    alpha: float,
    flag_below: float,
    seed: int,
) -> list[list[RatioInference]]:
    """Inference per metric and per grouping of the same cells into categories (LL144: sex, race and
    their intersection from sex x race cells), all from one bootstrap. A grouping is (category of
    each cell, or -1 for a cell left out; category names; which categories are in the ratios)."""
    boot_n, boot_s = bootstrap_totals(units, n_bootstrap, np.random.default_rng([seed, 23]))
    out: list[list[RatioInference]] = []
    for metric in range(units.selected.shape[1]):
        out.append([])
        for index, (cell_category, categories, included) in enumerate(groupings):
            to_category = np.zeros((units.n.shape[1], len(categories)))
            keep = cell_category >= 0
            to_category[np.flatnonzero(keep), cell_category[keep]] = 1.0
            n_strata, s_strata = units.strata(to_category, metric)
            null_s, method = permutation_totals(
                n_strata[:, included],
                s_strata[:, included],
                n_permutations,
                np.random.default_rng([seed, 23, metric, index]),
            )
            table, tests = ratio_block(
                categories,
                n_strata.sum(axis=0),
                s_strata.sum(axis=0),
                boot_n @ to_category,
                boot_s[:, metric, :] @ to_category,
                n_strata[:, included].sum(axis=0),
                null_s,
                included,
                alpha=alpha,
                flag_below=flag_below,
            )
            out[-1].append(
                RatioInference(
                    table=table,
                    null_method=method,
                    n_clusters=len(units.n) if units.clustered else None,
                    n_bootstrap=n_bootstrap,
                    n_permutations=n_permutations,
                    alpha=alpha,
                    flag_below=flag_below,
                    **tests,
                )
            )
    return out


def count_values(counts: pd.DataFrame, n: str, selected: Sequence[str]) -> pd.DataFrame:
    """The numeric `n` and selected columns of a counts table; DataError naming what is wrong."""
    missing = [c for c in (n, *selected) if c not in counts.columns]
    if missing:
        raise DataError(f"counts lack columns {missing}; they have {sorted(map(str, counts.columns))}")
    if counts.empty:
        raise DataError("counts: no rows")
    values = counts[[n, *selected]].apply(pd.to_numeric, errors="coerce")
    bad = values.isna().any(axis=1) | (values[list(selected)].lt(0) | values[list(selected)].gt(values[n], axis=0)).any(
        axis=1
    )
    if bad.any():
        raise DataError(
            f"counts: {int(bad.sum())} rows have no numeric {n}/{'/'.join(selected)} or a selected count "
            f"outside 0..{n} (e.g. row {counts.index[bad.to_numpy()][0]!r})"
        )
    return values


def impact_ratio_inference(
    counts: pd.DataFrame,
    *,
    category: str = "category",
    cluster: str | None = "cluster",
    n: str = "n",
    selected: str = "selected",
    exclude: Collection[str] = (),
    n_bootstrap: int = 2000,
    n_permutations: int | None = None,
    alpha: float = 0.05,
    flag_below: float = 0.8,
    seed: int = 0,
) -> RatioInference:
    """Impact ratios against the most selected category, with CIs that re-choose the reference in
    every bootstrap replicate and a test of "no category differs" that accounts for that choice.

    Parameters
    ----------
    counts : DataFrame
        One row per cluster x category (several rows for one pair are summed): `n` applicants, of
        whom `selected` were selected (for scores: scored above the sample's median).
    category, cluster, n, selected : str
        Column names. `cluster=None`: applicants are independent (the bootstrap resamples
        applicants, the permutation runs over the whole table).
    exclude : collection of str
        Categories shown (counts, rate, rate CI) but left out of the ratios and the test: LL144's
        small categories, an unknown category.
    n_bootstrap, n_permutations : int
        Bootstrap replicates; permutation replicates of the test (None: as many as `n_bootstrap`).
    alpha : float
        1 - CI level, and the level at which a flag survives the test.
    flag_below : float
        The four-fifths line.
    seed : int
        Seeds the bootstrap and the permutations.

    Returns
    -------
    RatioInference
        `table` per category, `p_value`, `min_ratio`, `null_flag_rate`, `null_method`, `explain()`.

    Examples
    --------
    >>> import pandas as pd
    >>> from popfair import impact_ratio_inference
    >>> counts = pd.DataFrame({"category": ["a", "b", "c"], "n": [400, 400, 400], "selected": [120, 100, 70]})
    >>> result = impact_ratio_inference(counts, cluster=None, n_bootstrap=500)
    >>> result.table["impact_ratio"].round(3).tolist(), result.p_value < 0.05
    ([1.0, 0.833, 0.583], True)
    """
    missing = [c for c in (category, cluster) if c is not None and c not in counts.columns]
    if missing:
        raise DataError(f"counts lack columns {missing}; they have {sorted(map(str, counts.columns))}")
    values = count_values(counts, n, [selected])
    cat_codes, categories = pd.factorize(counts[category].astype(str), sort=True)
    if cluster is None:
        unit = np.zeros(len(counts), dtype=np.int64)
    else:
        unit, _ = pd.factorize(counts[cluster], sort=True)
        if (unit < 0).any():
            raise DataError(f"counts: {int((unit < 0).sum())} rows have no {cluster}")
    shape = (int(unit.max()) + 1, len(categories))
    flat = unit * len(categories) + cat_codes
    n_matrix, s_matrix = (
        np.bincount(flat, weights=values[c].to_numpy(float), minlength=shape[0] * shape[1]).reshape(shape)
        for c in (n, selected)
    )
    included = ~np.isin(np.asarray(categories), list(exclude)) & (n_matrix.sum(axis=0) > 0)
    if cluster is None:
        units = Units.of_applicants(n_matrix[0], s_matrix[0])
    else:
        units = Units(n=n_matrix, selected=s_matrix[:, None, :], clustered=True)
    ((result,),) = infer_groupings(
        units,
        [(np.arange(len(categories)), list(categories), included)],
        n_bootstrap=n_bootstrap,
        n_permutations=n_permutations or n_bootstrap,
        alpha=alpha,
        flag_below=flag_below,
        seed=seed,
    )
    return result
