"""Sequential audits through the real case path (config `sequential`): a paired race audit against
the local stub of a biased chat model screens in looks of 10 postings, stops once the anytime-valid
CI excludes 0, and pays for each posting once, counted as distinct prompts at the stub; an audit
stopped by its budget resumes and extends from the response cache; the run records the looks,
the n used, the spend saved and both intervals, labelled."""

from __future__ import annotations

import dataclasses
import re

import mlflow
import pandas as pd
import pytest
from scipy import stats

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.design import design_named
from popfair.design.paired.population import load_name_pools
from popfair.design.sequential import SequentialSettings, check_sequential
from popfair.estimate.sequential.sequences import GroupRates
from popfair.population.popresume import PopResumePopulation
from popfair.sweep.plan import plan_case
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import make_screener

PROMPTS_PER_POSTING = 8  # 4 pairs x 2 members
LOOKS = ["sequential.looks=null", "sequential.batch=10"]


def _biased_model():
    """P(yes) 0.75 for a profile with a White-coded first name, 0.35 otherwise (a 40 pp gap)."""
    first, _ = load_name_pools(["bertrand_mullainathan_2004", "kline_rose_walters_2022"])
    white = {n for key, names in first.items() if key.startswith("white|") for n in names}
    black = {n for key, names in first.items() if key.startswith("black|") for n in names}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(white - black))) + r")\b")
    return lambda user: 0.75 if pattern.search(user) else 0.35


def test_a_sequential_paired_audit_stops_early_and_a_resume_extends_it(tmp_path, monkeypatch):
    def case(n: int, *extra: str, tracked: bool = False) -> PopulationCase:
        overrides = ["experiment=paired_race", f"occupation.n_postings={n}", "sequential.rule=excludes_zero", *LOOKS]
        overrides += ["outcome_audit=null", "estimator.n_bootstrap=200"]
        overrides += [] if tracked else ["tracking=none"]
        experiment = PopulationCase.from_config(compose_config([*overrides, *extra], tmp_path=tmp_path))
        return dataclasses.replace(experiment, screener=screener)

    with StubServer(yes_share=_biased_model()) as stub:
        screener = make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)
        short = case(10).run()  # a budget of 10 postings: one look, not settled
        rec = short.sequential
        assert rec.stopped_by == "the planned n is spent (occupation.n_postings)" and not rec.final.excludes(0.0)
        assert len(stub.state.answered) == 10 * PROMPTS_PER_POSTING

        grown = case(300, tracked=True).run()  # more budget: continues from the cache, stops by the rule
        rec = grown.sequential
        assert rec.stopped_by == "the anytime-valid CI excludes 0 (no effect)" and rec.final.low > 0
        assert 10 < rec.n_used < 300 and len(rec.looks) == rec.n_used // 10
        assert len(stub.state.answered) == rec.n_used * PROMPTS_PER_POSTING  # the first 10 not paid again
        assert sum(stub.state.answered.values()) == len(stub.state.answered)  # nothing asked twice
        assert rec.prompts_used == rec.n_used * PROMPTS_PER_POSTING
        assert rec.prompts_planned == 300 * PROMPTS_PER_POSTING and rec.saved_share > 0.5
        assert grown.effects.table.loc["gap", "n_clusters"] == rec.n_used  # the fixed-n analysis of the n used
        gap = grown.effects.table.loc["gap"]  # the fixed-n interval is the paired gap's cluster-robust t
        half = stats.t.ppf(0.975, rec.n_used - 1) * gap["cluster_se"]
        assert 100 * rec.fixed.estimate == pytest.approx(gap["estimate"])
        assert 100 * (rec.fixed.high - rec.fixed.estimate) == pytest.approx(half)
        assert rec.fixed.low > rec.final.low and rec.fixed.high < rec.final.high  # the anytime CI is wider
        words = "\n".join(rec.sentences())
        assert f"{rec.n_used} of 300 planned" in words and "not needed" in words
        assert "anytime-valid 95% CI (valid at every look" in words and "fixed-n 95% CI at the n used" in words

        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        run = mlflow.get_run(grown.run_id)
        assert run.data.metrics["sequential.n_used"] == rec.n_used
        assert run.data.metrics["sequential.saved_share"] == pytest.approx(rec.saved_share)
        assert run.data.metrics["sequential.anytime_low"] == pytest.approx(100 * rec.final.low)
        assert run.data.tags["sequential.stopped_by"] == rec.stopped_by
        looks = mlflow.artifacts.load_text(f"{run.info.artifact_uri}/sequential/looks.csv")
        assert looks.count("\n") == len(rec.looks) + 1

        answered = len(stub.state.answered)
        again = case(300).run()  # the same command again: a free replay, same stop
        assert len(stub.state.answered) == answered and again.sequential.n_used == rec.n_used


def test_sequential_settings_fail_before_any_work():
    def settings(**values):
        return SequentialSettings.from_config({"rule": "excludes_zero", **values})

    with pytest.raises(ConfigError, match="sequential.rule: 'sometimes' is not a rule"):
        settings(rule="sometimes")
    with pytest.raises(ConfigError, match="set exactly one"):
        settings(batch=5)
    with pytest.raises(ConfigError, match="sequential.margin"):
        settings(margin=2)
    with pytest.raises(ConfigError, match="sequential.colour: no such setting"):
        settings(colour="red")
    assert SequentialSettings.from_config({"rule": False}).rule == "off"  # YAML's bare `off`
    with pytest.raises(ConfigError, match="sequential.target: 'top1' does not apply to the paired design"):
        PopulationCase.from_config(
            compose_config(
                ["experiment=paired_race", "tracking=none", "sequential.rule=budget", "sequential.target=top1"]
            )
        )
    population = PopResumePopulation.__new__(PopResumePopulation)
    population.n = None
    with pytest.raises(ConfigError, match="set population.n"):
        check_sequential(design_named("population"), settings(), population)
    population.n = 100
    with pytest.raises(ConfigError, match="sequential.threshold"):
        check_sequential(design_named("population"), settings(target="impact_ratio"), population)
    check_sequential(design_named("population"), settings(target="impact_ratio", threshold=70), population)
    with pytest.raises(ConfigError, match="the table design has no sequential audit"):
        check_sequential(design_named("table"), settings(), population)


def _independent_group_cs(frame: pd.DataFrame, groups: list[str], bounds=(0.0, 1.0)) -> GroupRates:
    """The unit x group values fed by hand, in unit order, into the estimate layer's GroupRates."""
    rates = GroupRates(groups, bounds=bounds)
    frame = frame.sort_values(["unit", "group"], kind="stable")
    rates.update(frame["value"].to_numpy(), frame["group"].to_numpy(dtype=object))
    return rates


def test_a_ranking_audit_looks_at_top1_rates_in_blocks_of_the_latin_square():
    overrides = [
        "experiment=ranking_race_gender",
        "population.n_trials=96",
        "tracking=none",
        "estimator.n_bootstrap=200",
    ]
    overrides += ["sequential.rule=budget", "sequential.looks=3"]
    result = PopulationCase.from_config(compose_config(overrides)).run()
    rec = result.sequential
    assert rec.stream.what == "blocks of 8 trials" and rec.planned_looks == [4, 8, 12]
    assert [look.n_units for look in rec.looks] == [4, 8, 12] and rec.stopped_by.startswith("the planned n is spent")
    scored = result.scored
    trial_index = scored["trial_id"].str.rsplit("-", n=1).str[1].astype(int)
    by_block = pd.DataFrame({"unit": trial_index // 8, "group": scored["group"], "value": scored["y"]})
    by_block = by_block.groupby(["unit", "group"], as_index=False)["value"].mean()
    groups = sorted(scored["group"].unique())
    group, lowest = _independent_group_cs(by_block, groups).lowest_impact_ratio()
    assert rec.final.low == pytest.approx(lowest.low) and rec.final.high == pytest.approx(lowest.high)
    assert rec.looks[-1].group == group and rec.target.name == "top1"
    top1 = scored.groupby("group")["y"].mean()
    assert rec.fixed.estimate == pytest.approx(top1.min() / top1.max())  # the fixed-n point estimate
    assert rec.fixed.method == "fixed-n bootstrap" and rec.fixed.low <= rec.fixed.estimate <= rec.fixed.high


def test_a_population_audit_looks_at_the_score_gap_and_at_impact_ratios_of_a_threshold():
    base = ["population.n=240", "population.diagnostics=false", "estimator=outcome_gap", "outcome_audit=null"]
    base += ["tracking=none", "sequential.rule=budget", "sequential.looks=2"]
    gap = PopulationCase.from_config(compose_config(base)).run()
    rec, scored = gap.sequential, gap.scored
    assert rec.stream.what == "applicants" and [look.n_units for look in rec.looks] == [120, 240]
    frame = pd.DataFrame({"unit": range(len(scored)), "group": scored["gender"], "value": scored["y"]})
    direct = _independent_group_cs(frame, ["male", "female"], bounds=(0.0, 100.0)).difference("male", "female")
    assert rec.final.low == pytest.approx(direct.low) and rec.final.high == pytest.approx(direct.high)
    assert rec.final.estimate == pytest.approx(gap.effects.table["estimate"].iloc[0])  # = the outcome gap
    assert "mean score gap male - female (points)" in rec.target.label

    ratios = PopulationCase.from_config(
        compose_config([*base, "sequential.target=impact_ratio", "sequential.threshold=3.3"])
    ).run()
    rec, scored = ratios.sequential, ratios.scored
    frame = pd.DataFrame({"unit": range(len(scored)), "group": scored["gender"], "value": (scored["y"] >= 3.3) * 1.0})
    assert 0.2 < frame["value"].mean() < 0.8  # the tfidf matcher's scores straddle the threshold
    _, lowest = _independent_group_cs(frame, ["female", "male"]).lowest_impact_ratio()
    assert rec.final.low == pytest.approx(lowest.low) and rec.final.high == pytest.approx(lowest.high)
    assert 0 < rec.final.low <= rec.fixed.estimate <= rec.final.high <= 1


def test_a_paired_audit_can_target_the_impact_ratio_of_callback_rates():
    overrides = ["experiment=paired_race", "screener=simulated_paired", "occupation.n_postings=40", "tracking=none"]
    overrides += ["outcome_audit=null", "sequential.rule=equivalence", "sequential.target=impact_ratio"]
    overrides += ["sequential.margin=0.5", "sequential.batch=20", "sequential.looks=null", "audit_report=true"]
    experiment = PopulationCase.from_config(compose_config(overrides))
    assert "sequential (equivalence, a look every 20 units): this plan is the budget" in plan_case(experiment).line()
    result = experiment.run()
    rec, scored = result.sequential, result.scored
    unit = scored["posting_id"].str[1:].astype(int)
    frame = pd.DataFrame({"unit": unit, "group": scored["race"], "value": scored["y"]})
    frame = frame.groupby(["unit", "group"], as_index=False)["value"].mean()
    used = frame[frame["unit"] < rec.n_used]
    _, lowest = _independent_group_cs(used, ["white", "black"]).lowest_impact_ratio()
    assert rec.final.low == pytest.approx(lowest.low) and rec.final.high == pytest.approx(lowest.high)
    if rec.n_used < 40:  # stopped by the rule: every ratio above 1 - margin
        assert rec.final.low >= 0.5 and "equivalence margin" in rec.stopped_by
    report = result.report["report.md"]
    assert "Sequential audit: looks and stopping" in report and "anytime-valid 95% CI" in report
    assert "fixed-n 95% CI at the n used" in report and "decision (anytime-valid)" in report


def test_a_table_audit_refuses_a_stopping_rule():
    from popfair.case.table import TableCase

    table = ["table.path=docs/data/sample_decisions.csv", "table.columns.outcome=advanced"]
    table += ["table.columns.sex=gender", "table.columns.race=ethnicity"]
    cfg = compose_config(["experiment=table_audit", *table, "sequential.rule=budget"])
    with pytest.raises(ConfigError, match="sequential.rule: a table audit reads decisions that exist"):
        TableCase.from_config(cfg)


def test_the_sweep_report_says_how_each_sequential_case_stopped():
    from popfair.report.sweep import sequential_blocks

    metrics = {"sequential.looks": 4.0, "sequential.looks_planned": 10.0, "sequential.n_used": 120.0}
    metrics |= {"sequential.n_planned": 300.0, "sequential.saved_share": 0.6, "sequential.anytime_low": 1.5}
    metrics |= {"sequential.anytime_high": 9.25, "sequential.fixed_n_low": 3.0, "sequential.fixed_n_high": 7.5}
    runs = pd.DataFrame(
        [
            {
                "status": "FINISHED",
                "case_name": "seq",
                "metrics": metrics,
                "stopped_by": "the anytime-valid CI excludes 0",
            },
            {"status": "FINISHED", "case_name": "fixed", "metrics": {"gap.estimate": 1.0}, "stopped_by": None},
        ]
    )
    blocks = sequential_blocks(runs)
    table = blocks[-1].content
    assert list(table["case"]) == ["seq"]  # fixed-n cases are not listed
    row = table.iloc[0]
    assert row["looks"] == "4 of 10" and row["n used"] == "120 of 300" and row["answers not needed"] == "60%"
    assert row["anytime-valid CI"] == "[1.5, 9.25]" and row["fixed-n CI (n used)"] == "[3, 7.5]"
    assert sequential_blocks(runs.iloc[1:]) == []
