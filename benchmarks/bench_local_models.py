"""hf_local with each job's shared prompt prefix computed once, beside hf_local computing every
prompt whole and a plain `model.generate` loop, on the same prompts, run side by side in rounds:
prompts/s, the speed-up over hf_local without reuse, and whether the answers are the same.

    python benchmarks/bench_local_models.py                      # CPU: a tiny random Llama
    python benchmarks/bench_local_models.py --shape 1b           # a GPU: a random Llama-3.2-1B shape
    python benchmarks/bench_local_models.py --model /models/Llama-3.1-8B-Instruct --prompts 512

The prompts are shaped like a case's: the score prompts of conf/prompts/ with a job description of
`--job-words` words (default 450) and resumes of about `--prompt-words` (default 200), so the system
prompt and the job description are about 500 of a prompt's ~700 tokens; one job for every prompt, or
`--jobs` jobs (a paired audit's shape: many postings of a few prompts each, packed into batches).

Rows: `hf_local, prefix once` is the screener at its defaults (token-budget batches, max_new_tokens
auto, decoding stopped once the reply's reading is settled, the invariance check, the shared
prefix computed once per job); `hf_local, every prompt whole` the same with
screener.prefix_cache=false; `generate bN` a plain greedy `model.generate` over length-sorted
batches of N, to hf_local's token cap. A random model's replies never settle (its vocabulary has
no digits and no yes or no), so every reply decodes to its cap. Each round times the three rows one
after another, in a rotated order (the machine may be shared: the ratio of each round's adjacent
runs is the figure to read, its median and range are printed); prompts/s is the median over rounds.
Answers the same: the share of prompts whose answer equals hf_local's without reuse.

`--steps` (default on a GPU) adds hf_local's decode step time and its share of the device's limit:
per batch, (time of the generation - time of its prefill alone, a generation of one token) /
(decode steps - 1); a decode step must read every weight and the batch's keys and values once, so
bytes per step / step time against the device's memory bandwidth (GPU: the data-sheet figure of the
device's name; CPU: an assumed figure, printed; --peak-gbs sets either)."""

from __future__ import annotations

import argparse
import functools
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
os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars between the rows

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


def documents(n: int, prompt_words: int, jobs: int = 1, seed: int = 0) -> list:
    from popfair.core.types import Document

    rng = np.random.default_rng(seed)
    vocabulary = words(4_000)
    return [
        Document(
            applicant_id=f"a{i}",
            job_id=f"job{i % jobs}",
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


def plain_generate(screener, prompts: list[str], new_tokens: int, batch: int) -> list[str]:
    """Greedy `model.generate` on length-sorted batches of `batch`, to `new_tokens`: the replies, each
    up to and including its first end token (as hf_local reads them)."""
    import torch

    from popfair.screen.hf_local import end_token_ids

    model, tok, device = screener.model, screener.tokenizer, screener.input_device
    ids = tok(prompts, add_special_tokens=False)["input_ids"]
    order = np.argsort([-len(r) for r in ids], kind="stable")
    end_ids = end_token_ids(model, tok)
    texts: list[str] = [""] * len(prompts)
    for s in range(0, len(order), batch):
        rows = order[s : s + batch]
        enc = {k: v.to(device) for k, v in tok.pad({"input_ids": [ids[i] for i in rows]}, return_tensors="pt").items()}
        width = enc["input_ids"].shape[1]
        with torch.inference_mode():
            out = model.generate(
                **enc, do_sample=False, max_new_tokens=new_tokens, pad_token_id=tok.pad_token_id, eos_token_id=end_ids
            )
        for i, tokens in zip(rows, out[:, width:].cpu().numpy()):
            ends = np.flatnonzero(np.isin(tokens, end_ids))
            texts[i] = tok.decode(tokens[: int(ends[0] + 1) if len(ends) else len(tokens)], skip_special_tokens=True)
    return texts


def screen(screener, jobs, docs, outcome: str) -> list[str]:
    """hf_local's own `screen()` (its answer store emptied first): the raw answers."""
    from popfair.store.blobs import GENERATIONS, MemoryBlobStore

    MemoryBlobStore.clear(GENERATIONS)
    return [r.raw for r in screener.screen(jobs, docs, outcome)]


def timed(device: str, run) -> tuple[float, float, list[str]]:
    """Wall seconds, this process's CPU seconds (all its threads) and the answers of `run()`."""
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    answers = run()
    sync(device)
    return time.perf_counter() - t0, time.process_time() - c0, answers


def decode_steps(screener, jobs, docs, outcome: str) -> Timing:
    """hf_local's batches (with its shared prefixes) generated again: decode step times and bytes."""
    from popfair.screen.hf_generate import Decoding, generate
    from popfair.screen.hf_local import end_token_ids
    from popfair.screen.hf_prefix import SharedPrefixes, plan_batches
    from popfair.screen.parse import parse_answer

    prompts = [screener.prompt_text(jobs[d.job_id], d, outcome) for d in docs]
    ids = screener.tokenizer(prompts, add_special_tokens=False)["input_ids"]
    lengths = np.array([len(r) for r in ids])
    cap = screener.new_tokens(outcome)
    end_ids = end_token_ids(screener.model, screener.tokenizer)

    def parse(text):
        return parse_answer(text, outcome)

    groups = [d.job_id for d in docs] if screener.prefix_cache else None
    pad_id = screener.tokenizer.pad_token_id
    shared = SharedPrefixes(screener.model, screener.input_device, int(lengths.sum()), pad_id)
    timing = Timing()
    for prefix_ids, batch in plan_batches(ids, groups, cap, screener.budget(), screener.batch_size):
        rows = [ids[i] for i in batch]
        prefix = shared.for_batch(prefix_ids, int(lengths[batch].max()) + cap)
        times, replies = [], []
        for decoding in (Decoding(cap, screener.static_cache, screener.compile), Decoding(1)):
            run = functools.partial(
                generate,
                screener.model,
                screener.tokenizer,
                rows,
                parse,
                decoding,
                end_ids,
                screener.input_device,
                prefix,
            )
            t, _, reply = timed(screener.device, run)
            times.append(t)
            replies.append(reply)
        steps = max(r.new_tokens for r in replies[0])
        timing.add_batch(screener.model, len(rows), max(len(r) for r in rows), times[0], times[1], steps)
    return timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a chat model directory (default: a random Llama of --shape)")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), help="random model shape (default: 1b on a GPU, tiny on CPU)"
    )
    parser.add_argument("--prompts", type=int, default=None, help="prompts (default: 512 on a GPU, 96 on CPU)")
    parser.add_argument("--prompt-words", type=int, default=200, help="resume words (default 200)")
    parser.add_argument("--job-words", type=int, default=450, help="job description words (default 450)")
    parser.add_argument("--jobs", type=int, default=1, help="jobs the prompts are spread over (default 1)")
    parser.add_argument("--baseline-batch", type=int, default=8, help="the plain loop's batch (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three rows (default 3)")
    parser.add_argument("--outcome", choices=["score", "callback"], default="score")
    parser.add_argument("--steps", action=argparse.BooleanOptionalAction, help="decode step times (default: on a GPU)")
    parser.add_argument("--threads", type=int, help="torch threads on CPU (default: torch's own)")
    parser.add_argument("--peak-gbs", type=float, help="device memory bandwidth, GB/s (default: by device)")
    args = parser.parse_args()

    import torch

    from benchmarks._side_by_side import core_speed, load
    from popfair.core.types import Job
    from popfair.screen.hf_local import HFLocalScreener
    from popfair.screen.local_runtime import device_name, runtime_versions

    gpu = torch.cuda.is_available()
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = args.shape or ("1b" if gpu else "tiny")
    n = args.prompts or (512 if gpu else 96)
    with tempfile.TemporaryDirectory(prefix="bench-local-") as tmp:
        path = args.model or str(random_model(Path(tmp), shape))

        def build(**settings):
            return HFLocalScreener(model_path=path, name="hf_local", cache_dir=None, **settings)

        reuse = build()
        whole = build(prefix_cache=False)
        whole._model = reuse.model  # the same weights: not loaded twice
        device = reuse.device
        vocabulary = words(args.job_words + args.jobs)
        jobs = {  # descriptions of one length, each its own words
            f"job{k}": Job(f"job{k}", "Registered nurse", " ".join(vocabulary[k : k + args.job_words]))
            for k in range(args.jobs)
        }
        docs = documents(n, args.prompt_words, args.jobs)
        prompts = [reuse.prompt_text(jobs[d.job_id], d, args.outcome) for d in docs]
        ids = reuse.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        lengths = [len(r) for r in ids]
        cap = reuse.new_tokens(args.outcome)
        weights = sum(p.numel() * p.element_size() for p in reuse.model.parameters()) / 1e9
        print(f"device {device_name(device)}, dtype {reuse.dtype}, model {args.model or f'random Llama ({shape})'}")
        print(f"  {weights:.3f} GB of weights; versions {runtime_versions()}")
        print(
            f"{n} prompts of {np.mean(lengths):.0f} tokens (min {min(lengths)}, max {max(lengths)}), {args.jobs} job(s), "
            f"outcome {args.outcome}, token cap {cap}, batch_tokens {reuse.budget()}"
        )
        print(f"load {load()}, core speed {core_speed():.3f} s (benchmarks/_side_by_side.py)")
        runs = {
            "hf_local, prefix once": lambda: screen(reuse, jobs, docs, args.outcome),
            "hf_local, every prompt whole": lambda: screen(whole, jobs, docs, args.outcome),
            f"generate b{args.baseline_batch}": lambda: plain_generate(reuse, prompts, cap, args.baseline_batch),
        }
        screen(reuse, jobs, docs[:4], args.outcome)  # one untimed pass of each path (kernels, allocator)
        screen(whole, jobs, docs[:4], args.outcome)
        plain_generate(reuse, prompts[:4], 2, args.baseline_batch)
        names = list(runs)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        answers: dict[str, list[str]] = {}
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t, c, answers[name] = timed(device, runs[name])
                seconds[name].append(t)
                cpu[name].append(c)
        print(
            f"prefixes computed: {reuse.metrics().get('screen.prefixes_computed', 0):.0f} in "
            f"{reuse.metrics().get('screen.batches', 0):.0f} batch(es), "
            f"{reuse.metrics().get('screen.prefix_token_share', 0):.0%} of the prompt tokens not computed again"
        )
        whole_name = "hf_local, every prompt whole"
        header = f"{'prompts/s':>10} {'speed-up':>9} {'per round':>12} {'CPU speed-up':>13} {'per round':>12}"
        print(f"{'':30} {header} {'answers same':>13}")
        for name in names:
            ratios = [b / t for b, t in zip(seconds[whole_name], seconds[name])]
            cpu_ratios = [b / t for b, t in zip(cpu[whole_name], cpu[name])]
            same = np.mean([a == b for a, b in zip(answers[name], answers[whole_name])])
            print(
                f"{name:30} {n / np.median(seconds[name]):10.1f} {np.median(ratios):8.2f}x "
                f"{min(ratios):5.2f}-{max(ratios):.2f}x {np.median(cpu_ratios):12.2f}x "
                f"{min(cpu_ratios):5.2f}-{max(cpu_ratios):.2f}x {same:13.0%}"
            )
        print(
            f"load {load()} at the end. Speed-up: hf_local without reuse's time / the row's, in each round "
            "(median, range); CPU: the same with this process's CPU seconds (less moved by other users)"
        )
        if args.steps if args.steps is not None else gpu:
            if args.peak_gbs:
                peak, source = args.peak_gbs, "--peak-gbs"
            elif gpu:
                name = torch.cuda.get_device_name(device)
                peak = next((v for k, v in GPU_PEAK_GBS.items() if k in name), float("nan"))
                source = f"data sheet of {name}" if peak == peak else f"unknown device {name}: give --peak-gbs"
            else:
                peak, source = CPU_PEAK_GBS, "ASSUMED for this CPU (set --peak-gbs)"
            print(f"memory bandwidth {peak:.0f} GB/s ({source})")
            for label, screener in (("hf_local, prefix once", reuse), ("hf_local, every prompt whole", whole)):
                t = decode_steps(screener, jobs, docs, args.outcome)
                print(f"{label:30} decode step {t.step_ms:.2f} ms, {t.share(peak):.1%} of the limit")


if __name__ == "__main__":
    main()
