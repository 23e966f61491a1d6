"""experiment=popresume_authors and its parts: the authors' race coding with AIAN and "other race"
left out (counted), resumes without skills, JSON scores read to two decimals, prompts and job texts
from the user's files, 64 new tokens."""

from __future__ import annotations

import pandas as pd
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.core.types import Job
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute, select_races
from popfair.render.text import TextRenderer
from popfair.screen.parse import parse_answer
from popfair.screen.prompts import PromptSet
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import JOBS, documents, make_screener

PROFILE = {
    "applicant_id": "nurse-000001",
    "first_name": "Maria",
    "surname": "Lopez",
    "state": "TX",
    "age": 30,
    "edu_level": "bachelor",
    "exp_year": 6,
    "birth_year": 1994,
}


def _people() -> pd.DataFrame:
    # RAC1P: 1 White, 2 Black, 3-5 AIAN, 6 Asian, 7 NHPI, 8 some other race, 9 two or more
    rac1p = [1, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9]
    race = ["white", "hispanic", "black", "other", "other", "other", "api", "api", "hispanic", "other", "other"]
    return pd.DataFrame({"rac1p": rac1p, "race": race, "gender": ["female", "male"] * 5 + ["female"]})


def test_white_nonwhite_counts_hispanic_whites_white_and_leaves_out_aian_and_other_race():
    table, notes = select_races(_people(), ProtectedAttribute("race_white_nonwhite", "nonwhite", "white"), ())
    assert table["race_white_nonwhite"].tolist() == ["white", "white", "nonwhite", "nonwhite", "nonwhite", "nonwhite"]
    assert table["rac1p"].tolist() == [1, 1, 2, 6, 7, 9]  # a Hispanic White (row 2) is White
    assert "5 applicants excluded (3 American Indian or Alaska Native, 2 Some Other Race) of 11" in notes[0]


def test_excluded_races_leave_every_analysis_and_are_counted():
    gender = ProtectedAttribute("gender", "female", "male")
    table, notes = select_races(_people(), gender, ("aian", "some_other"))
    assert len(table) == 6 and not table["rac1p"].isin([3, 4, 5, 8]).any()
    assert "population.exclude_races=['aian', 'some_other']" in notes[0]
    same, none = select_races(_people(), gender, ())
    assert none == [] and len(same) == len(_people())


def test_unknown_race_group_fails_naming_the_key():
    with pytest.raises(ConfigError, match="population.exclude_races"):
        PopulationCase.from_config(compose_config(["population.exclude_races=[martian]", "tracking=none"]))


def test_renderer_without_skills_has_no_skills_section():
    pools = OmegaConf.to_container(compose_config().occupation.pools)
    job = Job(job_id="nurse", title="Registered Nurse", description="x" * 50)
    with_skills = TextRenderer(pools=pools, n_skills=8).render(PROFILE, job).text
    without = TextRenderer(pools=pools, n_skills=0).render(PROFILE, job).text
    assert "SKILLS" in with_skills and "SKILLS" not in without
    assert "WORK HISTORY" in without and "EDUCATION" in without
    built = TextRenderer(pools=pools, n_skills=0).builder
    assert built.build(PROFILE).to_text() == without  # the two code paths agree


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('{"score": 85.12}', 85.12),
        ('{"score": 85.129}', 85.12),  # two decimals kept, as the authors' pattern reads them
        ('Sure. {"score": 70}', 70.0),
        ('{"score":100.00}', 100.0),
    ],
)
def test_json_scores_are_read_to_two_decimals(reply, value):
    assert parse_answer(reply, "score", "json_decimal") == (value, None)


@pytest.mark.parametrize("reply", ["85", '{"score": 101.5}', '{"grade": 80}', '{"score": -3}'])
def test_json_replies_without_a_valid_score_are_failures(reply):
    value, error = parse_answer(reply, "score", "json_decimal")
    assert value is None and error.startswith("unparseable answer")


def test_prompts_come_from_the_named_folder_and_the_rest_from_conf(tmp_path):
    (tmp_path / "score_system.txt").write_text("Grade it.")
    (tmp_path / "score_user.txt").write_text('JOB:\n{job_description}\nRESUME:\n{document}\n{"score": XX.XX}')
    prompts = PromptSet(directory=tmp_path)
    assert prompts.texts["score_system"] == "Grade it." and sorted(prompts.from_dir) == ["score_system", "score_user"]
    assert "yes" in prompts.texts["callback_system"].lower()  # not in the folder: popfair's own
    with pytest.raises(ConfigError, match="prompts.dir"):
        PromptSet(directory=tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds none of the prompt files"):
        PromptSet(directory=tmp_path / "empty")


def test_job_description_is_read_from_the_named_file(tmp_path):
    text = "We are hiring Registered Nurses to provide patient care and to educate patients and families."
    (tmp_path / "job.txt").write_text(text)
    occupation = Occupation(
        key="nurse",
        title="RN",
        occp=3255,
        soc="29-1141",
        description="y" * 50,
        description_file=str(tmp_path / "job.txt"),
    )
    assert occupation.job.description == text
    with pytest.raises(ConfigError, match="occupation.description_file"):
        Occupation(
            key="nurse", title="RN", occp=3255, soc="", description="y" * 50, description_file=str(tmp_path / "no.txt")
        )


def test_preset_sets_the_authors_choices_for_every_llm_screener(tmp_path):
    cfg = compose_config(
        ["experiment=popresume_authors", "screener=gpt4o_mini", f"occupation.description_file={tmp_path}/job.txt"]
    )
    assert cfg.estimator._target_.endswith("PsePaper") and cfg.renderer.n_skills == 0
    assert list(cfg.population.exclude_races) == ["aian", "some_other"]
    screener = instantiate(cfg.screener, require_key=False, _convert_="all")
    assert screener.provider.generation.max_tokens == 64 and screener.score_reply == "json_decimal"
    assert '{"score": XX.XX}' in screener.prompts.texts["score_system"]  # popfair's own JSON wording


def test_preset_runs_with_the_simulated_screener_and_white_nonwhite(tmp_path):
    overrides = [
        "experiment=popresume_authors",
        "screener=simulated",
        "protected_attr=race_white_nonwhite",
        "population.n=3000",
        "population.diagnostics=false",
        "estimator.n_bootstrap=3",
        "estimator.grid={n_estimators:[20],max_depth:[2],reg_lambda:[1.0]}",
        "tracking=none",
    ]
    result = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp_path)).run()
    assert any("applicants excluded" in note and "American Indian or Alaska Native" in note for note in result.notes)
    assert set(result.scored["race_white_nonwhite"]) == {"white", "nonwhite"}
    assert "SKILLS" not in result.scored["document"].iloc[0]
    assert result.effects.table["estimate"].notna().all()


def test_counterfactual_worlds_refuse_the_pooled_race_coding(tmp_path):
    overrides = [
        "protected_attr=race_white_nonwhite",
        "estimator=interventional",
        "estimator.n=50",
        "population.n=500",
        "population.diagnostics=false",
        "screener=simulated",
        "tracking=none",
    ]
    with pytest.raises(ConfigError, match="counterfactual worlds set one of"):
        PopulationCase.from_config(compose_config(overrides, tmp_path=tmp_path)).run()


@pytest.mark.parametrize("mode", ["online", "batch"])
def test_api_screeners_read_scores_by_their_own_rule_when_asked_and_from_the_cache(mode, tmp_path, monkeypatch):
    """The stub answers a bare integer: read as JSON it is a failure that keeps the raw reply (online
    engine and provider batch alike); a screener reading integers gets the same cached replies as
    values, with no request sent."""
    docs = documents(12)
    batch = {"mode": "batch", "batch": {"poll_interval_s": 0.01}} if mode == "batch" else {}
    with StubServer() as stub:
        as_json = make_screener("openai", stub.url, tmp_path, monkeypatch, score_reply="json_decimal", **batch)
        first = as_json.screen(JOBS, docs, "score")
        assert all(r.value is None and r.raw is not None and '"score"' in str(r.error) for r in first)
        sent = stub.state.requests
        as_integer = make_screener("openai", stub.url, tmp_path, monkeypatch, **batch)
        again = as_integer.screen(JOBS, docs, "score")
        assert stub.state.requests == sent
        assert all(r.cached and r.error is None and r.value == float(str(r.raw).strip()) for r in again)
