"""Benchmark: what the interventional audit adds beyond scoring, on the nurse case.

Runs one case (default: nurse, gender, text resumes, tfidf, estimator=both, every PUMS nurse,
interventional n=2000) without MLflow and prints the stage times, the scoring time (one screening
of the factual and counterfactual documents), the interventional audit's cost beyond scoring
(drawing the worlds, rendering the counterfactual resumes, the interventional inference) and its
share of the run, then the side-by-side table. The counterfactual rendering and inference are
timed again on the run's own world rows (the run renders all rows in one pass).

    python benchmarks/bench_interventional.py                      # tfidf, estimator=both
    python benchmarks/bench_interventional.py --screener embedding_minilm --population-n 2000 --n 400
    python benchmarks/bench_interventional.py --estimator interventional --attr race
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from popfair.case.population import PopulationCase  # noqa: E402
from popfair.core.types import FACTUAL, WORLD  # noqa: E402
from popfair.render.base import render_all  # noqa: E402

TARGET_SHARE = 0.10  # the bar: added cost beyond scoring under 10% of the run time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--screener", default="tfidf")
    parser.add_argument("--estimator", default="both", choices=["both", "interventional"])
    parser.add_argument("--attr", default="gender", choices=["gender", "race"])
    parser.add_argument("--n", type=int, default=2000, help="applicants intervened on (estimator n)")
    parser.add_argument("--population-n", type=int, default=None, help="resample the population (default: all)")
    parser.add_argument("--occupation", default="nurse")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="also write the effects table to this CSV")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides (key=value)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    n_key = "estimator.interventional.n" if args.estimator == "both" else "estimator.n"
    overrides = [
        f"occupation={args.occupation}",
        f"protected_attr={args.attr}",
        f"screener={args.screener}",
        f"estimator={args.estimator}",
        f"{n_key}={args.n}",
        f"seed={args.seed}",
        "tracking=none",
        "population.diagnostics=false",
        *args.overrides,
    ]
    if args.population_n:
        overrides.append(f"population.n={args.population_n}")
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=overrides)

    start = time.perf_counter()
    experiment = PopulationCase.from_config(cfg)
    build_s = time.perf_counter() - start
    result = experiment.run()
    run_s = time.perf_counter() - start
    metrics = result.effects.metrics
    worlds = result.scored_worlds
    clock = time.perf_counter()
    render_all(experiment.renderer, result.profiles.worlds.drop(columns=WORLD), result.profiles.jobs, progress=False)
    intv = {"worlds": result.timings["worlds"], "render": time.perf_counter() - clock}
    interventional = getattr(experiment.estimator, "interventional", experiment.estimator)
    ok = result.scored[result.scored["error"].isna()].assign(**{WORLD: FACTUAL})
    clock = time.perf_counter()
    interventional.estimate(pd.concat([ok, worlds], ignore_index=True), result.profiles.roles)
    intv["inference"] = time.perf_counter() - clock
    scoring_s = result.timings["screen"]
    added_s = sum(intv.values())
    share = added_s / run_s

    print(
        f"\ncase: {experiment.case_name()}   applicants: {len(result.scored):,}   "
        f"intervened on: {metrics['intv.n']:.0f}   counterfactual documents: {metrics['intv.documents']:.0f} "
        f"({metrics['intv.distinct_documents']:.0f} distinct)   own-world = factual document: "
        f"{metrics.get('intv.consistency', float('nan')):.3f}"
    )
    print(
        f"stage times (s): build {build_s:.2f}, "
        + ", ".join(f"{name} {seconds:.2f}" for name, seconds in result.timings.items())
    )
    print("interventional (s): " + ", ".join(f"{k} {v:.2f}" for k, v in intv.items()))
    pse = {k.removeprefix("time.pse_").removesuffix("_s"): v for k, v in metrics.items() if k.startswith("time.pse_")}
    if pse:
        print("observational DML-UCA (s): " + ", ".join(f"{k} {v:.2f}" for k, v in pse.items()))
    print(
        f"run time {run_s:.2f} s; scoring (factual and counterfactual documents) {scoring_s:.2f} s; "
        f"interventional cost beyond scoring {added_s:.2f} s = {100 * share:.1f}% of the run "
        f"({'under' if share < TARGET_SHARE else 'OVER'} the {100 * TARGET_SHARE:.0f}% bar)"
    )
    with pd.option_context("display.width", 220, "display.max_columns", 30, "display.float_format", "{:.3f}".format):
        shown = result.effects.table.drop(columns=[c for c in ("case", "p_value") if c in result.effects.table])
        print(shown.to_string())
    print(f"pattern label{' (observational)' if args.estimator == 'both' else ''}: {result.effects.pattern}")
    if args.csv:
        result.effects.table.to_csv(args.csv)


if __name__ == "__main__":
    main()
