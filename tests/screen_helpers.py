"""Shared pieces of the API-screener tests: documents, a screener wired to the local stub."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from popfair.core.types import Document, Job
from popfair.screen.llm import LLMScreener

KEYS = {
    "openai": "OPENAI_API_KEY",
    "openai_compatible": "TOGETHER_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "bedrock": None,
}
FAST_ENGINE = dict(
    concurrency=8,
    # an answer is waited for as long as a loaded machine needs: a client that gives up on an answer the
    # stub has sent asks again, and the stub counts the prompt paid twice (a real API bills both); tests
    # that make the stub hang set their own short timeout_s
    timeout_s=30.0,
    max_attempts=6,
    backoff_initial_s=0.005,
    backoff_max_s=0.02,
    backoff_jitter_s=0.005,
    retry_after_max_s=0.05,
    progress=False,
)
JOBS = {
    "nurse": Job("nurse", "Registered Nurse", "Care for patients; BSN and RN license required."),
    "teacher": Job("teacher", "Teacher", "Teach grade-school pupils."),
}


def documents(n: int, duplicates: int = 0) -> list[Document]:
    """n distinct resumes over two jobs, then `duplicates` exact copies of the first ones."""
    docs = [
        Document(f"a{i}", "nurse" if i % 2 else "teacher", "text", f"Applicant {i}\nExperience: {i % 17} years")
        for i in range(n)
    ]
    copies = [Document(f"dup{i}", d.job_id, d.kind, d.text) for i, d in enumerate(docs[:duplicates])]
    return docs + copies


def png(seed: int, size: tuple[int, int] = (64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (seed % 256, (7 * seed) % 256, 99)).save(buffer, format="PNG")
    return buffer.getvalue()


def base_url(stub_url: str, provider: str) -> str:
    return stub_url + "/v1" if provider in ("openai", "openai_compatible") else stub_url


def make_screener(kind: str, stub_url: str, cache_dir: Path, monkeypatch, **overrides) -> LLMScreener:
    """An LLMScreener of provider `kind` pointed at the stub, with fast backoffs; overrides merge in."""
    provider = kind
    key_env = KEYS[provider]
    if key_env:
        monkeypatch.setenv(key_env, f"test-key-{provider}-0123456789")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTESTTESTTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-access-key-0123456789")
    settings = dict(
        name=f"stub_{provider}",
        provider=provider,
        model="stub-model",
        api_key_env=key_env,
        base_url=base_url(stub_url, provider),
        region="us-east-1",
        cache_dir=str(cache_dir),
        engine=dict(FAST_ENGINE),
        price={"input_per_mtok": 1.0, "output_per_mtok": 4.0},
        vision=True,
    )
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(settings.get(key), dict):
            settings[key] = {**settings[key], **value}
        else:
            settings[key] = value
    return LLMScreener(**settings)
