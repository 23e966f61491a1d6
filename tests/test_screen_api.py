"""API screeners through the real SDKs (openai, anthropic, boto3) against a local stub on 127.0.0.1
that injects 429 + Retry-After, 500, hangs past the timeout and malformed bodies."""

from __future__ import annotations

import asyncio
import time

import pytest
from tenacity import RetryCallState

from popfair.core.errors import MissingSecretError, ScreeningStopped
from popfair.screen.calls import EngineSettings
from popfair.screen.engine import Engine
from popfair.screen.limits import RateLimiter
from popfair.screen.parse import parse_answer
from popfair.screen.providers import TransientError
from tests.llm_stub import Faults, StubServer, expected_answer, prompt_text
from tests.screen_helpers import JOBS, documents, make_screener, png

N_FAULTY = 150
PROVIDERS = ["openai", "openai_compatible", "anthropic", "bedrock"]
FAULTS = Faults(
    rate_limit=0.06, server_error=0.06, timeout=0.03, malformed=0.05, always_fail=0.05, retry_after="0.01", hang_s=2.0
)  # hangs outlast the 1 s client timeout


def expected_value(screener, document, outcome):
    prompt = screener.prompts.build(outcome, JOBS[document.job_id], document)
    return parse_answer(expected_answer(prompt.system, prompt.user, 0.05), outcome), prompt


@pytest.mark.parametrize("provider", PROVIDERS)
def test_faulty_server_every_row_scored_or_recorded_and_each_prompt_answered_once(provider, tmp_path, monkeypatch):
    docs = documents(N_FAULTY, duplicates=20)
    with StubServer(faults=FAULTS, garbage_rate=0.05) as stub:
        # a generous timeout: on a loaded machine a slow *answer* must not pass for a hang
        screener = make_screener(provider, stub.url, tmp_path, monkeypatch, engine={"timeout_s": 1.0})
        results = screener.screen(JOBS, docs, "score")
        state = stub.state
        faults = sum(state.fault_counts.values())
        assert faults / state.requests >= 0.10, state.fault_counts  # the acceptance's fault share
        assert set(state.fault_counts) == {"rate_limit", "server_error", "timeout", "malformed"}

        assert [r.applicant_id for r in results] == [d.applicant_id for d in docs]  # none lost, in order
        n_api_failures = n_unparseable = 0
        for doc, result in zip(docs, results):
            (value, parse_error), prompt = expected_value(screener, doc, "score")
            answered = state.answered[prompt_text(prompt.system, prompt.user)]
            if result.raw is None:  # API failure: recorded, never answered
                assert result.error and result.value is None and answered == 0
                n_api_failures += 1
            else:  # the stub's answer, parsed; exactly one paid answer per distinct prompt
                assert answered == 1
                assert result.value == value and (result.error is None) == (parse_error is None)
                n_unparseable += result.error is not None
        assert 0 < n_api_failures <= len(docs) * 0.2  # the always-failing prompts (5%) and their copies
        assert n_unparseable > 0
        assert (
            sum(state.answered.values())
            == len(state.answered)
            == N_FAULTY - n_api_failures + (sum(1 for r in results[N_FAULTY:] if r.raw is None))
        )  # copies share their original's answer
        metrics = screener.metrics()
        assert metrics["screen.timeouts"] > 0 and metrics["screen.rate_limited"] > 0
        assert metrics["screen.cost_usd"] == pytest.approx(sum(r.cost_usd for r in results))

        before = dict(state.answered)
        requests_before = state.requests
        again = screener.screen(JOBS, docs, "score")  # rerun: only the failed prompts are asked again
        assert state.answered == before
        failed_prompts = {d.text for d, r in zip(docs, results) if r.raw is None}
        assert state.requests - requests_before == len(failed_prompts) * screener.settings.max_attempts
        assert [(r.value, r.raw) for r in again] == [(r.value, r.raw) for r in results]
        assert all(r.cached for r, first in zip(again, results) if first.raw is not None)


@pytest.mark.parametrize("provider,fmt", [("openai", "openai"), ("anthropic", "anthropic"), ("bedrock", "bedrock:png")])
def test_images_reach_the_provider_in_its_own_base64_format(provider, fmt, tmp_path, monkeypatch):
    from popfair.core.types import Document

    docs = [Document(f"i{k}", "nurse", "image", "", image_png=png(k)) for k in range(6)]
    with StubServer() as stub:
        screener = make_screener(provider, stub.url, tmp_path, monkeypatch)
        results = screener.screen(JOBS, docs, "callback")
        assert all(r.error is None and r.value in (0.0, 1.0) for r in results)
        assert sorted(stub.state.images) == sorted((fmt, d.image_png) for d in docs)
        # the same request with a different image is a different cache entry
        assert (
            len({screener.provider.cache_key(screener.prompts.build("callback", JOBS["nurse"], d)) for d in docs}) == 6
        )


def test_text_only_model_refuses_images_before_any_call(tmp_path, monkeypatch):
    from popfair.core.errors import ConfigError
    from popfair.core.types import Document

    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, vision=False)
        with pytest.raises(ConfigError, match="text-only"):
            screener.screen(JOBS, [Document("x", "nurse", "image", "", image_png=png(1))], "score")
        assert stub.state.requests == 0


def test_callback_outcome_uses_the_papers_system_prompt_and_yes_no(tmp_path, monkeypatch):
    docs = documents(40)
    with StubServer() as stub:
        screener = make_screener("anthropic", stub.url, tmp_path, monkeypatch)
        results = screener.screen(JOBS, docs, "callback")
        prompts = list(stub.state.answered)
        assert all(p.startswith("You are an HR hiring manager screening a job application.") for p in prompts)
        assert {r.value for r in results} == {0.0, 1.0}


def test_budget_stops_cleanly_before_it_is_exceeded_and_rerun_finishes(tmp_path, monkeypatch):
    docs = documents(60)
    with StubServer() as stub:
        price = {"input_per_mtok": 100.0, "output_per_mtok": 1000.0}
        screener = make_screener(
            "openai", stub.url, tmp_path, monkeypatch, price=price, max_cost_usd=0.3, engine={"concurrency": 2}
        )
        plan = screener.plan(JOBS, docs, "score")
        worst_case_per_call = 200 * 1000.0 / 1e6  # max_tokens at the output price dominates
        assert plan.calls == 60 and 60 * worst_case_per_call > 0.3
        results = screener.screen(JOBS, docs, "score")
        done = [r for r in results if r.error is None]
        stopped = [r for r in results if r.error and r.error.startswith("budget exhausted")]
        assert done and stopped and len(done) + len(stopped) == 60
        assert sum(r.cost_usd for r in results) <= 0.3
        assert sum(stub.state.answered.values()) == len(done)  # nothing sent past the budget
        bigger = make_screener("openai", stub.url, tmp_path, monkeypatch, price=price, max_cost_usd=100.0)
        assert bigger.plan(JOBS, docs, "score").calls == len(stopped)
        final = bigger.screen(JOBS, docs, "score")
        assert all(r.error is None for r in final)
        assert set(stub.state.answered.values()) == {1}


def test_rejected_key_stops_sending_and_names_the_variable(tmp_path, monkeypatch):
    docs = documents(200)
    with StubServer(reject_auth=True) as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch)
        with pytest.raises(ScreeningStopped, match="HTTP 401.*check OPENAI_API_KEY"):
            screener.screen(JOBS, docs, "score")
        assert stub.state.requests <= 2 * screener.settings.concurrency  # no retry storm of 401s


def test_missing_key_fails_at_construction_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    from popfair.screen.llm import LLMScreener

    with pytest.raises(MissingSecretError, match="TOGETHER_API_KEY"):
        LLMScreener(
            name="x",
            provider="openai_compatible",
            model="m",
            api_key_env="TOGETHER_API_KEY",
            base_url="http://127.0.0.1:9/v1",
            cache_dir=str(tmp_path),
        )


def test_adaptive_concurrency_halves_on_429_bursts(tmp_path, monkeypatch):
    with StubServer(faults=Faults(rate_limit=0.5, retry_after="0.01")) as stub:
        screener = make_screener(
            "openai", stub.url, tmp_path, monkeypatch, engine={"concurrency": 16, "max_attempts": 12}
        )
        results = screener.screen(JOBS, documents(120), "score")
        assert all(r.error is None for r in results)
        assert screener.metrics()["screen.min_concurrency"] < 16


def test_retry_wait_honours_retry_after_else_exponential_backoff():
    settings = EngineSettings(backoff_initial_s=0.5, backoff_max_s=4.0, backoff_jitter_s=0.0, retry_after_max_s=30.0)
    engine = Engine(settings, provider=None, cache=None, price=None, outcome="score")

    def state(exc, attempt):
        s = RetryCallState(None, None, (), {})
        s.attempt_number = attempt
        s.set_exception((type(exc), exc, None))
        return s

    assert 7.0 <= engine._wait(state(TransientError("429", retry_after=7.0), 1)) <= 7.7
    assert engine._wait(state(TransientError("429", retry_after=999.0), 1)) <= 33.0  # capped
    waits = [engine._wait(state(TransientError("500"), n)) for n in (1, 2, 3, 4, 5)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_rate_limiter_holds_requests_per_minute():
    async def go():
        limiter = RateLimiter(requests_per_minute=1200, tokens_per_minute=None)  # 20/s, 1 s burst
        start = time.monotonic()
        for _ in range(50):
            await limiter.acquire(10)
        return time.monotonic() - start

    elapsed = asyncio.run(go())
    assert 1.3 <= elapsed <= 3.0  # (50 - 20 burst) / 20 per s = 1.5 s


def test_tokens_per_minute_limit_paces_large_requests():
    async def go():
        limiter = RateLimiter(requests_per_minute=None, tokens_per_minute=60_000)  # 1,000 tokens/s
        start = time.monotonic()
        for _ in range(4):
            await limiter.acquire(500)
        return time.monotonic() - start

    assert 0.8 <= asyncio.run(go()) <= 2.0  # 2,000 tokens, 1,000 burst -> about 1 s
