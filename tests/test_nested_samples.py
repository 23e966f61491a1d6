"""Nested samples: for one seed, a sample of n is the first n of any larger sample (postings, pairs,
applicants, world applicants, ranking trials), so growing an audit against an API screener pays
only for the new units (distinct prompts counted at the local stub) and its dry run shows the
answers it reuses; a smaller rerun is free; another seed draws afresh."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from popfair.case.population import PopulationCase
from popfair.sweep.plan import plan_case
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import make_screener

COMMON = ["tracking=none", "outcome_audit=null"]
# (design, config of the small and large case, new units, prompts per unit)
GROWTH = {
    "paired": (["experiment=paired_race"], "occupation.n_postings", 20, 100, 8),  # 4 pairs x 2 members
    "population": (["population.diagnostics=false", "estimator=pse_dml"], "population.n", 100, 300, 1),
    "ranking": (["experiment=ranking_race_gender"], "population.n_trials", 50, 200, 1),
}


def _sample(overrides: list[str]) -> pd.DataFrame:
    experiment = PopulationCase.from_config(compose_config([*COMMON, *overrides]))
    return experiment.sample().table.reset_index(drop=True)


@pytest.mark.parametrize("design", sorted(GROWTH))
def test_a_small_sample_is_the_start_of_a_larger_one(design):
    base, key, small, large, _ = GROWTH[design]
    few, many = _sample([*base, f"{key}={small}"]), _sample([*base, f"{key}={large}"])
    assert len(many) == len(few) * large // small
    if design == "paired":  # rows ordered by posting: the small audit's postings come first
        pd.testing.assert_frame_equal(many.iloc[: len(few)].reset_index(drop=True), few)
    else:
        pd.testing.assert_frame_equal(many.iloc[: len(few)], few)
    other = _sample([*base, f"{key}={small}", "seed=1"])
    columns = ["first_name", "surname"]
    assert (other[columns] != few[columns]).any(axis=1).mean() > 0.5  # another seed draws afresh


def test_world_applicants_are_nested_in_the_estimator_n():
    from popfair.core.types import WORLD

    def worlds(n: int) -> pd.DataFrame:
        cfg = ["estimator=interventional", f"estimator.n={n}", "population.n=200", "population.diagnostics=false"]
        rows = PopulationCase.from_config(compose_config([*COMMON, *cfg])).sample().worlds
        return rows[rows[WORLD] == rows[WORLD].iloc[0]]

    few, many = set(worlds(30)["applicant_id"]), set(worlds(90)["applicant_id"])
    assert len(few) == 30 and len(many) == 90 and few < many


@pytest.mark.parametrize("design", sorted(GROWTH))
def test_growing_an_audit_pays_only_for_the_new_units(design, tmp_path, monkeypatch):
    base, key, small, large, per_unit = GROWTH[design]

    def case(n: int, screener) -> PopulationCase:
        experiment = PopulationCase.from_config(compose_config([*COMMON, *base, f"{key}={n}"]))
        return dataclasses.replace(experiment, screener=screener)

    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)
        first = case(small, screener)
        first.run()
        paid_small = len(stub.state.answered)
        assert paid_small == small * per_unit
        grown = case(large, screener)
        planned = plan_case(grown)
        assert planned.cached_calls == paid_small  # the dry run shows the answers it will reuse
        assert "answers reused from the response cache" in planned.line()
        grown.run()
        paid_new = len(stub.state.answered) - paid_small
        assert sum(stub.state.answered.values()) == len(stub.state.answered)  # nothing paid twice
        assert paid_new == planned.calls
        assert paid_new <= 1.05 * (large - small) * per_unit
        assert plan_case(case(small, screener)).calls == 0  # a smaller rerun is free
