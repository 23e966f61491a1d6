"""screener.samples and screener.score_from against the local stub through the real openai and
anthropic SDKs: k answers per prompt, each its own cache entry (a rerun asks nothing, growing k asks
only the new answers, a kill -9 loses only the answers in flight), `n` choices in one request where the
endpoint takes it, the flip rate at temperature 0, P(yes) and expected scores from the top
log-probabilities, and the one-line refusals."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from popfair.core.errors import ConfigError
from popfair.screen.calls import sample_key
from popfair.screen.parse import logprob_value
from popfair.screen.request_loop import noise_metrics
from popfair.screen.simulated import SimulatedScreener
from popfair.screen.tfidf import TfidfScreener
from tests.llm_stub import StubServer, expected_answer, prompt_text, unit, yes_probability
from tests.screen_helpers import JOBS, documents, make_screener
from tests.test_screen_resume import ROOT, cached_rows
from tests.test_screen_served import local_screener, vllm_stub

N = 24
HOT = {"temperature": 1.0}


def prompts_of(screener, docs, outcome="callback"):
    """(system, user) of each document, as the stub sees them."""
    system = screener.prompts.system(outcome)
    return [(system, user) for user in screener.prompts.users(outcome, JOBS, docs)]


def sample_values(screener, docs, k, outcome="callback"):
    """Each document's k cached answers, read from the cache by their sample keys."""
    system = screener.prompts.system(outcome)
    keys = screener.provider.cache_keys(system, screener.prompts.users(outcome, JOBS, docs))
    got = screener.cache.get_many([sample_key(key, j) for key in keys for j in range(k)])
    return [[got[sample_key(key, j)].value for j in range(k)] for key in keys]


def test_k_answers_per_prompt_come_in_one_request_with_n_and_a_rerun_asks_nothing(tmp_path, monkeypatch):
    docs = documents(N)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT)
        plan = screener.plan(JOBS, docs, "callback")
        assert plan.calls == N and plan.output_tokens == 3 * N * screener.expected_output_tokens
        results = screener.screen(JOBS, docs, "callback")
        # one request per prompt asking n=3; three answers generated per prompt, each cached
        assert stub.state.n_requested == [3] * N and set(stub.state.choices.values()) == {3}
        assert len(stub.state.choices) == N and cached_rows(str(tmp_path)) == 3 * N
        values = sample_values(screener, docs, 3)
        assert [r.value for r in results] == pytest.approx([sum(v) / 3 for v in values])
        assert all(r.error is None for r in results)
        m = screener.metrics()
        assert m["screen.answered"] == 3 * N and m["screen.requests"] == N and m["screen.samples"] == 3
        assert m["screen.flip_rate"] == pytest.approx(np.mean([len(set(v)) > 1 for v in values]))
        assert 0 < m["screen.noise_share"] <= 1
        # the rerun asks nothing: every answer from the cache
        before = stub.state.requests
        again = make_screener("openai", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT)
        assert again.plan(JOBS, docs, "callback").calls == 0
        assert [r.value for r in again.screen(JOBS, docs, "callback")] == [r.value for r in results]
        assert stub.state.requests == before and again.metrics()["screen.rows_from_cache"] == N


def test_growing_k_from_3_to_5_pays_for_2_answers_per_prompt(tmp_path, monkeypatch):
    docs = documents(N)
    with StubServer() as stub:
        make_screener("openai", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT).screen(
            JOBS, docs, "callback"
        )
        five = make_screener("openai", stub.url, tmp_path, monkeypatch, samples=5, generation=HOT)
        plan = five.plan(JOBS, docs, "callback")
        assert (plan.calls, plan.cached, plan.output_tokens) == (N, 3 * N, 2 * N * five.expected_output_tokens)
        results = five.screen(JOBS, docs, "callback")
        assert stub.state.n_requested == [3] * N + [2] * N  # the 2 new answers of each prompt, one request
        assert set(stub.state.choices.values()) == {5}
        assert five.metrics()["screen.output_tokens"] == 2 * N  # the stub bills one token per answer
        assert [r.value for r in results] == pytest.approx([sum(v) / 5 for v in sample_values(five, docs, 5)])


def test_one_answer_keeps_todays_keys_so_an_old_cache_counts_as_the_first_answer(tmp_path, monkeypatch):
    docs = documents(N)
    with StubServer() as stub:
        one = make_screener("openai", stub.url, tmp_path, monkeypatch, generation=HOT)
        first = one.screen(JOBS, docs, "callback")
        system = one.prompts.system("callback")
        keys = one.provider.cache_keys(system, one.prompts.users("callback", JOBS, docs))
        assert all(sample_key(key, 0) == key for key in keys) and len({sample_key(keys[0], j) for j in range(4)}) == 4
        three = make_screener("openai", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT)
        three.screen(JOBS, docs, "callback")
        assert stub.state.n_requested == [1] * N + [2] * N
        assert [v[0] for v in sample_values(three, docs, 3)] == [r.value for r in first]


def test_without_n_each_answer_is_its_own_request(tmp_path, monkeypatch):
    """Anthropic takes no `n`; at temperature 0 OpenAI-style requests go one per answer too (a
    determinism check compares separate requests)."""
    docs = documents(N)
    with StubServer() as stub:
        make_screener("anthropic", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT).screen(
            JOBS, docs, "callback"
        )
        assert set(stub.state.answered.values()) == {3} and stub.state.n_requested == [1] * 3 * N
    with StubServer() as stub:
        cold = make_screener("openai", stub.url, tmp_path / "cold", monkeypatch, samples=2)
        assert cold.plan(JOBS, docs, "callback").calls == 2 * N
        cold.screen(JOBS, docs, "callback")
        assert stub.state.n_requested == [1] * 2 * N and set(stub.state.answered.values()) == {2}


def test_flip_rate_at_temperature_0_shows_an_endpoint_that_is_not_deterministic(tmp_path, monkeypatch, caplog):
    docs = documents(60)
    with StubServer() as stub:
        steady = make_screener("openai", stub.url, tmp_path / "a", monkeypatch, samples=2)
        steady.screen(JOBS, docs, "callback")
        assert steady.metrics()["screen.flip_rate"] == 0.0
    # a quarter of the prompts are answered afresh each time even at temperature 0 (batching, kernels)
    with StubServer(unstable_share=0.25) as stub, caplog.at_level(logging.INFO, "popfair.screen"):
        wobbly = make_screener("openai", stub.url, tmp_path / "b", monkeypatch, samples=2)
        wobbly.screen(JOBS, docs, "callback")
        values = sample_values(wobbly, docs, 2)
        flipped = np.mean([a != b for a, b in values])
        unstable = [unit("unstable", prompt_text(*p)) < 0.25 for p in prompts_of(wobbly, docs)]
        assert 0 < flipped <= np.mean(unstable)  # only unstable prompts can flip
        assert wobbly.metrics()["screen.flip_rate"] == pytest.approx(flipped)
        assert any(
            "answered differently" in r.message and "not deterministic" in r.message and r.levelno == logging.WARNING
            for r in caplog.records
        )


def test_route_local_logs_the_flip_rate_beside_batch_invariant_requested(tmp_path):
    with vllm_stub() as stub:
        screener = local_screener(stub.url, tmp_path, batch_invariant=True, samples=2)
        screener.screen(JOBS, documents(10), "callback")
        assert screener.run_tags["served.batch_invariant_requested"] == "true"
        assert screener.run_tags["served.flip_rate"] == "0.0000"


def test_p_yes_and_expected_scores_are_read_from_the_top_logprobs_and_cached(tmp_path, monkeypatch):
    docs = documents(N)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, score_from="logprobs")
        results = screener.screen(JOBS, docs, "callback")
        # the stub spells the first token as yes, " Yes", "Yes" or " yes" (by prompt); P(yes) is exact
        truth = [yes_probability(*p) for p in prompts_of(screener, docs)]
        assert [r.value for r in results] == pytest.approx(truth, abs=1e-9)
        scores = screener.screen(JOBS, docs, "score")
        centres = [int(unit("answer", prompt_text(*p)) * 101) for p in prompts_of(screener, docs, "score")]
        assert [r.value for r in scores] == pytest.approx(centres, abs=1e-6)
        asked = stub.state.requests
        again = make_screener("openai", stub.url, tmp_path, monkeypatch, score_from="logprobs")
        assert [r.value for r in again.screen(JOBS, docs, "callback")] == [r.value for r in results]
        assert [r.value for r in again.screen(JOBS, docs, "score")] == [r.value for r in scores]
        assert stub.state.requests == asked  # probabilities come from the cache
        # text answers of the same prompts are other cache entries (the request differs): 0/1 values
        text = make_screener("openai", stub.url, tmp_path, monkeypatch).screen(JOBS, docs, "callback")
        assert {r.value for r in text} <= {0.0, 1.0}
        system = screener.prompts.system("callback")
        users = screener.prompts.users("callback", JOBS, docs)
        assert [r.value for r in text] == [float(expected_answer(system, u) == "yes") for u in users]


def test_logprob_value_normalises_over_yes_and_no_spellings():
    top = [(" Yes", math.log(0.3)), ("yes", math.log(0.1)), (" No", math.log(0.4)), ("Maybe", math.log(0.2))]
    assert logprob_value(top, "callback") == (pytest.approx(0.5), None)
    assert logprob_value([("The", 0.0)], "callback")[0] is None
    assert logprob_value([("80", math.log(0.5)), (" 60", math.log(0.25)), ("x", math.log(0.25))], "score")[
        0
    ] == pytest.approx((80 * 0.5 + 60 * 0.25) / 0.75)
    assert logprob_value((), "score")[1].startswith("no log-probabilities")


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_providers_without_logprobs_refuse_them_naming_those_that_have_them(provider, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"^screener.score_from: logprobs needs .*openai.* does not") as error:
        make_screener(provider, "http://127.0.0.1:9", tmp_path, monkeypatch, score_from="logprobs")
    assert "\n" not in str(error.value)


def test_the_ranking_design_refuses_logprobs_and_repeated_answers(tmp_path, monkeypatch):
    docs = documents(4)
    for setting, key in ((dict(score_from="logprobs"), "score_from"), (dict(samples=2), "samples")):
        screener = make_screener("openai", "http://127.0.0.1:9", tmp_path, monkeypatch, **setting)
        with pytest.raises(ConfigError, match=rf"^screener.{key}: the ranking design reads"):
            screener.plan(JOBS, docs, "rank")


def test_deterministic_screeners_refuse_more_than_one_answer():
    with pytest.raises(ConfigError, match=r"^screener.samples: tfidf scores a document by arithmetic"):
        TfidfScreener(samples=2)
    with pytest.raises(ConfigError, match=r"^screener.samples: simulated draws its noise once per document"):
        SimulatedScreener(samples=3)
    TfidfScreener(samples=1)
    from popfair.screen.embedding import EmbeddingScreener
    from popfair.screen.file_results import FileScreener

    with pytest.raises(ConfigError, match=r"^screener.samples: embedding_minilm scores a document by arithmetic"):
        EmbeddingScreener(samples=2)
    with pytest.raises(ConfigError, match=r"^screener.samples: file reads one answer per document"):
        FileScreener(dir="x", samples=2)


def test_noise_share_matches_a_one_way_anova_and_the_simulated_truth():
    rng = np.random.default_rng(5)
    n, k, sd_between, sd_within = 4000, 3, 1.0, 2.0
    prompts = rng.normal(0, sd_between, (n, 1)) + rng.normal(0, sd_within, (n, k))
    m = noise_metrics(prompts.tolist(), k)
    frame = pd.DataFrame({"prompt": np.repeat(np.arange(n), k), "y": prompts.ravel()})
    msw = frame.groupby("prompt")["y"].var().mean()  # ANOVA mean squares, independently
    msb = k * frame.groupby("prompt")["y"].mean().var()
    assert m["screen.noise_share"] == pytest.approx(k * msw / (msb + (k - 1) * msw), rel=1e-9)
    assert m["screen.noise_share"] == pytest.approx(sd_within**2 / (sd_within**2 + sd_between**2), abs=0.03)
    assert m["screen.flip_rate"] == 1.0 and noise_metrics([[1.0, 1.0]] * 3, 2)["screen.flip_rate"] == 0.0


def test_kill_9_during_a_k3_run_then_rerun_asks_only_the_answers_in_flight(tmp_path):
    n, kill_after = 60, 25  # requests answered (3 answers each) before the stub holds the rest
    cache, out = str(tmp_path / "cache"), tmp_path / "out.json"
    with StubServer(latency_s=0.01, hold_after=kill_after) as stub:
        worker = _start_sampled(stub.url, cache, out, n)
        deadline = time.monotonic() + 120
        while cached_rows(cache) < 3 * kill_after or stub.state.held == 0:
            assert worker.poll() is None, worker.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "worker too slow"
            time.sleep(0.02)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert cached_rows(cache) == 3 * kill_after == sum(stub.state.choices.values())
        in_flight = stub.state.held
        stub.state.hold_after = None
        stub.state.released.set()
        rerun = _start_sampled(stub.url, cache, out, n)
        _, stderr = rerun.communicate(timeout=180)
        assert rerun.returncode == 0, stderr.decode()[-3000:]
        rows = json.loads(out.read_text())["rows"]
        assert len(rows) == n and all(error is None for _, _, error, _ in rows)
        # every prompt's 3 answers were generated once: nothing answered before the kill is asked again
        assert len(stub.state.choices) == n and set(stub.state.choices.values()) == {3}
        asked_again = [p for p, tries in stub.state.attempts.items() if tries > 1]
        assert 1 <= len(asked_again) == in_flight <= 4  # the requests in flight (the worker's concurrency)


def _start_sampled(url, cache, out, n):
    """A screening process asking each of n prompts 3 times at temperature 1 (tests.screen_worker)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "test-key-kill-0123456789"}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.screen_worker", url, cache, str(out), str(n), "600", "3", "1.0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_two_processes_with_k3_generate_each_answer_once(tmp_path):
    n, cache = 60, str(tmp_path / "cache")
    with StubServer(latency_s=0.01) as stub:
        workers = [_start_sampled(stub.url, cache, tmp_path / f"out{i}.json", n) for i in range(2)]
        for worker in workers:
            _, stderr = worker.communicate(timeout=180)
            assert worker.returncode == 0, stderr.decode()[-3000:]
        assert set(stub.state.choices.values()) == {3} and len(stub.state.choices) == n
        for i in range(2):
            rows = json.loads((tmp_path / f"out{i}.json").read_text())["rows"]
            assert all(error is None for _, _, error, _ in rows)


def test_logprob_scores_give_a_narrower_paired_ci_than_text_answers_on_the_same_prompts(tmp_path, monkeypatch):
    """Pairs of resumes that differ in one group word; the stub's P(yes) is a number of the resume plus
    5-15 pp for group A (the known gap: their mean over these pairs). Text answers (T=0: one yes/no draw per prompt) against P(yes) read from the
    same prompts' log-probabilities: the posting-clustered CI of the paired gap is narrower."""
    from popfair.core.types import Document
    from popfair.estimate.gap.paired import paired_gap

    def share(user: str) -> float:
        plain = user.replace("group A", "group").replace("group B", "group")
        effect = 0.05 + 0.1 * unit("effect", plain)  # 5-15 pp, by resume
        return 0.2 + 0.5 * unit("base", plain) + (effect if "group A" in user else 0.0)

    n = 400
    docs = [
        Document(f"{g}{i}", "nurse", "text", f"Applicant {i} group {g}\nExperience: {i % 13} years")
        for i in range(n)
        for g in "AB"
    ]
    with StubServer(yes_share=share) as stub:
        widths = {}
        for score_from in ("text", "logprobs"):
            screener = make_screener("openai", stub.url, tmp_path, monkeypatch, score_from=score_from)
            values = [r.value for r in screener.screen(JOBS, docs, "callback")]
            prompts = screener.prompts.users("callback", JOBS, docs)
            truth = 100 * np.mean([share(a) - share(b) for a, b in zip(prompts[0::2], prompts[1::2])])
            pairs = pd.DataFrame({"a": values[0::2], "b": values[1::2], "posting": np.arange(n) // 4})
            result = paired_gap(pairs, y_adv="a", y_other="b", cluster="posting", n_bootstrap=1000)
            widths[score_from] = result.ci_high - result.ci_low
            assert result.ci_low < truth < result.ci_high
        assert widths["logprobs"] < widths["text"] / 3, widths


def test_batch_mode_sends_k_requests_per_prompt(tmp_path, monkeypatch):
    """A provider batch carries no `n`: each answer is its own line (its own cache key)."""
    docs = documents(N)
    with StubServer(batch_polls=1) as stub:
        settings = dict(mode="batch", batch={"poll_interval_s": 0.01}, samples=3, generation=HOT)
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, **settings)
        assert screener.plan(JOBS, docs, "callback").calls == 3 * N
        results = screener.screen(JOBS, docs, "callback")
        assert all(r.error is None for r in results) and set(stub.state.answered.values()) == {3}
        assert cached_rows(str(tmp_path)) == 3 * N
        again = make_screener("openai", stub.url, tmp_path, monkeypatch, **settings)
        assert again.plan(JOBS, docs, "callback").calls == 0
        assert [r.value for r in again.screen(JOBS, docs, "callback")] == [r.value for r in results]
        assert len(stub.state.batches) == 1


def test_an_http_endpoint_is_asked_k_times_per_document(tmp_path):
    """screener=http takes samples: k requests per document (no `n`), priced by the plan, each answer
    its own cache entry; a deterministic vendor gives a flip rate of 0."""
    from tests import vendor_stub
    from tests.test_screen_http import DECISIONS, FAST, docs
    from tests.test_screen_http import JOBS as VENDOR_JOBS

    server, state, url = vendor_stub.start(vendor_stub.VendorState())
    try:
        settings = dict(url=url, response_path="$.result.decision", values=DECISIONS, cache_dir=str(tmp_path),
                        engine=FAST, samples=3, price_per_call_usd=0.01)  # fmt: skip
        from popfair.screen.http_endpoint import HttpScreener

        screener = HttpScreener(**settings)
        documents = docs(20)
        plan = screener.plan(VENDOR_JOBS, documents, "callback")
        assert plan.calls == 60 and plan.cost_usd == pytest.approx(0.6)
        results = screener.screen(VENDOR_JOBS, documents, "callback")
        assert all(r.error is None for r in results) and set(state.attempts.values()) == {3}
        assert screener.metrics()["screen.flip_rate"] == 0.0
        assert HttpScreener(**settings).plan(VENDOR_JOBS, documents, "callback").calls == 0
    finally:
        server.shutdown()


def test_an_endpoint_that_ignores_n_has_the_missing_answers_asked_again(tmp_path, monkeypatch, caplog):
    docs = documents(N)
    with StubServer(ignore_n=True) as stub, caplog.at_level(logging.WARNING, "popfair.screen"):
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, samples=3, generation=HOT)
        results = screener.screen(JOBS, docs, "callback")
        assert all(r.error is None for r in results)
        assert set(stub.state.choices.values()) == {3} and set(stub.state.answered.values()) == {3}
        assert cached_rows(str(tmp_path)) == 3 * N and screener.metrics()["screen.answered"] == 3 * N
        assert [r.value for r in results] == pytest.approx([sum(v) / 3 for v in sample_values(screener, docs, 3)])
        assert sum("answered 1 of n=3" in r.message for r in caplog.records) == 1
