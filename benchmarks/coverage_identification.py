"""Coverage study of the identification gate: DML-UCA on populations with the real overlap of the
bundled PUMS occupations (nurse x gender, software developer x gender), simulated screeners with
known truth.

Screeners (popfair.screen.simulated, noise sd 8):
- direct: reads gender (+2 men) and the grouped name typicality (+1.5 male-typical), education, experience;
- blind: gender-blind, reads only raw first names (+4 for the 20 most common male first names of
  the population) plus education and experience; its true NDE is exactly 0 (text resumes never show gender);
- qualifications: education and experience only; every group effect is 0 except through B.

Each replication: a population draw (seed p: names, experience; every PUMS record of the
occupation, or `--population-n`), the screener's scores with noise seed r, `estimate_pse` with the
gate off (so the would-be numbers are kept) and its identification verdict. The truth is the
screener's expected score averaged over every applicant's five counterfactual worlds of that
population draw (`expected_effects`): the finite-population effect, which the super-population CI
covers at least as often as nominal. Prints, per occupation x screener x effect: the share reported
(identified), coverage of the reported CIs, how often the ungated CI would miss, and the share of
those would-be misses that the gate reports as not identified.

    python benchmarks/coverage_identification.py --reps 4 --populations 2 --grid small --csv cov.csv

`--grid small` (depth 2-3, lambda 1, 50-100 trees) makes a replication a few seconds; `paper` is
the estimator's default grid (C.5). `--csv` keeps per-replication rows and resumes from them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402

from popfair.case.experiment import Experiment  # noqa: E402
from popfair.core.types import WorldRequest  # noqa: E402
from popfair.estimate.dml_settings import PseOverlapWarning  # noqa: E402
from popfair.estimate.identification import gate  # noqa: E402
from popfair.estimate.interventional import expected_effects  # noqa: E402
from popfair.estimate.pse import estimate_pse  # noqa: E402
from popfair.estimate.sfm import EFFECTS, TARGETS  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener  # noqa: E402

QUALIFICATIONS = {"edu_group": {"medium": 6.0, "high": 12.0}, "exp_year": 0.8}
KINDS = ("direct", "blind", "qualifications")
SMALL_GRID = {"n_estimators": [50, 100], "max_depth": [2, 3], "reg_lambda": [1.0]}


def coefficients(kind: str, table: pd.DataFrame) -> dict:
    """The simulated screener's coefficients for one kind (see the module docstring)."""
    if kind == "direct":
        return {"gender": {"male": 2.0}, "name_gender_typicality": {"male": 1.5}, **QUALIFICATIONS}
    if kind == "blind":
        names = table.loc[table["gender"] == "male", "first_name"].value_counts().index[:20]
        return {"first_name": {str(name): 4.0 for name in names}, **QUALIFICATIONS}
    if kind == "qualifications":
        return dict(QUALIFICATIONS)
    raise ValueError(kind)


def score(screener: SimulatedScreener, table: pd.DataFrame, seed: int) -> np.ndarray:
    """Noisy scores of the structural model: expected index plus normal noise, clipped to 0-100."""
    index = screener.linear_index(table)  # the structural index of each profile
    noise = np.random.default_rng([seed, 7]).normal(0.0, screener.noise_sd, len(table))
    return np.clip(index + noise, 0.0, 100.0)


def replication(experiment: Experiment, occupation: str, pop_seed: int, kind: str, rep: int, grid: dict) -> list[dict]:
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, pop_seed)
    table = profiles.table
    screener = SimulatedScreener(intercept=45.0, coefficients=coefficients(kind, table), noise_sd=8.0, seed=rep)
    # the screener's `seed` only hashes document noise in `screen`; this study draws it in `score`
    everyone = draw_worlds(experiment.population, profiles, WorldRequest(worlds=TARGETS, n=None, seed=pop_seed))
    truth = expected_effects(everyone, screener.expected(everyone, "score"))
    noise_seed = 1000 * pop_seed + 100 * list(KINDS).index(kind) + rep  # independent across screeners
    data = table.assign(y=score(screener, table, noise_seed))
    roles = profiles.roles
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PseOverlapWarning)
        result = estimate_pse(
            data,
            x=roles.x,
            x0=roles.x0,
            x1=roles.x1,
            z=roles.z,
            b=roles.b,
            r=roles.r,
            y="y",
            n_bootstrap=300,
            seed=rep,
            gate=False,
            grid=grid,
            n_jobs=1,
        )
    problems = {t: r for t, r in result.identification["reason"].items() if r}
    judged = gate(result.table, problems, result.n)
    rows = []
    for effect in EFFECTS:
        lo, hi = result.table.loc[effect, "ci_low"], result.table.loc[effect, "ci_high"]
        rows.append(
            {
                "occupation": occupation,
                "screener": kind,
                "population_seed": pop_seed,
                "rep": rep,
                "effect": effect,
                "truth": float(truth[effect]),
                "estimate": float(result.table.loc[effect, "estimate"]),
                "ci_low": float(lo),
                "ci_high": float(hi),
                "covered": bool(lo <= truth[effect] <= hi),
                "identified": bool(judged.loc[effect, "identified"]),
                "reason": judged.loc[effect, "reason"],
            }
        )
    return rows


def summarise(results: pd.DataFrame) -> pd.DataFrame:
    results = results.assign(miss=~results["covered"])
    grouped = results.groupby(["occupation", "screener", "effect"], sort=False)
    summary = grouped.apply(
        lambda g: pd.Series(
            {
                "reps": len(g),
                "reported": g["identified"].mean(),
                "coverage_reported": g.loc[g["identified"], "covered"].mean() if g["identified"].any() else np.nan,
                "ungated_coverage": g["covered"].mean(),
                "would_miss": int(g["miss"].sum()),
                "misses_gated": g.loc[g["miss"], "identified"].eq(False).mean() if g["miss"].any() else np.nan,
            }
        ),
        include_groups=False,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=4, help="screener noise seeds per population draw")
    parser.add_argument("--populations", type=int, default=2, help="population draws (seeds) per occupation")
    parser.add_argument("--population-n", type=int, default=None, help="resample n applicants (default: all)")
    parser.add_argument("--occupations", default="nurse,software_developer")
    parser.add_argument("--screeners", default="direct,blind,qualifications")
    parser.add_argument("--grid", choices=["small", "paper"], default="small")
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args()
    grid = SMALL_GRID if args.grid == "small" else None
    done = (
        pd.read_csv(args.csv, keep_default_na=False, na_values=[""])
        if args.csv and args.csv.exists()
        else pd.DataFrame()
    )
    start = time.perf_counter()
    for occupation in args.occupations.split(","):
        overrides = [
            "screener=simulated",
            f"occupation={occupation}",
            f"population.n={'null' if args.population_n is None else args.population_n}",
            "population.diagnostics=false",
            "tracking=none",
        ]
        with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
            experiment = Experiment.from_config(compose(config_name="config", overrides=overrides))
        for pop_seed in range(args.populations):
            for kind in args.screeners.split(","):
                for rep in range(args.reps):
                    key = (occupation, kind, pop_seed, rep)
                    if (
                        not done.empty
                        and (
                            done[["occupation", "screener", "population_seed", "rep"]].apply(tuple, axis=1) == key
                        ).any()
                    ):
                        continue
                    rows = pd.DataFrame(replication(experiment, occupation, pop_seed, kind, rep, grid))
                    done = pd.concat([done, rows], ignore_index=True)
                    if args.csv:
                        done.to_csv(args.csv, index=False)
                    print(
                        f"{occupation} {kind} pop {pop_seed} rep {rep}: {time.perf_counter() - start:.0f} s", flush=True
                    )
    summary = summarise(done)
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 160):
        print(summary.to_string())
    reported = done[done["identified"]]
    misses = done[~done["covered"]]
    print(
        f"\n{done.groupby(['occupation', 'screener', 'population_seed', 'rep']).ngroups} replications, "
        f"{time.perf_counter() - start:.0f} s; reported effects: {len(reported)} of {len(done)}, coverage "
        f"{reported['covered'].mean():.3f}; ungated misses: {len(misses)}, reported as not identified: "
        f"{(~misses['identified']).mean() if len(misses) else float('nan'):.3f}"
    )


if __name__ == "__main__":
    main()
