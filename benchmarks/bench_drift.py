"""Drift in dated decisions (issue 33, table.period): is a known drop in one group's selection rate in
one quarter flagged in that quarter, and how often is a table with no drop flagged at all?

Each simulated table is a year of decisions, 4 quarters x `--per-quarter` applicants, sex (F/M) and
race/ethnicity (White 45%, Black 25%, Hispanic 20%, Asian 10%), with the overall selection rate moving
from quarter to quarter (x1.0, x0.8, x1.15, x0.9: a hiring season, a freeze) while every impact ratio
stays where it is. In the tables with a drop, Black applicants' selection rate is multiplied by
`--drop` (default 0.6: impact ratio about 0.92 -> 0.55) in Q3 only. Each table is audited by
`popfair.estimate.impact_ratio.trend.impact_ratios_by_period` (the by-period LL144 tables and the test of
change against the earlier periods, Holm-adjusted over periods and over sex and race: what
`table.period=quarter` runs), from the table's counts per quarter x sex x race drawn binomially
(what the table case reduces its rows to). Two tables are also written as CSV rows and audited end to
end through `python -m popfair`'s table case, which must give the same tests as the counts.

Prints, with the number of simulated tables: the share of drop tables flagged in Q3 for race with
Black named as the category that fell (target: flagged), the share of no-drop tables with any flag
in any quarter (target <= 5%), and where else flags fell.

Run from the repository root: python benchmarks/bench_drift.py [--quick] [--tables-drop 500]
[--tables-null 1000] [--per-quarter 2500] [--drop 0.6]"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
os.environ.setdefault("MPLBACKEND", "Agg")

QUARTERS = ["2024-Q1", "2024-Q2", "2024-Q3", "2024-Q4"]
SEASON = [1.0, 0.8, 1.15, 0.9]  # the overall rate moves; the ratios do not
SEX = {"female": (0.5, 0.97), "male": (0.5, 1.0)}  # share, relative rate
RACE = {"white": (0.45, 0.36), "black": (0.25, 0.33), "hispanic": (0.20, 0.34), "asian": (0.10, 0.355)}
DROP_QUARTER, DROP_GROUP = "2024-Q3", "black"


def simulate_counts(rng: np.random.Generator, per_quarter: int, drop: float | None) -> pd.DataFrame:
    """Counts per quarter x sex x race: multinomial cell sizes, binomial selections."""
    cells = [(s, r, ps * pr, qs * qr) for s, (ps, qs) in SEX.items() for r, (pr, qr) in RACE.items()]
    rows = []
    for quarter, season in zip(QUARTERS, SEASON):
        sizes = rng.multinomial(per_quarter, [c[2] for c in cells])
        for (sex, race, _, rate), n in zip(cells, sizes):
            p = rate * season * (drop if drop is not None and race == DROP_GROUP and quarter == DROP_QUARTER else 1.0)
            rows.append((quarter, "all", sex, race, int(n), int(rng.binomial(n, p))))
    return pd.DataFrame(rows, columns=["period", "cluster", "sex", "race", "n", "selection"])


def audit(counts: pd.DataFrame, n_bootstrap: int):
    from popfair.estimate.impact_ratio.settings import ImpactRatioSettings
    from popfair.estimate.impact_ratio.trend import impact_ratios_by_period

    settings = ImpactRatioSettings(n_bootstrap=n_bootstrap)
    return impact_ratios_by_period(counts, period="quarter", settings=settings)


def rows_of(counts: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """The counts as applicant rows (labels as an HR export writes them), each with a date in its quarter."""
    sex_label = {"female": "F", "male": "M"}
    race_label = {"white": "White", "black": "Black", "hispanic": "Hispanic", "asian": "Asian"}
    frames = []
    for row in counts.itertuples():
        start = pd.Timestamp(f"{row.period[:4]}-{3 * int(row.period[-1]) - 2:02d}-01")
        days = rng.integers(0, 90, row.n)
        outcome = np.r_[np.ones(row.selection, int), np.zeros(row.n - row.selection, int)]
        frames.append(
            pd.DataFrame(
                {
                    "sex": sex_label[row.sex],
                    "race": race_label[row.race],
                    "decided": (start + pd.to_timedelta(days, unit="D")).strftime("%Y-%m-%d"),
                    "hired": outcome,
                }
            )
        )
    table = pd.concat(frames, ignore_index=True).sample(frac=1, random_state=0).reset_index(drop=True)
    table.insert(0, "applicant", np.arange(len(table)))
    return table


def end_to_end(counts: pd.DataFrame, rng: np.random.Generator, n_bootstrap: int) -> pd.DataFrame:
    """The table case on the counts written as CSV rows: its test of change by period."""
    from hydra import compose, initialize_config_dir

    from popfair.sweep.run_case import case_from_config

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "decisions.csv"
        rows_of(counts, rng).to_csv(path, index=False)
        overrides = [
            "experiment=table_audit",
            f"table.path={path}",
            "table.columns.outcome=hired",
            "table.columns.sex=sex",
            "table.columns.race=race",
            "table.columns.applicant_id=applicant",
            "table.columns.date=decided",
            "table.period=quarter",
            "tracking=none",
            "audit_report=false",
            f"estimator.n_bootstrap={n_bootstrap}",
        ]
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            cfg = compose(config_name="config", overrides=overrides)
        case = case_from_config(cfg)
        case.report_dir = Path(folder)
        return case.run().periods.changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 drop and 100 no-drop tables")
    parser.add_argument("--tables-drop", type=int, default=500)
    parser.add_argument("--tables-null", type=int, default=1000)
    parser.add_argument("--per-quarter", type=int, default=2500)
    parser.add_argument("--drop", type=float, default=0.6)
    parser.add_argument("--bootstrap", type=int, default=100, help="per-period CI resamples (the test needs none)")
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    if args.quick:
        args.tables_drop, args.tables_null = 60, 100
    rng = np.random.default_rng(args.seed)
    load = os.getloadavg()[0]
    start = time.perf_counter()

    # the counts path equals the table case's, end to end from CSV rows
    for drop in (args.drop, None):
        counts = simulate_counts(rng, args.per_quarter, drop)
        by_case = end_to_end(counts, rng, args.bootstrap).drop(columns="moved")
        by_counts = audit(counts, args.bootstrap).changes.drop(columns="moved")
        pd.testing.assert_frame_equal(by_case.reset_index(drop=True), by_counts.reset_index(drop=True))
    print("end to end: the table case on CSV rows gives the same tests of change as its counts (2 tables)")

    hits = named = early = late = 0
    for _ in range(args.tables_drop):
        changes = audit(simulate_counts(rng, args.per_quarter, args.drop), args.bootstrap).changes
        flagged = changes[changes["flagged"]]
        in_quarter = flagged[(flagged["period"] == DROP_QUARTER) & (flagged["dimension"] == "race")]
        hits += bool(len(in_quarter))
        named += bool(len(in_quarter)) and in_quarter["moved"].iloc[0].startswith("Black or African American fell")
        early += bool(len(flagged[flagged["period"] < DROP_QUARTER]))
        late += bool(len(flagged[flagged["period"] > DROP_QUARTER]))
    false_alarms = 0
    where: dict[str, int] = {}
    for _ in range(args.tables_null):
        flagged = audit(simulate_counts(rng, args.per_quarter, None), args.bootstrap).flagged()
        false_alarms += bool(len(flagged))
        for row in flagged.itertuples():
            where[f"{row.period} {row.dimension}"] = where.get(f"{row.period} {row.dimension}", 0) + 1
    seconds = time.perf_counter() - start
    rate_null = false_alarms / args.tables_null
    print(
        f"tables: {args.tables_drop} with Black applicants' selection rate x{args.drop:g} in {DROP_QUARTER}, "
        f"{args.tables_null} with no drop; {4 * args.per_quarter:,} applicants per table, the overall rate "
        f"moving by quarter (x{', x'.join(f'{s:g}' for s in SEASON)})"
    )
    print(
        f"drop tables flagged in {DROP_QUARTER} (race/ethnicity): {hits}/{args.tables_drop} = "
        f"{hits / args.tables_drop:.1%}; with Black named as the category that fell: {named}/{args.tables_drop}"
    )
    print(
        f"drop tables with a flag before {DROP_QUARTER}: {early}/{args.tables_drop} = {early / args.tables_drop:.1%}; "
        f"after it ({QUARTERS[-1]}: the recovery is a change against the earlier quarters): {late}/{args.tables_drop}"
    )
    from scipy.stats import binomtest

    interval = binomtest(false_alarms, args.tables_null).proportion_ci(0.95)
    print(
        f"no-drop tables with any flag (false alarms): {false_alarms}/{args.tables_null} = {rate_null:.1%} "
        f"[95% CI {interval.low:.1%}, {interval.high:.1%}] (target <= 5%: Holm keeps the chance of any flag at "
        f"most alpha = 5%; flags by quarter and dimension: {where or 'none'})"
    )
    print(f"time {seconds:.0f} s, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    met = hits / args.tables_drop >= 0.9 and rate_null <= 0.05
    print(
        "acceptance (flagged in the drop quarter in >= 90% of drop tables, <= 5% false alarms):",
        "met" if met else "NOT met",
    )
    if not met:
        sys.exit(1)


if __name__ == "__main__":
    main()
