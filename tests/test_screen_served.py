"""route=local: a run records what the self-hosted server served (its /models entry, the engine
version, the kernels asked for) and the settings sent, in MLflow and in the response cache's keys;
servers of the same model and engine share one cache. Against the local stub, through the real
openai SDK with base_url on 127.0.0.1."""

from __future__ import annotations

import mlflow
import pytest

from popfair.case.compose import build
from popfair.core.errors import ConfigError, ScreeningStopped
from popfair.screen.llm import LLMScreener
from tests.conftest import compose_config, popfair_in_process
from tests.llm_stub import StubServer
from tests.screen_helpers import FAST_ENGINE, JOBS, documents

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # conf/screener/llama31_8b.yaml's local route
VLLM_CARD = {"root": "/models/Llama-3.1-8B-Instruct", "owned_by": "vllm", "max_model_len": 8192}


def vllm_stub(version: str = "0.11.0", models: tuple = (MODEL,)) -> StubServer:
    return StubServer(models=models, model_fields=dict(VLLM_CARD), version=version)


def local_screener(url: str, cache, **settings) -> LLMScreener:
    return LLMScreener(
        name="llama31_8b",
        provider="openai_compatible",
        model=MODEL,
        api_key_env=None,
        base_url=f"{url}/v1",
        cache_dir=str(cache),
        engine=dict(FAST_ENGINE),
        **settings,
    )


def test_a_local_route_population_case_records_the_served_model_and_the_settings_sent(tmp_path):
    with vllm_stub() as stub:
        out = popfair_in_process(
            "screener=llama31_8b",
            "screener.route=local",
            f"screener.routes.local.base_url={stub.url}/v1",
            "screener.batch_invariant=true",
            "screener.generation.seed=0",
            "occupation=nurse",
            "population.n=60",
            "estimator=outcome_gap",
            "screener.engine.progress=false",
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert stub.state.requests >= 60
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = mlflow.search_runs(experiment_names=["popfair"]).iloc[0]
    assert run["tags.route"] == "local"
    assert run["tags.served.id"] == MODEL and run["tags.served.root"] == VLLM_CARD["root"]
    assert run["tags.served.owned_by"] == "vllm" and run["tags.served.max_model_len"] == "8192"
    assert run["tags.served.engine_version"] == "0.11.0"
    assert run["tags.served.batch_invariant_requested"] == "true"
    assert run["tags.served.endpoint"] == f"{stub.url}/v1"
    # the greedy settings sent with every request
    assert run["tags.request.model"] == MODEL and run["tags.request.temperature"] == "0.0"
    assert run["tags.request.max_tokens"] == "200" and run["tags.request.seed"] == "0"
    assert "tags.request.top_p" not in run or run.isna()["tags.request.top_p"]  # not sent: not recorded
    assert run["params.screener.batch_invariant"] == "True"


def test_servers_of_one_model_and_engine_share_the_cache_and_another_engine_asks_again(tmp_path):
    docs = documents(12)
    with vllm_stub() as first, vllm_stub() as second, vllm_stub(version="0.12.0") as upgraded:
        answers = [r.value for r in local_screener(first.url, tmp_path).screen(JOBS, docs, "score")]
        assert first.state.requests == 12
        again = local_screener(second.url, tmp_path)  # another GPU serving the same model
        assert [r.value for r in again.screen(JOBS, docs, "score")] == answers
        assert second.state.requests == 0 and second.state.model_requests == 2  # asked what it serves only
        local_screener(upgraded.url, tmp_path).screen(JOBS, docs, "score")
        assert upgraded.state.requests == 12  # another engine version: answers of its own
        local_screener(second.url, tmp_path, batch_invariant=True).screen(JOBS, docs, "score")
        assert second.state.requests == 12  # batch-invariant kernels asked for: another key


def test_a_model_id_the_server_does_not_serve_is_named_with_what_it_serves(tmp_path):
    with vllm_stub(models=("Qwen/Qwen2.5-7B-Instruct",)) as stub:
        with pytest.raises(ConfigError, match="serves Qwen/Qwen2.5-7B-Instruct, not 'meta-llama/Llama-3.1-8B"):
            local_screener(stub.url, tmp_path).screen(JOBS, documents(2), "score")
        assert stub.state.requests == 0


def test_a_server_that_is_down_stops_the_case_with_the_fix_and_a_dry_run_plans_every_call(tmp_path):
    with vllm_stub() as stub:
        url = stub.url
        local_screener(url, tmp_path).screen(JOBS, documents(4), "score")  # the cache holds this model now
    screener = local_screener(url, tmp_path)
    assert screener.plan(JOBS, documents(4), "score").calls == 4  # cannot tell what is cached: all counted
    with pytest.raises(ScreeningStopped, match="connection refused.*check screener.base_url"):
        screener.screen(JOBS, documents(4), "score")


def test_batch_invariant_is_refused_on_a_hosted_route_and_seed_on_a_non_openai_provider(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-0123456789")
    cfg = compose_config(["screener=gpt4o_mini", "screener.batch_invariant=true"], tmp_path=tmp_path)
    with pytest.raises(ConfigError, match="screener.batch_invariant: .* is a hosted API"):
        build(cfg.screener, "screener")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
    with pytest.raises(ConfigError, match="screener.generation: seed cannot be sent to provider anthropic"):
        LLMScreener(
            name="claude",
            provider="anthropic",
            model="claude-haiku-4-5",
            api_key_env="ANTHROPIC_API_KEY",
            cache_dir=str(tmp_path),
            generation={"seed": 1},
        )


# --- the engine's prefix-cache hit rate (popfair.screen.served_metrics) -------------------------------
BLOCK = 4  # words per cached block: the stub caches whole blocks of a prompt's start, as vLLM does


def prefix_cache_counters(prompts: list) -> tuple[int, int]:
    """(hits, queries) in words of an engine that caches every block of every prompt it has seen."""
    seen: set[tuple[str, ...]] = set()
    hits = queries = 0
    for system, user in prompts:
        words = tuple(f"{system}\n{user}".split())
        blocks = [words[: end + BLOCK] for end in range(0, len(words) - BLOCK + 1, BLOCK)]
        hits += BLOCK * next((i for i, block in enumerate(blocks) if block not in seen), len(blocks))
        queries += len(words)
        seen.update(blocks)
    return hits, queries


def vllm_metrics(earlier: tuple[int, int] = (300, 1000)):
    """A /metrics of vLLM's counters (made by prometheus_client, as vLLM does), after `earlier` traffic."""

    def render(state) -> str:
        from prometheus_client import CollectorRegistry, Counter, generate_latest

        registry = CollectorRegistry()
        hits, queries = prefix_cache_counters(state.prompts)
        for name, value in (("hits", hits + earlier[0]), ("queries", queries + earlier[1])):
            counter = Counter(f"vllm:prefix_cache_{name}", name, ["model_name", "engine"], registry=registry)
            counter.labels(MODEL, "0").inc(value)
            counter.labels("another-model", "0").inc(7)  # another model on the server: not this run's
        return generate_latest(registry).decode()

    return render


def test_route_local_records_the_engines_prefix_cache_hit_rate_over_its_own_requests(tmp_path):
    docs = documents(30)
    with StubServer(models=(MODEL,), model_fields=dict(VLLM_CARD), version="0.11.0", metrics=vllm_metrics()) as stub:
        first = local_screener(stub.url, tmp_path / "a")
        first.screen(JOBS, docs[:10], "score")
        second = local_screener(stub.url, tmp_path / "b")
        second.screen(JOBS, docs, "score")
        sent = list(stub.state.prompts)
    assert len(sent) == 40
    before, after = prefix_cache_counters(sent[:10]), prefix_cache_counters(sent)
    expected = (after[0] - before[0]) / (after[1] - before[1])  # the second run's requests only
    metrics = second.metrics()
    assert metrics["served.prefix_cache_hit_rate"] == pytest.approx(expected)
    assert metrics["served.prefix_cache_queried_tokens"] == after[1] - before[1]
    assert metrics["served.prefix_cache_hit_rate"] > 0.5  # the shared part first: most of each prompt is found
    assert first.metrics()["served.prefix_cache_hit_rate"] == pytest.approx(before[0] / before[1])
    # every answer from popfair's own cache: nothing asked, no rate
    with StubServer(models=(MODEL,), model_fields=dict(VLLM_CARD), version="0.11.0", metrics=vllm_metrics()) as stub:
        again = local_screener(stub.url, tmp_path / "b")
        again.screen(JOBS, docs, "score")
    assert stub.state.requests == 0 and "served.prefix_cache_hit_rate" not in again.metrics()


def test_an_engine_without_prefix_cache_metrics_is_said_once_and_records_nothing(tmp_path, caplog):
    import logging

    gauge = "# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate 0.75\n"
    with (
        vllm_stub() as bare,
        StubServer(models=(MODEL,), metrics=lambda state: "# TYPE other gauge\nother 1\n") as other,
        StubServer(models=(MODEL,), metrics=lambda state: gauge) as sglang,
        caplog.at_level(logging.WARNING, logger="popfair.screen"),
    ):
        for _ in range(2):
            for stub in (bare, other):
                screener = local_screener(stub.url, tmp_path / stub.url.rsplit(":", 1)[1])
                screener.screen(JOBS, documents(4), "score")
                assert not any(key.startswith("served.prefix") for key in screener.metrics())
        said = [r.getMessage() for r in caplog.records if "prefix-cache hit rate not recorded" in r.getMessage()]
        assert len(said) == 2  # once per server, though each was asked twice
        assert f"cannot read {bare.url}/metrics" in said[0] and "reports no prefix-cache metric" in said[1]
        engine = local_screener(sglang.url, tmp_path / "sglang")
        engine.screen(JOBS, documents(4), "score")
    assert engine.metrics()["served.prefix_cache_engine_hit_rate"] == 0.75  # the engine's own running rate
