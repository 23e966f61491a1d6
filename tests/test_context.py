"""Config group `context`: the texts a screener works in (company description, selectivity, an
anti-bias instruction), placed after the system prompt and before the job; they change the prompt,
so they change the cache key and the plan's price; a sweep over them shows the context as a column."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from popfair.core.errors import ConfigError
from popfair.report.sweep import case_table
from popfair.screen.pricing import MESSAGE_OVERHEAD_TOKENS
from popfair.screen.prompts import CONTEXT_DIR, PromptSet
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import JOBS, documents, make_screener

OPTIONS = {
    "none": [],
    "company": ["company.txt"],
    "selective": ["company.txt", "selective.txt"],
    "anti_bias": ["anti_bias.txt"],
    "anti_bias_company": ["company.txt", "anti_bias.txt"],
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_every_context_option_composes_into_the_llm_screeners_prompt_files(option):
    cfg = compose_config([f"context={option}", "screener=gpt4o_mini"])
    assert cfg.context.name == option
    assert list(cfg.screener.context) == OPTIONS[option]
    prompts = PromptSet(context=list(cfg.screener.context))
    texts = [(CONTEXT_DIR / name).read_text(encoding="utf-8").strip() for name in OPTIONS[option]]
    base = PromptSet().system("score")
    # the shared part first: the system prompt, then the context texts in order; the job and the
    # applicant's document stay in the user message, the document last
    assert prompts.system("score") == "\n\n".join([base, *texts])
    assert prompts.system("callback").startswith(PromptSet().system("callback"))


def test_anti_bias_and_selective_say_what_their_option_names():
    assert "top 10%" in (CONTEXT_DIR / "selective.txt").read_text()
    anti_bias = PromptSet(context=["anti_bias.txt"]).system("score").lower()
    assert "discriminat" in anti_bias and "anti_bias" not in anti_bias
    assert "culture" in PromptSet(context=["company.txt"]).system("rank").lower()


def test_a_users_own_context_file_is_read_and_a_missing_one_names_the_key(tmp_path):
    own = tmp_path / "ours.txt"
    own.write_text("We are a hospital network in Ohio.\n")
    assert PromptSet(context=[str(own)]).system("score").endswith("We are a hospital network in Ohio.")
    with pytest.raises(ConfigError, match=r"context\.files.*nope\.txt does not exist"):
        PromptSet(context=["nope.txt"])
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(ConfigError, match=r"context\.files.*is empty"):
        PromptSet(context=[str(tmp_path / "empty.txt")])


def test_a_context_changes_the_cache_key_and_the_plan_prices_its_tokens(tmp_path, monkeypatch):
    docs = documents(8)
    with StubServer() as stub:
        bare = make_screener("openai", stub.url, tmp_path, monkeypatch)
        company = make_screener("openai", stub.url, tmp_path, monkeypatch, context=["company.txt"])
        bare.screen(JOBS, docs, "score")
        asked = stub.state.requests
        assert asked == 8 and bare.plan(JOBS, docs, "score").calls == 0
        plan = company.plan(JOBS, docs, "score")  # another prompt: nothing of the bare answers is reused
        assert plan.calls == 8 and plan.cached == 0
        extra = len(company.prompts.system("score"))
        expected = sum(
            math.ceil((extra + len(user)) / 4) + MESSAGE_OVERHEAD_TOKENS
            for user in company.prompts.users("score", JOBS, docs)
        )
        assert plan.input_tokens == expected > bare_tokens(bare, docs)
        company.screen(JOBS, docs, "score")
        assert stub.state.requests == asked + 8  # each prompt asked once more, under the context
        company.screen(JOBS, docs, "score")
        assert stub.state.requests == asked + 8  # and cached under it


def bare_tokens(screener, docs) -> int:
    system = len(screener.prompts.system("score"))
    return sum(
        math.ceil((system + len(user)) / 4) + MESSAGE_OVERHEAD_TOKENS
        for user in screener.prompts.users("score", JOBS, docs)
    )


def test_the_sweep_comparison_shows_the_context_as_a_column_where_it_varies():
    def rows(contexts):
        return pd.DataFrame(
            [
                {
                    "occupation": "nurse",
                    "protected_attr": "gender",
                    "format": "text",
                    "model": "gpt4o_mini",
                    "context": context,
                    "variant": "",
                    "pattern": "",
                    "effect": "TE",
                    "estimate": estimate,
                    "ci_low": estimate - 1,
                    "ci_high": estimate + 1,
                    "significant": False,
                }
                for context, estimate in contexts
            ]
        )

    table = case_table(rows([("none", 1.0), ("company", 3.0), ("anti_bias", 2.0)]))
    assert "context" in table.columns and "variant" not in table.columns
    assert dict(zip(table["context"], table["TE"])) == {
        "none": "+1 [+0, +2]",
        "company": "+3 [+2, +4]",
        "anti_bias": "+2 [+1, +3]",
    }
    assert "context" not in case_table(rows([("none", 1.0)])).columns  # one context: no column
