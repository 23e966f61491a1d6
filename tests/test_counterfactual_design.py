"""estimator=counterfactual, the population audit's default: the five effects against the simulated
screener's truth, the combined estimator against the full world mean, the worlds against the factual
profiles, the plan's prices and a nested world budget paid once (real openai SDK, local stub)."""

from __future__ import annotations

import dataclasses

import mlflow
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from popfair.case.population import PopulationCase
from popfair.core.types import WORLD, WorldRequest
from popfair.estimate.pse.design.design_based import combine
from popfair.estimate.pse.design.interventional import expected_effects
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS
from popfair.population.worlds import MIN_PER_GROUP, draw_worlds, sample_applicants
from popfair.track.headline import logged_metrics
from tests.conftest import compose_config

FAST_DML = [
    "estimator.n_bootstrap=200",
    "estimator.grid={n_estimators:[20,50,100],max_depth:[2,3],reg_lambda:[1.0]}",
]


@pytest.fixture(scope="module")
def simulated_default(tmp_path_factory):
    """The default estimator on 4,000 nurses x gender with the simulated screener, tracked to MLflow."""
    tmp = tmp_path_factory.mktemp("counterfactual")
    overrides = ["screener=simulated", "population.n=4000", "population.diagnostics=false", *FAST_DML]
    experiment = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp))
    assert experiment.estimator.name == "counterfactual"  # the default of population cases
    result = experiment.run()
    everyone = dataclasses.replace(experiment.estimator.counterfactuals, n=None, fraction=None)
    worlds = draw_worlds(experiment.population, result.profiles, everyone)
    truth = expected_effects(worlds, experiment.screener.expected(worlds, result.profiles.outcome))
    return experiment, result, truth, tmp


def test_five_effects_with_cis_that_cover_the_truth(simulated_default):
    _, result, truth, _ = simulated_default
    table = result.effects.table
    assert list(table.index) == list(EFFECTS)
    assert table[["estimate", "se", "ci_low", "ci_high"]].notna().all().all()  # nothing "not identified"
    assert "identified" not in table  # the design's own effects are never gated
    # one replication: a 99.9% interval from the reported SE (the 95% rate is the coverage study's,
    # benchmarks/coverage_counterfactual.py)
    z = stats.norm.ppf(1 - 0.001 / 2)
    for effect in EFFECTS:
        est, se = table.loc[effect, "estimate"], table.loc[effect, "se"]
        assert est - z * se - 1e-3 <= truth[effect] <= est + z * se + 1e-3, (effect, est, se, truth[effect])
    assert table.loc["NDE", "estimate"] == pytest.approx(2.0, abs=0.05)  # the screener's direct +2
    # every factual answer used: never wider than the world sample alone
    assert (table["se"] <= table["se_sample"] * 1.02 + 1e-9).all()
    assert result.effects.labels  # pattern labels from the design's effects


def test_dml_is_beside_it_with_difference_and_agreement(simulated_default):
    _, result, _, _ = simulated_default
    table = result.effects.table
    for column in ("dml_estimate", "dml_identified", "difference", "difference_se", "agree"):
        assert column in table
    # gender: DML identifies TE only (the paper's estimator cannot identify the rest for nurses)
    assert bool(table.loc["TE", "dml_identified"])
    assert table.loc["TE", "agree"] in (True, False)
    hidden = ~table["dml_identified"].astype(bool)
    assert table.loc[hidden, "agree"].isna().all() and table.loc[hidden, "difference"].isna().all()
    notes = "\n".join(result.effects.notes)
    assert "DML-UCA on the factual data" in notes and "counterfactual design" in notes.lower()


def test_mlflow_holds_the_designs_effects_and_its_plan(simulated_default):
    _, result, _, tmp = simulated_default
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    run = mlflow.get_run(result.run_id)
    metrics, table = logged_metrics(mlflow.MlflowClient(), run), result.effects.table  # headline + tables
    for effect in EFFECTS:
        assert metrics[f"{effect}.estimate"] == pytest.approx(table.loc[effect, "estimate"])
        assert metrics[f"{effect}.se"] == pytest.approx(table.loc[effect, "se"])
    assert metrics["TE.dml_estimate"] == pytest.approx(table.loc["TE", "dml_estimate"])
    assert run.data.tags["estimator"] == "counterfactual"
    plan = {k: v for k, v in metrics.items() if k.startswith("plan.")}
    assert {f"plan.mde.{e}" for e in EFFECTS} <= set(plan), sorted(plan)
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id)}
    assert {"counterfactual_forest.png", "counterfactual_means.csv", "counterfactual_sample_only.csv"} <= names


def test_combined_estimate_with_everyone_sampled_is_the_full_world_mean():
    """With the sample = every applicant, the difference estimator is the plain mean of each world
    (the working model cancels exactly): the combined effects equal the full design's, known
    exactly for these worlds (inference="worlds": SE 0)."""
    table, outcomes, roles = _finite_population(400)
    combined = combine(table, outcomes, roles, "y", seed=1, inference="worlds")
    expected_effects = CONTRASTS @ outcomes[list(TARGETS)].mean().to_numpy()
    for effect, expected in zip(EFFECTS, expected_effects):
        assert combined.table.loc[effect, "estimate"] == pytest.approx(expected, abs=1e-9)
    assert (combined.table["se"] == 0).all()


def _finite_population(n: int = 600, seed: int = 0):
    """A fixed population of n applicants with every world's answer known (the full design)."""
    from popfair.core.types import Roles

    rng = np.random.default_rng(seed)
    x = np.where(rng.random(n) < 0.3, "m", "f")
    table = pd.DataFrame({"applicant_id": np.arange(n), "g": x, "z": rng.normal(size=n), "b": rng.normal(size=n)})
    base = 50 + 3 * table["z"] + 2 * table["b"] + rng.normal(0, 5, n)
    table["y"] = base + np.where(x == "m", 4.0, 0.0)
    worlds = list(TARGETS)
    own = {worlds[0]: "f", worlds[1]: "m"}
    shift = dict(zip(worlds, (0.0, 4.0, 2.0, 3.0, 1.0)))
    outcomes = pd.DataFrame(
        {w: np.where(x == own.get(w, ""), table["y"], base + shift[w] + rng.normal(0, 3, n)) for w in worlds},
        index=table["applicant_id"],
    )
    return table, outcomes, Roles(x="g", x0="f", x1="m", z=("z",), b=("b",), r=())


def test_finite_inference_matches_the_sampling_distribution_over_the_applicants_drawn():
    """One fixed population, 150 simple random samples of a quarter of it: the finite-population SE
    is the spread of the estimate around the full design's effects; the superpopulation SE is wider
    by the between-applicant spread."""
    table, outcomes, roles = _finite_population()
    truth = CONTRASTS @ outcomes[list(TARGETS)].mean().to_numpy()
    rng = np.random.default_rng(7)
    errors, ses, wider = [], [], []
    for rep in range(150):
        chosen = rng.choice(len(table), size=len(table) // 4, replace=False)
        sample = outcomes.iloc[np.sort(chosen)]
        finite = combine(table, sample, roles, "y", seed=rep, inference="worlds")
        errors.append(finite.table["estimate"].to_numpy() - truth)
        ses.append(finite.table["se"].to_numpy())
        wider.append(combine(table, sample, roles, "y", seed=rep, inference="superpopulation").table["se"].to_numpy())
    errors, ses, wider = np.array(errors), np.array(ses), np.array(wider)
    spread = errors.std(axis=0)
    np.testing.assert_allclose(ses.mean(axis=0), spread, rtol=0.15)  # SE = the estimate's real spread (within 5%)
    assert (np.abs(errors.mean(axis=0)) < 3 * spread / np.sqrt(150)).all()  # unbiased
    covered = (np.abs(errors) <= 1.97 * ses).mean()
    assert 0.92 <= covered <= 0.98
    assert (wider > ses).all()  # the population model adds the applicants' spread


def test_the_budget_predicts_the_se_of_another_world_budget():
    """W_e logged at one n (counterfactual.var_world) predicts the finite-population SE at another
    (SE^2 = W (1/n - 1/N)); with every applicant sampled the MDE is 0, and n_needed never asks for
    more than the population."""
    from popfair.estimate.power import PowerSettings
    from popfair.estimate.pse.design import budget

    table, outcomes, roles = _finite_population()
    big_n, rng = len(table), np.random.default_rng(3)

    def run(n: int, seed: int):
        chosen = outcomes.iloc[np.sort(rng.choice(big_n, size=n, replace=False))]
        return combine(table, chosen, roles, "y", seed=seed, inference="worlds")

    pilot = [run(100, seed) for seed in range(8)]
    world = {e: np.mean([p.world_variance[e] for p in pilot]) for e in EFFECTS}
    later = [run(400, seed) for seed in range(8)]
    for e in EFFECTS:
        predicted = np.sqrt(budget.variance(400, big_n, world[e], 0.0, inference="worlds"))
        assert np.mean([r.table.loc[e, "se"] for r in later]) == pytest.approx(predicted, rel=0.2), e
    settings = PowerSettings()
    assert budget.mde(big_n, big_n, world["TE"], 0.0, settings, "worlds") == 0.0
    assert budget.n_needed(1e-6, big_n, world["TE"], 0.0, settings, "worlds") == big_n
    wanted = budget.n_needed(1.0, big_n, world["TE"], 0.0, settings, "worlds")
    assert (
        budget.mde(wanted, big_n, world["TE"], 0.0, settings, "worlds")
        <= 1.0
        < budget.mde(wanted - 1, big_n, world["TE"], 0.0, settings, "worlds")
    )
    # averaged over the worlds' redraws, the redraw noise R / N is a floor no n removes
    redraw = world["TE"] / 4
    floor = budget.mde(big_n, big_n, world["TE"], 0.0, settings, "applicants", redraw)
    assert floor == pytest.approx(budget._z(settings) * np.sqrt(redraw / big_n))
    assert budget.n_needed(floor * 0.99, big_n, world["TE"], 0.0, settings, "applicants", redraw) is None
    wanted = budget.n_needed(floor * 1.5, big_n, world["TE"], 0.0, settings, "applicants", redraw)
    assert budget.mde(wanted, big_n, world["TE"], 0.0, settings, "applicants", redraw) <= floor * 1.5


@pytest.mark.parametrize("attribute", ["gender", "race"])
def test_world_profiles_match_each_groups_factual_profiles(attribute):
    """Each group's own world (x, x, x) drawn for the other group's applicants reproduces the group's
    factual qualifications B and proxies R (names, region, state) given the confounders Z: the other
    group's worlds, standardised to the group's Z cells (race or gender x age quartile), against its
    factual rows. Region and state hold because the conditionals are fitted on the population the
    factual rows are (every record once here): PUMS-weighted ones put the worlds' Black nurses in
    CA/TX at 14% where the factual rows have 22% (region TV 0.07, state 0.12)."""
    experiment = PopulationCase.from_config(
        compose_config(
            ["screener=simulated", "population.diagnostics=false", "tracking=none", f"protected_attr={attribute}"]
        )
    )
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, 0)
    roles, table = profiles.roles, profiles.table
    request = WorldRequest(worlds={"x1": (1, 1, 1), "x0": (0, 0, 0)}, n=None, seed=0)
    worlds = draw_worlds(experiment.population, profiles, request)
    quartiles = np.quantile(table["age"], [0.25, 0.5, 0.75])

    def cells(frame: pd.DataFrame) -> pd.Series:
        other = [c for c in roles.z if c != "age"]
        return (
            frame[other].astype(str).agg("/".join, axis=1)
            + "/"
            + pd.Series(np.digitize(frame["age"], quartiles), index=frame.index).astype(str)
        )

    names = [c for c in roles.r if c.startswith(("name_", "surname_"))]
    for world, group, other in (("x1", roles.x1, roles.x0), ("x0", roles.x0, roles.x1)):
        factual = table[table[roles.x] == group]
        drawn = worlds[
            (worlds[WORLD] == world) & worlds["applicant_id"].isin(table.loc[table[roles.x] == other, "applicant_id"])
        ]
        assert (drawn[roles.x] == group).all()
        share_factual, share_drawn = (
            cells(factual).value_counts(normalize=True),
            cells(drawn).value_counts(normalize=True),
        )
        weight = cells(drawn).map(share_factual / share_drawn).fillna(0.0)
        for column in [*roles.b, *names, "region", "state"]:
            if pd.api.types.is_numeric_dtype(table[column]):
                difference = np.average(drawn[column], weights=weight) - factual[column].mean()
                assert abs(difference) < 3 * factual[column].std() / np.sqrt(len(factual)), (world, column, difference)
                continue
            p_factual = factual[column].value_counts(normalize=True)
            p_drawn = weight.groupby(drawn[column]).sum() / weight.sum()
            levels = p_factual.index.union(p_drawn.index)
            distance = (
                0.5 * (p_factual.reindex(levels, fill_value=0) - p_drawn.reindex(levels, fill_value=0)).abs().sum()
            )
            # measured 0.003-0.017 (nurse, seed 0); state 0.012-0.043 over 51 levels, as close as the
            # drawn side's sampling noise allows (1,418 Black or 2,347 male applicants drawn)
            assert distance < (0.06 if column == "state" else 0.03), (world, column, distance)


def test_world_budget_is_nested():
    base = ["population.n=2000", "population.diagnostics=false", "tracking=none"]
    small = PopulationCase.from_config(compose_config([*base, "estimator.n=100"]))
    large = PopulationCase.from_config(compose_config([*base, "estimator.n=200"]))
    auto = PopulationCase.from_config(compose_config(base))
    profiles = small.population.sample(small.occupation, small.protected, small.seed)
    ids = {
        name: set(sample_applicants(profiles, e.world_request(profiles)).table["applicant_id"])
        for name, e in (("small", small), ("large", large), ("auto", auto))
    }
    assert len(ids["small"]) == 100 and len(ids["large"]) == 200 and ids["small"] < ids["large"]
    # the fraction 0.1 of the x0/x1 applicants, plus what brings a group up to MIN_PER_GROUP
    table = profiles.table.set_index("applicant_id")[profiles.roles.x]
    floor = {level: min(MIN_PER_GROUP, int(size)) for level, size in table.value_counts().items()}
    drawn = table.loc[sorted(ids["auto"])].value_counts()
    assert all(drawn.get(level, 0) >= need for level, need in floor.items()), (drawn, floor)
    n = round(0.1 * len(profiles.table))
    assert n <= len(ids["auto"]) <= n + sum(floor.values())


def test_a_small_group_gets_enough_worlds_to_estimate_within_it(tmp_path):
    """Race on 300 nurses: 10% of the applicants holds two or three Black applicants; each group keeps
    at least MIN_PER_GROUP (here all 27 of the smaller one), and the case reports five effects."""
    overrides = ["protected_attr=race", "population.n=300", "population.diagnostics=false", "tracking=none"]
    case = PopulationCase.from_config(compose_config([*overrides, f"cache_dir={tmp_path}/cache"]))
    profiles = case.population.sample(case.occupation, case.protected, case.seed)
    drawn = sample_applicants(profiles, case.world_request(profiles)).table[profiles.roles.x].value_counts()
    eligible = profiles.table[profiles.roles.x].value_counts()
    for level in (profiles.roles.x0, profiles.roles.x1):
        assert drawn[level] >= min(MIN_PER_GROUP, eligible[level]), (level, drawn, eligible)
    effects = case.run().effects.table
    assert set(EFFECTS) <= set(effects.index) and effects.loc[list(EFFECTS), "ci_low"].notna().all()


def _plan(tmp_path, monkeypatch, *extra: str):
    from popfair.sweep.plan import plan_case

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    common = [
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"cache_dir={tmp_path}/cache",
        "population.n=2000",
        "population.diagnostics=false",
        "tracking=none",
    ]
    return plan_case(PopulationCase.from_config(compose_config([*common, *extra]), dry_run=True))


def test_the_plan_prices_the_default_against_pse_dml(tmp_path, monkeypatch):
    default = _plan(tmp_path, monkeypatch)
    dml = _plan(tmp_path, monkeypatch, "estimator=pse_dml")
    assert dml.calls == 2000 and default.calls <= 1.25 * dml.calls
    assert f"{default.calls - dml.calls:,} calls beyond the factual screening" in default.note
    # pse_dml's plan prices the family's world-drawing member at its own defaults (the registry)
    assert "counterfactual (200 applicants' worlds) at most 800" in dml.note
    assert "TE" in default.power and "RIE" in default.power  # the MDE of each effect at the world budget
    assert "second set of worlds for 60 of the sampled applicants" in default.power  # the redraw subsample, priced
    wanted = _plan(tmp_path, monkeypatch, "plan.effect=3.0")
    assert "needs" in wanted.power and "plan.effect's budget of" in wanted.note  # the budget, priced


def test_a_bigger_world_budget_pays_only_for_the_new_worlds(tmp_path, monkeypatch):
    """Real openai SDK against the local stub: n=40 then n=80 on one cache; the second run asks
    exactly the documents its plan counted as not yet answered, each once."""
    from popfair.sweep.plan import plan_case
    from tests.llm_stub import StubServer
    from tests.screen_helpers import make_screener

    base = [
        "population.n=400",
        "population.diagnostics=false",
        "outcome_audit=null",
        "tracking=none",
        "estimator.compare=false",
    ]
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)
        first = dataclasses.replace(
            PopulationCase.from_config(compose_config([*base, "estimator.n=40"])), screener=screener
        )
        first.run()
        paid_first = sum(stub.state.answered.values())
        second = dataclasses.replace(
            PopulationCase.from_config(compose_config([*base, "estimator.n=80"])), screener=screener
        )
        planned = plan_case(second)
        result = second.run()
        paid_second = sum(stub.state.answered.values()) - paid_first
        assert sum(stub.state.answered.values()) == len(stub.state.answered)  # no prompt paid twice
        # the plan's calls are those its cache cannot answer; the first run's answers are cached
        assert 0 < paid_second == planned.calls and planned.cached_calls > paid_first - paid_second
        assert paid_second <= 4 * 40  # at most the new applicants' four new worlds
    assert result.effects.table[["estimate", "se"]].notna().all().all()


def test_the_auditors_report_shows_the_design_beside_dml(simulated_default):
    from popfair.report.audit import effects_blocks

    _, result, _, _ = simulated_default
    blocks = effects_blocks(result.effects, "Effect of gender (counterfactual)")
    tables = [b.content for b in blocks if b.kind == "table"]
    main, beside = tables[0], tables[1]
    assert list(main["effect"]) == list(EFFECTS) and main["estimate"].notna().all()
    assert list(beside.columns) == ["effect", "counterfactual design", "DML-UCA", "difference", "agree"]
    identified = result.effects.table["dml_identified"].astype(bool).to_numpy()
    assert (beside.loc[~identified, "DML-UCA"] == "not identified").all()
    assert beside.loc[identified, "agree"].isin(["yes", "NO"]).all()


def test_the_working_model_fit_beside_dml_gives_the_same_effects_and_its_warnings(simulated_default, monkeypatch):
    """The design's working model is fit in a forked process while DML-UCA runs in this one: the
    effects are those of fitting it here, and a warning it raises reaches the caller."""
    import warnings

    from popfair.core.types import FACTUAL
    from popfair.estimate.pse.design import counterfactual

    experiment, result, _, _ = simulated_default
    ok = result.scored[result.scored["error"].isna()]
    data = pd.concat([ok.assign(**{WORLD: FACTUAL}), result.scored_worlds], ignore_index=True)

    def warning_combine(*args, **kwargs):
        warnings.warn("from the working model", UserWarning, stacklevel=1)
        return combine(*args, **kwargs)

    monkeypatch.setattr(counterfactual, "combine", warning_combine)
    with pytest.warns(UserWarning, match="from the working model"):
        forked = experiment.estimator.estimate(data, result.profiles.roles, "y").table
    monkeypatch.setattr(counterfactual, "forked_call", lambda fn, *args: lambda: fn(*args))
    with pytest.warns(UserWarning, match="from the working model"):
        here = experiment.estimator.estimate(data, result.profiles.roles, "y").table
    pd.testing.assert_frame_equal(forked, here, check_exact=True)


def test_a_case_killed_mid_worlds_reruns_paying_only_what_was_not_answered(tmp_path):
    """`python -m popfair` of the default estimator against the stub (openai SDK), killed with SIGKILL
    while world requests are in flight; the rerun asks only the prompts never answered (those in
    flight included), each once, and prints the five effects."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from popfair.store.responses import open_cache
    from tests.conftest import ROOT
    from tests.llm_stub import StubServer

    def cached_rows(location: str) -> int:
        with open_cache(location) as cache:
            return cache.count()

    kill_after = 330  # past the 300 factual prompts: the stub holds while the worlds' prompts are in flight
    with StubServer(latency_s=0.005, hold_after=kill_after) as stub:
        command = [
            sys.executable,
            "-m",
            "popfair",
            "screener=gpt4o_mini",
            "screener.route=openai",
            f"screener.base_url={stub.url}/v1",
            "population.n=300",
            "population.diagnostics=false",
            "estimator.n=60",
            "estimator.compare=false",
            "outcome_audit=null",
            "tracking=none",
            f"cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/out",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-kill-0123456789"}
        first = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 240
        # every answer sent is cached and requests are in flight, waiting on the stub
        while stub.state.held == 0 or cached_rows(str(tmp_path / "cache")) < kill_after:
            assert first.poll() is None, first.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "case too slow to reach the stub"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        paid_before = sum(stub.state.answered.values())
        assert paid_before == kill_after
        stub.state.hold_after = None
        stub.state.released.set()  # the dead process's held requests get a 503
        rerun = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        answered = stub.state.answered
        assert set(answered.values()) == {1}  # nothing answered before the kill is asked again
        assert len(answered) > kill_after  # the rest, the held (in-flight) prompts among them, asked once
    for effect in EFFECTS:
        assert f"\n{effect} " in rerun.stdout
    assert "not identified" not in rerun.stdout


def test_dml_is_compared_only_where_the_two_estimate_the_same_quantity():
    """DML-UCA holds R grouped and the worlds redraw the raw names and state: what a screener reads
    from a raw name beyond its grouping is DML's NDE and the design's RIE. Only TE and BIE (and so
    NDE + RIE) are one quantity: those get a difference and a verdict, the others are shown apart."""
    from popfair.estimate.pse.design.side_by_side import beside
    from popfair.estimate.pse.estimand import comparison_notes
    from popfair.report.effects import DIFFERENT_ESTIMAND, beside_rows

    def table(estimates):
        frame = pd.DataFrame({"estimate": estimates, "se": 0.1}, index=pd.Index(EFFECTS, name="effect"))
        return frame.assign(ci_low=frame["estimate"] - 0.2, ci_high=frame["estimate"] + 0.2, identified=True, reason="")

    # a screener reading the raw surname only: the design has it in RIE, DML in NDE; TE and BIE agree
    design = table([1.0, 0.0, 1.0, 0.3, 0.7])
    dml = table([1.05, 0.6, 0.45, 0.3, 0.15])
    out = beside(design.drop(columns=["identified", "reason"]), dml)
    assert out.loc[["TE", "BIE"], "agree"].tolist() == [True, True]
    assert (
        out.loc[["NDE", "NIE", "RIE"], "agree"].isna().all()
        and out.loc[["NDE", "NIE", "RIE"], "difference"].isna().all()
    )
    notes = "\n".join(comparison_notes(out))
    assert "DISAGREE" not in notes and "shown, not compared" in notes and "NDE +0.6" in notes
    assert set(beside_rows(out).set_index("effect").loc[["NDE", "NIE", "RIE"], "agree"]) == {DIFFERENT_ESTIMAND}
    # a real gap in TE is still a finding
    far = beside(design.drop(columns=["identified", "reason"]), table([2.0, 0.6, 1.4, 0.3, 1.1]))
    assert not far.loc["TE", "agree"]
    assert "disagree beyond their 95% CIs on TE (p = " in "\n".join(comparison_notes(far))


def _redrawn_population(n: int = 600, seed: int = 0):
    """A fixed population whose cross worlds are redrawn with noise: world w of applicant i at redraw
    s is mu_i(w) + e_i(w, s) (sd 4), its own world the factual answer. Returns (table, roles, mu, draw)
    with draw(s) the answers of every applicant in every world at redraw s."""
    table, outcomes, roles = _finite_population(n, seed)
    mu = outcomes[list(TARGETS)].to_numpy()
    own = np.zeros_like(mu, dtype=bool)
    own[:, 0] = table["g"].to_numpy() == "f"
    own[:, 1] = table["g"].to_numpy() == "m"

    def draw(s: int) -> pd.DataFrame:
        noise = np.random.default_rng([seed, s]).normal(0, 4.0, mu.shape)
        return pd.DataFrame(np.where(own, mu, mu + noise), columns=list(TARGETS), index=outcomes.index)

    return table, roles, mu, draw


def test_the_default_ci_covers_the_effect_averaged_over_the_worlds_redraws():
    """Applicants fixed, the worlds redrawn per replication (seed s), a second independent set for a
    nested subsample of the sample: the default CIs ("applicants") cover the world-averaged effects at
    a tenth of the applicants and with every applicant sampled (SE > 0 there: the redraw noise does
    not vanish), and their SE is the estimate's spread; "worlds" (these worlds only) at n = N has SE 0
    and misses the world-averaged truth."""
    table, roles, mu, draw = _redrawn_population()
    truth = CONTRASTS @ mu.mean(axis=0)
    rng = np.random.default_rng(11)
    for size in (60, len(table)):
        errors, ses, covered = [], [], []
        for rep in range(120):
            worlds, again = draw(2 * rep), draw(2 * rep + 1)
            chosen = np.sort(rng.choice(len(table), size=size, replace=False))
            redrawn = chosen[: max(30, size // 10)]  # a subsample of the sample
            combined = combine(
                table, worlds.iloc[chosen], roles, "y", seed=rep, redraw=again.iloc[np.sort(redrawn)]
            ).table
            errors.append(combined["estimate"].to_numpy() - truth)
            ses.append(combined["se"].to_numpy())
            covered.append(((combined["ci_low"] <= truth) & (truth <= combined["ci_high"])).to_numpy())
        errors, ses = np.array(errors), np.array(ses)
        assert (ses > 0).all()
        np.testing.assert_allclose(ses.mean(axis=0), errors.std(axis=0), rtol=0.2)
        assert 0.9 <= np.mean(covered) <= 0.99, (size, np.mean(covered, axis=0))
    these = combine(table, draw(0), roles, "y", inference="worlds").table
    assert (these["se"] == 0).all()


def test_only_a_declared_contrast_is_exact():
    """NDE's two worlds answered alike: with the declaration it is 0, exact by design (SE 0); without
    it the sample without spread still gets an SE above 0 (the unseen-share floor), and so does a
    declared contrast whose answers differ."""
    table, roles, _, draw = _redrawn_population(400)
    worlds = draw(0)
    worlds["E[Y_x1,W_x0]"] = worlds["E[Y_x0]"]  # the two NDE worlds show the same document
    sample, again = worlds.iloc[::4], draw(1).iloc[::40].assign(**{"E[Y_x1,W_x0]": lambda d: d["E[Y_x0]"]})
    declared = combine(table, sample, roles, "y", redraw=again, exact={"NDE"})
    assert declared.exact == ("NDE",)
    assert declared.table.loc["NDE", ["estimate", "se"]].tolist() == [0.0, 0.0]
    plain = combine(table, sample, roles, "y", redraw=again)
    assert plain.exact == () and plain.table.loc["NDE", "se"] > 0
    differ = combine(table, draw(0).iloc[::4], roles, "y", redraw=draw(1).iloc[::40], exact={"NDE"})
    assert differ.exact == () and differ.table.loc["NDE", "se"] > 0


def test_the_world_sample_follows_the_seed_with_population_n():
    """With population.n (weighted draws) another estimator.seed samples other applicants, and a
    larger n keeps every applicant a smaller one kept; the redraw subsample is nested in the sample."""
    from popfair.population.worlds import redraw_applicants

    case = PopulationCase.from_config(
        compose_config(["screener=simulated", "population.n=1500", "population.diagnostics=false"])
    )
    profiles = case.population.sample(case.occupation, case.protected, 0)
    drawn = {}
    for seed, n in ((0, 200), (0, 400), (1, 200)):
        request = WorldRequest(worlds=TARGETS, n=n, seed=seed, redraw=30)
        sampled = sample_applicants(profiles, request)
        again = set(redraw_applicants(sampled, request).table["applicant_id"])
        drawn[seed, n] = set(sampled.table["applicant_id"])
        assert again <= drawn[seed, n] and len(again) >= 30
    assert drawn[0, 200] <= drawn[0, 400]
    assert len(drawn[0, 200] & drawn[1, 200]) < 100  # another seed, another sample
    first = set(profiles.table["applicant_id"].iloc[:200])
    assert drawn[0, 200] != first


def test_the_case_declares_nde_exact_only_for_a_screener_that_cannot_see_x(tmp_path):
    """Every applicant sampled (estimator.n=all): a simulated screener that does not read gender on
    text resumes gets NDE 0, exact by design (SE 0, said in the note and logged); TE, BIE and RIE
    still have SEs above 0 (the worlds' redraw noise). The default simulated screener reads gender
    from the profile: its NDE is estimated, never exact."""
    common = ["screener=simulated", "population.n=400", "population.diagnostics=false", "estimator.compare=false"]
    blind = PopulationCase.from_config(
        compose_config([*common, "estimator.n=all", "screener.coefficients.gender=null"], tmp_path=tmp_path / "blind")
    ).run()
    table = blind.effects.table
    assert table.loc["NDE", ["estimate", "se"]].tolist() == [0.0, 0.0]
    assert (table.loc[["TE", "BIE", "RIE"], "se"] > 0).all()
    assert blind.effects.metrics["counterfactual.exact.NDE"] == 1.0
    assert any("NDE is 0, exact by design" in note for note in blind.effects.notes)
    assert blind.effects.metrics["counterfactual.n_redraw.female"] >= 30
    reads = PopulationCase.from_config(compose_config(common, tmp_path=tmp_path / "reads")).run()
    assert reads.effects.metrics["counterfactual.exact.NDE"] == 0.0
    assert reads.effects.table.loc["NDE", "se"] > 0
