"""Coverage study of the counterfactual design (estimator=counterfactual) through the real pipeline.

Every replication runs the case's own steps: the population (`population.n` weighted draws, one per
population seed), the world request of `estimator=counterfactual` at the budget (the case's
`world_request`), the sampling step with its per-group floor and the redraw subsample
(`popfair.population.worlds.draw_worlds`, worlds redrawn with the replication's `estimator.seed`),
the simulated screener's answers, and the estimator's own `estimate` (after the case's
`declare_documents`, so NDE is exact only where declared). Nothing calls `combine` directly.

Screeners (popfair.screen.simulated, noise sd 8, coefficients of benchmarks/coverage_identification.py):
- direct: reads X (+2 for x1) and the grouped name (or surname) typicality, education, experience;
- blind: reads only raw first names (race: surnames) plus education and experience;
- qualifications: education and experience only.
An answer is a hash of the document (the columns a text resume shows: the applicant, names, state,
education, experience, age, birth year; never X) and the screener's seed, fixed per population and
screener, as a cached model call: the same document always gets the same answer. Each screener has
its own seed: with one seed for all three their noise was the same, their errors moved together
(correlation 0.99 in every cell) and a cell's intervals were three copies of one. Rendering the text itself is
left out (it only names that document). The screeners that do not read X get the same answer in
the two NDE worlds, and the case declares that NDE exact; the direct one reads X from the profile.

Truths, per population and screener (the applicants fixed):
- the default estimand (`inference=applicants`): the mean over world seeds of the full design (every
  applicant in every world, the screener's answers). The world seeds are `--truth-seeds` extra seeds
  and the other replications' seeds (each replication's own full design is left out of its truth:
  leave-one-out, so the truth is independent of the replication);
- `inference=worlds` (these worlds only): the replication's own full design (its seed).

Budgets: `estimator.fraction` 0.1 and 0.5, and `estimator.n=all`. Cases: occupation:attribute, with
@N for `population.n=N` (default `--applicants`); small populations (600, 300) are where the floor of
20 per group binds.

Coverage is counted per case x budget x effect over replications; its Monte Carlo interval is
clustered by population draw (the replications of one draw share its applicants and its truth):
a ratio estimator's SE, sum_p (h_p - c n_p)^2 P / (P - 1) / (sum_p n_p)^2, normal 95%. A pooled
figure counts each distinct interval once: where NDE is exact by design, NIE is TE (the same
interval) and is left out.

Full study (about an hour on a free 2-core machine):

    nice python benchmarks/coverage_counterfactual.py --populations 10 --reps 8 --truth-seeds 30 \\
        --cases nurse:gender,software_developer:gender,nurse:race,nurse:gender@600,nurse:race@300 --csv cov_cf.csv

One case at more population draws, e.g. the floor-bound one (docs/concepts/counterfactual_design.md):

    nice python benchmarks/coverage_counterfactual.py --cases nurse:race@300 --populations 40 --csv cov_cf_weak.csv

`--csv` keeps per-replication rows and resumes from them; rerunning prints the table from the file.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import special  # noqa: E402

from benchmarks.coverage_identification import coefficients, simulated_case  # noqa: E402
from popfair.core.types import FACTUAL, WORLD, WorldRequest, redraw_world  # noqa: E402
from popfair.estimate.pse.design.counterfactual import Counterfactual  # noqa: E402
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener, hash_uniforms  # noqa: E402

KINDS = ("direct", "blind", "qualifications")
SHOWN = ("applicant_id", "first_name", "surname", "state", "edu_level", "exp_year", "age", "birth_year")
BUDGETS = {"10%": {"fraction": 0.1}, "50%": {"fraction": 0.5}, "100%": {"n": "all"}}
TRUTH_SEED = 100_000  # truth-only world seeds start here (replication seeds are 0, 1, ...)


def answers(screener: SimulatedScreener, table: pd.DataFrame) -> np.ndarray:
    """The simulated screener's answers: its index plus noise hashed from the document (the columns
    a text resume shows) and its seed, clipped to 0-100."""
    columns = [table[c].astype(str) for c in SHOWN]
    u = hash_uniforms(columns[0].str.cat(columns[1:], sep="\x1f"), screener.seed, "score")
    return np.clip(screener.linear_index(table) + special.ndtri(u) * screener.noise_sd, 0.0, 100.0)


def full_designs(experiment, profiles, screeners: dict, seed: int) -> dict[str, np.ndarray]:
    """Per screener, the five effects of the full design at world seed `seed`: every applicant in
    every world (one draw of the worlds, every screener's answers)."""
    everyone = draw_worlds(experiment.population, profiles, WorldRequest(worlds=TARGETS, n=None, seed=seed))
    out = {}
    for kind, screener in screeners.items():
        means = pd.Series(answers(screener, everyone)).groupby(everyone[WORLD].to_numpy()).mean()
        out[kind] = CONTRASTS @ means.reindex(list(TARGETS)).to_numpy()
    return out


REDRAW = 30  # estimator.redraw: applicants per group (at least) with a second set of worlds (--redraw)


def estimator(budget: dict, seed: int, inference: str, redraw: int = REDRAW) -> Counterfactual:
    return Counterfactual(**budget, seed=seed, inference=inference, redraw=redraw, compare=False)


def replication(experiment, profiles, screeners: dict, budget_name: str, seed: int, redraw: int = REDRAW) -> list[dict]:
    """One replication at one budget: the case's world request and worlds (sampling step, floor,
    redraw subsample), each screener's answers, and the estimator's estimate for both estimands."""
    roles = profiles.roles
    main = estimator(BUDGETS[budget_name], seed, "applicants", redraw)
    experiment.estimator = main
    request = experiment.world_request(profiles)
    worlds = draw_worlds(experiment.population, profiles, request)
    factual = profiles.table[profiles.table[roles.x].isin([roles.x0, roles.x1])]
    rows = []
    for kind, screener in screeners.items():
        data = pd.concat(
            [
                factual.assign(y=answers(screener, factual), **{WORLD: FACTUAL}),
                worlds.assign(y=answers(screener, worlds), error=None),
            ],
            ignore_index=True,
        )
        for inference in ("applicants", "worlds"):
            fitted = main if inference == "applicants" else estimator(BUDGETS[budget_name], seed, inference)
            fitted.declare_documents(frozenset(), screener.reads)  # text resumes show no protected attribute
            start = time.perf_counter()
            table = fitted.estimate(data, roles, "y").table
            seconds = time.perf_counter() - start
            for effect in EFFECTS:
                rows.append(
                    {
                        "screener": kind,
                        "budget": budget_name,
                        "seed": seed,
                        "inference": inference,
                        "effect": effect,
                        "estimate": float(table.loc[effect, "estimate"]),
                        "se": float(table.loc[effect, "se"]),
                        "ci_low": float(table.loc[effect, "ci_low"]),
                        "ci_high": float(table.loc[effect, "ci_high"]),
                        "n": int(table.loc[effect, "n"]),
                        "n_redraw": int(worlds.loc[worlds[WORLD] == redraw_world("E[Y_x0]"), "applicant_id"].nunique()),
                        "seconds": seconds,
                    }
                )
    return rows


def population_rows(experiment, case: str, pop_seed: int, args) -> pd.DataFrame:
    """Every replication of one population draw, with its truths."""
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, pop_seed)
    x = profiles.roles.x
    screeners = {
        kind: SimulatedScreener(
            intercept=45.0,
            coefficients=coefficients(kind, profiles.table, x),
            noise_sd=8.0,
            seed=pop_seed * len(KINDS) + KINDS.index(kind),  # its own noise (module docstring)
        )
        for kind in args.screeners.split(",")
    }
    seeds = list(range(args.reps))
    truth_seeds = [TRUTH_SEED + k for k in range(args.truth_seeds)]
    every = {seed: full_designs(experiment, profiles, screeners, seed) for seed in [*seeds, *truth_seeds]}
    designs = {  # the full design at every world seed, per screener: rows seeds, columns effects
        kind: pd.DataFrame([every[seed][kind] for seed in every], index=list(every), columns=list(EFFECTS))
        for kind in screeners
    }
    rows = []
    for budget in args.budgets.split(","):
        for seed in seeds:
            rows += replication(experiment, profiles, screeners, budget, seed, args.redraw)
    out = pd.DataFrame(rows).assign(case=case, population_seed=pop_seed, n_eligible=len(profiles.table))
    truth, these, spread = [], [], []
    for row in out.itertuples():
        design = designs[row.screener][row.effect]
        truth.append(design.drop(index=row.seed).mean())  # leave-one-out: independent of this replication
        these.append(design[row.seed])
        spread.append(design.std(ddof=1))
    return out.assign(truth=truth, truth_these_worlds=these, sd_over_world_seeds=spread)


def coverage_line(rows: pd.DataFrame, column: str) -> tuple[float, float, float, int]:
    """Coverage (share of rows with `column` True) and its 95% interval clustered by population draw."""
    hits = rows.groupby(["case", "population_seed"])[column].agg(["sum", "count"])
    share = hits["sum"].sum() / hits["count"].sum()
    p = len(hits)
    if p > 1:
        residual = hits["sum"] - share * hits["count"]
        se = float(np.sqrt((residual**2).sum() * p / (p - 1)) / hits["count"].sum())
    else:
        se = float("nan")
    return float(share), share - 1.96 * se, share + 1.96 * se, int(hits["count"].sum())


def report(done: pd.DataFrame) -> None:
    done = done.assign(
        exact=done["se"] == 0,  # NDE exact by design; under inference=worlds at n=all, the full design itself
        covered=(done["ci_low"] - 1e-9 <= done["truth"]) & (done["truth"] <= done["ci_high"] + 1e-9),
        covered_these=(done["ci_low"] - 1e-9 <= done["truth_these_worlds"])
        & (done["truth_these_worlds"] <= done["ci_high"] + 1e-9),
    )
    reps = done.groupby(["case", "population_seed", "budget", "seed"]).ngroups
    draws = done.groupby(["case", "population_seed"]).ngroups
    print(f"\n{reps} replications (case x population draw x budget x estimator.seed), {draws} population draws")
    for inference, column, name in (
        ("applicants", "covered", "default (applicants, averaged over the redraws) vs the mean over world seeds"),
        ("worlds", "covered_these", "inference=worlds (these worlds only) vs the replication's own full design"),
    ):
        rows = done[done["inference"] == inference]
        print(f"\n== {name}: coverage (clustered 95% MC interval) [intervals] ==")
        table = []
        for (case, budget, effect), group in rows.groupby(["case", "budget", "effect"], sort=False):
            estimated = group[~group["exact"]]
            cell = (
                "exact in all"
                if estimated.empty
                else "{:.3f} ({:.3f}-{:.3f}) [{}]".format(*coverage_line(estimated, column))
            )
            if group["exact"].any() and not estimated.empty:
                cell += f" +{int(group['exact'].sum())} exact"
            elif group["exact"].any():
                cell += f" ({int(group['exact'].sum())})"
            table.append({"case": case, "budget": budget, "effect": effect, "coverage": cell})
        wide = pd.DataFrame(table).pivot(index=["case", "budget"], columns="effect", values="coverage")
        with pd.option_context("display.width", 250, "display.max_colwidth", 40):
            print(wide[list(EFFECTS)].to_string())
        print("pooled over cases and screeners, each distinct interval once (NIE left out where NDE is exact):")
        exact_nde = rows[(rows["effect"] == "NDE") & rows["exact"]][
            ["case", "population_seed", "budget", "seed", "screener"]
        ]
        keys = ["case", "population_seed", "budget", "seed", "screener"]
        merged = rows.merge(exact_nde.assign(nde_exact=True), on=keys, how="left")
        once = merged[
            ~((merged["effect"] == "NIE") & merged["nde_exact"].fillna(False).astype(bool)) & ~merged["exact"]
        ]
        for budget, group in once.groupby("budget", sort=False):
            parts = []
            for effect, g in group.groupby("effect", sort=False):
                share, low, high, count = coverage_line(g, column)
                verdict = "" if 0.93 <= share <= 0.97 else " OUT"
                parts.append(f"{effect} {share:.3f} ({low:.3f}-{high:.3f}, {count}){verdict}")
            share, low, high, count = coverage_line(group, column)
            print(f"  {budget}: " + "; ".join(parts) + f" | all {share:.3f} ({low:.3f}-{high:.3f}, {count})")
    print("\nmean SE / root mean squared error against the truth (1 = calibrated), default estimand:")
    default = done[(done["inference"] == "applicants") & ~done["exact"]]
    calibration = default.groupby(["budget", "effect"], sort=False).apply(
        lambda g: g["se"].mean() / np.sqrt(((g["estimate"] - g["truth"]) ** 2).mean()), include_groups=False
    )
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 200):
        print(calibration.unstack("effect")[[e for e in EFFECTS if e in calibration.index.get_level_values(1)]])
    full = done[(done["inference"] == "applicants") & (done["budget"] == "100%") & ~done["exact"]]
    if not full.empty:
        print("\nn=all, default estimand: SE > 0 in", f"{(full['se'] > 0).mean():.3f} of {len(full)} intervals;")
        summary = full.groupby(["case", "screener", "effect"])[["se", "sd_over_world_seeds"]].mean()
        summary["ratio"] = summary["se"] / summary["sd_over_world_seeds"]
        with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 200):
            print("mean SE against the SD of the full design over world seeds:")
            print(summary.to_string())
    nde = done[(done["effect"] == "NDE") & (done["inference"] == "applicants")]
    print(
        "\nNDE exact by design (SE 0) per screener:",
        ", ".join(f"{k} {v:.2f}" for k, v in nde.groupby("screener")["exact"].mean().items()),
    )
    seconds = done.groupby(["case", "population_seed", "budget", "seed", "screener", "inference"])["seconds"].first()
    print(f"estimate: {seconds.mean():.2f} s per replication and estimand")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--populations", type=int, default=10, help="population draws per case (clusters)")
    parser.add_argument("--reps", type=int, default=8, help="estimator.seed values per population and budget")
    parser.add_argument("--truth-seeds", type=int, default=30, help="extra world seeds for the truth")
    parser.add_argument(
        "--cases",
        default="nurse:gender,software_developer:gender,nurse:race,nurse:gender@600,nurse:race@300",
        help="occupation:attribute[@population.n]",
    )
    parser.add_argument("--screeners", default=",".join(KINDS))
    parser.add_argument("--budgets", default=",".join(BUDGETS))
    parser.add_argument("--applicants", type=int, default=4000, help="population.n of a case without @N")
    parser.add_argument("--redraw", type=int, default=REDRAW, help="estimator.redraw (at least 2)")
    parser.add_argument("--first-population", type=int, default=0, help="population seeds start here")
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args()
    unknown = {*args.screeners.split(",")} - set(KINDS), {*args.budgets.split(",")} - set(BUDGETS)
    if unknown[0] or unknown[1] or args.redraw < 2:
        parser.error(f"--screeners from {list(KINDS)}, --budgets from {list(BUDGETS)}, --redraw at least 2")
    done = pd.read_csv(args.csv) if args.csv and args.csv.exists() else pd.DataFrame()
    seen = set(done[["case", "population_seed"]].itertuples(index=False, name=None)) if not done.empty else set()
    experiments = {}
    for case in args.cases.split(","):
        name, _, size = case.partition("@")
        experiments[case] = simulated_case(name, [f"population.n={int(size or args.applicants)}"])
    start = time.perf_counter()
    for pop_seed in range(
        args.first_population, args.first_population + args.populations
    ):  # population draws outermost: a study cut short stays balanced
        for case, experiment in experiments.items():
            if (case, pop_seed) in seen:
                continue
            rows = population_rows(experiment, case, pop_seed, args)
            done = pd.concat([done, rows], ignore_index=True)
            if args.csv:
                done.to_csv(args.csv, index=False)
            print(f"{case} population {pop_seed}: {time.perf_counter() - start:.0f} s", flush=True)
    report(done)


if __name__ == "__main__":
    main()
