"""Anytime-valid confidence sequences (popfair.estimate.sequential.sequences) against computable truths: the
hedged-capital process recomputed by hand, coverage at every look by simulation (where a fixed-n
CI peeked at as often fails), and the Bonferroni box behind differences, ratios and impact ratios."""

from __future__ import annotations

import math

import numpy as np
import pytest

from popfair.core.errors import ConfigError, EstimationError
from popfair.estimate.sequential import sequences as sq


def _hedged_log_capital(z: np.ndarray, m: float, alpha: float, c: float = 0.5, theta: float = 0.5) -> np.ndarray:
    """Waudby-Smith and Ramdas (2024) Theorem 3, written from the paper: the log of
    max(theta K+_t(m), (1 - theta) K-_t(m)) at every t, on data in [0, 1], with the predictable
    plug-in bet lambda_t = sqrt(2 log(2/alpha) / (sigma2_{t-1} t log(1 + t))) truncated at c/m, c/(1-m)."""
    log_up = log_down = 0.0
    out = []
    mu_sum, dev_sum, var_prev = 0.0, 0.0, 0.25
    for t, x in enumerate(z, start=1):
        lam = math.sqrt(2 * math.log(2 / alpha) / (var_prev * t * math.log1p(t)))
        log_up += math.log1p(min(lam, c / m) * (x - m))
        log_down += math.log1p(-min(lam, c / (1 - m)) * (x - m))
        out.append(max(math.log(theta) + log_up, math.log(1 - theta) + log_down))
        mu_sum += x
        mu = (0.5 + mu_sum) / (t + 1)
        dev_sum += (x - mu) ** 2
        var_prev = (0.25 + dev_sum) / (t + 1)
    return np.array(out)


def test_betting_interval_matches_the_hedged_capital_process():
    rng = np.random.default_rng(7)
    y = (rng.random(400) < 0.3).astype(float)
    alpha = 0.05
    seq = sq.MeanSequence((0.0, 1.0), alpha=alpha, grid=2000)
    iv = seq.update(y[:150])
    iv = seq.update(y[150:])
    assert iv.n == 400 and iv.estimate == pytest.approx(y.mean())
    step = 1 / 1999
    threshold = math.log(1 / alpha)
    for m_out in (iv.low - 3 * step, iv.high + 3 * step):  # excluded at some look: capital reached 1/alpha
        assert _hedged_log_capital(y, m_out, alpha).max() >= threshold
    for m_in in (iv.low + 3 * step, iv.high - 3 * step, 0.3):  # kept: capital never reached 1/alpha
        assert _hedged_log_capital(y, m_in, alpha).max() < threshold


def test_rate_sequence_covers_at_every_look_where_a_peeked_fixed_n_ci_does_not():
    rng = np.random.default_rng(11)
    p, n, reps = 0.3, 300, 120
    looks = sq.looks_for(n, n_looks=10)
    assert looks == [30, 60, 90, 120, 150, 180, 210, 240, 270, 300]
    cs_miss = fixed_miss = 0
    for _ in range(reps):
        y = (rng.random(n) < p).astype(float)
        path = sq.rate_sequence(y, looks, method="bernstein" if _ % 2 else "betting")
        cs_miss += any(not (iv.low <= p <= iv.high) for iv in path)
        fixed_miss += any(not (f.low <= p <= f.high) for f in (sq.fixed_mean_interval(y[:k]) for k in looks))
    assert cs_miss / reps <= 0.05  # time-uniform coverage >= 95% (the CS is conservative at 10 looks)
    assert fixed_miss / reps >= 0.09  # ten peeks at a 95% CI miss far more often than 5%


def test_paired_gap_sequence_detects_a_real_gap_and_not_a_null_one():
    rng = np.random.default_rng(3)
    looks = sq.looks_for(1500, batch=150)
    biased = rng.choice([-1.0, 0.0, 1.0], p=[0.08, 0.7, 0.22], size=1500)  # true gap +0.14
    path = sq.paired_gap_sequence(biased, looks)
    assert path[-1].excludes(0.0) and path[-1].low <= 0.14 <= path[-1].high
    first = next(iv.n for iv in path if iv.excludes(0.0))
    assert first < 1500  # stops before the budget
    widths = [iv.high - iv.low for iv in path]
    assert all(b <= a for a, b in zip(widths, widths[1:]))  # the running intersection only narrows
    fixed = sq.fixed_mean_interval(biased)
    assert fixed.method == "fixed-n t" and (fixed.high - fixed.low) < widths[-1]  # the price of looking
    null = rng.choice([-1.0, 0.0, 1.0], p=[0.15, 0.7, 0.15], size=1500)
    assert not sq.paired_gap_sequence(null, looks)[-1].excludes(0.0)
    pp = path[-1].scaled(100)
    assert pp.low == pytest.approx(100 * path[-1].low) and pp.n == path[-1].n


def test_group_rates_box_gives_simultaneous_differences_ratios_and_impact_ratios():
    rng = np.random.default_rng(5)
    truth = {"a": 0.5, "b": 0.35, "c": 0.45}
    top = max(truth.values())
    reps, n = 40, 600
    misses = 0
    for _ in range(reps):
        g = rng.choice(list(truth), size=n)
        y = (rng.random(n) < np.vectorize(truth.get)(g)).astype(float)
        rates = sq.GroupRates(list(truth), alpha=0.05, method="bernstein")
        rates.update(y[:300], g[:300])
        rates.update(y[300:], g[300:])
        diff, ratio, irs = rates.difference("a", "b"), rates.ratio("b", "a"), rates.impact_ratios()
        ok = diff.low <= 0.15 <= diff.high and ratio.low <= 0.7 <= ratio.high
        ok &= all(irs[k].low <= truth[k] / top <= irs[k].high for k in truth)
        misses += not ok
    assert misses / reps <= 0.05
    # The derived intervals are the image of the per-group box (each group at alpha / G).
    ra, rb = rates.rate("a"), rates.rate("b")
    assert diff.low == pytest.approx(ra.low - rb.high) and diff.high == pytest.approx(ra.high - rb.low)
    assert ratio.low == pytest.approx(rb.low / ra.high) and ratio.high == pytest.approx(rb.high / ra.low)
    assert irs["a"].high <= 1.0 and rates.n == n
    low_group, lowest = rates.lowest_impact_ratio()
    assert low_group == min(irs, key=lambda k: irs[k].estimate)
    assert lowest.low == min(iv.low for iv in irs.values()) and lowest.high == min(iv.high for iv in irs.values())
    scores = sq.GroupRates(["a", "b"], bounds=(0.0, 100.0), method="bernstein")
    scores.update([80.0, 60.0, 75.0, 55.0], ["a", "b", "a", "b"])
    assert scores.difference("a", "b").estimate == pytest.approx(20.0)
    alone = sq.MeanSequence((0.0, 1.0), alpha=0.05 / 3, method="bernstein").update(y[g == "a"])
    assert ra.low == pytest.approx(alone.low) and ra.high == pytest.approx(alone.high)


def test_difference_ratio_and_impact_ratio_functions_follow_the_looks():
    rng = np.random.default_rng(2)
    g = rng.choice(["f", "m"], size=800)
    y = (rng.random(800) < np.where(g == "m", 0.6, 0.3)).astype(float)
    looks = [200, 400, 800]
    diffs = sq.rate_difference_sequence(y, g, "m", "f", looks)
    ratios = sq.rate_ratio_sequence(y, g, "f", "m", looks)
    irs = sq.impact_ratio_sequence(y, g, looks)
    assert [d.n for d in diffs] == looks and diffs[-1].excludes(0.0)
    assert ratios[-1].high < 1.0 and irs[-1]["f"].high < 1.0 and irs[-1]["m"].high == 1.0
    assert irs[-1]["f"].estimate == pytest.approx(ratios[-1].estimate)


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(EstimationError, match="outside its bounds"):
        sq.MeanSequence((0.0, 1.0)).update([0.0, 2.0])
    with pytest.raises(EstimationError, match="not finite"):
        sq.MeanSequence((0.0, 1.0)).update([float("nan")])
    with pytest.raises(ConfigError, match="unknown confidence-sequence method"):
        sq.MeanSequence(method="bayes")
    with pytest.raises(ConfigError, match="alpha"):
        sq.MeanSequence(alpha=0.7)
    with pytest.raises(ConfigError, match="increasing"):
        sq.rate_sequence([0, 1, 1], [2, 2])
    with pytest.raises(ConfigError, match="exactly one"):
        sq.looks_for(10)
    with pytest.raises(EstimationError, match="not one of the declared groups"):
        sq.rate_difference_sequence([1, 0, 1], ["a", "b", "z"], "a", "b", [3])
    empty = sq.MeanSequence((-1.0, 1.0)).interval
    assert (empty.low, empty.high, empty.n) == (-1.0, 1.0, 0) and not empty.excludes(0.0)
    assert sq.looks_for(10, batch=4) == [4, 8, 10]
    assert sq.AnytimeInterval(0.0, -0.01, 0.015, 10, 0.05, "betting").within(0.02)
