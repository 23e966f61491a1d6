"""Batch mode (OpenAI Batch API, Anthropic Message Batches) through the real SDKs against the stub:
submit, poll, collect; failed entries recorded; an interrupted run resumes from the stored batch id."""

from __future__ import annotations

import pytest

from popfair.screen.parse import parse_answer
from tests.llm_stub import Faults, StubServer, expected_answer, prompt_text
from tests.screen_helpers import JOBS, documents, make_screener

BATCH = {"poll_interval_s": 0.01}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_batch_mode_submits_polls_and_collects(provider, tmp_path, monkeypatch):
    docs = documents(40)
    with StubServer(faults=Faults(always_fail=0.1), batch_polls=2) as stub:
        screener = make_screener(
            provider, stub.url, tmp_path, monkeypatch, mode="batch", batch={**BATCH, "max_requests": 15}
        )
        plan = screener.plan(JOBS, docs, "callback")
        assert plan.cost_usd == pytest.approx(0.5 * screener.price.cost(plan.input_tokens, plan.output_tokens))
        results = screener.screen(JOBS, docs, "callback")
        assert len(stub.state.batches) == 3  # 40 requests in batches of at most 15
        failed = 0
        for doc, result in zip(docs, results):
            prompt = screener.prompts.build("callback", JOBS[doc.job_id], doc)
            if result.error:
                assert result.error.startswith("batch entry failed") and result.raw is None
                failed += 1
            else:
                assert (result.value, None) == parse_answer(expected_answer(prompt.system, prompt.user), "callback")
                assert stub.state.answered[prompt_text(prompt.system, prompt.user)] == 1
        assert 0 < failed < 40
        assert screener.cache.open_batches(provider, screener.provider.endpoint, "stub-model") == []
        assert sum(r.cost_usd for r in results) == pytest.approx(
            0.5 * screener.price.cost(sum(r.input_tokens for r in results), sum(r.output_tokens for r in results))
        )
        again = screener.screen(JOBS, docs, "callback")  # only the failed entries go into a new batch
        assert len(stub.state.batches) == 4 and [r.value for r in again] == [r.value for r in results]


def test_interrupted_batch_run_resumes_from_the_stored_batch_id(tmp_path, monkeypatch):
    docs = documents(25)
    with StubServer(batch_polls=10_000) as stub:  # the batch stays "in progress"
        screener = make_screener(
            "openai", stub.url, tmp_path, monkeypatch, mode="batch", batch={**BATCH, "max_wait_s": 0.05}
        )
        first = screener.screen(JOBS, docs, "score")
        assert all(r.error and "rerun to collect" in r.error for r in first)
        open_batches = screener.cache.open_batches("openai", screener.provider.endpoint, "stub-model")
        assert [b.batch_id for b in open_batches] == ["batch-0"] and len(open_batches[0].keys) == 25

        stub.state.batch_polls = 0  # the provider finishes the batch
        resumed = make_screener("openai", stub.url, tmp_path, monkeypatch, mode="batch", batch=BATCH)
        results = resumed.screen(JOBS, docs, "score")
        assert all(r.error is None for r in results)
        assert len(stub.state.batches) == 1  # collected, not resubmitted
        assert set(stub.state.answered.values()) == {1}
        assert resumed.cache.open_batches("openai", resumed.provider.endpoint, "stub-model") == []


def test_prompts_another_process_is_submitting_are_not_batched_twice(tmp_path, monkeypatch):
    """Parallel cases in batch mode: prompts claimed by another process are left to its batch."""
    docs = documents(20)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, mode="batch", batch=BATCH)
        keys = [screener.provider.cache_key(screener.prompts.build("score", JOBS[d.job_id], d)) for d in docs]
        screener.cache.claim(keys[:5], "other-host:1:abc", 600.0)  # a parallel case is uploading these
        first = screener.screen(JOBS, docs, "score")
        assert [r.error is not None and "another process" in r.error for r in first] == [True] * 5 + [False] * 15
        assert len(stub.state.answered) == 15
        screener.cache.release("other-host:1:abc")  # its batch is recorded (or its lease ran out)
        again = screener.screen(JOBS, docs, "score")
        assert all(r.error is None for r in again)
        assert len(stub.state.answered) == 20 and set(stub.state.answered.values()) == {1}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_batch_api_calls_that_fail_for_a_while_are_retried(provider, tmp_path, monkeypatch):
    docs = documents(12)
    with StubServer(batch_polls=1) as stub:
        stub.state.batch_faults = [500, 429, 503]  # the upload, then the retries, then polls fail once each
        screener = make_screener(provider, stub.url, tmp_path, monkeypatch, mode="batch", batch=BATCH)
        results = screener.screen(JOBS, docs, "callback")
        assert all(r.error is None for r in results) and len(stub.state.batches) == 1
        assert stub.state.batch_faults == []


@pytest.mark.parametrize(
    ("provider", "faults", "cause", "fix"),
    [
        ("openai", [401], "HTTP 401", "check OPENAI_API_KEY"),
        ("anthropic", [401], "HTTP 401", "check ANTHROPIC_API_KEY"),
        ("openai", [404], "HTTP 404", "wrong model id or path"),
        ("openai", [500] * 10, "HTTP 500", "check the endpoint's status"),
    ],
)
def test_a_batch_api_that_cannot_answer_stops_the_case_in_one_line(provider, faults, cause, fix, tmp_path, monkeypatch):
    from popfair.core.errors import ScreeningStopped

    docs = documents(8)
    with StubServer() as stub:
        stub.state.batch_faults = list(faults)
        screener = make_screener(provider, stub.url, tmp_path, monkeypatch, mode="batch", batch=BATCH)
        with pytest.raises(ScreeningStopped) as stopped:
            screener.screen(JOBS, docs, "callback")
        message = str(stopped.value)
        assert "\n" not in message and f": {cause} (" in message and fix in message
        assert "rerun to resume" in message and "test-key" not in message
        assert stub.state.batches == {}  # nothing was submitted
        assert len(stub.state.batch_faults) == len(faults) - (1 if cause != "HTTP 500" else 6)
        stub.state.batch_faults = []  # fixed: the rerun submits and collects
        again = make_screener(provider, stub.url, tmp_path, monkeypatch, mode="batch", batch=BATCH)
        assert all(r.error is None for r in again.screen(JOBS, docs, "callback"))


def test_batch_mode_is_refused_for_providers_without_a_batch_api(tmp_path, monkeypatch):
    from popfair.core.errors import ConfigError

    with pytest.raises(ConfigError, match="screener.mode"):
        make_screener("bedrock", "http://127.0.0.1:9", tmp_path, monkeypatch, mode="batch")
