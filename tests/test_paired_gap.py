"""paired_gap statistics: the paper's arithmetic, agreement with statsmodels/scipy, bootstrap
behaviour and coverage on simulated clustered pairs, failures, and the Estimator's pivot."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar

from popfair.core.errors import EstimationError
from popfair.core.types import Roles
from popfair.estimate.gap.paired import PairedGap, paired_gap
from popfair.estimate.inference import bootstrap_means

ROLES = Roles(x="race", x0="black", x1="white", z=("gender",), b=(), r=("first_name", "surname"))


def pairs_with_counts(n_postings: int, per_posting: int, b: int, c: int, both_yes: int, seed: int = 0) -> pd.DataFrame:
    """n_postings x per_posting pairs with exactly b (adv yes, other no), c (reverse) and both_yes pairs."""
    n = n_postings * per_posting
    order = np.random.default_rng(seed).permutation(n)
    adv, other = np.zeros(n), np.zeros(n)
    adv[order[:b]] = 1
    other[order[b : b + c]] = 1
    adv[order[b + c : b + c + both_yes]] = other[order[b + c : b + c + both_yes]] = 1
    return pd.DataFrame({"y_white": adv, "y_black": other, "posting": np.repeat(np.arange(n_postings), per_posting)})


def simulate_clustered(n_postings: int, gap: float, seed: int) -> pd.DataFrame:
    """Pairs whose callback propensity varies by posting (so pairs within a posting are correlated)."""
    rng = np.random.default_rng(seed)
    base = np.repeat(rng.beta(2, 5, n_postings), 4)
    tilt = np.repeat(rng.normal(gap, 0.08, n_postings), 4)  # posting-level heterogeneity in the gap
    u = rng.random(len(base))
    other = (u < base).astype(float)
    adv = (u < np.clip(base + tilt, 0, 1)).astype(float)
    return pd.DataFrame({"a": adv, "o": other, "g": np.repeat(np.arange(n_postings), 4)})


def test_paper_race_arithmetic():
    pairs = pairs_with_counts(6006, 4, b=953, c=443, both_yes=9000)
    r = paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="posting")
    assert (r.n_pairs, r.n_clusters, r.b, r.c) == (24_024, 6006, 953, 443)
    assert round(r.gap_pp, 2) == 2.12 and round(r.bc_ratio, 2) == 2.15
    assert r.mcnemar_p < 0.001 and r.mcnemar_chi2 == pytest.approx((510 - 1) ** 2 / 1396)
    assert r.discordant_share == pytest.approx(1396 / 24_024)  # the paper's 5.8%
    assert round(100 * (r.rate_adv - r.rate_other), 2) == 2.12
    assert r.ci_low < r.gap_pp < r.ci_high and 1.6 < r.ci_low and r.ci_high < 2.7  # paper [1.82, 2.43]


def test_paper_gender_arithmetic():
    pairs = pairs_with_counts(6006, 8, b=1750, c=827, both_yes=20_000)
    r = paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="posting")
    assert r.n_pairs == 48_048 and round(r.gap_pp, 2) == 1.92 and r.mcnemar_p < 0.001


@pytest.mark.parametrize("b, c", [(953, 443), (12, 9), (5, 5), (0, 3), (40, 0)])
def test_mcnemar_equals_statsmodels(b, c):
    pairs = pairs_with_counts(1500, 4, b=b, c=c, both_yes=100)
    r = paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="posting", n_bootstrap=200)
    table = pd.crosstab(pairs["y_white"], pairs["y_black"]).to_numpy()
    expected = mcnemar(table, exact=False, correction=True)
    assert r.mcnemar_chi2 == pytest.approx(expected.statistic, rel=1e-12)
    assert r.mcnemar_p == pytest.approx(expected.pvalue, rel=1e-10)


def test_cluster_t_equals_one_sample_t_test_on_posting_means():
    data = simulate_clustered(500, 0.02, seed=4)
    data = data.drop(index=np.arange(0, 2000, 7))  # unequal cluster sizes
    data.loc[data.index[::31], "o"] = np.nan  # failures drop their pairs
    r = paired_gap(data, y_adv="a", y_other="o", cluster="g", n_bootstrap=200)
    ok = data.dropna()
    means = (ok["a"] - ok["o"]).groupby(ok["g"]).mean()
    expected = stats.ttest_1samp(means, 0.0)
    assert r.cluster_t == pytest.approx(expected.statistic, rel=1e-10)
    assert r.cluster_p == pytest.approx(expected.pvalue, rel=1e-8)
    assert r.n_clusters == len(means) and r.n_dropped == int(data["o"].isna().sum())
    assert r.cluster_se == pytest.approx(100 * means.std(ddof=1) / np.sqrt(len(means)))


def test_bootstrap_matches_resampling_cluster_indices():
    """The multinomial shortcut has the distribution of the textbook index bootstrap."""
    data = simulate_clustered(800, 0.03, seed=5)
    diff = (data["a"] - data["o"]).to_numpy()
    sums = np.bincount(data["g"], weights=diff)
    sizes = np.bincount(data["g"]).astype(float)
    fast = 100 * bootstrap_means(sums, sizes, 20_000, np.random.default_rng(1))[:, 0]
    idx = np.random.default_rng(2).integers(0, len(sums), size=(20_000, len(sums)))
    slow = 100 * sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    assert fast.mean() == pytest.approx(slow.mean(), abs=0.03)
    assert fast.std() == pytest.approx(slow.std(), rel=0.03)
    assert np.quantile(fast, [0.025, 0.975]) == pytest.approx(np.quantile(slow, [0.025, 0.975]), abs=0.08)


def test_bootstrap_ci_contains_estimate_and_narrows_with_n():
    widths = []
    for n_postings in (250, 1000, 4000):
        r = paired_gap(simulate_clustered(n_postings, 0.02, seed=n_postings), y_adv="a", y_other="o", cluster="g")
        assert r.ci_low <= r.gap_pp <= r.ci_high
        widths.append(r.ci_high - r.ci_low)
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] == pytest.approx(4.0, rel=0.25)  # width ~ 1/sqrt(G)


def test_bootstrap_ci_covers_the_true_gap():
    """Coverage of the 95% cluster-bootstrap CI over 200 simulated audits with clustered pairs."""
    truth_sims = simulate_clustered(200_000, 0.03, seed=99)
    true_gap = 100 * (truth_sims["a"] - truth_sims["o"]).mean()
    hits = []
    for seed in range(200):
        r = paired_gap(
            simulate_clustered(400, 0.03, seed=seed), y_adv="a", y_other="o", cluster="g", n_bootstrap=500, seed=seed
        )
        hits.append(r.ci_low <= true_gap <= r.ci_high)
    assert 0.90 <= np.mean(hits) <= 0.99


def test_null_gap_is_rarely_significant():
    rejections = [
        paired_gap(simulate_clustered(300, 0.0, seed=s), y_adv="a", y_other="o", cluster="g", n_bootstrap=100).cluster_p
        < 0.05
        for s in range(200)
    ]
    assert np.mean(rejections) < 0.09


def test_failures_drop_their_pairs_and_bad_inputs_are_clear():
    pairs = pairs_with_counts(50, 4, b=20, c=10, both_yes=40)
    pairs.loc[[0, 5, 9], "y_black"] = np.nan
    pairs.loc[[5, 17], "y_white"] = np.nan
    r = paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="posting", n_bootstrap=200)
    assert r.n_dropped == 4 and r.n_pairs == 196
    with pytest.raises(EstimationError, match="every pair is missing a side"):
        paired_gap(pairs.assign(y_black=np.nan), y_adv="y_white", y_other="y_black", cluster="posting")
    with pytest.raises(EstimationError, match="lacks columns \\['cluster'\\]"):
        paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="cluster")
    with pytest.raises(EstimationError, match=r"must be callbacks in \[0, 1\]"):
        paired_gap(pairs.assign(y_white=2.0), y_adv="y_white", y_other="y_black", cluster="posting")
    # a mean of several answers (screener.samples > 1) is a callback rate: the clustered t, no McNemar
    mean = paired_gap(pairs.assign(y_white=0.5), y_adv="y_white", y_other="y_black", cluster="posting")
    assert mean.test == "cluster_t" and np.isnan(mean.mcnemar_p)
    with pytest.raises(EstimationError, match="at least 2"):
        paired_gap(pairs.assign(posting=1), y_adv="y_white", y_other="y_black", cluster="posting")


def long_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate, as the pipeline's scored table."""
    key = pairs.index.astype(str)
    white = pd.DataFrame({"pair_key": key, "posting_id": pairs["posting"], "race": "white", "y": pairs["y_white"]})
    black = pd.DataFrame({"pair_key": key, "posting_id": pairs["posting"], "race": "black", "y": pairs["y_black"]})
    return pd.concat([white, black]).sample(frac=1.0, random_state=0)  # order must not matter


def test_estimator_pivots_within_pair_key():
    pairs = pairs_with_counts(300, 4, b=60, c=25, both_yes=200)
    direct = paired_gap(pairs, y_adv="y_white", y_other="y_black", cluster="posting", n_bootstrap=500)
    effects = PairedGap(n_bootstrap=500).estimate(long_table(pairs), ROLES, "y")
    row = effects.table.loc["gap"]
    assert row["estimate"] == pytest.approx(direct.gap_pp) and row["ci_low"] == pytest.approx(direct.ci_low)
    assert (row["b"], row["c"], row["n_pairs"]) == (60, 25, 1200)
    assert row["rate_white"] == pytest.approx(direct.rate_adv)
    assert effects.labels and "favouring white" in effects.labels[0]


def test_estimator_counts_pairs_with_a_missing_side_and_rejects_malformed_pairs():
    scored = long_table(pairs_with_counts(100, 4, b=30, c=10, both_yes=50))
    one_sided = scored[~((scored["race"] == "black") & scored["pair_key"].isin(["0", "1", "2"]))]
    effects = PairedGap(n_bootstrap=200).estimate(one_sided, ROLES, "y")
    assert effects.table.loc["gap", "n_dropped"] == 3 and effects.table.loc["gap", "n_pairs"] == 397
    with pytest.raises(EstimationError, match="every pair is missing a side"):
        PairedGap(n_bootstrap=200).estimate(scored[scored["race"] == "white"], ROLES, "y")
    doubled = pd.concat([scored, scored.head(1)])
    with pytest.raises(EstimationError, match="two rows for the same race level"):
        PairedGap(n_bootstrap=200).estimate(doubled, ROLES, "y")
    with pytest.raises(EstimationError, match="lacks columns \\['pair_key'\\]"):
        PairedGap(n_bootstrap=200).estimate(scored.drop(columns="pair_key"), ROLES, "y")
