"""Benchmark: the PopResume authors' estimator (estimator=pse_paper) beside popfair's (pse_dml) and the
counterfactual design (estimator=interventional), against the truth, on every PUMS nurse.

Cases (the simulated screener of conf/screener/simulated.yaml unless named):
- nurse x gender, simulated screener (direct +2 for men, +1.5 for male-typical names, qualifications);
- nurse x gender, a gender-blind screener: +4 for the 20 most common first names of the population's
  men, plus qualifications; it never reads gender, so its true NDE is exactly 0 (its name effect is
  a proxy effect, RIE);
- nurse x race (Black vs White), simulated screener.

Each case is one run of the pipeline (population draw, rendering, screening) with
estimator=interventional (n applicants' five counterfactual resumes rendered and scored by the same
screener), so every estimator reads the same scored applicants. The truth is the screener's expected
score averaged over every applicant's five counterfactual worlds of that draw (the full
interventional design). pse_paper and pse_dml run on the factual scores of the same run; pse_dml is
shown as popfair reports it (gate on: "n/i" = not identified, no number), with its ungated estimate
in parentheses. Per effect: estimate [95% CI], whether the CI covers the truth, and for pse_paper
the mean of its worst raw weight (1 when the propensities are right), popfair's verdict on it, and
the share of its iterations above 0. Then the seconds each estimator took.

    nice python benchmarks/bench_paper_estimator.py --bootstrap 30          # about 15 min on 2 busy cores
    python benchmarks/bench_paper_estimator.py --cases gender --bootstrap 8 --population-n 5000

`--bootstrap` is pse_paper's resample-and-refit iterations (the paper's 500 take about 50 min per
case on one core); pse_dml keeps its 500 score resamples.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from popfair.case.experiment import Experiment  # noqa: E402
from popfair.core.types import WorldRequest  # noqa: E402
from popfair.estimate.base import factual_rows  # noqa: E402
from popfair.estimate.pse.estimator import estimate_pse  # noqa: E402
from popfair.estimate.pse.interventional import expected_effects  # noqa: E402
from popfair.estimate.pse.paper import estimate_pse_paper  # noqa: E402
from popfair.estimate.pse.settings import PseOverlapWarning  # noqa: E402
from popfair.estimate.pse.sfm import EFFECTS, TARGETS  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener  # noqa: E402

QUALIFICATIONS = {"edu_group": {"medium": 6.0, "high": 12.0}, "exp_year": 0.8}
CASES = {  # name -> (protected attribute, screener)
    "gender": ("gender", "simulated"),
    "gender_blind": ("gender", "blind"),
    "race": ("race", "simulated"),
}


def run_case(name: str, args: argparse.Namespace, cache: Path) -> tuple[list[dict], dict[str, float]]:
    attribute, screener = CASES[name]
    overrides = [
        "screener=simulated",
        f"protected_attr={attribute}",
        f"population.n={'null' if args.population_n is None else args.population_n}",
        "population.diagnostics=false",
        "estimator=interventional",
        f"estimator.n={args.intervened}",
        "outcome_audit=null",
        "tracking=none",
        f"cache_dir={cache}",
        f"seed={args.seed}",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        experiment = Experiment.from_config(compose(config_name="config", overrides=overrides))
    if screener == "blind":  # the 20 most common first names of this draw's men
        table = experiment.population.sample(experiment.occupation, experiment.protected, args.seed).table
        names = table.loc[table["gender"] == "male", "first_name"].value_counts().index[:20]
        experiment.screener = SimulatedScreener(
            intercept=45.0, coefficients={"first_name": {str(n): 4.0 for n in names}, **QUALIFICATIONS}, seed=args.seed
        )
    times: dict[str, float] = {}
    clock = time.perf_counter()
    result = experiment.run()  # the factual and n applicants' counterfactual resumes, scored
    times["interventional (whole run)"] = time.perf_counter() - clock
    everyone = draw_worlds(experiment.population, result.profiles, WorldRequest(worlds=TARGETS, n=None, seed=args.seed))
    truth = expected_effects(everyone, experiment.screener.expected(everyone, result.profiles.outcome))
    data, roles = factual_rows(result.scored), result.profiles.roles
    role_kwargs = {"x": roles.x, "x0": roles.x0, "x1": roles.x1, "z": roles.z, "b": roles.b, "r": roles.r, "y": "y"}
    clock = time.perf_counter()
    paper = estimate_pse_paper(data, n_bootstrap=args.bootstrap, n_jobs=args.jobs, cache_dir=cache, **role_kwargs)
    times["pse_paper"] = time.perf_counter() - clock
    times["pse_paper tuning"] = paper.timings["tune"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        clock = time.perf_counter()
        dml = estimate_pse(data, n_jobs=args.jobs, seed=args.seed, **role_kwargs)
        times["pse_dml"] = time.perf_counter() - clock
        ungated = estimate_pse(data, n_jobs=args.jobs, seed=args.seed, gate=False, **role_kwargs).table
    intv = result.effects.table
    above = {e: float((paper.iterations[e] > 0).mean()) for e in EFFECTS}
    rows = []
    for effect in EFFECTS:
        t = float(truth[effect])
        p, d, i = paper.table.loc[effect], dml.table.loc[effect], intv.loc[effect]
        rows.append(
            {
                "case": name,
                "effect": effect,
                "truth": t,
                "paper": _ci(p, t),
                "paper_raw_weight": float(p["raw_weight_mean"]),
                "paper_popfair_rule": "ok" if p["popfair_rule"] == "identified" else "n/i",
                "paper_iters_above_0": above[effect],
                "dml": _ci(d, t) if bool(d["identified"]) else f"n/i ({ungated.loc[effect, 'estimate']:.2f})",
                "interventional": _ci(i, t),
            }
        )
    return rows, times


def _ci(row: pd.Series, truth: float) -> str:
    covers = "yes" if row["ci_low"] <= truth <= row["ci_high"] else "NO"
    return f"{row['estimate']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}] {covers}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="gender,gender_blind,race", help=f"comma-separated of {', '.join(CASES)}")
    parser.add_argument("--bootstrap", type=int, default=30, help="pse_paper resample-and-refit iterations")
    parser.add_argument("--intervened", type=int, default=2000, help="applicants of the interventional estimator")
    parser.add_argument("--population-n", type=int, default=None, help="resample n nurses (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="threads (default: every CPU)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    rows, times = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_paper_") as tmp:
        for name in args.cases.split(","):
            case_rows, times[name] = run_case(name.strip(), args, Path(tmp))
            rows += case_rows
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    print(f"\npse_paper B = {args.bootstrap} iterations; interventional n = {args.intervened}; pse_dml gate on\n")
    print(
        "| case | effect | truth | pse_paper [95% CI] covers | raw weight | popfair rule | iterations > 0 | pse_dml | interventional |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in table.itertuples(index=False):
        print(
            f"| {r.case} | {r.effect} | {r.truth:.2f} | {r.paper} | {r.paper_raw_weight:.2f} | {r.paper_popfair_rule} "
            f"| {r.paper_iters_above_0:.0%} | {r.dml} | {r.interventional} |"
        )
    print("\n| case | " + " | ".join(next(iter(times.values()))) + " |")
    print("|---|" + "---|" * len(next(iter(times.values()))))
    for name, seconds in times.items():
        print(f"| {name} | " + " | ".join(f"{s:.0f} s" for s in seconds.values()) + " |")
    covered = table["paper"].str.endswith("yes").mean()
    print(
        f"\npse_paper CIs covering the truth: {covered:.0%} of {len(table)}; total {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
