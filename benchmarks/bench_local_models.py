"""hf_local against a plain `model.generate` loop on the same prompts, side by side in one run:
prompts/s, generated tokens/s, the decode step time and its share of the device's limit.

    python benchmarks/bench_local_models.py                      # CPU: a tiny random Llama
    python benchmarks/bench_local_models.py --shape 1b           # a GPU: a random Llama-3.2-1B shape
    python benchmarks/bench_local_models.py --model /models/Llama-3.1-8B-Instruct --prompts 512

Rows: `generate b8` is hf_local as it was (a plain greedy `model.generate`, batches of 8 sorted by
length, `--new-tokens` new tokens); `hf_local` is the screener at its defaults (token-budget
batches, the token cap of max_new_tokens=auto, decoding stopped once the reply's reading is
settled, the invariance check); `hf_local cap N, no check` is the same with the baseline's cap and
no invariance check: the same work as the baseline. A random model's replies never settle (its vocabulary has no digits and no
yes or no), so every reply decodes to its cap: a worst case for hf_local.

Decode step time: per batch, (time of the generation - time of its prefill alone, a generation of
one token) / (decode steps - 1). Share of the limit: a decode step must read every weight and the
batch's keys and values once, so bytes per step / step time against the device's memory bandwidth
(GPU: the data-sheet figure of the device's name; CPU: an assumed figure, printed; --peak-gbs sets
either). hf_local's prompts/s come from `screen()` itself (its invariance check included, its
answer store in memory), the step times from its batches generated again with the same code."""

from __future__ import annotations

import argparse
import itertools
import os
import string
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# memory bandwidth, GB/s, by a substring of torch.cuda.get_device_name (data sheets)
GPU_PEAK_GBS = {
    "H200": 4800,
    "H100 NVL": 3900,
    "H100 PCIe": 2000,
    "H100": 3350,
    "A100-SXM4-80GB": 2039,
    "A100 80GB PCIe": 1935,
    "A100": 1555,
    "L40S": 864,
    "L4": 300,
    "A10G": 600,
    "RTX 4090": 1008,
    "V100": 900,
}
CPU_PEAK_GBS = 20.0  # assumed: about two DDR4 channels; a laptop-class host reads less
SHAPES = {  # a random Llama of each shape (hidden, layers, heads, kv heads, intermediate, vocab)
    "tiny": (64, 2, 4, 2, 128, 8_192),
    "small": (512, 8, 8, 4, 1536, 32_000),  # about 41M parameters: a CPU reads its weights at every step
    "1b": (2048, 16, 32, 8, 8192, 128_256),  # Llama-3.2-1B
}
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]
CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def words(n: int) -> list[str]:
    """n distinct four-letter words (no digits, no 'yes' or 'no': a random reply never settles)."""
    return ["".join(w) for w in itertools.islice(itertools.product(string.ascii_lowercase, repeat=4), n)]


def random_model(folder: Path, shape: str) -> Path:
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    hidden, layers, heads, kv_heads, intermediate, vocab = SHAPES[shape]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    vocabulary = SPECIAL + ["<|system|>", "<|user|>", "<|assistant|>"] + words(vocab - 7)
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(vocabulary)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    tok.decoder = decoders.WordPiece()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = CHAT
    fast.save_pretrained(folder)
    return folder


def documents(n: int, prompt_words: int, seed: int = 0) -> list:
    from popfair.core.types import Document

    rng = np.random.default_rng(seed)
    vocabulary = words(4_000)
    return [
        Document(
            applicant_id=f"a{i}",
            job_id="nurse",
            kind="text",
            text=" ".join(rng.choice(vocabulary, int(prompt_words * rng.uniform(0.7, 1.3)))),
        )
        for i in range(n)
    ]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def step_bytes(model, rows: int, context: float) -> float:
    """Bytes a decode step reads: every weight (the input embedding only where untied: a lookup) and
    the keys and values of `rows` sequences of `context` tokens."""
    from popfair.screen.local_runtime import text_config

    params = sum(p.numel() * p.element_size() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    if embedding.data_ptr() != model.get_output_embeddings().weight.data_ptr():
        params -= embedding.numel() * embedding.element_size()
    text = text_config(model.config)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * embedding.element_size()
    return params + rows * context * kv


class Timing:
    """Sums over batches: prompts, generated tokens, wall time, decode steps and their time and bytes."""

    def __init__(self) -> None:
        self.prompts = self.tokens = self.steps = 0
        self.seconds = self.decode_s = self.bytes = 0.0

    def add_batch(self, model, rows: int, width: int, full_s: float, prefill_s: float, steps: int) -> None:
        if steps > 1:
            self.steps += steps - 1
            self.decode_s += max(full_s - prefill_s, 0.0)
            self.bytes += (steps - 1) * step_bytes(model, rows, width + steps / 2)

    @property
    def step_ms(self) -> float:
        return 1e3 * self.decode_s / self.steps if self.steps else float("nan")

    def share(self, peak_gbs: float) -> float:
        return self.bytes / self.decode_s / (peak_gbs * 1e9) if self.decode_s else float("nan")


def baseline(screener, prompts: list[str], new_tokens: int, batch: int) -> Timing:
    """Greedy `model.generate` on length-sorted batches of `batch` (hf_local before the token budget)."""
    import torch

    from popfair.screen.hf_local import end_token_ids

    model, tok, device = screener.model, screener.tokenizer, screener.input_device
    ids = tok(prompts, add_special_tokens=False)["input_ids"]
    order = np.argsort([-len(r) for r in ids], kind="stable")
    end_ids = end_token_ids(model, tok)
    timing = Timing()
    for s in range(0, len(order), batch):
        rows = [ids[i] for i in order[s : s + batch]]
        enc = {k: v.to(device) for k, v in tok.pad({"input_ids": rows}, return_tensors="pt").items()}
        width = enc["input_ids"].shape[1]
        times = []
        for cap in (new_tokens, 1):  # the generation, then its prefill alone
            sync(device)
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(
                    **enc, do_sample=False, max_new_tokens=cap, pad_token_id=tok.pad_token_id, eos_token_id=end_ids
                )
            sync(device)
            times.append(time.perf_counter() - t0)
            if cap == new_tokens:
                steps = out.shape[1] - width
                timing.tokens += int((out[:, width:] != tok.pad_token_id).sum())
        timing.add_batch(model, len(rows), width, times[0], times[1], steps)
        timing.seconds += times[0]
        timing.prompts += len(rows)
    return timing


def hf_local(screener, jobs, docs, outcome: str) -> Timing:
    """The screener's own `screen()` for prompts/s, then its batches again for the step times."""
    from popfair.screen.hf_generate import Decoding, generate, token_budget_batches
    from popfair.screen.hf_local import end_token_ids
    from popfair.screen.parse import parse_answer
    from popfair.store.blobs import GENERATIONS, MemoryBlobStore

    MemoryBlobStore.clear(GENERATIONS)
    sync(screener.device)
    t0 = time.perf_counter()
    results = screener.screen(jobs, docs, outcome)
    sync(screener.device)
    timing = Timing()
    timing.seconds, timing.prompts = time.perf_counter() - t0, len(results)
    timing.tokens = sum(r.output_tokens for r in results)
    prompts = [screener.prompt_text(jobs[d.job_id], d, outcome) for d in docs]
    ids = screener.tokenizer(prompts, add_special_tokens=False)["input_ids"]
    cap = screener.new_tokens(outcome)
    end_ids = end_token_ids(screener.model, screener.tokenizer)

    def parse(text):
        return parse_answer(text, outcome)

    for batch in token_budget_batches(np.array([len(r) for r in ids]), cap, screener.budget(), screener.batch_size):
        rows = [ids[i] for i in batch]
        times, replies = [], []
        for decoding in (Decoding(cap, screener.static_cache, screener.compile), Decoding(1)):
            sync(screener.device)
            t = time.perf_counter()
            replies.append(
                generate(screener.model, screener.tokenizer, rows, parse, decoding, end_ids, screener.input_device)
            )
            sync(screener.device)
            times.append(time.perf_counter() - t)
        steps = max(r.new_tokens for r in replies[0])
        timing.add_batch(screener.model, len(rows), max(len(r) for r in rows), times[0], times[1], steps)
    timing.cut_short = sum("cut short" in (r.error or "") for r in results)  # type: ignore[attr-defined]
    return timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a chat model directory (default: a random Llama of --shape)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), help="random model shape (default: 1b on a GPU, tiny on CPU)"
    )
    parser.add_argument("--prompts", type=int, default=None, help="prompts (default: 512 on a GPU, 96 on CPU)")
    parser.add_argument("--prompt-words", type=int, default=None, help="resume words (default: 550 GPU, 150 CPU)")
    parser.add_argument("--new-tokens", type=int, default=16, help="the baseline's new tokens (default 16)")
    parser.add_argument("--baseline-batch", type=int, default=8, help="the baseline's batch (default 8)")
    parser.add_argument("--outcome", choices=["score", "callback"], default="score")
    parser.add_argument("--peak-gbs", type=float, help="device memory bandwidth, GB/s (default: by device)")
    args = parser.parse_args()

    import torch

    from popfair.core.types import Job
    from popfair.screen.hf_local import HFLocalScreener
    from popfair.screen.local_runtime import device_name, runtime_versions

    gpu = torch.cuda.is_available()
    shape = args.shape or ("1b" if gpu else "tiny")
    n = args.prompts or (512 if gpu else 96)
    prompt_words = args.prompt_words or (550 if gpu else 150)
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        path = args.model or str(random_model(Path(tmp), shape))

        def build(**settings):
            return HFLocalScreener(model_path=path, name="hf_local", cache_dir=None, **settings)

        screener = build()
        device = screener.device
        label = device_name(device)
        if args.peak_gbs:
            peak, source = args.peak_gbs, "--peak-gbs"
        elif gpu:
            name = torch.cuda.get_device_name(device)
            peak = next((v for k, v in GPU_PEAK_GBS.items() if k in name), float("nan"))
            source = f"data sheet of {name}" if peak == peak else f"unknown device {name}: give --peak-gbs"
        else:
            peak, source = CPU_PEAK_GBS, "ASSUMED for this CPU (set --peak-gbs)"
        jobs = {"nurse": Job("nurse", "Registered nurse", " ".join(words(60)))}
        docs = documents(n, prompt_words)
        prompts = [screener.prompt_text(jobs["nurse"], d, args.outcome) for d in docs]
        lengths = [len(r) for r in screener.tokenizer(prompts, add_special_tokens=False)["input_ids"]]
        weights = sum(p.numel() * p.element_size() for p in screener.model.parameters()) / 1e9
        print(
            f"device {label}, dtype {screener.dtype}, model {args.model or f'random Llama ({shape})'} {weights:.3f} GB"
        )
        print(
            f"{n} prompts of {np.mean(lengths):.0f} tokens (min {min(lengths)}, max {max(lengths)}), outcome {args.outcome}"
        )
        print(f"memory bandwidth {peak:.0f} GB/s ({source}); versions {runtime_versions()}")
        # one untimed pass of each path (kernels, allocator)
        hf_local(screener, jobs, docs[:4], args.outcome)
        baseline(screener, prompts[:4], 2, args.baseline_batch)
        rows = [
            (
                f"generate b{args.baseline_batch}, {args.new_tokens} new",
                baseline(screener, prompts, args.new_tokens, args.baseline_batch),
            )
        ]
        rows.append(
            (
                f"hf_local defaults (cap {screener.new_tokens(args.outcome)})",
                hf_local(screener, jobs, docs, args.outcome),
            )
        )
        capped = build(max_new_tokens=args.new_tokens, invariance_check=0)
        capped._model = screener.model  # the same weights: not loaded twice
        rows.append((f"hf_local cap {args.new_tokens}, no check", hf_local(capped, jobs, docs, args.outcome)))
        print(f"hf_local batch_tokens {screener.budget()} (auto), invariance check {screener.invariance_check} prompts")
        print(f"{'':34} {'prompts/s':>10} {'tokens/s':>10} {'step ms':>9} {'limit share':>12} {'cut short':>10}")
        for name, t in rows:
            cut = getattr(t, "cut_short", None)
            print(
                f"{name:34} {t.prompts / t.seconds:10.1f} {t.tokens / t.seconds:10.1f} {t.step_ms:9.2f} "
                f"{t.share(peak):12.1%} {'' if cut is None else cut:>10}"
            )
        base = rows[0][1]
        print(
            f"hf_local defaults / baseline prompts/s: {rows[1][1].prompts / rows[1][1].seconds / (base.prompts / base.seconds):.2f}x"
        )


if __name__ == "__main__":
    main()
