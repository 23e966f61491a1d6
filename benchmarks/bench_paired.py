"""Benchmark: paired_gap statistics for a 14-model panel x 2 axes at the paper's design size
(race 24,024 pairs, gender 48,048 pairs, 6,006 posting clusters), 2,000 bootstrap resamples each,
plus the panel report. Target: all 28 statistics in under 5 s. Also times the design generation.

Run: python benchmarks/bench_paired.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script lives in

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from popfair.design.paired.population import PairedAuditPopulation
from popfair.estimate.gap.paired import paired_gap
from popfair.population.postings import EntryLevelPostings
from popfair.population.protected import ProtectedAttribute
from popfair.report.panel import panel_report, panel_row

N_POSTINGS, N_MODELS, N_BOOTSTRAP = 6006, 14, 2000


def simulated_decisions(n_postings: int, per_posting: int, gap: float, rng: np.random.Generator) -> pd.DataFrame:
    """0/1 decisions with posting-level heterogeneity (clustered pairs) and a true gap; the two members
    share their uniform draw 90% of the time (mostly concordant pairs, as in the paper)."""
    base = np.repeat(rng.beta(2, 3, n_postings), per_posting)
    u = rng.random(len(base))
    u_adv = np.where(rng.random(len(base)) < 0.9, u, rng.random(len(base)))
    return pd.DataFrame(
        {
            "y_adv": (u_adv < np.clip(base + gap, 0, 1)).astype(float),
            "y_other": (u < base).astype(float),
            "posting_id": np.repeat(np.arange(n_postings), per_posting),
        }
    )


def main() -> None:
    rng = np.random.default_rng(0)
    gaps = np.linspace(0.02, -0.03, N_MODELS)
    inputs = {
        (m, axis): simulated_decisions(N_POSTINGS, 4 if axis == "race" else 8, g * (1 if axis == "race" else 0.7), rng)
        for m, g in enumerate(gaps)
        for axis in ("race", "gender")
    }
    start = time.perf_counter()
    rows = []
    for (m, axis), pairs in inputs.items():
        result = paired_gap(
            pairs, y_adv="y_adv", y_other="y_other", cluster="posting_id", n_bootstrap=N_BOOTSTRAP, seed=m
        )
        rows.append(panel_row(f"model_{m:02d}", axis, f"{2023 + m // 5}-{1 + m % 12:02d}-01", result))
    stats_s = time.perf_counter() - start
    start = time.perf_counter()
    report = panel_report(pd.DataFrame(rows))
    report_s = time.perf_counter() - start
    print(report.to_text())
    print(
        f"\npaired_gap: {len(rows)} statistics (14 models x 2 axes, {N_BOOTSTRAP} cluster-bootstrap "
        f"resamples each, 24,024 / 48,048 pairs in {N_POSTINGS} postings): {stats_s:.2f} s "
        f"(target < 5 s: {'PASS' if stats_s < 5 else 'FAIL'})"
    )
    print(f"panel report (tables, chart, correlation): {report_s:.2f} s")

    postings = EntryLevelPostings(n_postings=N_POSTINGS)
    start = time.perf_counter()
    race = PairedAuditPopulation(axis="race").sample(postings, ProtectedAttribute("race", "black", "white"), 0)
    race_s = time.perf_counter() - start
    start = time.perf_counter()
    gender = PairedAuditPopulation(axis="gender").sample(postings, ProtectedAttribute("gender", "female", "male"), 0)
    gender_s = time.perf_counter() - start
    print(
        f"design: postings + race sample {len(race.table):,} rows in {race_s:.2f} s; "
        f"gender sample {len(gender.table):,} rows in {gender_s:.2f} s"
    )


if __name__ == "__main__":
    main()
