"""Benchmark: the PopResume authors' estimator (estimator=pse_paper) beside popfair's estimators,
against the truth, on PUMS nurses.

Cases (the simulated screener of conf/screener/simulated.yaml unless named):
- nurse x gender, simulated screener (direct +2 for men, +1.5 for male-typical names, qualifications);
- nurse x gender, a gender-blind screener: +4 for the 20 most common first names of the population's
  men, plus qualifications; it never reads gender, so its true NDE is exactly 0 (its name effect is
  a proxy effect, RIE);
- nurse x race (Black vs White), simulated screener.

Estimators: those of ESTIMATORS below that popfair's registry has (so `counterfactual` joins once it
exists), plus the default population estimator of conf/config.yaml, each run as the pipeline runs it
(`estimator=<name>`) on the same seeded draw, rendering and screening. The truth is the screener's
expected score averaged over every applicant's five counterfactual worlds of that draw (popfair's
interventional worlds, all applicants). pse_dml is shown as popfair reports it (gate on: "n/i" = not
identified, no number), with its ungated estimate in parentheses. Per effect: estimate [95% CI] and
whether the CI covers the truth; for pse_paper also the mean of its worst raw weight (1 when the
propensities are right), popfair's verdict on it and the share of its iterations above 0. Then the
seconds of each case: the estimate stage and the whole run (draw, render, screen, estimate).

    python benchmarks/bench_paper_estimator.py --population-n 6000 --bootstrap 10   # about 5 min on 2 busy cores
    python benchmarks/bench_paper_estimator.py --bootstrap 30                            # every nurse: much longer

`--bootstrap` is pse_paper's resample-and-refit iterations; pse_dml keeps its 500 score resamples.

`--side-by-side`: pse_paper alone, this tree against a baseline (`--baseline-tree PATH`, or a
worktree of `--baseline-commit`), in one sitting on the same estimator input: the default nurse case
(`--override screener=simulated` and the like for another), drawn, rendered and screened once by this
tree. Each tree runs in its own process (PYTHONPATH = that tree) with its own empty cache, so each
pays its own grid search. Printed: per tree the search's seconds, the seconds and CPU seconds of an
iteration, and the minutes the paper's 500 iterations would take (search + 500 x an iteration); then
per effect both estimates and how far apart their iterations are (bit-identical or not).

    nice python benchmarks/bench_paper_estimator.py --side-by-side --bootstrap 30 --jobs 2 \
        --baseline-tree /work/baseline   # about 2 min on 2 quiet cores
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import subprocess
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

from benchmarks._side_by_side import baseline_tree, core_speed, load  # noqa: E402
from popfair.case.population import PopulationCase  # noqa: E402
from popfair.core.types import WorldRequest  # noqa: E402
from popfair.estimate.pse.design.interventional import expected_effects  # noqa: E402
from popfair.estimate.pse.settings import PseOverlapWarning  # noqa: E402
from popfair.estimate.pse.sfm import EFFECTS, TARGETS  # noqa: E402
from popfair.estimate.registry import ESTIMATORS as REGISTERED  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener  # noqa: E402

# the estimators compared, in column order; a name the registry lacks is left out (printed)
ESTIMATORS = ["pse_paper", "pse_dml", "interventional", "counterfactual"]
QUALIFICATIONS = {"edu_group": {"medium": 6.0, "high": 12.0}, "exp_year": 0.8}
CASES = {  # name -> (protected attribute, screener)
    "gender": ("gender", "simulated"),
    "gender_blind": ("gender", "blind"),
    "race": ("race", "simulated"),
}


def default_estimator() -> str:
    """The estimator conf/config.yaml runs when none is named."""
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return str(compose(config_name="config", return_hydra_config=True).hydra.runtime.choices.estimator)


def compared() -> tuple[list[str], list[str]]:
    """The estimators to run (ESTIMATORS the registry has, then the default if not among them), and
    those left out."""
    names = [n for n in ESTIMATORS if n in REGISTERED]
    default = default_estimator()
    return names + ([default] if default not in names else []), [n for n in ESTIMATORS if n not in REGISTERED]


def settings(name: str, args: argparse.Namespace) -> list[str]:
    """Benchmark sizes of the estimators that take them (others run as configured)."""
    return {
        "pse_paper": [f"estimator.n_bootstrap={args.bootstrap}", f"estimator.n_jobs={args.jobs or 'null'}"],
        "pse_dml": [f"estimator.n_jobs={args.jobs or 'null'}"],
        "interventional": [f"estimator.n={args.intervened}"],
    }.get(name, [])


def experiment_for(
    case: str, estimator: str, args: argparse.Namespace, cache: Path, extra: list[str]
) -> PopulationCase:
    attribute, screener = CASES[case]
    overrides = [
        "screener=simulated",
        f"protected_attr={attribute}",
        f"population.n={'null' if args.population_n is None else args.population_n}",
        "population.diagnostics=false",
        f"estimator={estimator}",
        *settings(estimator, args),
        *extra,
        "outcome_audit=null",
        "tracking=none",
        f"cache_dir={cache}",
        f"seed={args.seed}",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        experiment = PopulationCase.from_config(compose(config_name="config", overrides=overrides))
    if screener == "blind":  # the 20 most common first names of this draw's men
        table = experiment.population.sample(experiment.occupation, experiment.protected, args.seed).table
        names = table.loc[table["gender"] == "male", "first_name"].value_counts().index[:20]
        experiment.screener = SimulatedScreener(
            intercept=45.0, coefficients={"first_name": {str(n): 4.0 for n in names}, **QUALIFICATIONS}, seed=args.seed
        )
    return experiment


def run_case(case: str, names: list[str], args: argparse.Namespace, cache: Path) -> tuple[list[dict], dict[str, str]]:
    truth: pd.Series | None = None
    tables: dict[str, pd.DataFrame] = {}
    times: dict[str, str] = {}
    extras: dict[str, dict[str, float | str]] = {e: {} for e in EFFECTS}
    for name in names:
        experiment = experiment_for(case, name, args, cache, [])
        clock = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PseOverlapWarning)
            result = experiment.run()
        times[name] = f"{result.timings.get('estimate', float('nan')):.0f} s ({time.perf_counter() - clock:.0f} s)"
        tables[name] = result.effects.table
        if truth is None:  # every run draws the same applicants (same seed): one truth per case
            everyone = draw_worlds(
                experiment.population, result.profiles, WorldRequest(worlds=TARGETS, n=None, seed=args.seed)
            )
            truth = expected_effects(everyone, experiment.screener.expected(everyone, result.profiles.outcome))
        if name == "pse_paper":
            iterations = result.effects.artifacts["pse_paper_iterations.csv"]
            for effect in EFFECTS:
                row = result.effects.table.loc[effect]
                extras[effect] |= {
                    "raw weight": f"{row['raw_weight_mean']:.2f}",
                    "popfair rule": "ok" if row["popfair_rule"] == "identified" else "n/i",
                    "iterations > 0": f"{(iterations[effect] > 0).mean():.0%}",
                }
        if name == "pse_dml":  # what the gate hides: the same estimator ungated, on the same rows
            ungated = experiment_for(case, name, args, cache, ["estimator.gate=false"])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PseOverlapWarning)
                tables["pse_dml ungated"] = ungated.run().effects.table
    assert truth is not None
    rows = []
    for effect in EFFECTS:
        t = float(truth[effect])
        row: dict[str, str | float] = {"case": case, "effect": effect, "truth": t}
        for name in names:
            row[name] = _cell(tables[name], effect, t, tables.get(f"{name} ungated"))
        row.update(extras[effect])
        rows.append(row)
    return rows, times


def _cell(table: pd.DataFrame, effect: str, truth: float, ungated: pd.DataFrame | None) -> str:
    if effect not in table.index:
        return "-"
    row = table.loc[effect]
    if "identified" in row and not bool(row["identified"]):
        return "n/i" if ungated is None else f"n/i ({ungated.loc[effect, 'estimate']:.2f})"
    slack = 1e-6 * max(1.0, abs(truth))  # a point interval (an exact estimator) equal to the truth up to rounding
    covers = "yes" if row["ci_low"] - slack <= truth <= row["ci_high"] + slack else "NO"
    digits = 3 if row["ci_high"] - row["ci_low"] < 0.01 else 2  # a point interval: enough digits to see a miss
    return f"{row['estimate']:.{digits}f} [{row['ci_low']:.{digits}f}, {row['ci_high']:.{digits}f}] {covers}"


BASELINE = "e969169"  # main before pse_paper's grouped fits
SHIFT = 0.25  # added to Y in a second run of the baseline: its floating-point noise floor


class _Captured(Exception):
    """The estimator's input, taken at the estimate stage (nothing after it runs)."""


def estimator_input(args: argparse.Namespace, cache: Path) -> dict:
    """The default nurse case (with `--override`s) drawn, rendered and screened by this tree: the
    factual rows pse_paper receives, its roles and outcome column."""
    overrides = ["estimator=pse_paper", "outcome_audit=null", "tracking=none", f"cache_dir={cache}"]
    overrides += ["population.diagnostics=false", f"seed={args.seed}", *args.override]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        experiment = PopulationCase.from_config(compose(config_name="config", overrides=overrides))

    def capture(data: pd.DataFrame, roles, y: str = "y"):  # noqa: ANN001, ANN202
        raise _Captured({"data": data, "roles": roles.as_dict(), "y": y})

    experiment.estimator.estimate = capture  # type: ignore[method-assign]
    try:
        experiment.run()
    except _Captured as captured:
        return captured.args[0]
    raise RuntimeError("the case ended before its estimate stage")


# run in a child process whose PYTHONPATH is the tree measured: its estimate_pse_paper on the input
WORKER = """
import pickle, resource, sys
import popfair
from popfair.estimate.base import factual_rows
from popfair.estimate.pse.paper.estimator import estimate_pse_paper
source, target, iterations, jobs, cache, shift = sys.argv[1:7]
given = pickle.load(open(source, "rb"))
data, roles = factual_rows(given["data"]), {k: given["roles"][k] for k in ("x", "x0", "x1", "z", "b", "r")}
data[given["y"]] = data[given["y"]].astype(float) + float(shift)
def run(n):
    return estimate_pse_paper(data, **roles, y=given["y"], n_bootstrap=n, n_jobs=int(jobs), cache_dir=cache)
search = run(2).timings["tune"]  # the grid search into the empty cache (and 2 iterations)
usage = resource.getrusage(resource.RUSAGE_SELF)
result = run(int(iterations))  # the search read back: its iterations alone
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
pickle.dump({"iterations": result.iterations, "table": result.table, "tuning": result.tuning, "search": search,
             "bootstrap": result.timings["bootstrap"], "cpu": cpu, "source": popfair.__file__}, open(target, "wb"))
"""


def run_tree(tree: Path, source: Path, folder: Path, args: argparse.Namespace, label: str, shift: float = 0.0) -> dict:
    """One tree's pse_paper on the captured input (Y + `shift`), in a child process importing that tree."""
    target, cache = folder / f"{label}.pkl", folder / f"cache_{label}"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", WORKER, str(source), str(target), str(args.bootstrap), str(args.jobs), str(cache)]
    command.append(str(shift))
    done = subprocess.run(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:  # its own traceback, then stop
        sys.exit(f"pse_paper of {tree} failed:\n{done.stderr[-3000:]}")
    with target.open("rb") as handle:
        return pickle.load(handle)


def side_by_side(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="bench_paper_sbs_") as tmp,
        baseline_tree(args.baseline_tree, args.baseline_commit) as base,
    ):
        folder = Path(tmp)
        given = estimator_input(args, folder / "case_cache")
        source = folder / "input.pkl"
        with source.open("wb") as handle:
            pickle.dump(given, handle)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=base, capture_output=True, text=True)
        trees = {f"before ({commit.stdout.strip() or base})": base, "after (this tree)": ROOT}
        speed, before_load = core_speed(), load()
        runs = {label: run_tree(tree, source, folder, args, f"run{i}") for i, (label, tree) in enumerate(trees.items())}
        # the baseline's own rounding: Y + SHIFT changes no model in exact arithmetic (squared error), only
        # the float32 rounding of its labels and predictions; the gap it opens is the floor of "the same"
        shifted = run_tree(base, source, folder, args, "shifted", SHIFT)
    shifted["iterations"][list(TARGETS)] -= SHIFT
    print(
        f"\npse_paper side by side: the default nurse case{' with ' + ' '.join(args.override) if args.override else ''}"
        f" ({len(given['data']):,} applicants, seed {args.seed}), {args.bootstrap} iterations, n_jobs {args.jobs}; "
        f"load {before_load} before, {load()} after, core speed {speed:.3f} s (benchmarks/_side_by_side.py)\n"
    )
    rows = {
        "popfair imported from": lambda r: str(Path(r["source"]).parents[1]),
        "grid search, s": lambda r: f"{r['search']:.1f}",
        "an iteration, s": lambda r: f"{r['bootstrap'] / args.bootstrap:.3f}",
        "an iteration, CPU s": lambda r: f"{r['cpu'] / args.bootstrap:.3f}",
        "500 iterations + search, min": lambda r: f"{minutes(r, args):.1f}",
    }
    print("| | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))
    for name, cell in rows.items():
        print(f"| {name} | " + " | ".join(cell(r) for r in runs.values()) + " |")
    before, after = runs.values()
    print(
        f"\nfaster: {before['bootstrap'] / after['bootstrap']:.2f}x an iteration ({before['cpu'] / after['cpu']:.2f}x its"
        f" CPU), {before['search'] / after['search']:.2f}x the search, {minutes(before, args) / minutes(after, args):.2f}x"
        " the paper's 500 iterations with the search"
    )
    kept = ["max_depth", "n_estimators", "reg_lambda"]
    same = before["tuning"][kept].equals(after["tuning"][kept])
    loss_gap = float((before["tuning"]["loss"] / after["tuning"]["loss"] - 1).abs().max())
    print(f"grid search: {'the same' if same else 'DIFFERENT'} selections; losses within {loss_gap:.1e} relative")
    columns = list(EFFECTS) + list(TARGETS)
    spread = before["iterations"][columns].std()

    def gap(other: dict) -> pd.Series:  # the largest gap in an iteration, over the iterations' SD
        return (before["iterations"][columns] - other["iterations"][columns]).abs().max() / spread

    changed, floor = gap(after), gap(shifted)
    print(
        f"\nestimates (the mean of the iterations); gaps: the largest in an iteration, over the iterations' SD;"
        f" 'before, Y + {SHIFT}': the baseline again with a constant added to Y (means shifted back), which moves"
        " only its floating-point rounding\n"
    )
    print(f"| effect or mean | before | after | before, Y + {SHIFT} | gap after | gap of Y + {SHIFT} | bit-identical |")
    print("|---|---|---|---|---|---|---|")
    for column in columns:
        values = [r["iterations"][column].mean() for r in (before, after, shifted)]
        print(
            f"| {column} | "
            + " | ".join(f"{v:.6f}" for v in values)
            + f" | {changed[column]:.1e} | {floor[column]:.1e}"
            f" | {'yes' if changed[column] == 0 else 'no'} |"
        )
    print(
        f"largest gap: after {changed.max():.1e} of an SD, the baseline's own rounding {floor.max():.1e};"
        f" the estimates (means over {args.bootstrap} iterations) within "
        f"{(before['iterations'][columns].mean() - after['iterations'][columns].mean()).abs().max():.1e}"
    )
    print(f"total {time.perf_counter() - start:.0f} s")


def minutes(run: dict, args: argparse.Namespace) -> float:
    """The paper's 500 iterations: the grid search, then 500 times the measured seconds of an iteration."""
    return (run["search"] + 500 * run["bootstrap"] / args.bootstrap) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="gender,gender_blind,race", help=f"comma-separated of {', '.join(CASES)}")
    parser.add_argument("--bootstrap", type=int, default=30, help="pse_paper resample-and-refit iterations")
    parser.add_argument("--intervened", type=int, default=2000, help="applicants of the interventional estimator")
    parser.add_argument("--population-n", type=int, default=None, help="resample n nurses (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="threads (default: every CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--side-by-side", action="store_true", help="pse_paper alone, this tree against a baseline")
    parser.add_argument("--baseline-tree", default=None, help="the baseline's source tree (default: a worktree)")
    parser.add_argument("--baseline-commit", default=BASELINE, help="the baseline commit without --baseline-tree")
    parser.add_argument("--override", action="append", default=[], help="a case override (side by side), repeatable")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("popfair").setLevel(logging.ERROR)  # the population's notes: the same for every run
    if args.side_by_side:
        args.jobs = args.jobs or len(os.sched_getaffinity(0))
        side_by_side(args)
        return
    names, missing = compared()
    start = time.perf_counter()
    rows, times = [], {}
    with tempfile.TemporaryDirectory(prefix="bench_paper_") as tmp:
        for case in args.cases.split(","):
            case_rows, times[case] = run_case(case.strip(), names, args, Path(tmp))
            rows += case_rows
            print(f"{case}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows)
    print(
        f"\nestimators: {', '.join(names)} (default: {default_estimator()}"
        + (f"; not in this popfair: {', '.join(missing)}" if missing else "")
        + f"); n = {args.population_n or 'every'} nurses, seed {args.seed}; pse_paper B = {args.bootstrap};"
        f" interventional n = {args.intervened}; pse_dml gate on, n/i (ungated estimate)\n"
    )
    columns = [c for c in table.columns if c not in ("case", "effect", "truth")]
    print("| case | effect | truth | " + " | ".join(columns) + " |")
    print("|---|---|---|" + "---|" * len(columns))
    for r in table.to_dict("records"):
        print(f"| {r['case']} | {r['effect']} | {r['truth']:.3f} | " + " | ".join(str(r[c]) for c in columns) + " |")
    print("\nseconds: estimate stage (whole run: draw, render, screen, estimate)\n")
    print("| case | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for case, seconds in times.items():
        print(f"| {case} | " + " | ".join(seconds[n] for n in names) + " |")
    for name in names:
        cells = table[name].astype(str)
        numbers = cells[~(cells.str.startswith("n/i") | (cells == "-"))]
        print(
            f"{name}: CIs covering the truth {numbers.str.endswith('yes').sum()} of {len(numbers)} reported"
            f" ({len(cells) - len(numbers)} not reported)"
        )
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
