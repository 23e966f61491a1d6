"""The shared part of a case's prompts comes first on every route: what the model reads of each
prompt begins with the system prompt and the job description, the applicant's document after them,
so the prompts of a job share that start (hf_local computes it once; vLLM's and SGLang's prefix
caches and the hosted APIs' prompt caches only hit on a common start)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from popfair.case.population import PopulationCase
from popfair.screen.prompts import ChatPrompt
from tests.conftest import compose_config
from tests.screen_helpers import make_screener

CASES = {
    "default": ["population.n=30", "population.diagnostics=false"],
    "paired": ["experiment=paired_race", "occupation.n_postings=2"],
}


def case_prompts(name: str, tmp_path: Path):
    case = PopulationCase.from_config(compose_config(["screener=simulated", *CASES[name]], tmp_path=tmp_path))
    profiles = case.sample()
    documents = list(case.prompts(profiles, progress=False).prompts)
    return profiles.jobs, documents, profiles.outcome


def common_start(texts: list[str]) -> str:
    return os.path.commonprefix(texts)


def model_reads(body: dict) -> str:
    """A request body's text in the order the model reads it: the system prompt, then each message's
    parts in order (an image as a marker)."""
    parts = []
    system = body.get("system")
    if system is not None:
        parts.append(system if isinstance(system, str) else "".join(p.get("text", "") for p in system))
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            parts.append(content)
            continue
        for part in content:
            text = part.get("text")
            parts.append(text if isinstance(text, str) else "<image>")
    return "\n".join(parts)


def assert_shared_part_first(prompts: list[str], system: str, jobs, documents) -> None:
    """For each job with two or more documents, the common start of its prompts holds the system
    prompt and the job description, and none of the applicant's document."""
    checked = 0
    for job_id, job in jobs.items():
        mine = [p for p, d in zip(prompts, documents) if d.job_id == job_id]
        texts = {d.text for d in documents if d.job_id == job_id}
        if len(texts) < 2:
            continue
        start = common_start(mine)
        assert system in start and job.description in start, job_id
        assert start.index(system) < start.index(job.description)
        checked += 1
    assert checked > 0


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("provider", ["openai", "openai_compatible", "anthropic", "bedrock"])
def test_every_api_route_sends_the_shared_part_first(case, provider, tmp_path, monkeypatch):
    jobs, documents, outcome = case_prompts(case, tmp_path)
    screener = make_screener(provider, "http://127.0.0.1:9", tmp_path / "cache", monkeypatch)
    system = screener.prompts.system(outcome)
    users = screener.prompts.users(outcome, jobs, documents)
    prompts = [model_reads(screener.provider.body(ChatPrompt(system, user), None)) for user in users]
    assert_shared_part_first(prompts, system, jobs, documents)


def test_route_local_of_an_open_model_sends_the_shared_part_first(tmp_path):
    jobs, documents, outcome = case_prompts("default", tmp_path)
    cfg = compose_config(["screener=llama31_8b", "screener.route=local", "cache_dir=null"], tmp_path=tmp_path)
    from popfair.case.compose import build

    screener = build(cfg.screener, "screener")
    assert screener.served is not None  # a self-hosted vLLM/SGLang server
    system = screener.prompts.system(outcome)
    users = screener.prompts.users(outcome, jobs, documents)
    prompts = [model_reads(screener.provider.body(ChatPrompt(system, user), None)) for user in users]
    assert_shared_part_first(prompts, system, jobs, documents)


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "tokenizers")),
    reason="needs the hflocal extra",
)
@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_local_prompts_share_the_system_prompt_and_job_description(case, tmp_path):
    from popfair.screen.hf_prefix import common_prefix
    from tests.test_screen_hf_local import random_llama, screener

    jobs, documents, outcome = case_prompts(case, tmp_path)
    local = screener(random_llama(tmp_path / "llama"))
    prompts = [local.prompt_text(jobs[d.job_id], d, outcome) for d in documents]
    system = local.prompts.system(outcome)
    assert_shared_part_first(prompts, system, jobs, documents)
    # in tokens too: the prefix hf_local computes once per job holds the system prompt and the job
    for job_id, job in jobs.items():
        mine = [p for p, d in zip(prompts, documents) if d.job_id == job_id]
        if len(set(mine)) < 2:
            continue
        rows = local.tokenizer(mine, add_special_tokens=False)["input_ids"]
        through_job = mine[0][: mine[0].index(job.description) + len(job.description)]
        assert len(common_prefix(rows)) >= len(local.tokenizer(through_job, add_special_tokens=False)["input_ids"])


def test_a_template_with_the_document_first_fails_the_check(tmp_path):
    from popfair.screen.prompts import PromptSet

    jobs, documents, outcome = case_prompts("default", tmp_path)
    backwards = tmp_path / "backwards.txt"
    backwards.write_text("Resume:\n{document}\n\nJob description:\n{job_description}\n")
    prompts = PromptSet({f"{outcome}_user": str(backwards)})
    system = prompts.system(outcome)
    texts = [f"{system}\n{user}" for user in prompts.users(outcome, jobs, documents)]
    with pytest.raises(AssertionError):
        assert_shared_part_first(texts, system, jobs, documents)
