"""Pricing and planning arithmetic, cache keys, config validation, log redaction.
(Answer parsing and prompt files: test_screen_parse.py.)"""

from __future__ import annotations

import logging
import math

import pytest

from popfair.core.errors import ConfigError
from popfair.core.types import Document
from popfair.runtime.secrets import REDACTED, RedactSecrets, register_secret
from popfair.screen.pricing import MESSAGE_OVERHEAD_TOKENS, Price
from popfair.screen.providers import PROVIDERS
from popfair.store.responses import SqliteCache
from tests.llm_stub import StubServer
from tests.screen_helpers import JOBS, documents, make_screener, png


def test_price_arithmetic_and_batch_discount():
    price = Price(input_per_mtok=0.15, output_per_mtok=0.60, batch_discount=0.5)
    assert price.cost(1_000_000, 0) == pytest.approx(0.15)
    assert price.cost(2_000, 500) == pytest.approx((2_000 * 0.15 + 500 * 0.60) / 1e6)
    assert price.cost(2_000, 500, batch=True) == pytest.approx(0.5 * price.cost(2_000, 500))


@pytest.mark.parametrize(
    "config,key",
    [
        ({"input_per_mtok": -1}, "screener.price"),
        ({"batch_discount": 0}, "batch_discount"),
        ({"per_call": 1}, "per_call"),
    ],
)
def test_bad_price_names_the_key(config, key):
    with pytest.raises(ConfigError, match=key):
        Price.from_config(config)


def test_image_token_estimates_follow_the_providers_published_formulas():
    """Each adapter declares its pricing unit; an image counts by its provider's published rule."""
    openai, anthropic, bedrock = (PROVIDERS[kind].pricing for kind in ("openai", "anthropic", "bedrock"))
    square = png(1, (1024, 1024))
    assert openai.image_tokens(square) == 85 + 170 * 4  # 768x768 -> 2x2 tiles = 765
    assert anthropic.image_tokens(png(1, (1000, 1000))) == math.ceil(1000 * 1000 / 750)
    assert bedrock.image_tokens(png(1, (2000, 1000))) == math.ceil(1568 * 784 / 750)  # fitted in 1568 px
    assert openai.image_tokens(png(1, (512, 512))) == 85 + 170  # small images are not upscaled
    assert PROVIDERS["openai_compatible"].pricing is openai
    assert openai.input_tokens("ab" * 10, "c" * 20, None) == 10 + MESSAGE_OVERHEAD_TOKENS


def test_plan_counts_distinct_uncached_prompts_and_prices_them(tmp_path, monkeypatch):
    docs = documents(30, duplicates=10)
    with StubServer() as stub:
        screener = make_screener(
            "openai", stub.url, tmp_path, monkeypatch, price={"input_per_mtok": 2.0, "output_per_mtok": 8.0}
        )
        plan = screener.plan(JOBS, docs, "score")
        prompts = [screener.prompts.build("score", JOBS[d.job_id], d) for d in docs[:30]]
        expected_in = sum(math.ceil((len(p.system) + len(p.user)) / 4) + MESSAGE_OVERHEAD_TOKENS for p in prompts)
        assert plan.calls == 30 and plan.input_tokens == expected_in
        assert plan.output_tokens == 30 * screener.expected_output_tokens
        assert plan.cost_usd == pytest.approx((expected_in * 2.0 + plan.output_tokens * 8.0) / 1e6)
        assert stub.state.requests == 0  # planning calls nothing
        screener.screen(JOBS, docs[:12], "score")
        assert screener.plan(JOBS, docs, "score").calls == 18
        assert screener.plan(JOBS, docs, "callback").calls == 30  # another prompt: another answer


def test_plan_prices_each_distinct_image_once_and_looks_up_only_models_the_cache_holds(tmp_path, monkeypatch):
    pages = [png(seed, (800, 1000 + 100 * seed)) for seed in range(3)]  # three distinct page sizes
    docs = [Document(f"a{i}", "nurse", "image", "", pages[i % 3]) for i in range(7)]  # 3 distinct prompts
    with StubServer() as stub:
        screener = make_screener("anthropic", stub.url, tmp_path, monkeypatch, vision=True)
        plan = screener.plan(JOBS, docs, "score")
        distinct = [screener.prompts.build("score", JOBS["nurse"], d) for d in docs[:3]]
        expected = sum(PROVIDERS["anthropic"].pricing.input_tokens(p.system, p.user, p.image_png) for p in distinct)
        assert (plan.calls, plan.input_tokens) == (3, expected)
        assert not screener.cache.holds("anthropic", screener.provider.model)  # no key was even hashed
        screener.screen(JOBS, docs[:1], "score")
        assert screener.cache.holds("anthropic", screener.provider.model)
        assert not screener.cache.holds("anthropic", "another-model")
        assert screener.plan(JOBS, docs, "score").calls == 2  # the answered page's prompt is cached
        other = make_screener("anthropic", stub.url, tmp_path, monkeypatch, vision=True, model="another-model")
        assert other.plan(JOBS, docs, "score").calls == 3  # another model's answers are not this one's


def test_prompt_tables_are_shared_by_equal_jobs_and_rebuilt_when_a_job_text_changes():
    """A sweep's cases plan one document list for many models (and the gender and race cases with
    equal jobs in different maps): one table; a changed posting text is another table."""
    from dataclasses import replace

    from popfair.screen.prompts import PromptSet, PromptTable

    prompts, docs = PromptSet(), documents(300, duplicates=20)
    table = PromptTable.of(prompts, "score", JOBS, docs)
    assert len(table.users) == 300 and list(table.user_chars) == [len(user) for user in table.users]
    assert PromptTable.of(prompts, "score", dict(JOBS), docs) is table  # equal jobs, another map
    assert PromptTable.of(prompts, "callback", JOBS, docs) is not table  # another outcome: other prompts
    remote = {key: replace(job, description=job.description + " Remote.") for key, job in JOBS.items()}
    changed = PromptTable.of(prompts, "score", remote, docs)
    assert changed is not table and all("Remote." in user for user in changed.users)
    assert PromptTable.of(prompts, "score", JOBS, list(docs)) is not table  # another list: built afresh
    assert PromptTable.of(prompts, "score", JOBS, docs).users == table.users


def test_cache_key_covers_model_params_endpoint_and_prompt(tmp_path, monkeypatch):
    docs = documents(2)
    with StubServer() as stub:

        def key(**overrides):
            screener = make_screener("openai", stub.url, tmp_path, monkeypatch, **overrides)
            return screener.provider.cache_key(screener.prompts.build("score", JOBS[docs[0].job_id], docs[0]))

        base = key()
        assert key() == base
        assert key(model="other") != base
        assert key(generation={"temperature": 0.5}) != base
        assert key(generation={"max_tokens": 16}) != base
        assert key(base_url="http://127.0.0.1:1/v1") != base
        assert key(price={"input_per_mtok": 9.0}) == base  # prices do not change answers


def test_cache_survives_reopening_and_ignores_missing_keys(tmp_path):
    from popfair.store.responses import CachedAnswer

    cache = SqliteCache(tmp_path)
    cache.put("k1", "openai", "m", CachedAnswer("85", 85.0, None, 10, 1, 0.001, 0.2, 1.0))
    cache.close()
    again = SqliteCache(tmp_path)
    assert again.get_many(["k1", "k2"]) == {"k1": CachedAnswer("85", 85.0, None, 10, 1, 0.001, 0.2, 1.0)}
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize(
    "override,key",
    [
        ({"provider": "azure"}, "screener.provider"),
        ({"base_url": "ftp://x"}, "screener.base_url"),
        ({"mode": "offline"}, "mode: must be one of"),  # a declared constraint: named relative to the class
        ({"max_cost_usd": -1}, "max_cost_usd"),
        ({"engine": {"concurrency": 0}}, "engine.concurrency"),
        ({"engine": {"threads": 4}}, "engine: unknown keys"),
        ({"generation": {"max_tokens": 0}}, "max_tokens"),
        ({"generation": {"top_k": 3}}, "screener.generation"),
        ({"release_date": "May 2023"}, "release_date"),
        ({"prompts": {"score_user": "/nonexistent/prompt.txt"}}, "/nonexistent/prompt.txt"),
        ({"api_key_env": "sk-live-abc123!"}, "screener.api_key_env"),
        ({"batch": {"poll_interval_s": 0}}, "poll_interval_s"),
    ],
)
def test_bad_screener_settings_fail_at_construction_naming_the_key(override, key, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_screener("openai", "http://127.0.0.1:9", tmp_path, monkeypatch, **override)


def test_prompt_template_without_document_placeholder_is_rejected(tmp_path, monkeypatch):
    template = tmp_path / "bad.txt"
    template.write_text("Rate the applicant.")
    with pytest.raises(ConfigError, match="{document}"):
        make_screener("openai", "http://127.0.0.1:9", tmp_path, monkeypatch, prompts={"score_user": str(template)})


def test_log_records_with_a_secret_are_redacted(caplog):
    secret = "sk-sentinel-redaction-0123456789"
    register_secret(secret)
    logger = logging.getLogger("popfair.test_redaction")
    handler = logging.Handler()
    seen = []
    handler.emit = lambda record: seen.append(record.getMessage())
    handler.addFilter(RedactSecrets())
    logger.addHandler(handler)
    try:
        logger.error("auth header was Bearer %s", secret)
    finally:
        logger.removeHandler(handler)
    assert seen == [f"auth header was Bearer {REDACTED}"]


def test_collector_settings_are_scoped_and_restored_by_the_last_user():
    import gc

    from popfair.screen import collector

    before = gc.get_threshold()
    with collector.relaxed():
        assert gc.get_threshold()[0] >= collector.YOUNG_THRESHOLD
        with collector.relaxed(), collector.paused():  # nested (another engine, a cached read)
            assert not gc.isenabled()
        assert gc.isenabled() and gc.get_threshold()[0] >= collector.YOUNG_THRESHOLD  # still one user
    assert gc.get_threshold() == before and gc.isenabled()
