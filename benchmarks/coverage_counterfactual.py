"""Coverage study of the counterfactual design (estimator=counterfactual), with known truth.

Cases: nurse x gender, software developer x gender and nurse x race (every bundled PUMS record of the
occupation, or `--applicants` resampled with PUMS weights per population draw: 4,000 in the study
reported in docs/concepts/counterfactual_design.md, to run 648 replications in minutes). Screeners
(popfair.screen.simulated, noise sd 8, as benchmarks/coverage_identification.py):
- direct: reads X (+2 for x1) and the grouped name (or surname) typicality, education, experience;
- blind: reads only raw first names (+4 for the 20 most common male first names; race: the 20 most
  common surnames of White applicants) plus education and experience; its true NDE is exactly 0;
- qualifications: education and experience only.

The noise of a score is a hash of the document it is given (the applicant and the profile columns a
text resume shows), as the simulated screener and the response cache make it: an applicant's own
world and a world that changes X alone show the same document and get the same answer. A screener
can read X only where the page shows it, so the direct screener's documents show X (as a photo page
does): its two NDE worlds are two documents with two answers.

Each replication: one population draw (seed p) and every applicant's five worlds, two truths on
them: the full interventional design's realised answers, every applicant in every world with this
replication's noise (`truth_realised`: the estimand of the default `inference=finite`, and the
acceptance figure), and the screener's expected score averaged over every applicant's worlds
(`truth`); a world sample of the default budget (fraction 0.1 of the x0/x1 applicants, an
independent simple random sample per replication), scores with noise seed r, and the combined
estimator (`popfair.estimate.pse.design_based.combine`, finite-population SEs; its superpopulation
SEs beside them) beside the sample alone (`interventional.paired_effects`, its SE with the same
finite population correction). On nurse x gender and nurse x race DML-UCA's factual TE is
estimated too (small XGBoost grid), and the design's TE is compared with it.

Prints per case x screener x effect: coverage of the combined CI and of the sample-only CI, mean SE
of each and their ratio; then the acceptance figures: every effect's coverage in 93-97%
(Clopper-Pearson interval beside it) against the full design, over the replications where the
effect is estimated (an effect that is exactly determined, SE 0 and estimate equal to the truth,
such as NDE of a screener that cannot see X on identical documents, is counted apart), the blind
screener's NDE CI covering 0 and its Case 1 labels, and the TE agreement with DML (mean difference
against a replication's difference SE, and against the SE of the mean clustered by population draw).

    nice python benchmarks/coverage_counterfactual.py --populations 12 --reps 6 --applicants 4000 --csv cov_cf.csv

`--csv` keeps per-replication rows and resumes from them; rerunning prints the table from the file.
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
from scipy import special  # noqa: E402

from benchmarks.coverage_identification import SMALL_GRID, binom_ci, coefficients, simulated_case  # noqa: E402
from popfair.case.population import PopulationCase  # noqa: E402
from popfair.core.types import WORLD, WorldRequest  # noqa: E402
from popfair.estimate.pse.design_based import combine  # noqa: E402
from popfair.estimate.pse.estimator import estimate_pse  # noqa: E402
from popfair.estimate.pse.interventional import expected_effects, paired_effects  # noqa: E402
from popfair.estimate.pse.settings import PseOverlapWarning  # noqa: E402
from popfair.estimate.pse.sfm import EFFECTS, TARGETS, pattern_labels  # noqa: E402
from popfair.population.scm import keyed_uniforms  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener, hash_uniforms  # noqa: E402

KINDS = ("direct", "blind", "qualifications")
SHOWN = ("applicant_id", "first_name", "surname", "state", "edu_level", "exp_year", "age", "birth_year")
DML_CASES = ("nurse:gender", "nurse:race")


def document_keys(table: pd.DataFrame, shows: tuple[str, ...] = ()) -> pd.Series:
    """What a resume shows of a profile row (a text resume's columns, and `shows`): equal keys, equal
    documents (and answers)."""
    columns = [table[c].astype(str) for c in (*SHOWN, *shows)]
    return columns[0].str.cat(columns[1:], sep="\x1f")


def scores(screener: SimulatedScreener, table: pd.DataFrame, seed: int, shows: tuple[str, ...] = ()) -> np.ndarray:
    """The simulated screener's answers: index + noise hashed from the document, clipped to 0-100."""
    u = hash_uniforms(document_keys(table, shows), seed, "score")
    return np.clip(screener.linear_index(table) + special.ndtri(u) * screener.noise_sd, 0.0, 100.0)


def population_draw(experiment: PopulationCase, pop_seed: int) -> tuple:
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, pop_seed)
    everyone = draw_worlds(experiment.population, profiles, WorldRequest(worlds=TARGETS, n=None, seed=pop_seed))
    return profiles, everyone


def replication(draw: tuple, case: str, pop_seed: int, kind: str, rep: int, fraction: float, dml: bool) -> list[dict]:
    profiles, everyone = draw
    roles = profiles.roles
    table = profiles.table
    eligible = table[table[roles.x].isin([roles.x0, roles.x1])].reset_index(drop=True)
    screener = SimulatedScreener(intercept=45.0, coefficients=coefficients(kind, table, roles.x), noise_sd=8.0, seed=0)
    truth = expected_effects(everyone, screener.expected(everyone, "score"))
    noise_seed = 1000 * pop_seed + 100 * KINDS.index(kind) + rep
    # the full interventional design's answers: every applicant in every world, this replication's noise
    shows = (roles.x,) if kind == "direct" else ()  # a screener reads X only where the page shows it
    realised = expected_effects(everyone, scores(screener, everyone, noise_seed, shows))
    factual = eligible.assign(y=scores(screener, eligible, noise_seed, shows))
    # the world sample: a simple random sample of the default budget, independent per replication
    n = max(2, round(fraction * len(eligible)))
    u = keyed_uniforms(eligible["applicant_id"], noise_seed, "coverage_sample")
    chosen = set(eligible["applicant_id"].iloc[np.argsort(u, kind="stable")[:n]])
    worlds = everyone[everyone["applicant_id"].isin(chosen)]
    worlds = worlds.assign(y=scores(screener, worlds, noise_seed, shows))
    outcomes = worlds.pivot(index="applicant_id", columns=WORLD, values="y")[list(TARGETS)]
    start = time.perf_counter()
    combined = combine(factual, outcomes, roles, "y", seed=noise_seed)
    seconds = time.perf_counter() - start
    wide = combine(factual, outcomes, roles, "y", seed=noise_seed, inference="superpopulation").table
    alone, _ = paired_effects(outcomes.to_numpy(), seed=noise_seed)
    alone[["se", "ci_low", "ci_high"]] = _finite(alone, combined.n / combined.n_eligible)
    labels = pattern_labels(combined.table)
    dml_te = dml_se = np.nan
    if dml:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PseOverlapWarning)
            result = estimate_pse(
                factual, x=roles.x, x0=roles.x0, x1=roles.x1, z=roles.z, b=roles.b, r=roles.r, y="y",
                n_bootstrap=200, seed=noise_seed, grid=SMALL_GRID, n_jobs=1,
            )  # fmt: skip
        dml_te, dml_se = float(result.table.loc["TE", "estimate"]), float(result.table.loc["TE", "se"])
    rows = []
    for effect in EFFECTS:
        c, a, t = combined.table.loc[effect], alone.loc[effect], float(truth[effect])
        r = float(realised[effect])
        rows.append(
            {
                "case": case,
                "screener": kind,
                "population_seed": pop_seed,
                "rep": rep,
                "effect": effect,
                "truth": t,
                "estimate": float(c["estimate"]),
                "se": float(c["se"]),
                "ci_low": float(c["ci_low"]),
                "ci_high": float(c["ci_high"]),
                "covered": bool(c["ci_low"] <= t <= c["ci_high"]),
                "truth_realised": r,
                "covered_realised": bool(c["ci_low"] - 1e-9 <= r <= c["ci_high"] + 1e-9),
                "exact": bool(c["se"] == 0 and abs(c["estimate"] - r) < 1e-9),
                "super_se": float(wide.loc[effect, "se"]),
                "super_covered": bool(wide.loc[effect, "ci_low"] <= t <= wide.loc[effect, "ci_high"]),
                "super_covered_realised": bool(
                    wide.loc[effect, "ci_low"] - 1e-9 <= r <= wide.loc[effect, "ci_high"] + 1e-9
                ),
                "significant": bool(c["significant"]),
                "sample_estimate": float(a["estimate"]),
                "sample_se": float(a["se"]),
                "sample_covered": bool(a["ci_low"] - 1e-9 <= r <= a["ci_high"] + 1e-9),
                "case1": any(label.startswith("Case 1") for label in labels),
                "n": combined.n,
                "dml_te": dml_te,
                "dml_se": dml_se,
                "seconds": seconds,
            }
        )
    return rows


def _finite(alone: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """The sample-only effects' SE and t interval with the finite population correction (the same
    estimand as the combined estimator's default)."""
    shrink = np.sqrt(1 - fraction)
    half = (alone["ci_high"] - alone["ci_low"]) / 2 * shrink
    return pd.DataFrame(
        {"se": alone["se"] * shrink, "ci_low": alone["estimate"] - half, "ci_high": alone["estimate"] + half}
    )


def summarise(results: pd.DataFrame) -> pd.DataFrame:
    grouped = results.groupby(["case", "screener", "effect"], sort=False)
    return grouped.apply(
        lambda g: pd.Series(
            {
                "reps": len(g),
                "truth": g["truth"].mean(),
                "coverage": g["covered_realised"].mean(),
                "coverage_sample": g["sample_covered"].mean(),
                "coverage_expected": g["covered"].mean(),
                "coverage_super": g["super_covered"].mean(),
                "se": g["se"].mean(),
                "se_sample": g["sample_se"].mean(),
                "se_ratio": g["se"].mean() / g["sample_se"].mean() if g["sample_se"].mean() > 0 else np.nan,
                "sd_estimate": g["estimate"].std(),
                "sd_error": (g["estimate"] - g["truth"]).std(),
                "bias": (g["estimate"] - g["truth"]).mean(),
            }
        ),
        include_groups=False,
    )


def agreement(results: pd.DataFrame) -> list[str]:
    """The design's TE against DML-UCA's factual TE over the replications of each DML case: the mean
    difference against a replication's difference SE, and against the SE of the mean clustered by
    population draw (replications of one draw share its applicants, so they are not independent)."""
    lines = []
    te = results[(results["effect"] == "TE") & results["dml_te"].notna()]
    for case, rows in te.groupby("case", sort=False):
        difference = rows["estimate"] - rows["dml_te"]
        by_draw = difference.groupby(rows["population_seed"]).mean()
        se_mean = by_draw.std(ddof=1) / np.sqrt(len(by_draw)) if len(by_draw) > 1 else np.nan
        se_one = np.sqrt(rows["se"] ** 2 + rows["dml_se"] ** 2).mean()
        lines.append(
            f"{case}: design TE - DML TE over {len(rows)} replications ({len(by_draw)} population draws): mean "
            f"{difference.mean():+.4f}; a replication's difference SE {se_one:.4f} "
            f"({'within' if abs(difference.mean()) <= se_one else 'NOT within'} one SE); SE of the mean, clustered by "
            f"draw, {se_mean:.4f} ({abs(difference.mean()) / se_mean:.2f} SEs from 0); SD of the differences "
            f"{difference.std(ddof=1):.4f}"
        )
    return lines


def print_coverage(done: pd.DataFrame, column: str) -> None:
    """Per effect: the share of CIs that cover (`column`), its binomial 95% CI and the 93-97% verdict,
    over the replications where the effect is estimated; exactly determined ones counted apart."""
    for effect, rows in done.groupby("effect", sort=False):
        estimated = rows[~rows["exact"]]
        exact = (
            f"; exactly determined (SE 0, estimate = truth) in {int(rows['exact'].sum())}"
            if rows["exact"].any()
            else ""
        )
        if estimated.empty:
            print(f"  {effect}: exactly determined in all {len(rows)}")
            continue
        share, hits, count = estimated[column].mean(), int(estimated[column].sum()), len(estimated)
        lo, hi = binom_ci(hits, count)
        verdict = "in 93-97%" if 0.93 <= share <= 0.97 else "OUTSIDE 93-97%"
        print(f"  {effect}: coverage {share:.3f} ({hits}/{count}, {lo:.3f}-{hi:.3f}) {verdict}{exact}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", type=int, default=12, help="population draws per case")
    parser.add_argument("--reps", type=int, default=6, help="samples and noise seeds per draw and screener")
    parser.add_argument("--cases", default="nurse:gender,software_developer:gender,nurse:race")
    parser.add_argument("--screeners", default=",".join(KINDS))
    parser.add_argument("--fraction", type=float, default=0.1, help="world sample share (estimator.fraction)")
    parser.add_argument("--no-dml", action="store_true", help="skip DML-UCA's TE (the agreement check)")
    parser.add_argument(
        "--dml-reps", type=int, default=None, help="DML-UCA's TE in the first this many reps of each draw (default all)"
    )
    parser.add_argument(
        "--applicants",
        type=int,
        default=None,
        help="population.n: resample this many applicants per draw (default all)",
    )
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args()
    done = pd.read_csv(args.csv) if args.csv and args.csv.exists() else pd.DataFrame()
    keys = (
        set(done[["case", "screener", "population_seed", "rep"]].itertuples(index=False, name=None))
        if not done.empty
        else set()
    )
    experiments = {}
    for case in args.cases.split(","):
        experiments[case] = simulated_case(case, [f"population.n={args.applicants}"] if args.applicants else [])
    start = time.perf_counter()
    for pop_seed in range(args.populations):  # population draws outermost: a study cut short stays balanced
        for case, experiment in experiments.items():
            draw = None
            for kind in args.screeners.split(","):
                for rep in range(args.reps):
                    if (case, kind, pop_seed, rep) in keys:
                        continue
                    draw = draw or population_draw(experiment, pop_seed)
                    dml = case in DML_CASES and not args.no_dml and (args.dml_reps is None or rep < args.dml_reps)
                    rows = pd.DataFrame(replication(draw, case, pop_seed, kind, rep, args.fraction, dml))
                    done = pd.concat([done, rows], ignore_index=True)
                    if args.csv:
                        done.to_csv(args.csv, index=False)
                    print(f"{case} {kind} pop {pop_seed} rep {rep}: {time.perf_counter() - start:.0f} s", flush=True)
    summary = summarise(done)
    with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 200):
        print(summary.to_string())
    n_reps = done.groupby(["case", "screener", "population_seed", "rep"]).ngroups
    print(f"\n{n_reps} replications; every effect reported in every one: {done['estimate'].notna().all()}")
    estimated = done[~done["exact"]]
    low, high = binom_ci(int(estimated["covered_realised"].sum()), len(estimated))
    print(
        f"against the full design on the same draw (every applicant in every world, this replication's answers), "
        f"finite-population CIs: {estimated['covered_realised'].mean():.3f} of {len(estimated)} estimated effects "
        f"(95% CI {low:.3f}-{high:.3f})"
    )
    print_coverage(done, "covered_realised")
    print("the same CIs against the screener's expected score on the same applicants (no answer noise):")
    print_coverage(done, "covered")
    print("superpopulation CIs (inference=superpopulation) against the full design, then the expected score:")
    print_coverage(done, "super_covered_realised")
    print_coverage(done, "super_covered")
    blind = done[(done["screener"] == "blind") & (done["effect"] == "NDE")]
    covers_zero = ((blind["ci_low"] <= 0) & (blind["ci_high"] >= 0)).mean()
    print(
        f"blind screener: NDE CI covers 0 in {covers_zero:.3f}; labelled Case 1 in {int(blind['case1'].sum())} replications"
    )
    ratio = done.groupby("effect", sort=False).apply(
        lambda g: g["se"].mean() / g["sample_se"].mean(), include_groups=False
    )
    print(
        "SE combined / sample alone, both finite-population (mean over cases): "
        + ", ".join(f"{e} {v:.3f}" for e, v in ratio.items())
    )
    for line in agreement(done):
        print(line)
    print(
        f"combine: {done.groupby(['case', 'screener', 'population_seed', 'rep'])['seconds'].first().mean():.2f} s per replication"
    )


if __name__ == "__main__":
    main()
