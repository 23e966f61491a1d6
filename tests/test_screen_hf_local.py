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
        ("screener.prefix_cache=sometimes", "screener.prefix_cache"),
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


# --- the shared prefix computed once per job (popfair.screen.hf_prefix) ------------------------------
TWO_JOBS = {**JOBS, "aide": Job(job_id="aide", title="aide", description="the job is care for patients years")}


def two_job_documents(n: int) -> list[Document]:
    return [
        Document(d.applicant_id, "aide" if i % 3 == 0 else "nurse", "text", d.text) for i, d in enumerate(documents(n))
    ]


@pytest.mark.parametrize("static", ["false", "true"])
def test_prefix_computed_once_per_job_answers_as_every_prompt_whole(llama_dir, tmp_path, static):
    docs = two_job_documents(14)
    settings = ("screener.batch_size=null", "screener.batch_tokens=500", f"screener.static_cache={static}")
    reused = screener(llama_dir, *settings, f"cache_dir={tmp_path}/a")
    answers = reused.screen(TWO_JOBS, docs, "score")
    whole = screener(llama_dir, *settings, "screener.prefix_cache=false", f"cache_dir={tmp_path}/b")
    expected = whole.screen(TWO_JOBS, docs, "score")
    assert [r.raw for r in answers] == [r.raw for r in expected]  # greedy, fp32: the same answers
    assert [r.output_tokens for r in answers] == [r.output_tokens for r in expected]
    metrics = reused.metrics()
    assert metrics["screen.prefixes_computed"] == 2 and metrics["screen.prefix_rows"] == 14  # once per job
    assert metrics["screen.batches"] > 2  # the token budget cut each job's resumes into several batches
    assert 0.3 < metrics["screen.prefix_token_share"] < 1 and metrics["screen.batch_variant_share"] == 0.0
    assert whole.metrics()["screen.prefix_rows"] == 0 and whole.metrics()["screen.prefixes_computed"] == 0
    records = stored_records(tmp_path / "a")
    system_tokens = len(reused.tokenizer(reused.prompts.system("score"))["input_ids"])
    assert all(r["prefix_tokens"] > system_tokens for r in records)  # the system prompt and more: the job
    assert all(r["batch_padded_tokens"] <= 500 for r in records)  # within batch_tokens
    assert reused.run_tags["hf_local.prefix_cache"] == "True" and whole.run_tags["hf_local.prefix_cache"] == "False"
    # the prefix does not change answers, so it is not in their key: computed whole, they are found stored
    again = screener(llama_dir, *settings, "screener.prefix_cache=false", f"cache_dir={tmp_path}/a")
    assert [r.raw for r in again.screen(TWO_JOBS, docs, "score")] == [r.raw for r in answers]
    assert again.metrics()["screen.rows_from_cache"] == 14


def test_prefix_cache_gives_the_logits_of_the_whole_prompt(llama_dir):
    """Two jobs' prefixes in one cache (the shorter left-padded), each row on top of its own job's."""
    import torch

    from popfair.screen.hf_prefix import PrefixCache, common_prefix

    s = screener(llama_dir)
    docs = two_job_documents(8)
    prompts = [s.prompt_text(TWO_JOBS[d.job_id], d, "callback") for d in docs]
    rows = s.tokenizer(prompts, add_special_tokens=False)["input_ids"]
    prefixes = [common_prefix([r for r, d in zip(rows, docs) if d.job_id == job]) for job in ("nurse", "aide")]
    assert len(prefixes[0]) > 20 and len(prefixes[0]) != len(prefixes[1])
    shared = PrefixCache(s.model, prefixes, "cpu", s.tokenizer.pad_token_id)
    assert [shared.which(r) for r in rows] == [1 if d.job_id == "aide" else 0 for d in docs]
    with torch.inference_mode():
        inputs = shared.inputs(s.tokenizer, rows, 4, static=False)
        mask = inputs["attention_mask"]
        width = shared.ids.shape[1]
        # the rest of every row on top of its prefix's cache (generate's position ids: the mask's count)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, width:]
        ids = inputs.pop("input_ids")[:, width:]
        logits = s.model(input_ids=ids, position_ids=positions, **inputs).logits[:, -1]
        for row, last in zip(rows, logits):
            alone = s.model(input_ids=torch.tensor([row])).logits[0, -1]
            assert torch.allclose(last, alone, atol=1e-5)


def test_prefix_groups_need_two_rows_and_a_long_enough_start():
    from popfair.screen.hf_prefix import MIN_PREFIX_TOKENS, common_prefix, plan_batches

    start = list(range(100, 100 + MIN_PREFIX_TOKENS))
    rows = [start + [1, 2], start + [1, 3, 4], start + [5], [7] * 20, start[:3] + [9] * 20, start[:3] + [8] * 20]
    assert common_prefix(rows[:3]) == tuple(start)
    assert common_prefix([start + [1], start + [1, 2]]) == (*start,)  # each row keeps a token of its own
    plan = plan_batches(rows, ["a", "a", "a", "b", "c", "c"], 4, 10_000, None)
    assert plan == [((tuple(start),), [0, 1, 2]), (None, [4, 5, 3])]  # job c shares only 3 tokens
    assert plan_batches(rows, None, 4, 10_000, None) == [(None, [4, 5, 3, 1, 0, 2])]


def test_small_jobs_are_packed_whole_within_the_token_budget():
    from popfair.screen.hf_prefix import MIN_PREFIX_TOKENS, plan_batches

    def job(k: int, width: int) -> list[list[int]]:  # two rows sharing a prefix of `width` tokens
        return [[k] * width + [1, 2], [k] * width + [3, 4, 5]]

    rows = [*job(10, MIN_PREFIX_TOKENS), *job(11, 30), *job(12, 20), *job(13, 40)]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d"]
    # longest prefix first; a batch costs rows x (longest prefix + longest rest + 2 new tokens)
    plan = plan_batches(rows, groups, 2, 4 * (40 + 3 + 2), None)
    assert [len(prefixes) for prefixes, _ in plan] == [2, 2]
    assert plan[0] == ((tuple([13] * 40), tuple([11] * 30)), [6, 7, 2, 3])
    assert sorted(i for _, batch in plan for i in batch) == list(range(8))
    # 135 tokens: the two longest jobs alone (4 x (40 + 5) and 4 x (30 + 5) exceed it), the short ones together
    assert [len(prefixes) for prefixes, _ in plan_batches(rows, groups, 2, 3 * (40 + 3 + 2), None)] == [1, 1, 2]
    assert [len(b) for _, b in plan_batches(rows, groups, 2, 10_000, 5)] == [4, 4]  # at most 5 rows


def test_prefix_reuse_is_off_past_a_sliding_window_and_for_recurrent_state():
    from types import SimpleNamespace

    import transformers

    from popfair.screen.hf_prefix import reusable

    windowed = SimpleNamespace(config=transformers.MistralConfig(sliding_window=100, num_hidden_layers=2))
    assert reusable(windowed, 100) and not reusable(windowed, 101)  # the middle padding would take window places
    assert reusable(SimpleNamespace(config=transformers.MistralConfig(sliding_window=None)), 10_000)
    hybrid = transformers.Qwen3NextConfig(num_hidden_layers=4) if hasattr(transformers, "Qwen3NextConfig") else None
    if hybrid is not None:  # linear-attention layers keep a recurrent state that a prefix cannot be shared by
        assert any("linear" in t for t in hybrid.layer_types) and not reusable(SimpleNamespace(config=hybrid), 10)


@pytest.mark.parametrize("static", ["false", "true"])
def test_postings_of_a_few_resumes_are_packed_and_answer_as_every_prompt_whole(llama_dir, static):
    """A paired audit's shape: many jobs (postings) of a few prompts each, of unequal lengths."""
    words = ["care", "for", "patients", "years", "experience", "the", "job", "nurse"]
    postings = {f"p{k}": Job(f"p{k}", "nurse", " ".join(words[: 2 + k] * (k + 1))) for k in range(5)}
    docs = [Document(d.applicant_id, f"p{i % 5}", "text", d.text) for i, d in enumerate(documents(15))]
    settings = ("screener.batch_size=null", f"screener.static_cache={static}", "screener.invariance_check=4")
    packed = screener(llama_dir, *settings)
    answers = packed.screen(postings, docs, "score")
    whole = screener(llama_dir, *settings, "screener.prefix_cache=false").screen(postings, docs, "score")
    assert [r.raw for r in answers] == [r.raw for r in whole]
    metrics = packed.metrics()
    assert metrics["screen.prefixes_computed"] == 5 and metrics["screen.prefix_rows"] == 15
    assert metrics["screen.batches"] == 1 and metrics["screen.batch_variant_share"] == 0.0  # all five in one batch


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
