"""Benchmark: the printed minimum detectable effect (MDE) of every design against a simulated power
curve of the design's own estimator and test. Target: the simulated 80%-power point within 10% of
the printed MDE, for each design.

For each design the plan's power line is computed as a dry run computes it
(`popfair.design.base.plan_power`), then `--reps` audits are simulated at each of five effects
(0.6 to 1.4 times the MDE) and run through the estimator the case runs:
- population: `estimate_pse` (DML-UCA, pse_dml) on the simulated standard fairness model
  (`popfair.estimate.pse.simulate`, direct path only, so TE is the direct effect); significant = its TE CI
  excludes 0. Two plans: plan.sd from a pilot's score SD, and plan.from_run from a pilot run's SE at
  half the n;
- paired: `paired_gap` on pairs within postings, discordant share psi (posting-level heterogeneity
  in the callback rate), McNemar p < alpha as the pattern labels;
- ranking: Plackett-Luce rankings of k groups in Latin-square orders, the top-1 logit
  (`fit_rank_logit(stages=1)`), Wald test of one group against the reference;
- table: a table with one category's selection rate below the others', `impact_ratio_inference`
  (the permutation test of the lowest ratio), p < alpha; k = 2 (sex) and k = 4 (race-like, Bonferroni
  in the plan).

The simulated 80% point is read off a probit curve fitted to all the simulated audits (statsmodels
GLM, binomial with probit link, effect as the covariate). Printed: the curve, the simulated point,
the printed MDE and their ratio.

Run: python benchmarks/power_check.py            (full: 400 audits per effect, population 200)
     python benchmarks/power_check.py --quick    (60 per effect, population 40)
     python benchmarks/power_check.py --skip-population / --only-population --population-reps 100
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script lives in
os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from popfair.core.types import Roles  # noqa: E402
from popfair.design import design_named
from popfair.design.base import PreviousRun, plan_power  # noqa: E402
from popfair.estimate.power import PowerSettings  # noqa: E402

FACTORS = (0.6, 0.8, 1.0, 1.2, 1.4)
TOLERANCE = 0.10


def eighty_point(effects: np.ndarray, rejected: np.ndarray, power: float = 0.8) -> float:
    """The effect at which a probit curve fitted to (effect, rejected) reaches `power`."""
    import statsmodels.api as sm

    model = sm.GLM(
        rejected.astype(float), sm.add_constant(effects), family=sm.families.Binomial(sm.families.links.Probit())
    )
    a, b = model.fit().params
    return float((stats.norm.ppf(power) - a) / b)


def curve(
    name: str,
    mde: float,
    reject: Callable[[float, np.random.Generator], bool],
    reps: int,
    seed: int,
    shown: Callable[[float], str],
) -> dict[str, object]:
    """Simulate `reps` audits at each of FACTORS x mde; print the curve; return the row of the summary."""
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    effects, rejected, rates = [], [], []
    for factor in FACTORS:
        hits = [reject(factor * mde, rng) for _ in range(reps)]
        effects += [factor * mde] * reps
        rejected += hits
        rates.append(float(np.mean(hits)))
    point = eighty_point(np.array(effects), np.array(rejected))
    seconds = time.perf_counter() - start
    print(f"\n{name}: printed MDE {shown(mde)}; simulated power at each effect ({reps} audits each, {seconds:.0f} s):")
    for factor, rate in zip(FACTORS, rates):
        print(f"  {factor:.1f} x MDE = {shown(factor * mde):>12}: power {rate:.3f}")
    ratio = point / mde
    verdict = "met" if abs(ratio - 1) <= TOLERANCE else "NOT met"
    print(f"  simulated 80% point {shown(point)}, printed MDE {shown(mde)}: ratio {ratio:.3f} ({verdict})")
    return {
        "design": name,
        "printed MDE": shown(mde),
        "power at MDE": rates[FACTORS.index(1.0)],
        "simulated 80% point": shown(point),
        "ratio": round(ratio, 3),
        "within 10%": verdict,
    }


# --- population (pse_dml on the simulated SFM) -------------------------------------------------------


def population_rows(n: int, reps: int, seed: int) -> list[dict[str, object]]:
    from popfair import estimate_pse
    from popfair.estimate.pse.simulate import SimulatedSFM

    grid = {"n_estimators": [20], "max_depth": [2], "reg_lambda": [1]}
    settings = {"n_bootstrap": 200, "grid": grid, "n_jobs": 1, "gate": False, "folds": 5}

    def sim(te: float) -> SimulatedSFM:
        return SimulatedSFM(direct=te, x_to_b=0.0, x_to_r=0.0)

    def significant(data: pd.DataFrame, model: SimulatedSFM) -> bool:
        result = estimate_pse(data, x0=model.x0, x1=model.x1, y="y", **settings, **model.roles)
        return bool(result.table.loc["TE", "significant"])

    base = sim(0.0)
    pilot = base.sample(2000, seed=seed + 99)
    profiles = SimpleNamespace(
        table=base.sample(n, seed=seed + 98), roles=Roles(x="gender", x0="female", x1="male", z=(), b=(), r=())
    )
    rows = []
    sd = float(pilot["y"].std(ddof=1))
    plan = plan_power(design_named("population"), profiles, PowerSettings(sd=sd))
    assert plan is not None
    print(plan.line())

    def reject(te: float, rng: np.random.Generator) -> bool:
        model = sim(te)
        return significant(model.sample(n, seed=int(rng.integers(1 << 31))), model)

    rows.append(curve(f"population TE, n={n:,}, plan.sd={sd:.2f} (pilot)", plan.mde, reject, reps, seed, plan.shown))
    half = n // 2
    pilot_run = estimate_pse(base.sample(half, seed=seed + 97), x0="female", x1="male", y="y", **settings, **base.roles)
    previous = PreviousRun("a pilot run", {"TE.se": float(pilot_run.table.loc["TE", "se"]), "n_rows": float(half)})
    plan = plan_power(design_named("population"), profiles, PowerSettings(), previous)
    assert plan is not None
    print(plan.line())
    rows.append(
        curve(f"population TE, n={n:,}, plan.from_run (SE at n={half:,})", plan.mde, reject, reps, seed + 1, plan.shown)
    )
    return rows


# --- paired (paired_gap, McNemar) --------------------------------------------------------------------


def paired_rows(n_pairs: int, psi: float, reps: int, seed: int) -> list[dict[str, object]]:
    from popfair.estimate.gap.paired import paired_gap

    per_posting = 4
    n_postings = n_pairs // per_posting
    profiles = SimpleNamespace(
        table=pd.DataFrame({"pair_key": np.arange(n_pairs)}),
        roles=Roles(x="race", x0="black", x1="white", z=(), b=(), r=()),
    )
    plan = plan_power(design_named("paired"), profiles, PowerSettings(discordant_share=psi))
    assert plan is not None
    print(plan.line())

    def reject(gap: float, rng: np.random.Generator) -> bool:
        # per posting: both called back with a posting-specific share of the concordant pairs
        both = np.repeat(rng.beta(2, 2, n_postings), per_posting) * (1 - psi)
        u = rng.random(n_pairs)
        p10, p01 = (psi + gap) / 2, (psi - gap) / 2
        y_adv = np.where(u < both, 1, np.where(u < both + p10, 1, 0))
        y_other = np.where(u < both, 1, np.where((u >= both + p10) & (u < both + p10 + p01), 1, 0))
        pairs = pd.DataFrame({"adv": y_adv, "other": y_other, "posting": np.repeat(np.arange(n_postings), per_posting)})
        result = paired_gap(pairs, y_adv="adv", y_other="other", cluster="posting", n_bootstrap=100)
        return result.mcnemar_p < 0.05

    return [curve(f"paired gap, {n_pairs:,} pairs, psi={psi:g}", plan.mde, reject, reps, seed, plan.shown)]


# --- ranking (top-1 logit) ---------------------------------------------------------------------------


def ranking_rows(n_trials: int, k: int, reps: int, seed: int) -> list[dict[str, object]]:
    from popfair.estimate.ranking import top1_power as rp
    from popfair.estimate.ranking.model import fit_rank_logit

    profiles = SimpleNamespace(
        table=pd.DataFrame(
            {"trial_id": np.repeat(np.arange(n_trials), k), "group": np.tile([f"g{i}" for i in range(k)], n_trials)}
        )
    )
    plan = plan_power(design_named("ranking"), profiles, PowerSettings())
    assert plan is not None
    print(plan.line())

    def worth_of(gap: float) -> float:
        worth = rp.log_worth_of_gap(gap, k)
        assert worth is not None
        return worth

    def reject(gap: float, rng: np.random.Generator) -> bool:
        strengths = np.zeros(k)
        strengths[0] = worth_of(gap)
        trials = rp.simulate_rankings(n_trials, strengths, np.zeros(k), rng)
        fit = fit_rank_logit(trials, reference="g1", reference_position=k, se="model", stages=1)
        i = fit.names.index("group.g0")
        return abs(fit.params[i] / fit.se[i]) > stats.norm.ppf(0.975)

    return [curve(f"ranking top-1, {n_trials:,} trials, k={k}", plan.mde, reject, reps, seed, plan.shown)]


# --- table (impact_ratio_inference) ------------------------------------------------------------------


def table_rows(sizes: list[int], base: float, reps: int, seed: int) -> list[dict[str, object]]:
    from popfair.estimate.impact_ratio.inference import impact_ratio_inference

    names = [f"c{i}" for i in range(len(sizes))]
    # the smallest category first: it is the one whose rate drops
    order = np.argsort(sizes)
    categories = pd.DataFrame(
        {"n": sizes, "selected": np.round(np.array(sizes) * base).astype(int)}, index=pd.Index(names, name="race")
    )
    plan = plan_power(design_named("table"), categories, PowerSettings(base_rate=base))
    assert plan is not None
    print(plan.line())
    low = names[int(order[0])]

    def reject(gap: float, rng: np.random.Generator) -> bool:
        rates = np.array([base - gap if name == low else base for name in names])
        selected = rng.binomial(sizes, rates)
        counts = pd.DataFrame({"category": names, "n": sizes, "selected": selected})
        result = impact_ratio_inference(
            counts, cluster=None, n_bootstrap=100, n_permutations=400, seed=int(rng.integers(1 << 31))
        )
        return bool(result.p_value < 0.05)

    label = f"table, {len(sizes)} categories {sizes}, base rate {base:g}"
    return [curve(label, plan.mde, reject, reps, seed, plan.shown)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 audits per effect, smaller population runs")
    parser.add_argument("--reps", type=int, default=None, help="audits per effect (default 400; --quick 60)")
    parser.add_argument("--skip-population", action="store_true", help="leave out the (slow) pse_dml curves")
    parser.add_argument("--only-population", action="store_true", help="only the pse_dml curves")
    parser.add_argument(
        "--population-reps", type=int, default=None, help="pse_dml audits per effect (default reps / 2)"
    )
    args = parser.parse_args()
    reps = args.reps or (60 if args.quick else 400)
    start = time.perf_counter()
    print(f"load before: {os.getloadavg()[0]:.1f}")
    rows = []
    if not args.only_population:
        rows += paired_rows(800, 0.2, reps, seed=1)
        rows += ranking_rows(1000, 8, reps, seed=2)
        rows += table_rows([400, 400], 0.3, reps, seed=3)
        rows += table_rows([60, 120, 240, 400], 0.3, reps, seed=4)
    if not args.skip_population:
        rows += population_rows(1000, args.population_reps or max(reps // 2, 40), seed=5)
    print(f"\nsummary (load after: {os.getloadavg()[0]:.1f}; {time.perf_counter() - start:.0f} s):")
    with pd.option_context("display.width", 200, "display.max_columns", 10, "display.max_colwidth", 70):
        print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
