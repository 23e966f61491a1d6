"""hf_local with tiny models built from configs (no download): every document ends as a parsed
value or a recorded failure with its raw text; known answers flow through prompt -> greedy
generation -> parsing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from popfair.case.compose import build
from popfair.core.errors import ConfigError
from popfair.core.types import Document, Job
from popfair.screen.parse import parse_answer
from tests.conftest import compose_config

# torch and transformers are imported by the tests that build a model, not at collection (seconds per worker)
_missing = [m for m in ("torch", "transformers", "tokenizers") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(_missing), reason=f"needs the hflocal extra ({_missing}): pip install 'popfair[hflocal]'"
)

SPECIAL = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
WORDS = (
    SPECIAL
    + [
        "yes",
        "no",
        "maybe",
        "the",
        "a",
        "score",
        "is",
        "candidate",
        "job",
        "nurse",
        "care",
        "patients",
        "years",
        "experience",
    ]
    + [str(i) for i in range(0, 151)]
)
CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
NO_SYSTEM_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}" + CHAT
)
JOBS = {"nurse": Job(job_id="nurse", title="nurse", description="care for patients")}


def save_tokenizer(path: Path, chat_template: str | None = CHAT) -> None:
    """A word-level tokenizer over WORDS with a minimal chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(path)


def random_llama(path: Path, context: int = 256, chat_template: str | None = CHAT) -> Path:
    """A randomly initialised 2-layer Llama (seeded)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    save_tokenizer(path, chat_template)
    return path


def rigged_gpt2(path: Path, answer: str) -> Path:
    """A random GPT-2 whose final layer norm emits a constant vector aligned with the embedding of
    `answer`, so greedy decoding says `answer` at every step, whatever the prompt."""
    import torch
    import transformers

    torch.manual_seed(1)
    config = transformers.GPT2Config(
        vocab_size=len(WORDS),
        n_embd=32,
        n_layer=1,
        n_head=2,
        n_positions=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    model = transformers.GPT2LMHeadModel(config)
    target = WORDS.index(answer)
    with torch.no_grad():
        direction = torch.randn(config.n_embd)
        direction /= direction.norm()
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(direction)
        model.transformer.wte.weight[target] = 10.0 * direction  # tied to the output layer
    model.save_pretrained(path)
    save_tokenizer(path)
    return path


def screener(model_path: Path, *overrides: str):
    """An hf_local screener on CPU; answers kept nowhere unless an override names a cache_dir (two
    screeners of one model would otherwise share this process's memory store)."""
    from popfair.store.blobs import GENERATIONS, MemoryBlobStore

    MemoryBlobStore.clear(GENERATIONS)
    cfg = compose_config(
        [
            "screener=hf_local",
            f"screener.model_path={model_path}",
            "screener.device=cpu",
            "screener.max_new_tokens=5",
            "screener.batch_size=4",
            "cache_dir=null",
            *overrides,
        ]
    )
    return build(cfg.screener, "screener")


def documents(n: int) -> list[Document]:
    rng = np.random.default_rng(0)
    words = ["nurse", "care", "patients", "years", "experience", "candidate", "yes", "no", "42", "7"]
    return [
        Document(
            applicant_id=f"a{i}",
            job_id="nurse",
            kind="text",
            text=" ".join(rng.choice(words, size=rng.integers(3, 30))),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    return random_llama(tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("outcome", ["score", "callback"])
def test_random_model_answers_are_each_parsed_or_recorded_as_failures(llama_dir, outcome):
    docs = documents(11)
    results = screener(llama_dir).screen(JOBS, docs, outcome)
    assert [r.applicant_id for r in results] == [d.applicant_id for d in docs]  # none lost, in order
    for r in results:
        assert isinstance(r.raw, str) and r.input_tokens > 0 and 1 <= r.output_tokens <= 5
        if r.error is None:
            assert (0 <= r.value <= 100) if outcome == "score" else r.value in (0.0, 1.0)
        else:
            assert r.value is None and "unparseable" in r.error


def test_batched_generation_matches_one_prompt_at_a_time(llama_dir):
    docs = documents(9)
    batched = screener(llama_dir, "screener.batch_size=4").screen(JOBS, docs, "score")
    single = screener(llama_dir, "screener.batch_size=1").screen(JOBS, docs, "score")
    assert [r.raw for r in batched] == [r.raw for r in single]  # left padding changes nothing


@pytest.mark.parametrize(
    "answer,outcome,value",
    [
        ("yes", "callback", 1.0),
        ("no", "callback", 0.0),
        ("73", "score", 73.0),
        ("0", "score", 0.0),
    ],
)
def test_known_answer_is_parsed_for_every_document(tmp_path, answer, outcome, value):
    results = screener(rigged_gpt2(tmp_path, answer)).screen(JOBS, documents(6), outcome)
    assert [r.value for r in results] == [value] * 6
    assert all(r.error is None and r.raw.split()[0] == answer for r in results)


@pytest.mark.parametrize(
    "answer,outcome,reason",
    [
        ("maybe", "callback", "no 'yes' or 'no'"),
        ("maybe", "score", "no integer"),
        ("150", "score", "outside"),
    ],
)
def test_unusable_answers_are_failures_that_keep_the_raw_text(tmp_path, answer, outcome, reason):
    results = screener(rigged_gpt2(tmp_path, answer)).screen(JOBS, documents(5), outcome)
    assert len(results) == 5
    assert all(r.value is None and reason in r.error and r.raw.startswith(answer) for r in results)


def test_prompt_longer_than_the_context_is_a_failure_not_a_crash(tmp_path):
    path = random_llama(tmp_path, context=160)
    docs = documents(3) + [Document(applicant_id="long", job_id="nurse", kind="text", text="care " * 200)]
    results = screener(path).screen(JOBS, docs, "score")
    assert [r.applicant_id for r in results] == ["a0", "a1", "a2", "long"]
    assert "exceeds the model context 160" in results[-1].error and results[-1].raw is None
    assert all(r.raw is not None for r in results[:3])


def test_system_message_is_folded_into_the_user_turn_when_the_template_rejects_it(tmp_path):
    s = screener(random_llama(tmp_path, chat_template=NO_SYSTEM_CHAT))
    assert s.system_role is False
    text = s.prompt_text(JOBS["nurse"], documents(1)[0], "callback")
    assert "<|system|>" not in text and text.startswith("<|user|> You are an HR hiring manager")
    assert len(s.screen(JOBS, documents(2), "callback")) == 2


def test_plan_makes_no_calls(llama_dir):
    assert screener(llama_dir).plan(JOBS, documents(3), "score").calls == 0


def test_model_path_is_required_and_checked():
    with pytest.raises(ConfigError, match="screener.model_path"):
        build(compose_config(["screener=hf_local"]).screener, "screener")
    with pytest.raises(ConfigError, match="no config.json"):
        build(compose_config(["screener=hf_local", "screener.model_path=/nonexistent"]).screener, "screener")


def test_tokenizer_without_chat_template_is_refused(tmp_path):
    path = random_llama(tmp_path, chat_template=None)
    with pytest.raises(ConfigError, match="chat_template"):
        screener(path)


@pytest.mark.parametrize(
    "override,key",
    [
        ("screener.max_new_tokens=0", "screener.max_new_tokens"),
        ("screener.dtype=int8", "screener.dtype"),
        ("screener.device=tpu", "screener.device"),
        ("screener.prompts.score_user=no_such_prompt.txt", "screener.prompts.score_user"),
    ],
)
def test_bad_values_name_the_key(llama_dir, override, key):
    with pytest.raises(ConfigError, match=key):
        screener(llama_dir, override)


def test_image_documents_are_refused(llama_dir):
    doc = Document(applicant_id="a", job_id="nurse", kind="image", text="", image_png=b"\x89PNG")
    with pytest.raises(ConfigError, match="text only"):
        screener(llama_dir).screen(JOBS, [doc], "score")


# --- token-budget batches, settled replies, stored answers with their provenance ----------------------


def stored_records(cache: Path) -> list[dict]:
    import json

    from popfair.store.blobs import GENERATIONS, open_blob_store

    with open_blob_store(cache, GENERATIONS) as store:
        return [json.loads(blob) for items in store.items() for _, blob in items]


def test_token_budget_batches_answer_as_each_prompt_alone(llama_dir, tmp_path):
    docs = documents(13)
    budget = screener(llama_dir, "screener.batch_size=null", "screener.batch_tokens=600", f"cache_dir={tmp_path}/a")
    batched = budget.screen(JOBS, docs, "score")
    alone = screener(llama_dir, "screener.batch_size=1", f"cache_dir={tmp_path}/b").screen(JOBS, docs, "score")
    assert [r.raw for r in batched] == [r.raw for r in alone]  # fp32, left padding: the batch changes nothing
    sizes = [record["batch_size"] for record in stored_records(tmp_path / "a")]
    assert max(sizes) > 1 and len(set(sizes)) > 1  # the budget made batches of several sizes
    assert all(r["batch_padded_tokens"] <= 600 for r in stored_records(tmp_path / "a"))
    metrics = budget.metrics()
    assert metrics["screen.generated"] == 13 and metrics["screen.batch_size_mean"] > 1
    assert metrics["screen.invariance_checked"] > 0 and metrics["screen.batch_variant_share"] == 0.0


def test_yes_no_case_decodes_at_most_8_new_tokens_and_records_those_cut_short(llama_dir):
    s = screener(llama_dir, "screener.max_new_tokens=auto", "screener.batch_size=null")
    results = s.screen(JOBS, documents(12), "callback")
    assert all(1 <= r.output_tokens <= 8 for r in results)
    cut = [r for r in results if r.error is not None and "cut short at 8 new tokens" in r.error]
    assert s.metrics()["screen.cut_short_rows"] == len(cut) > 0  # a random model rarely says yes or no
    assert all(r.output_tokens == 8 for r in cut)


@pytest.mark.parametrize("answer,outcome,value", [("yes", "callback", 1.0), ("73", "score", 73.0)])
def test_decoding_stops_once_the_reading_is_settled(tmp_path, answer, outcome, value):
    path = rigged_gpt2(tmp_path, answer)
    results = screener(path, "screener.max_new_tokens=60").screen(JOBS, documents(3), outcome)
    # "73" alone could still become "730"; "73 73" cannot change its first integer: two tokens
    assert all(r.value == value and r.output_tokens == 2 and r.raw == f"{answer} {answer}" for r in results)


def test_settled_means_no_continuation_changes_the_reading():
    from popfair.screen.hf_generate import settled

    def score(text):
        return parse_answer(text, "score")

    def callback(text):
        return parse_answer(text, "callback")

    assert not settled("7", score) and not settled("7.", score) and settled("73 ", score) and settled("73,", score)
    assert not settled("the score is", score) and not settled("150", score)
    assert not settled("no", callback) and not settled("ye", callback) and settled("No.", callback)
    assert settled("yes, because", callback)


def test_answers_are_kept_with_what_produced_them_and_reused(llama_dir, tmp_path):
    docs = documents(6)
    first = screener(llama_dir, f"cache_dir={tmp_path}")
    answers = [r.raw for r in first.screen(JOBS, docs, "score")]
    records = stored_records(tmp_path)
    assert len(records) == 6
    for record in records:
        assert record["dtype"] == "float32" and record["device"] == "cpu" and record["batch_size"] >= 1
        assert record["versions"]["torch"] and record["versions"]["transformers"]
    assert first.run_tags["hf_local.dtype"] == "float32" and "hf_local.version.torch" in first.run_tags
    again = screener(llama_dir, f"cache_dir={tmp_path}")
    assert [r.raw for r in again.screen(JOBS, docs, "score")] == answers
    assert again.metrics()["screen.rows_from_cache"] == 6 and again._model is None  # nothing generated
    static = screener(llama_dir, f"cache_dir={tmp_path}", "screener.static_cache=true")
    static.screen(JOBS, docs, "score")
    assert static.metrics()["screen.generated"] == 6  # the static cache is part of the key


def test_a_batch_out_of_device_memory_is_split_and_retried(llama_dir, monkeypatch):
    import torch

    from popfair.screen import hf_generate, hf_local

    real, sizes = hf_generate.generate, []

    def small_memory(model, tokenizer, rows, *args):
        sizes.append(len(rows))
        if len(rows) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, tokenizer, rows, *args)

    monkeypatch.setattr(hf_local, "generate", small_memory)
    docs = documents(7)
    s = screener(llama_dir, "screener.batch_size=null", "screener.invariance_check=0")
    results = s.screen(JOBS, docs, "score")
    tried = list(sizes)
    expected = screener(llama_dir, "screener.batch_size=1").screen(JOBS, docs, "score")
    assert [r.raw for r in results] == [r.raw for r in expected]
    assert tried[0] == 7 and sum(n for n in tried if n <= 2) == 7  # split until every part fitted
    assert s.budget() < 16_384  # later batches are planned smaller


def test_compile_needs_a_gpu_and_dtype_auto_is_fp32_on_cpu(llama_dir):
    with pytest.raises(ConfigError, match="screener.compile"):
        screener(llama_dir, "screener.compile=true")
    assert screener(llama_dir, "screener.dtype=auto").dtype == "float32"


@pytest.mark.parametrize("outcome", ["callback", "score"])
def test_logprob_scores_come_from_the_first_token_logits_over_the_whole_vocabulary(llama_dir, tmp_path, outcome):
    """score_from=logprobs: P(yes) = p(yes) / (p(yes) + p(no)), or the expected score over the 0-100
    tokens, computed here independently from one prompt at a time through the model's own forward."""
    import torch

    s = screener(llama_dir, "screener.score_from=logprobs", f"cache_dir={tmp_path}")
    docs = documents(6)
    results = s.screen(JOBS, docs, outcome)
    assert all(r.error is None for r in results)
    vocab = {w: i for i, w in enumerate(WORDS)}
    for doc, result in zip(docs, results):
        ids = s.tokenizer(s.prompt_text(JOBS["nurse"], doc, outcome), add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            p = torch.softmax(s.model(torch.tensor([ids])).logits[0, -1].double(), -1)
        if outcome == "callback":
            truth = float(p[vocab["yes"]] / (p[vocab["yes"]] + p[vocab["no"]]))
        else:
            numbers = torch.tensor([vocab[str(v)] for v in range(101)])
            truth = float((p[numbers] * torch.arange(101)).sum() / p[numbers].sum())
        assert result.value == pytest.approx(truth, rel=1e-4)
    again = screener(llama_dir, "screener.score_from=logprobs", f"cache_dir={tmp_path}")
    assert [r.value for r in again.screen(JOBS, docs, outcome)] == [r.value for r in results]
    assert again.metrics()["screen.rows_from_cache"] == len(docs)


def test_hf_local_refuses_more_than_one_answer_per_prompt(llama_dir):
    with pytest.raises(ConfigError, match=r"^screener.samples: hf_local decodes greedily"):
        screener(llama_dir, "screener.samples=2")
