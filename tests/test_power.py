"""The power line (config plan.*): each design's printed MDE against a small simulation of the
estimator and test the case runs (a few hundred audits; benchmarks/power_check.py runs the full
curves), and bad plan settings refused in one line."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from popfair.core.errors import ConfigError
from popfair.core.types import Roles
from popfair.design import design_named
from popfair.design.base import PreviousRun, plan_power
from popfair.estimate.power import PowerSettings, mcnemar_power

SIMS = 2000  # vectorised audits of the test the case's label uses: power at the MDE 0.8 +- 0.036 (4 SE)
BAND = (0.764, 0.836)  # an MDE off by 10% moves the power to about 0.71 or 0.87


def _roles(x: str, x0: str, x1: str) -> Roles:
    return Roles(x=x, x0=x0, x1=x1, z=(), b=(), r=())


def test_paired_mde_has_80_percent_power_for_the_cases_mcnemar_test():
    from popfair.estimate.inference import mcnemar_cc

    n_pairs, psi = 240, 0.3
    profiles = SimpleNamespace(table=pd.DataFrame({"pair_key": range(n_pairs)}), roles=_roles("race", "black", "white"))
    plan = plan_power(design_named("paired"), profiles, PowerSettings(discordant_share=psi, effect=0.1))
    assert plan is not None and plan.mde is not None and 0.05 < plan.mde < psi and plan.units == "pairs"
    assert mcnemar_power(n_pairs, psi, plan.mde, 0.05) == pytest.approx(0.8, abs=1e-4)
    # (x1 yes, x0 no), (x1 no, x0 yes), concordant: paired_gap's b and c, and its McNemar test
    cells = np.random.default_rng(0).multinomial(n_pairs, [(psi + plan.mde) / 2, (psi - plan.mde) / 2, 1 - psi], SIMS)
    rejected = [mcnemar_cc(int(b), int(c))[1] < 0.05 for b, c, _ in cells]
    assert BAND[0] <= np.mean(rejected) <= BAND[1]
    # the n for plan.effect reaches the power, one pair fewer does not
    assert plan.n_needed is not None
    assert mcnemar_power(plan.n_needed, psi, 0.1, 0.05) >= 0.8 > mcnemar_power(plan.n_needed - 1, psi, 0.1, 0.05)


def test_population_mde_has_80_percent_power_for_the_score_gap_and_from_a_previous_run():
    n1, n0, sd = 120, 200, 12.0
    table = pd.DataFrame({"gender": ["male"] * n1 + ["female"] * n0})
    profiles = SimpleNamespace(table=table, roles=_roles("gender", "female", "male"))
    plan = plan_power(design_named("population"), profiles, PowerSettings(sd=sd, effect=5.0))
    assert plan is not None and plan.mde is not None and plan.unit == "points"
    # a previous run at half the n with the standard error a difference of means has there
    se_half = sd * np.sqrt(1 / (n1 / 2) + 1 / (n0 / 2))
    previous = PreviousRun("a pilot", {"TE.se": se_half, "n_rows": (n1 + n0) / 2})
    from_run = plan_power(design_named("population"), profiles, PowerSettings(), previous)
    assert from_run is not None and from_run.mde == pytest.approx(plan.mde, rel=0.02)
    # a race case: the previous run's n counts every applicant, as the plan's n does (the others included)
    mixed = pd.DataFrame({"race": ["white"] * 50 + ["black"] * 30 + ["asian"] * 20})
    same_n = plan_power(
        design_named("population"), SimpleNamespace(table=mixed, roles=_roles("race", "black", "white")), PowerSettings(),
        PreviousRun("a run", {"TE.se": 2.0, "n_rows": 100.0}),
    )  # fmt: skip
    assert same_n is not None and same_n.n == 100
    assert same_n.mde == pytest.approx(2.0 * (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)), rel=1e-3)
    # Welch's t test of the two groups' scores (outcome_gap's p-value; pse_dml's TE: benchmarks/power_check.py)
    rng = np.random.default_rng(1)
    test = stats.ttest_ind(
        rng.normal(50 + plan.mde, sd, (SIMS, n1)), rng.normal(50, sd, (SIMS, n0)), axis=1, equal_var=False
    )
    assert BAND[0] <= np.mean(test.pvalue < 0.05) <= BAND[1]
    assert plan.n_needed is not None and plan_power(
        design_named("population"), SimpleNamespace(table=table.sample(plan.n_needed, replace=True, random_state=0), roles=profiles.roles),
        PowerSettings(sd=sd),
    ).mde == pytest.approx(5.0, rel=0.05)  # fmt: skip


def test_ranking_top1_mde_has_80_percent_power_for_the_top1_contrast():
    from popfair.estimate.ranking import top1_power as rp

    n, k = 300, 4
    table = pd.DataFrame({"trial_id": np.repeat(np.arange(n), k), "group": np.tile([f"g{i}" for i in range(k)], n)})
    plan = plan_power(design_named("ranking"), SimpleNamespace(table=table), PowerSettings(effect=0.1))
    assert plan is not None and plan.mde is not None and plan.units == "trials"
    worth = plan.extra["mde_log_worth"]
    assert rp.top1_trials(worth, k) == pytest.approx(n, rel=0.01)
    # the variance the top-1 logit's information gives, positions fitted (simulated rankings)
    assert rp.trials_needed(round(worth, 3), k, stages=1) == pytest.approx(n, rel=0.05)
    high, low = rp.top1_rates(worth, k)
    wins = np.random.default_rng(2).multinomial(n, [high, low] + [low] * (k - 2), SIMS)[:, :2]
    z = np.log(wins[:, 0] / wins[:, 1]) / np.sqrt(1 / wins[:, 0] + 1 / wins[:, 1])  # the winner-only MLE's Wald z
    assert BAND[0] <= np.mean(np.abs(z) > stats.norm.ppf(0.975)) <= BAND[1]


def test_table_mde_has_80_percent_power_for_two_proportions():
    categories = pd.DataFrame({"n": [300, 500], "selected": [120, 200]}, index=pd.Index(["female", "male"], name="sex"))
    plan = plan_power(design_named("table"), categories, PowerSettings())
    assert plan is not None and plan.mde is not None
    base = 0.4
    assert plan.extra["mde_impact_ratio"] == pytest.approx((base - plan.mde) / base)
    rng = np.random.default_rng(3)
    low, high = rng.binomial(300, base - plan.mde, SIMS), rng.binomial(500, base, SIMS)
    pooled = (low + high) / 800
    z = (high / 500 - low / 300) / np.sqrt(pooled * (1 - pooled) * (1 / 300 + 1 / 500))
    assert BAND[0] <= np.mean(np.abs(z) > stats.norm.ppf(0.975)) <= BAND[1]


def test_table_mde_of_three_categories_has_80_percent_power_for_the_lowest_ratio_test():
    """More than two categories: the simulated plan against the case's own permutation test."""
    from popfair.estimate.impact_ratio.inference import impact_ratio_inference

    sizes, base, sims = [60, 150, 300], 0.4, 200
    names = ["c0", "c1", "c2"]
    categories = pd.DataFrame({"n": sizes, "selected": [24, 60, 120]}, index=pd.Index(names, name="race"))
    plan = plan_power(design_named("table"), categories, PowerSettings())
    assert plan is not None and plan.mde is not None and "lowest of 3 impact ratios" in plan.line()
    rng = np.random.default_rng(4)
    rates = np.array([base - plan.mde, base, base])  # the smallest category drops
    hits = 0
    for _ in range(sims):
        counts = pd.DataFrame({"category": names, "n": sizes, "selected": rng.binomial(sizes, rates)})
        result = impact_ratio_inference(
            counts, cluster=None, n_bootstrap=100, n_permutations=100, seed=int(rng.integers(9999))
        )
        hits += result.p_value < 0.05
    assert 0.69 <= hits / sims <= 0.91  # 200 audits: 4 standard errors of 0.028


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"power": 1.5}, "plan.power: must lie strictly between 0 and 1, got 1.5"),
        ({"alpha": 0}, "plan.alpha: must lie strictly between 0 and 1, got 0"),
        ({"effect": -0.03}, "plan.effect: must be a positive number"),
        ({"sd": "wide"}, "plan.sd: must be a positive number"),
        ({"base_rate": 2}, "plan.base_rate: must lie strictly between 0 and 1"),
        ({"efect": 0.03}, "plan.efect: unknown key"),
    ],
)
def test_bad_plan_settings_fail_in_one_line_naming_the_key(node, message):
    with pytest.raises(ConfigError) as failure:
        PowerSettings.from_config(node)
    assert str(failure.value).startswith(message) and "\n" not in str(failure.value)


def test_previous_run_from_a_folder(tmp_path):
    """plan.from_run names a run's artifact folder: its effects.csv is the previous run (an unknown MLflow
    run id: tests/test_paired_end_to_end.py, beside a real run)."""
    from popfair.case.power_plan import CasePower

    tracking = {"enabled": False}
    with pytest.raises(ConfigError, match="holds no effects.csv"):
        CasePower.of({"from_run": str(tmp_path)}, tracking)
    with pytest.raises(ConfigError, match="is not a folder, and tracking is off"):
        CasePower.of({"from_run": "deadbeef"}, tracking)
    # a run's artifact folder: its effects.csv and scored.parquet are the previous run
    pd.DataFrame(
        {"estimate": [5.0], "se": [1.5], "b": [30], "c": [18], "n_pairs": [240], "cluster_se": [3.5]},
        index=pd.Index(["gap"], name="effect"),
    ).to_csv(tmp_path / "effects.csv")
    power = CasePower.of({"from_run": str(tmp_path)}, tracking)
    assert power.previous is not None and power.previous.get("gap.b") == 30
    table = pd.DataFrame({"pair_key": range(100)})
    plan = power.plan("paired", SimpleNamespace(table=table, roles=_roles("race", "black", "white")))
    assert plan is not None and "20.0% of the pairs discordant" in plan.line()
    # the postings' design effect: the clustered variance over the independent-pairs one, (psi - gap^2) / n
    assert plan.extra["design_effect"] == pytest.approx(0.035**2 / ((0.2 - 0.05**2) / 240))
    assert "design effect in that run: 1.49" in plan.line()


def test_reports_say_what_the_audit_can_and_cannot_detect():
    """The auditor's report and the sweep report put the power line in plain words."""
    from popfair.report.audit import power_blocks
    from popfair.report.sweep import power_blocks as sweep_power_blocks

    table = pd.DataFrame({"pair_key": range(800)})
    plan = plan_power(
        design_named("paired"),
        SimpleNamespace(table=table, roles=_roles("race", "black", "white")),
        PowerSettings(effect=0.03),
    )
    assert plan is not None and plan.mde is not None
    heading, text = power_blocks(SimpleNamespace(power=plan))
    assert heading.content == "What this audit can and cannot detect"
    assert text.content.startswith(
        f"With 800 pairs, this audit detects a paired callback gap (white minus black) of {plan.shown(plan.mde)}"
    )
    assert "is not evidence that no such effect exists" in text.content and f"{plan.n_needed:,} pairs" in text.content
    assert power_blocks(SimpleNamespace(power=None)) == []
    runs = pd.DataFrame(
        {"case_name": ["a", "b"], "run_id": ["r1", "r2"], "units": ["pairs", None], "detects": [plan.tags()["plan.detects"], None],
         "metrics": [plan.metrics(), {}]}
    )  # fmt: skip
    written: dict[str, pd.DataFrame] = {}
    blocks = sweep_power_blocks(runs, lambda name, frame: written.__setitem__(name, frame))
    assert blocks[0].content == "What the audits can and cannot detect"
    assert written["power.csv"].to_dict("records")[0] | {"run_id": "r1"} == {
        "case_name": "a", "n": 800.0, "units": "pairs", "detects": plan.shown(plan.mde), "power": 0.8, "alpha": 0.05,
        "n_needed_for_plan_effect": float(plan.n_needed), "run_id": "r1",
    }  # fmt: skip


def test_a_population_with_an_empty_group_plans_no_detectable_effect_instead_of_failing():
    import pandas as pd

    from popfair.core.types import Profiles, Roles
    from popfair.design.population.planning import population_power
    from popfair.estimate.power import PowerSettings

    roles = Roles(x="gender", x0="female", x1="male", z=(), b=(), r=())
    profiles = Profiles(table=pd.DataFrame({"gender": ["female"] * 12}), roles=roles, jobs={})
    plan = population_power(profiles, PowerSettings(effect=2.0), None)
    assert plan.mde is None and plan.n_needed is None
    assert "detects no effect" in plan.line() and "fewer than 2 male or female applicants" in plan.line()
