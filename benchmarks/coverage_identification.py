"""Coverage study of the identification gate: DML-UCA on populations with the real overlap of the
bundled PUMS occupations (nurse x gender, software developer x gender; `nurse:race` adds race on
nurses), simulated screeners with known truth.

Screeners (popfair.screen.simulated, noise sd 8):
- direct: reads gender (+2 men) and the grouped name typicality (+1.5 male-typical), education,
  experience (race: +2 White, -1.5 Black-typical surname);
- blind: reads only raw first names (+4 for the 20 most common male first names of the population;
  race: the 20 most common surnames of White applicants) plus education and experience; its true NDE
  is exactly 0 (it never reads the attribute), and its name effect is a proxy (R) effect;
- qualifications: education and experience only; every group effect is 0 except through B.

Each replication: a population draw (seed p: names, experience; every PUMS record of the
occupation, or `--population-n`), the screener's scores with noise seed r, `estimate_pse` (folds and
bootstrap seeded by the same independent seed) with the gate off, so the would-be numbers are kept,
and every counterfactual mean's diagnostics, so the summary re-applies the rule as it stands in
popfair.estimate.pse.identification to the recorded rows. The truth is the screener's expected score
averaged over every applicant's five counterfactual worlds of that population draw
(`expected_effects`): the finite-population effect. The coarser split (BIE_coarse, TE_minus_BIE) is
judged the same way.

Prints, per occupation x screener x effect: the share reported (identified), coverage of the
reported CIs, the ungated coverage, the would-be misses and the share of them the gate reports as
not identified, and whether the cell is answerable (its ungated CI misses no more often than a valid
95% CI would: one-sided binomial test at 0.05). Then the acceptance figures: coverage of every
reported CI (with its Clopper-Pearson interval) and the share of would-be misses reported as not
identified, over all misses and over the misses in unanswerable cells (a valid CI still misses 5% of
the time; those misses are the coverage figure's, not the gate's).

    nice python benchmarks/coverage_identification.py --reps 5 --populations 8 --grid small --csv cov.csv

`--grid small` (depth 2-3, lambda 1, 50-100 trees) makes a replication about 8 s on a quiet core;
`paper` is the estimator's default grid (C.5). `--csv` keeps per-replication rows and resumes from
them; rerunning with the same arguments prints the table from the file. Population draws are the
outer loop, so a study cut short stays balanced over occupations and screeners.
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

from popfair.case.population import PopulationCase  # noqa: E402
from popfair.core.types import WORLD, WorldRequest  # noqa: E402
from popfair.estimate.pse.design.interventional import expected_effects  # noqa: E402
from popfair.estimate.pse.dml.estimator import estimate_pse  # noqa: E402
from popfair.estimate.pse.estimand import grouping_problems  # noqa: E402
from popfair.estimate.pse.identification import IdentificationRule, gate, mean_problems  # noqa: E402
from popfair.estimate.pse.settings import PseOverlapWarning  # noqa: E402
from popfair.estimate.pse.sfm import COARSE_CONTRASTS, COARSE_EFFECTS, CONTRASTS, EFFECTS, TARGETS  # noqa: E402
from popfair.population.popresume import PopResumePopulation, roles_for  # noqa: E402
from popfair.population.protected import ProtectedAttribute  # noqa: E402
from popfair.population.worlds import draw_worlds  # noqa: E402
from popfair.screen.simulated import SimulatedScreener  # noqa: E402

QUALIFICATIONS = {"edu_group": {"medium": 6.0, "high": 12.0}, "exp_year": 0.8}
KINDS = ("direct", "blind", "qualifications")
LEVELS_OF = {"gender": ("female", "male"), "race": ("black", "white")}  # conf/protected_attr
DIAGNOSTICS = ("mass_pi3", "mass_pi2", "ess", "crossing", "share_clipped")  # recorded per mean
SMALL_GRID = {"n_estimators": [50, 100], "max_depth": [2, 3], "reg_lambda": [1.0]}


def coefficients(kind: str, table: pd.DataFrame, attribute: str = "gender") -> dict:
    """The simulated screener's coefficients for one kind (see the module docstring); with
    `attribute` race the direct screener reads race and the surname's race typicality, the blind one
    the 20 most common surnames of White applicants."""
    if kind == "direct":
        if attribute == "race":
            return {"race": {"white": 2.0}, "surname_race_typicality": {"black": -1.5}, **QUALIFICATIONS}
        return {"gender": {"male": 2.0}, "name_gender_typicality": {"male": 1.5}, **QUALIFICATIONS}
    if kind == "blind":
        column, group = ("surname", "white") if attribute == "race" else ("first_name", "male")
        names = table.loc[table[attribute] == group, column].value_counts().index[:20]
        return {column: {str(name): 4.0 for name in names}, **QUALIFICATIONS}
    if kind == "qualifications":
        return dict(QUALIFICATIONS)
    raise ValueError(kind)


def reads(kind: str, attribute: str) -> frozenset[str]:
    """The profile columns a screener of this kind reads (its coefficients' keys)."""
    sample = pd.DataFrame({attribute: ["x"], "first_name": ["x"], "surname": ["x"]})
    return frozenset(coefficients(kind, sample, attribute))


def score(screener: SimulatedScreener, table: pd.DataFrame, seed: int) -> np.ndarray:
    """Noisy scores of the structural model: expected index plus normal noise, clipped to 0-100."""
    index = screener.linear_index(table)  # the structural index of each profile
    noise = np.random.default_rng([seed, 7]).normal(0.0, screener.noise_sd, len(table))
    return np.clip(index + noise, 0.0, 100.0)


def population_draw(experiment: PopulationCase, pop_seed: int) -> tuple:
    """One population draw (every applicant) and every applicant's five counterfactual worlds."""
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, pop_seed)
    everyone = draw_worlds(experiment.population, profiles, WorldRequest(worlds=TARGETS, n=None, seed=pop_seed))
    return profiles, everyone


def replication(draw: tuple, occupation: str, pop_seed: int, kind: str, rep: int, grid: dict | None) -> list[dict]:
    profiles, everyone = draw
    table = profiles.table
    attribute = profiles.roles.x
    screener = SimulatedScreener(
        intercept=45.0, coefficients=coefficients(kind, table, attribute), noise_sd=8.0, seed=rep
    )
    # the screener's `seed` only hashes document noise in `screen`; this study draws it in `score`
    expected = screener.expected(everyone, "score")
    truth = expected_effects(everyone, expected)
    means = pd.Series(np.asarray(expected, float), index=everyone.index).groupby(everyone[WORLD]).mean()
    for name, row in zip(COARSE_EFFECTS, COARSE_CONTRASTS):  # the coarser split's truth, same worlds
        truth[name] = float(row @ means.reindex(list(TARGETS)).to_numpy())
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
            seed=noise_seed,  # folds and bootstrap too: replications of different screeners are independent
            gate=False,
            grid=grid,
            n_jobs=1,
        )
    problems = {t: r for t, r in result.identification["reason"].items() if r}
    judged = pd.concat(
        [
            gate(result.table, problems, result.n),
            gate(result.coarse, problems, result.n, COARSE_EFFECTS, COARSE_CONTRASTS),
        ]
    )
    ungated = pd.concat([result.table, result.coarse])
    # every mean's diagnostics, so any stated rule can be re-applied to the rows afterwards
    diagnostics = {
        f"{column}:{target}": float(value)
        for target, row in result.identification.iterrows()
        for column, value in row.items()
        if column in DIAGNOSTICS
    }
    rows = []
    for effect in (*EFFECTS, *COARSE_EFFECTS):
        lo, hi = ungated.loc[effect, "ci_low"], ungated.loc[effect, "ci_high"]
        rows.append(
            {
                "occupation": occupation,
                "screener": kind,
                "population_seed": pop_seed,
                "rep": rep,
                "effect": effect,
                "truth": float(truth[effect]),
                "estimate": float(ungated.loc[effect, "estimate"]),
                "se": float(ungated.loc[effect, "se"]),
                "ci_low": float(lo),
                "ci_high": float(hi),
                "covered": bool(lo <= truth[effect] <= hi),
                "identified": bool(judged.loc[effect, "identified"]),
                "reason": judged.loc[effect, "reason"],
                **diagnostics,
            }
        )
    return rows


def regate(results: pd.DataFrame, rule: IdentificationRule, structural: bool = True) -> pd.DataFrame:
    """`identified` re-decided from each replication's recorded diagnostics under `rule` (the rule in
    popfair.estimate.pse.identification, so a changed rule is judged on the same replications), and with
    `structural` the case's grouping check (`popfair.estimate.pse.estimand.grouping_problems`) on the
    columns the screener reads."""
    columns = [c for c in results if ":" in c]
    if not columns:
        return results
    verdicts = []
    for _, rows in results.groupby(["occupation", "screener", "population_seed", "rep"], sort=False):
        first = rows.iloc[0]
        diagnostics = pd.DataFrame(
            {name: {c.split(":", 1)[1]: first[c] for c in columns if c.startswith(name + ":")} for name in DIAGNOSTICS}
        ).reindex(list(TARGETS))
        problems = mean_problems(diagnostics, rule, ("x0", "x1"))
        if structural:  # the screener's known columns: a raw name read while R holds it grouped
            occupation, kind = str(first["occupation"]), str(first["screener"])
            attribute = occupation.partition(":")[2] or "gender"
            roles = roles_for(ProtectedAttribute(attribute, *LEVELS_OF[attribute]))
            known = grouping_problems(roles, reads(kind, attribute), PopResumePopulation.grouped_from)
            problems = {**known, **problems}
        contrasts = dict(zip((*EFFECTS, *COARSE_EFFECTS), np.vstack([CONTRASTS, COARSE_CONTRASTS])))
        verdicts.append(
            pd.Series(
                [not any(c != 0 and t in problems for t, c in zip(TARGETS, contrasts[e])) for e in rows["effect"]],
                index=rows.index,
            )
        )
    return results.assign(identified=pd.concat(verdicts).reindex(results.index))


def answerable(results: pd.DataFrame, alpha: float = 0.05) -> pd.Series:
    """Per occupation x screener x effect: whether the ungated CI covers consistently with its nominal
    level (one-sided binomial test of its misses against alpha at level 0.05). A cell that fails it is
    an effect the data cannot answer: its ungated CI misses more often than a valid one would."""
    from scipy.stats import binomtest

    return results.groupby(["occupation", "screener", "effect"], sort=False)["covered"].agg(
        lambda c: binomtest(int((~c).sum()), len(c), alpha, alternative="greater").pvalue >= 0.05
    )


def summarise(results: pd.DataFrame) -> pd.DataFrame:
    """Per occupation x screener x effect: reps, share reported, coverage of the reported CIs, ungated
    coverage, ungated misses and the share of them the gate reports as not identified, and whether the
    ungated estimator is valid there (`answerable`)."""
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
    return summary.assign(answerable=answerable(results))


def verdict(results: pd.DataFrame, label: str) -> str:
    """The acceptance figures over `results`: coverage of the reported CIs, and the share of would-be
    misses reported as not identified, over all misses and over the misses of effects the data cannot
    answer (cells whose ungated CI covers below its nominal level, `answerable`)."""
    reported = results[results["identified"]]
    misses = results[~results["covered"]]
    cells = answerable(results)
    key = pd.MultiIndex.from_frame(misses[["occupation", "screener", "effect"]])
    unanswerable = misses[~cells.reindex(key).to_numpy(bool)]
    low, high = binom_ci(int(reported["covered"].sum()), len(reported))
    return (
        f"{label}: reported {len(reported)} of {len(results)} effects, coverage {reported['covered'].mean():.3f} "
        f"(95% CI {low:.3f}-{high:.3f}); would-be misses {len(misses)}, reported as not identified "
        f"{(~misses['identified']).mean() if len(misses) else float('nan'):.3f} of all, "
        f"{(~unanswerable['identified']).mean() if len(unanswerable) else float('nan'):.3f} of the "
        f"{len(unanswerable)} in cells the data cannot answer"
    )


def simulated_case(case: str, overrides: list[str]) -> PopulationCase:
    """The case "occupation" or "occupation:attribute" (default gender) with the simulated screener,
    no diagnostics and no tracking, plus `overrides`."""
    occupation, _, attribute = case.partition(":")
    common = [
        "screener=simulated",
        f"occupation={occupation}",
        f"protected_attr={attribute or 'gender'}",
        "population.diagnostics=false",
        "tracking=none",
    ]
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        return PopulationCase.from_config(compose(config_name="config", overrides=[*common, *overrides]))


def binom_ci(successes: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of a share (the coverage over this many replications)."""
    from scipy.stats import binomtest

    if n == 0:
        return float("nan"), float("nan")
    interval = binomtest(successes, n).proportion_ci(0.95)
    return float(interval.low), float(interval.high)


def blind_labelled_direct(results: pd.DataFrame) -> int:
    """Replications where the gender-blind screener (true NDE 0) would be labelled Case 1: its NDE
    reported (identified) with a CI that excludes 0."""
    nde = results[(results["screener"] == "blind") & (results["effect"] == "NDE") & results["identified"]]
    return int(((nde["ci_low"] > 0) | (nde["ci_high"] < 0)).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=4, help="screener noise seeds per population draw")
    parser.add_argument("--populations", type=int, default=2, help="population draws (seeds) per occupation")
    parser.add_argument("--population-n", type=int, default=None, help="resample n applicants (default: all)")
    parser.add_argument(
        "--occupations",
        default="nurse,software_developer",
        help="comma-separated occupation[:attribute] (attribute gender by default; e.g. nurse:race)",
    )
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
    experiments = {}
    for case in args.occupations.split(","):  # occupation or occupation:attribute (default gender)
        experiments[case] = simulated_case(
            case, [f"population.n={'null' if args.population_n is None else args.population_n}"]
        )
    keys = (
        set(done[["occupation", "screener", "population_seed", "rep"]].itertuples(index=False, name=None))
        if not done.empty
        else set()
    )
    # population draws outermost: a study cut short is balanced over occupations and screeners
    for pop_seed in range(args.populations):
        for occupation, experiment in experiments.items():
            draw = None
            for kind in args.screeners.split(","):
                for rep in range(args.reps):
                    if (occupation, kind, pop_seed, rep) in keys:
                        continue
                    draw = draw or population_draw(experiment, pop_seed)
                    rows = pd.DataFrame(replication(draw, occupation, pop_seed, kind, rep, grid))
                    done = pd.concat([done, rows], ignore_index=True)
                    if args.csv:
                        done.to_csv(args.csv, index=False)
                    print(
                        f"{occupation} {kind} pop {pop_seed} rep {rep}: {time.perf_counter() - start:.0f} s", flush=True
                    )
    overlap_only = regate(done, IdentificationRule(), structural=False)
    done = regate(done, IdentificationRule())  # the rule as it stands, on the recorded diagnostics
    fine = done[done["effect"].isin(EFFECTS)]
    coarse = done[done["effect"].isin(COARSE_EFFECTS)]
    with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 160):
        print(summarise(fine).to_string())
        print("\ncoarser split (offered where the fine decomposition is not identified):")
        print(summarise(coarse).to_string())
    n_reps = done.groupby(["occupation", "screener", "population_seed", "rep"]).ngroups
    print(f"\n{n_reps} replications, {time.perf_counter() - start:.0f} s")
    print(verdict(fine, "five effects"))
    print(verdict(coarse, "coarser split"))
    print(f"blind screener labelled Case 1 (NDE reported, CI excludes 0): {blind_labelled_direct(fine)}")
    fine_overlap = overlap_only[overlap_only["effect"].isin(EFFECTS)]
    print(verdict(fine_overlap, "five effects, overlap checks alone (without the grouping check)"))
    print(f"  blind screener labelled Case 1 then: {blind_labelled_direct(fine_overlap)}")


if __name__ == "__main__":
    main()
