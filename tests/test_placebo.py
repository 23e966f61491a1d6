"""Placebo edits (renderer.placebo): what each edit changes and keeps, the keyed sample, the
placebo row's interval, and whole cases: TF-IDF as a bag of words does not move under reordering,
a screener that ignores formatting has placebo effects covering 0, the plan prices the re-screens
and an API screener is asked each of them once."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf
from scipy import stats

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.core.types import Job
from popfair.estimate.controls.placebo import placebo_change
from popfair.render.json_profile import JsonRenderer
from popfair.render.placebo import PAD_SENTENCE, TEXT_EDITS, PlaceboSettings, edit_document_text, keyed_sample
from popfair.render.text import SECTION_TITLES, TextRenderer
from tests.conftest import compose_config

JOB = Job("nurse", "Registered Nurse", "Care for patients.")
PROFILE = {
    "applicant_id": "a1",
    "first_name": "Maria",
    "surname": "Lopez",
    "state": "OH",
    "edu_level": "bachelor",
    "age": 31,
    "exp_year": 6,
    "birth_year": 1993,
    "job_id": "nurse",
}


def words(text: str) -> Counter:
    return Counter(re.findall(r"\w+", text.lower()))


@pytest.fixture(scope="module")
def resume() -> str:
    cfg = compose_config(["tracking=none"])
    renderer = TextRenderer(pools=OmegaConf.to_container(cfg.occupation.pools, resolve=True), seed=0)
    return renderer.render(PROFILE, JOB).text


def test_reorder_and_format_keep_every_word_and_change_only_order_or_layout(resume):
    reordered = edit_document_text(resume, "text", "reorder")
    assert reordered != resume and words(reordered) == words(resume)
    titles = [line for line in reordered.split("\n") if line in SECTION_TITLES]
    assert titles == list(reversed(SECTION_TITLES))
    assert reordered.split("\n")[:2] == resume.split("\n")[:2]  # name and contact stay on top
    formatted = edit_document_text(resume, "text", "format")
    assert words(formatted) == words(resume) and "\n- " not in formatted and "\n* " in formatted
    assert formatted.replace("* ", "- ").replace(" / ", " | ").replace("\n\n\n", "\n\n") == resume


def test_rephrase_swaps_only_section_titles_and_pad_adds_one_neutral_sentence(resume):
    rephrased = edit_document_text(resume, "text", "rephrase")
    changed = [(a, b) for a, b in zip(resume.split("\n"), rephrased.split("\n")) if a != b]
    assert [a for a, _ in changed] == list(SECTION_TITLES)
    assert all(b and b not in SECTION_TITLES for _, b in changed)
    padded = edit_document_text(resume, "text", "pad")
    assert padded.startswith(resume.rstrip("\n")) and padded.rstrip().endswith(PAD_SENTENCE)


def test_json_edits_keep_every_value():
    row = {
        **PROFILE,
        "age": 23,
        "metro": None,
        "school": "Ohio State University",
        "degree": "BS",
        "major": "Nursing",
        "gpa": 3.4,
        "graduation_year": 2024,
        "job1_employer": "Acme",
        "job1_title": "Aide",
        "job1_start": "2022-01",
        "job1_end": "2024-05",
    }
    text = JsonRenderer().render(row, JOB).text
    original = json.loads(text)
    for edit in TEXT_EDITS:
        edited = json.loads(edit_document_text(text, "json", edit))
        if edit == "rephrase":
            assert "work_experience" in edited and "employment_history" not in edited
            assert edited["work_experience"] == original["employment_history"]
        elif edit == "pad":
            assert edited == {**original, "references": PAD_SENTENCE}
        else:
            assert edited == original  # the same object: only order or layout changed
    assert list(json.loads(edit_document_text(text, "json", "reorder")))[:2] == ["name", "employment_history"]
    assert "\n  " in edit_document_text(text, "json", "format")


def test_keyed_sample_is_stable_and_nested_as_it_grows():
    keys = [f"applicant-{i}" for i in range(1000)]
    small, large = keyed_sample(keys, 50, seed=3), keyed_sample(keys, 200, seed=3)
    assert len(small) == 50 and set(small) <= set(large) and list(small) == sorted(small)
    assert list(keyed_sample(keys, 50, seed=3)) == list(small)
    assert set(keyed_sample(keys, 50, seed=4)) != set(small)
    assert list(keyed_sample(keys, None, seed=3)) == list(range(1000))


def test_bad_placebo_settings_name_their_key():
    with pytest.raises(ConfigError, match=r"renderer\.placebo.*shuffle"):
        PlaceboSettings.from_config({"placebo": "shuffle"})
    with pytest.raises(ConfigError, match=r"renderer\.placebo_n"):
        PlaceboSettings.from_config({"placebo": ["pad"], "placebo_n": 0})
    assert PlaceboSettings.from_config({"placebo": None}) is None
    assert PlaceboSettings.from_config({"placebo": "pad"}).edits == ("pad",)
    with pytest.raises(ConfigError, match=r"renderer\.placebo.*renderer=image"):
        PopulationCase.from_config(
            compose_config(["renderer=image", "renderer.placebo=reorder", "tracking=none"]), dry_run=True
        )


def test_the_placebo_interval_is_scipys_t_interval_and_covers_the_true_mean():
    rng = np.random.default_rng(0)
    draws = rng.normal(0.7, 3.0, size=(400, 120))
    rows = [placebo_change(d) for d in draws]
    covered = np.mean([r["ci_low"] <= 0.7 <= r["ci_high"] for r in rows])
    assert 0.91 <= covered <= 0.99  # 95% interval: binomial sd 1.1 pp over 400 samples
    low, high = stats.t.interval(0.95, 119, loc=draws[0].mean(), scale=stats.sem(draws[0]))
    assert (rows[0]["ci_low"], rows[0]["ci_high"]) == pytest.approx((low, high))
    assert rows[0]["mean_abs_change"] == pytest.approx(np.abs(draws[0]).mean())
    zero = placebo_change(np.zeros(30))
    assert (zero["estimate"], zero["ci_low"], zero["ci_high"], zero["share_changed"]) == (0, 0, 0, 0)


CASE = ["population.n=300", "population.diagnostics=false", "outcome_audit=null", "tracking=none"]


@pytest.mark.parametrize("ngram_max", [2, 1])  # the default (words and pairs within a line), words only
def test_tfidf_does_not_move_under_reordering_or_formatting_but_moves_under_rephrase_and_pad(tmp_path, ngram_max):
    """TF-IDF reads the bag of a resume's words and of the word pairs inside its lines: moving a
    section or changing its bullets and spacing keeps that bag, and every score, exactly."""
    cfg = compose_config(
        [
            *CASE,
            "renderer.placebo=[reorder,format,rephrase,pad]",
            f"screener.ngram_max={ngram_max}",
            "estimator=outcome_gap",
        ],
        tmp_path=tmp_path,
    )
    result = PopulationCase.from_config(cfg).run()
    table = result.effects.table
    for edit in ("reorder", "format"):  # a bag of words: the same bag, the same score, exactly
        row = table.loc[f"placebo.{edit}"]
        assert (row["estimate"], row["ci_low"], row["ci_high"], row["mean_abs_change"]) == (0, 0, 0, 0)
        assert row["n"] == 200
    for edit in ("rephrase", "pad"):
        assert table.loc[f"placebo.{edit}", "share_changed"] == 1.0
        assert table.loc[f"placebo.{edit}", "mean_abs_change"] > 0
    notes = "\n".join(result.effects.notes)
    assert "placebo.reorder: " in notes and "does not react to this edit at all" in notes
    assert re.search(r"placebo\.pad: .*; gap \([-+][\d.e-]+\) is [\d.e-]+x that movement", notes)
    assert set(result.effects.artifacts["placebo.csv"]["effect"]) == {f"placebo.{e}" for e in TEXT_EDITS}


def test_a_screener_that_ignores_formatting_has_placebo_effects_covering_zero(tmp_path):
    cfg = compose_config(
        [*CASE, "screener=simulated", "renderer.placebo=[reorder,format,pad]", "renderer.placebo_n=300"],
        tmp_path=tmp_path,
    )
    table = PopulationCase.from_config(cfg).run().effects.table
    for edit in ("reorder", "format", "pad"):
        row = table.loc[f"placebo.{edit}"]
        assert row["ci_low"] <= 0 <= row["ci_high"] and row["n"] == 300 and row["unit"] == "points"


def test_the_plan_prices_the_placebo_rescreens_and_the_run_asks_each_once(tmp_path, monkeypatch):
    """An API screener (real openai SDK, local stub): the dry-run plan counts the re-screens; the run
    asks exactly the planned prompts, each once; a rerun asks nothing."""
    from popfair.sweep.plan import plan_case
    from tests.llm_stub import StubServer
    from tests.screen_helpers import make_screener

    plain = PopulationCase.from_config(compose_config([*CASE, "estimator=outcome_gap", "population.n=120"]))
    cfg = compose_config([*CASE, "estimator=outcome_gap", "population.n=120", "renderer.placebo=[reorder,pad]"])
    cfg.renderer.placebo_n = 40
    base = PopulationCase.from_config(cfg)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)
        without = plan_case(dataclasses.replace(plain, screener=screener))
        experiment = dataclasses.replace(base, screener=screener)
        planned = plan_case(experiment)
        assert planned.calls == without.calls + 2 * 40 and planned.cost_usd > without.cost_usd
        result = experiment.run()
        answered = stub.state.answered
        assert sum(answered.values()) == len(answered) == planned.calls  # every distinct prompt paid once
        assert result.effects.table.loc["placebo.reorder", "n"] == 40
        dataclasses.replace(base, screener=make_screener("openai", stub.url, tmp_path / "cache", monkeypatch)).run()
        assert sum(stub.state.answered.values()) == planned.calls  # the rerun reads the cache


def test_ranking_trials_edit_one_candidate_each_and_read_its_top1_change(tmp_path):
    cfg = compose_config(
        [
            "experiment=ranking_race_gender",
            "population.n_trials=120",
            "renderer.placebo=pad",
            "renderer.placebo_n=30",
            "tracking=none",
        ],
        tmp_path=tmp_path,
    )
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.sample()
    shown = experiment.prompts(profiles, progress=False)
    sample = shown.placebo
    by_trial = {p.applicant_id: p.text for p in shown.prompts}
    assert len(sample.prompts["pad"]) == 30
    for prompt in sample.prompts["pad"]:  # the trial's prompt with one resume padded
        assert prompt.text.count(PAD_SENTENCE) == 1
        assert prompt.text.replace("\n\n" + PAD_SENTENCE, "") == by_trial[prompt.applicant_id]
    row = experiment.run().effects.table.loc["placebo.pad"]
    assert row["unit"] == "proportion" and 0 < row["n"] <= 30 and -1 <= row["ci_low"] <= row["ci_high"] <= 1


def test_within_group_worlds_take_a_donors_name_and_qualifications_in_the_same_group(tmp_path):
    cfg = compose_config(  # no score noise: what moves is the donor's R and B alone
        [*CASE, "screener=simulated", "screener.noise_sd=0", "renderer.placebo=within_group"], tmp_path=tmp_path
    )
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.sample()
    sample = experiment.prompts(profiles, progress=False).placebo
    usable = sample.usable["within_group"]
    original = sample.rows
    donated = pd.DataFrame([d.profile for d in sample.documents["within_group"]])
    kept = ["applicant_id", "job_id", "gender", "race", "age"]  # the applicant, its job, X and Z
    assert donated[kept].astype(str).equals(original[kept].astype(str))
    moved = ["first_name", "surname", "state", "edu_level", "exp_year"]  # R and B, raw
    factual = profiles.table
    for i in np.flatnonzero(usable)[:50]:
        donors = factual[(factual[moved] == donated.loc[i, moved]).all(axis=1)]
        assert ((donors[kept[1:]] == original.loc[i, kept[1:]]).all(axis=1)).any()  # a donor of the same cell
        assert donors["applicant_id"].ne(original.loc[i, "applicant_id"]).any()
    assert usable.mean() > 0.5 and (donated.loc[~usable, moved] == original.loc[~usable, moved]).all().all()
    assert all(d.profile["first_name"] in d.text for d in sample.documents["within_group"])  # rendered anew
    table = experiment.run().effects.table  # donors of the same cell: no change in expectation
    row = table.loc["placebo.within_group"]
    assert row["ci_low"] <= 0 <= row["ci_high"] and row["n"] == usable.sum()
    with pytest.raises(ConfigError, match=r"within_group .* not the paired design"):
        PopulationCase.from_config(
            compose_config(["experiment=paired_race", "renderer.placebo=within_group", "tracking=none"]), dry_run=True
        )
