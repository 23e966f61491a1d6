"""Answer parsing (callback: first yes/no word; score: first integer in 0..100) and prompt templates."""
from __future__ import annotations

import pytest

from popfair.errors import ConfigError
from popfair.screen.parse import parse_answer, parse_callback, parse_score
from popfair.screen.prompt import prompt_templates
from popfair.types import Document, Job
from tests.conftest import compose_config


@pytest.mark.parametrize("text,value", [
    ("yes", 1.0), ("no", 0.0), ("Yes.", 1.0), ("NO", 0.0), ("  yes\n", 1.0),
    ("Answer: no, not a fit", 0.0), ("I would say yes; no doubt", 1.0), ("no - yes", 0.0),
    ("'yes'", 1.0), ("yes/no: no", 1.0),
])
def test_callback_is_the_first_yes_or_no_word(text, value):
    assert parse_callback(text) == (value, None)


@pytest.mark.parametrize("text", ["", "maybe", "yesterday", "know", "nobody", "Yep", "none", None])
def test_callback_without_a_yes_or_no_word_is_a_failure(text):
    value, error = parse_callback(text)
    assert value is None and "yes" in error


@pytest.mark.parametrize("text,value", [
    ("85", 85.0), ("Score: 72/100", 72.0), ("0", 0.0), ("100", 100.0), ("I rate this 9 of 10", 9.0),
    ("85.5", 85.0), ("Suitability - 40", 40.0),
])
def test_score_is_the_first_integer(text, value):
    assert parse_score(text) == (value, None)


@pytest.mark.parametrize("text,reason", [
    ("", "no integer"), ("high", "no integer"), ("150", "150 is outside"), ("-5", "-5 is outside"),
    ("1000 points", "outside"), (None, "no integer"),
])
def test_score_without_an_integer_in_range_is_a_failure(text, reason):
    value, error = parse_score(text)
    assert value is None and reason in error


def test_parse_answer_dispatches_on_outcome():
    assert parse_answer("yes 90", "callback").value == 1.0
    assert parse_answer("yes 90", "score").value == 90.0
    with pytest.raises(ValueError, match="outcome"):
        parse_answer("yes", "rank")


def test_configured_prompts_build_chat_messages():
    templates = prompt_templates(compose_config(["screener=hf_local"]).screener.prompts)
    job = Job(job_id="nurse", title="Registered nurse", description="Care for patients {in} wards.")
    doc = Document(applicant_id="a", job_id="nurse", kind="json", text='{"name": "Ann Lee"}')
    system, user = templates["callback"].messages(job, doc)
    assert system["role"] == "system" and system["content"].startswith(
        "You are an HR hiring manager screening a job application.")
    assert "'yes' (callback) or 'no' (no callback)" in system["content"]
    assert user["role"] == "user" and '{"name": "Ann Lee"}' in user["content"]
    assert "Care for patients {in} wards." in user["content"]  # braces in values are left alone
    _, score_user = templates["score"].messages(job, doc)
    assert "Registered nurse" in score_user["content"] and "0 (least" in templates["score"].system


@pytest.mark.parametrize("prompts,key", [
    (None, "screener.prompts"),
    ({"score": {"system": "s", "user": "{document}"}}, "screener.prompts.callback"),
    ({"score": {"system": "", "user": "{document}"}, "callback": {"system": "s", "user": "{document}"}},
     "screener.prompts.score.system"),
    ({"score": {"system": "s", "user": "{resume}"}, "callback": {"system": "s", "user": "{document}"}},
     "screener.prompts.score.user"),
    ({"score": {"system": "s", "user": "{job_title}"}, "callback": {"system": "s", "user": "{document}"}},
     "screener.prompts.score.user"),
    ({"score": {"system": "s", "user": "{document"}, "callback": {"system": "s", "user": "{document}"}},
     "screener.prompts.score.user"),
])
def test_bad_prompts_name_the_key(prompts, key):
    with pytest.raises(ConfigError) as info:
        prompt_templates(prompts)
    assert key in str(info.value)
