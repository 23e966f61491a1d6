"""Answer parsing shared by model screeners (callback: first yes/no word; score: first number,
which must be an integer in 0..100) and the prompt files every model screener reads."""

from __future__ import annotations

import pytest

from popfair.core.errors import ConfigError
from popfair.core.types import Document, Job
from popfair.screen.parse import parse_answer
from popfair.screen.prompts import PromptSet
from tests.conftest import compose_config


@pytest.mark.parametrize(
    "text,value",
    [
        ("yes", 1.0),
        ("no", 0.0),
        ("Yes.", 1.0),
        ("NO", 0.0),
        ("  yes\n", 1.0),
        ("Answer: no, not a fit", 0.0),
        ("I would say yes; no doubt", 1.0),
        ("no - yes", 0.0),
        ("'yes'", 1.0),
        ("yes/no: no", 1.0),
    ],
)
def test_callback_is_the_first_yes_or_no_word(text, value):
    assert parse_answer(text, "callback") == (value, None)


@pytest.mark.parametrize("text", ["", "maybe", "yesterday", "know", "nobody", "Yep", "none"])
def test_callback_without_a_yes_or_no_word_is_a_failure(text):
    value, error = parse_answer(text, "callback")
    assert value is None and "'yes' or 'no'" in error


@pytest.mark.parametrize(
    "text,value",
    [
        ("85", 85.0),
        ("Score: 72/100", 72.0),
        ("0", 0.0),
        ("100", 100.0),
        ("I rate this 9 of 10", 9.0),
        ("Suitability - 40", 40.0),
    ],
)
def test_score_is_the_first_integer(text, value):
    assert parse_answer(text, "score") == (value, None)


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "no integer"),
        ("high", "no integer"),
        ("150", "150 is outside"),
        ("-5", "-5 is not an integer"),
        ("85.5", "85.5 is not an integer"),
        ("1000 points", "outside"),
    ],
)
def test_score_without_an_integer_in_range_is_a_failure(text, reason):
    value, error = parse_answer(text, "score")
    assert value is None and reason in error


def test_prompt_files_build_the_papers_prompts():
    prompts = PromptSet(compose_config(["screener=hf_local"]).screener.prompts)
    job = Job(job_id="nurse", title="Registered nurse", description="Care for patients {in} wards.")
    doc = Document(applicant_id="a", job_id="nurse", kind="json", text='{"name": "Ann Lee"}')
    callback = prompts.build("callback", job, doc)
    assert callback.system.startswith("You are an HR hiring manager screening a job application.")
    assert "'yes' (callback) or 'no' (no callback)" in callback.system
    assert '{"name": "Ann Lee"}' in callback.user and "Care for patients {in} wards." in callback.user
    score = prompts.build("score", job, doc)
    assert "Registered nurse" in score.user and "0 (least suitable)" in score.system


def test_missing_prompt_file_names_the_key():
    with pytest.raises(ConfigError, match="screener.prompts.callback_user"):
        PromptSet({"callback_user": "missing.txt"})
