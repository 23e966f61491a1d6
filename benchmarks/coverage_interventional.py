"""Coverage study: do the interventional CIs cover the simulated screener's true effects?

Samples the nurse population once, then for each replication r draws a fresh interventional
estimate (estimator seed r: the population draws the worlds its design declares for a new applicant
sample with new counterfactual noise; the simulated screener scores them) and compares each
effect's 95% CI with the exact truth for that seed (`expected_effects`: the screener's expected
score averaged over every applicant's counterfactual worlds). Prints per-effect coverage, mean CI width and mean error.

    python benchmarks/coverage_interventional.py [--reps 100] [--n 500] [--attr gender] [--population-n 5000]

A contrast that is constant across applicants (NDE when the resume never shows X: both documents,
and so their noise draws, are identical) has a zero-width CI; it counts as covering when the truth
lies within `--tolerance` points of it (the truth differs only through rare clipping at 0 or 100).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from popfair.case.population import PopulationCase  # noqa: E402
from popfair.core.types import FACTUAL, WORLD  # noqa: E402
from popfair.estimate.pse.design.interventional import Interventional, expected_effects  # noqa: E402
from popfair.estimate.pse.sfm import EFFECTS  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.render.base import render_all  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--n", type=int, default=500, help="applicants intervened on per replication")
    parser.add_argument("--attr", default="gender", choices=["gender", "race"])
    parser.add_argument("--population-n", type=int, default=5000)
    parser.add_argument("--ci", default="t", choices=["t", "bootstrap"])
    parser.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args()

    overrides = [
        "screener=simulated",
        "estimator=interventional",
        f"protected_attr={args.attr}",
        f"population.n={args.population_n}",
        "population.diagnostics=false",
        "tracking=none",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=overrides)
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, experiment.seed)
    factual = profiles.table.assign(y=0.0, **{WORLD: FACTUAL})  # counts the eligible; y is not used
    start = time.perf_counter()
    rows = []
    for rep in range(args.reps):
        estimator = Interventional(n=args.n, ci=args.ci, seed=rep)
        worlds = draw_worlds(experiment.population, profiles, estimator.counterfactuals)
        documents = render_all(experiment.renderer, worlds.drop(columns=WORLD), profiles.jobs, progress=False)
        results = experiment.screener.screen(profiles.jobs, documents, profiles.outcome)
        scored = worlds.assign(y=[r.value for r in results])
        table = estimator.estimate(pd.concat([factual, scored], ignore_index=True), profiles.roles).table
        everyone = draw_worlds(experiment.population, profiles, dataclasses.replace(estimator.counterfactuals, n=None))
        truth = expected_effects(everyone, experiment.screener.expected(everyone, profiles.outcome))
        for effect in EFFECTS:
            lo, hi = table.loc[effect, "ci_low"], table.loc[effect, "ci_high"]
            rows.append(
                {
                    "rep": rep,
                    "effect": effect,
                    "truth": truth[effect],
                    "estimate": table.loc[effect, "estimate"],
                    "width": hi - lo,
                    "covered": lo - args.tolerance <= truth[effect] <= hi + args.tolerance,
                }
            )
    results = pd.DataFrame(rows)
    summary = (
        results.assign(error=results["estimate"] - results["truth"])
        .groupby("effect", sort=False)
        .agg(
            coverage=("covered", "mean"),
            mean_width=("width", "mean"),
            mean_error=("error", "mean"),
            mean_truth=("truth", "mean"),
        )
    )
    print(
        f"\n{args.reps} replications, n={args.n} of {len(profiles.table):,} nurses ({args.attr}), "
        f"{args.ci} CIs, {time.perf_counter() - start:.1f} s"
    )
    with pd.option_context("display.float_format", "{:.4f}".format):
        print(summary.to_string())
    lo, hi = 0.90, 0.98
    ok = summary["coverage"].between(lo, hi) | (summary["mean_width"] < 10 * args.tolerance)
    print(
        f"coverage in [{lo}, {hi}] (or a zero-width exact contrast): {'yes' if ok.all() else 'NO'}; "
        f"binomial 95% band for nominal 0.95 at {args.reps} reps: "
        f"[{0.95 - 1.96 * np.sqrt(0.95 * 0.05 / args.reps):.3f}, {0.95 + 1.96 * np.sqrt(0.95 * 0.05 / args.reps):.3f}]"
    )


if __name__ == "__main__":
    main()
