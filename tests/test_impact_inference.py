"""Reference-aware impact-ratio inference on counts: the permutation null against exact
distributions (scipy's hypergeometric, multivariate hypergeometric moments, a brute-force shuffle of
applicants), the test's size and power, bootstrap coverage of known impact ratios, and the row-based
LL144 table agreeing with the counts-based one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from popfair.core.errors import DataError
from popfair.estimate.impact_ratio import resampling
from popfair.estimate.impact_ratio.inference import impact_ratio_inference
from popfair.estimate.impact_ratio.ratios import ImpactRatioSettings, impact_ratios, impact_ratios_from_counts
from popfair.estimate.impact_ratio.resampling import permutation_totals

CATEGORIES = list("ABCDEFGH")


def ranking(rng: np.random.Generator, trials: int, chances: np.ndarray | None = None) -> pd.DataFrame:
    """Trials of one candidate per category, the top one selected (chances: who wins)."""
    k = len(CATEGORIES)
    winner = rng.choice(k, size=trials, p=chances)
    return pd.DataFrame(
        {
            "cluster": np.repeat(np.arange(trials), k),
            "category": np.tile(CATEGORIES, trials),
            "n": 1,
            "selected": (np.tile(np.arange(k), trials) == np.repeat(winner, k)).astype(int),
        }
    )


def postings(rng: np.random.Generator, clusters: int, lift: np.ndarray | None = None, k: int = 4) -> pd.DataFrame:
    """Postings of 2-20 applicants of random categories, a posting-specific chance (x lift per category)."""
    size = rng.integers(2, 21, clusters)
    cluster = np.repeat(np.arange(clusters), size)
    category = rng.integers(0, k, len(cluster))
    chance = rng.beta(2, 5, clusters)[cluster] * (1.0 if lift is None else lift[category])
    rows = pd.DataFrame(
        {
            "cluster": cluster,
            "category": np.array(CATEGORIES)[category],
            "n": 1,
            "selected": (rng.random(len(cluster)) < chance).astype(int),
        }
    )
    return rows.groupby(["cluster", "category"], as_index=False)[["n", "selected"]].sum()


def test_two_categories_without_clusters_match_the_exact_hypergeometric_p_value():
    counts = pd.DataFrame({"category": ["a", "b"], "n": [60, 90], "selected": [12, 33]})
    result = impact_ratio_inference(counts, cluster=None, n_bootstrap=20000, seed=4)
    # exact: given 45 selected of 150, a's selected is hypergeometric; the statistic is min/max rate
    dist = stats.hypergeom(150, 45, 60)
    support = np.arange(0, 46)
    rate_a, rate_b = support / 60, (45 - support) / 90
    lowest = np.minimum(rate_a, rate_b) / np.maximum(rate_a, rate_b)
    observed = (12 / 60) / (33 / 90)
    exact = dist.pmf(support)[lowest <= observed + 1e-12].sum()
    assert result.min_ratio == pytest.approx(observed)
    assert result.p_value == pytest.approx(exact, abs=0.006)  # Monte Carlo error of 20,000 permutations
    assert result.null_method == "exact"
    a = result.table.loc["a"]
    assert a["flag"] and a["p_adjusted"] == pytest.approx(result.p_value)
    # one verdict per row: the flag survives where the test rejects and the CI excludes 1; where they
    # part, the row says so
    assert a["flag_survives"] == (result.p_value <= 0.05 and a["ci_high"] < 1)
    assert bool(a["verdict_note"]) == ((result.p_value <= 0.05) != (a["ci_high"] < 1))
    assert result.table.loc["b", "is_reference"] and result.table.loc["b", "p_adjusted"] == 1.0


def brute_force_shuffles(rows: pd.DataFrame, size: int, seed: int) -> np.ndarray:
    """Selected per category after shuffling the applicants' categories within each cluster."""
    rng = np.random.default_rng(seed)
    codes = pd.Categorical(rows["category"], categories=CATEGORIES[:4]).codes
    starts = np.flatnonzero(np.r_[True, rows["cluster"].to_numpy()[1:] != rows["cluster"].to_numpy()[:-1]])
    bounds = np.r_[starts, len(rows)]
    y = rows["selected"].to_numpy()
    out = np.zeros((size, 4))
    for b in range(size):
        shuffled = codes.copy()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            shuffled[lo:hi] = rng.permutation(shuffled[lo:hi])
        out[b] = np.bincount(shuffled, weights=y, minlength=4)
    return out


@pytest.mark.parametrize("path", ["exact", "normal"])
def test_permutation_within_clusters_matches_a_brute_force_shuffle_and_the_exact_moments(path, monkeypatch):
    rng = np.random.default_rng(8)
    size = rng.integers(2, 12, 150)
    rows = pd.DataFrame(
        {
            "cluster": np.repeat(np.arange(150), size),
            "category": np.array(CATEGORIES[:4])[rng.integers(0, 4, size.sum())],
            "selected": (rng.random(size.sum()) < 0.3).astype(int),
        }
    )
    counts = rows.assign(n=1).groupby(["cluster", "category"])[["n", "selected"]].sum()
    n = counts["n"].unstack(fill_value=0).to_numpy()
    s = counts["selected"].unstack(fill_value=0).to_numpy()
    if path == "normal":
        monkeypatch.setattr(resampling, "NORMAL_ERROR", 1.0)
        monkeypatch.setattr(resampling, "MULTINOMIAL_PROFILES", 0)
    drawn, method = permutation_totals(n, s, 20000, np.random.default_rng(1))
    assert method.startswith("exact" if path == "exact" else "normal approximation")
    # the multivariate hypergeometric mean and covariance, summed over clusters
    total, chosen = n.sum(axis=1), s.sum(axis=1)
    share = n / total[:, None]
    mean = (share * chosen[:, None]).sum(axis=0)
    w = np.where(total > 1, chosen * (total - chosen) / np.maximum(total - 1, 1), 0.0)
    cov = np.diag((w[:, None] * share).sum(axis=0)) - (share * w[:, None]).T @ share
    assert drawn.mean(axis=0) == pytest.approx(mean, abs=4 * np.sqrt(np.diag(cov) / 20000).max())
    assert np.cov(drawn.T) == pytest.approx(cov, abs=0.06 * np.abs(cov).max())
    shuffled = brute_force_shuffles(rows, 2000, seed=3)
    assert shuffled.mean(axis=0) == pytest.approx(mean, abs=4 * np.sqrt(np.diag(cov) / 2000).max())
    assert np.cov(shuffled.T) == pytest.approx(cov, abs=0.15 * np.abs(cov).max())
    # totals are conserved exactly by every exact permutation
    if path == "exact":
        assert np.allclose(drawn.sum(axis=1), s.sum())


def _exact_total_cdf_error(n: np.ndarray, chosen: np.ndarray, category: int) -> float:
    """The largest gap between the exact permutation CDF of one category's total over clusters (a
    convolution of scipy's hypergeometric pmfs) and the normal law with its mean and sd."""
    pmf = np.array([1.0])
    for row, c in zip(n, chosen):
        pmf = np.convolve(pmf, stats.hypergeom(row.sum(), row[category], c).pmf(np.arange(min(row[category], c) + 1)))
    x = np.arange(len(pmf))
    mean = (x * pmf).sum()
    normal = stats.norm.cdf((x - mean) / np.sqrt(((x - mean) ** 2 * pmf).sum()))
    cdf = np.cumsum(pmf)
    return float(max(np.abs(cdf - normal).max(), np.abs(np.concatenate([[0.0], cdf[:-1]]) - normal).max()))


@pytest.mark.parametrize(
    ("clusters", "shares"), [(50, [0.5, 0.5]), (2000, [0.5, 0.5]), (2000, [0.9, 0.1]), (5000, [0.8, 0.2])]
)
def test_the_normal_error_estimate_matches_the_exact_distribution(clusters, shares):
    """What decides exact vs normal draws: the estimated CDF error of the normal law, against the
    exact one computed by convolution (within 5% of it, from 50 to 5,000 clusters)."""
    rng = np.random.default_rng(3)
    size = rng.integers(3, 8, clusters)
    n = np.stack([rng.multinomial(k, shares) for k in size])
    chosen = rng.binomial(size, 0.3)
    keep = (chosen > 0) & (chosen < size) & ((n > 0).sum(axis=1) > 1)
    n, chosen = n[keep], chosen[keep]
    exact = max(_exact_total_cdf_error(n, chosen, j) for j in range(n.shape[1]))
    assert resampling.normal_error(n, chosen) == pytest.approx(exact, rel=0.05)


def test_the_permutation_path_depends_on_the_data_not_the_replicates():
    """Few clusters: exact draws however few replicates; many: the normal law however many, so 200
    replicates never take a slower path than 2,000 (the issue: they used to)."""
    rng = np.random.default_rng(5)
    for clusters, expected in ((300, "exact"), (60_000, "normal approximation")):
        size = rng.integers(3, 8, clusters)
        n = np.stack([rng.multinomial(k, [0.6, 0.4]) for k in size])
        s = np.minimum(n, rng.binomial(n, 0.35))
        methods = {
            permutation_totals(n, s, reps, np.random.default_rng(1))[1].split(" (")[0] for reps in (20, 200, 2000)
        }
        assert methods == {expected if expected == "exact" else f"normal approximation over {_rest(n, s)} clusters"}
        error = resampling.normal_error(n[_rest_mask(n, s)], s.sum(axis=1)[_rest_mask(n, s)])
        assert (error > resampling.NORMAL_ERROR) == (expected == "exact")


def _rest_mask(n: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Clusters drawn hypergeometrically or from the normal law: neither constant nor one-selected."""
    size, chosen = n.sum(axis=1), s.sum(axis=1)
    fixed = (chosen == 0) | (chosen == size) | ((n > 0).sum(axis=1) <= 1)
    return ~fixed & ~((chosen == 1) | (chosen == size - 1))


def _rest(n: np.ndarray, s: np.ndarray) -> int:
    return int(_rest_mask(n, s).sum())


def test_ranking_trials_flag_two_samples_in_three_but_the_test_keeps_its_size():
    """The issue's null: 8 equal categories, 1,000 trials with one winner each."""
    rng = np.random.default_rng(11)
    rejected = flagged = 0
    sims = 300
    for sim in range(sims):
        result = impact_ratio_inference(ranking(rng, 1000), n_bootstrap=100, n_permutations=199, seed=sim)
        rejected += result.p_value <= 0.05
        flagged += bool(result.table["flag"].any())
        assert result.null_method == "exact"
    # an independent estimate of the flag rate: winners are Multinomial(1000, 1/8) under the null
    counts = np.random.default_rng(0).multinomial(1000, np.full(8, 1 / 8), size=20000)
    flag_rate = np.mean(counts.min(axis=1) / counts.max(axis=1) < 0.8)
    assert 0.55 < flag_rate < 0.75
    assert flagged / sims == pytest.approx(flag_rate, abs=0.09)
    assert result.null_flag_rate == pytest.approx(flag_rate, abs=0.05)
    assert 0.01 <= rejected / sims <= 0.09  # 5% +/- 3.3 standard errors of 300 simulations


def test_a_real_gap_is_found_and_only_its_flag_survives():
    rng = np.random.default_rng(5)
    chances = np.array([1.0] * 7 + [0.5])
    result = impact_ratio_inference(ranking(rng, 2000, chances / chances.sum()), n_bootstrap=500, seed=1)
    assert result.p_value < 0.01
    table = result.table
    assert table.loc["H", "flag_survives"]
    assert not table.drop(index="H")["flag_survives"].any()
    assert table.loc["H", "ci_high"] < 0.8
    assert "H" in result.explain() and "survive" in result.explain()


def test_clustered_cis_cover_known_impact_ratios():
    """Postings with per-category lifts 1, 0.85, 0.6: true ratios 1, 0.85, 0.6 against category A."""
    lift = np.array([1.0, 0.85, 0.6])
    truth = lift / lift.max()
    hits, sims = np.zeros(3), 100
    for sim in range(sims):
        counts = postings(np.random.default_rng(100 + sim), 600, lift, k=3)
        table = impact_ratio_inference(counts, n_bootstrap=400, n_permutations=100, seed=sim).table
        hits += ((table["ci_low"] <= truth) & (truth <= table["ci_high"])).to_numpy()
    coverage = hits / sims
    assert (coverage >= 0.93).all(), coverage  # simultaneous intervals: at least 95% jointly


def test_cis_hold_when_categories_tie():
    """8 equal categories: every true ratio is 1; the percentile interval of the re-chosen ratio
    would miss it for about 30% of categories, the simultaneous intervals for very few."""
    rng = np.random.default_rng(21)
    missed, all_held, sims = 0.0, 0, 100
    for sim in range(sims):
        table = impact_ratio_inference(ranking(rng, 1000), n_bootstrap=500, n_permutations=100, seed=sim).table
        held = (table["ci_low"] <= 1.0) & (table["ci_high"] >= 1.0 - 1e-12)
        missed += 1 - held.mean()
        all_held += bool(held.all())
    assert missed / sims < 0.03 and all_held / sims >= 0.9


def test_poisson_bootstrap_of_many_clusters_agrees_with_resampling(monkeypatch):
    counts = postings(np.random.default_rng(2), 3000, np.array([1.0, 0.9, 0.8, 0.7]))
    resampled = impact_ratio_inference(counts, n_bootstrap=2000, seed=3).table
    monkeypatch.setattr(resampling, "POISSON_MIN_CLUSTERS", 100)
    poisson = impact_ratio_inference(counts, n_bootstrap=2000, seed=3).table
    for column in ("rate_ci_low", "rate_ci_high", "ci_low", "ci_high"):
        assert poisson[column].to_numpy() == pytest.approx(resampled[column].to_numpy(), abs=0.012)
    assert poisson["ratio_se"].to_numpy() == pytest.approx(resampled["ratio_se"].to_numpy(), rel=0.12)


def test_row_and_count_tables_are_one_computation():
    rng = np.random.default_rng(9)
    rows = pd.DataFrame(
        {
            "gender": rng.choice(["female", "male", None], 4000, p=[0.48, 0.48, 0.04]),
            "race": rng.choice(["black", "white", "hispanic", "api", "unknown"], 4000, p=[0.3, 0.4, 0.2, 0.09, 0.01]),
            "posting_id": rng.integers(0, 300, 4000),
        }
    )
    rows["y"] = (rng.random(4000) < np.where(rows["race"] == "black", 0.2, 0.3)).astype(int)
    settings = ImpactRatioSettings(n_bootstrap=300, seed=2)
    from_rows = impact_ratios(rows, settings=settings)
    counts = (
        rows.fillna({"gender": "unknown"})
        .groupby(["posting_id", "gender", "race"], as_index=False)["y"]
        .agg(n="size", selection="sum")
    )
    from_counts = impact_ratios_from_counts(counts, sex="gender", cluster="posting_id", settings=settings)
    pd.testing.assert_frame_equal(from_rows.table, from_counts.table)
    pd.testing.assert_frame_equal(from_rows.tests, from_counts.tests)
    unclustered = ImpactRatioSettings(n_bootstrap=300, seed=2, cluster="none")
    flat = counts.groupby(["gender", "race"], as_index=False)[["n", "selection"]].sum()
    pd.testing.assert_frame_equal(
        impact_ratios(rows, settings=unclustered).table,
        impact_ratios_from_counts(flat, sex="gender", settings=unclustered).table,
    )


def test_score_tables_from_rows_and_from_counts_of_several_metrics_agree():
    rng = np.random.default_rng(4)
    rows = pd.DataFrame(
        {"gender": rng.choice(["female", "male"], 3000), "race": rng.choice(["black", "white", "asian"], 3000)}
    )
    rows["y"] = np.round(rng.normal(60, 10, 3000) + 3 * (rows["race"] == "white"))
    settings = ImpactRatioSettings(n_bootstrap=300, seed=1, min_score=65)
    from_rows = impact_ratios(rows, settings=settings)
    assert list(from_rows.thresholds) == ["scoring_median", "top_20pct", "score_ge_65"]
    cells = rows.assign(
        n=1,
        scoring_median=rows["y"] > rows["y"].median(),
        top_20pct=rows["y"] >= from_rows.thresholds["top_20pct"],
        score_ge_65=rows["y"] >= 65,
    )
    counts = cells.groupby(["gender", "race"], as_index=False)[["n", *from_rows.thresholds]].sum()
    from_counts = impact_ratios_from_counts(
        counts, outcome="score", thresholds=from_rows.thresholds, sex="gender", settings=settings
    )
    pd.testing.assert_frame_equal(from_rows.table, from_counts.table)


def test_one_category_or_nobody_selected_is_said_plainly():
    one = impact_ratio_inference(
        pd.DataFrame({"category": ["a", "b"], "n": [50, 1], "selected": [10, 1]}), cluster=None, exclude=["b"]
    )
    assert one.table.loc["a", "impact_ratio"] == 1.0 and np.isnan(one.p_value)
    assert one.explain() == "Fewer than two categories are compared, so there is no impact ratio to test."
    none = impact_ratio_inference(
        pd.DataFrame({"category": ["a", "b"], "n": [50, 40], "selected": [0, 0]}), cluster=None
    )
    assert none.table["impact_ratio"].isna().all() and "undefined" in none.explain()


def test_counts_errors_name_the_problem():
    good = pd.DataFrame({"cluster": [1, 1], "category": ["a", "b"], "n": [3, 4], "selected": [1, 2]})
    with pytest.raises(DataError, match=r"lack columns \['selected'\]"):
        impact_ratio_inference(good.drop(columns="selected"))
    with pytest.raises(DataError, match="a selected count outside 0..n"):
        impact_ratio_inference(good.assign(selected=[1, 5]))
    with pytest.raises(DataError, match="no rows"):
        impact_ratio_inference(good.iloc[:0])
