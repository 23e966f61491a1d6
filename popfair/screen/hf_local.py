"""A local transformers chat model as a screener (for users with weights on disk and one GPU, no
inference server; at scale, serve the model with vLLM and use the model's `route=local`).

Same prompt files (conf/prompts/, popfair.screen.prompts) and parsing (popfair.screen.parse) as
the API screeners; greedy decoding (the papers' temperature 0), stopped as soon as the reply's
reading is settled (popfair.screen.hf_generate). Needs the optional extra: pip install 'popfair[hflocal]'.

Answers are kept in the `generations` store beside the response cache (`<cache_dir>/generations.sqlite`,
or the `cache_url` database), keyed by the model's files, the dtype, the device, the library
versions, the decoding settings (token cap, static cache, compile) and the prompt: a rerun, or the
other protected attribute's case on the same resumes, generates nothing. Each stored answer records
the batch it was generated in (rows, padded tokens, shared prefix tokens), dtype, device and library
versions. The prompts' shared start is computed once per job (popfair.screen.hf_prefix)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
from tqdm.auto import tqdm

from popfair.core.constraints import Boolean, Interval, Options, Rules, validate
from popfair.core.errors import ConfigError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.screen.base import Screener, one_answer_per_prompt
from popfair.screen.hf_generate import Decoding, Reply, end_token_ids, generate
from popfair.screen.hf_logprobs import first_token_records, kept_batch
from popfair.screen.hf_prefix import SharedPrefixes, plan_batches
from popfair.screen.local_runtime import (
    accepts_system_role,
    device_name,
    file_samples,
    require_extra,
    resolve_device,
    resolve_dtype,
    runtime_versions,
    text_config,
    token_bytes,
)
from popfair.screen.parse import SCORE_FROM, SCORE_REPLIES, parse_answer
from popfair.screen.prompts import PromptSet
from popfair.store.blobs import GENERATIONS, BlobStore, content_key, open_blob_store_or_memory

log = logging.getLogger("popfair")

EXTRA_MODULES = {"transformers": "transformers", "torch": "torch", "accelerate": "accelerate"}
DTYPES = ("auto", "float32", "bfloat16", "float16")
SCHEMA = "hf_local-v1"  # bump when what a stored answer stands for changes
AUTO_NEW_TOKENS = 8  # max_new_tokens=auto: a yes/no or a 0-100 integer with a few words around it
AUTO_JSON_NEW_TOKENS = 16  # ... and for score_reply=json_decimal: {"score": XX.XX} with a few around it
CPU_BATCH_TOKENS = 16_384  # batch_tokens=auto off a GPU: CPU throughput gains little beyond this
GPU_MEMORY_SHARE = 0.5  # batch_tokens=auto on a GPU: this share of the free memory after loading
BUDGET_RANGE = (512, 1 << 20)
TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "tokenizer.model",
)


class HFLocalScreener(Screener):
    """Greedy chat generation with a transformers causal LM loaded from `model_path`.

    Prompts are tokenised once, sorted by length and generated in batches of at most `batch_tokens`
    padded tokens (left padding). Each answer is parsed; an unparseable answer, or a prompt longer
    than the model's context, is a failure that keeps the raw text and the reason. Models whose chat
    template rejects a system message (Gemma, Mistral-Instruct v0.2) get the system text prepended
    to the user message. `invariance_check` prompts of each call are also answered alone, and the
    share whose answer differs from the batched one is a metric of the run. `prefix_cache`: a job's
    prompts start from the cache of the tokens they share, computed once (popfair.screen.hf_prefix)."""

    parameter_constraints: ClassVar[Rules] = {
        "max_new_tokens": [Options(("auto",)), Interval(int, 1, 4096)],
        "batch_size": [None, Interval(int, 1, None)],
        "batch_tokens": [Options(("auto",)), Interval(int, 16, None)],
        "dtype": Options(DTYPES),
        "device_map": [None, Options(("auto",))],
        "static_cache": Boolean(),
        "compile": Boolean(),
        "prefix_cache": Boolean(),
        "invariance_check": Interval(int, 0, None),
        "trust_remote_code": Boolean(),
        "score_reply": Options(SCORE_REPLIES),
        "max_new_tokens_override": [None, Interval(int, 1, 4096)],
        "score_from": Options(SCORE_FROM),
    }

    def __init__(
        self,
        model_path: str | None = None,
        prompts: Mapping[str, str] | None = None,
        name: str = "hf_local",
        max_new_tokens: int | str = "auto",
        batch_size: int | None = None,
        batch_tokens: int | str = "auto",
        device: str = "auto",
        dtype: str = "auto",
        device_map: str | None = None,
        static_cache: bool = False,
        compile: bool = False,  # noqa: A002 - the config key's name
        prefix_cache: bool = True,
        invariance_check: int = 16,
        trust_remote_code: bool = False,
        cache_dir: str | None = None,
        cache_url: str | None = None,
        prompts_dir: str | None = None,
        context: Sequence[str] | None = None,
        score_reply: str = "integer",
        max_new_tokens_override: int | None = None,
        samples: int = 1,
        score_from: str = "text",
    ) -> None:
        one_answer_per_prompt(name, samples, "decodes greedily (its determinism check is invariance_check)")
        require(
            isinstance(model_path, str) and model_path.strip() != "",
            "screener.model_path",
            "set it to a local directory holding a transformers chat model "
            "(config.json, weights, tokenizer), e.g. screener.model_path=/models/Llama-3.1-8B-Instruct",
        )
        model_path = str(model_path)  # a non-empty string, checked above
        require(
            Path(model_path, "config.json").is_file(),
            "screener.model_path",
            f"{model_path!r} has no config.json; point it at a saved transformers model directory",
        )
        validate(
            self.parameter_constraints,
            {
                "max_new_tokens": max_new_tokens,
                "batch_size": batch_size,
                "batch_tokens": batch_tokens,
                "dtype": dtype,
                "device_map": device_map,
                "static_cache": static_cache,
                "compile": compile,
                "prefix_cache": prefix_cache,
                "invariance_check": invariance_check,
                "trust_remote_code": trust_remote_code,
                "score_reply": score_reply,
                "max_new_tokens_override": max_new_tokens_override,
                "score_from": score_from,
            },
        )
        self.prompts = PromptSet(prompts, prompts_dir, context)
        self.score_reply, self.score_from = score_reply, score_from
        # prompts.max_new_tokens (a preset's one cap for every screener) wins over the screener's own
        if max_new_tokens_override is not None:
            max_new_tokens = max_new_tokens_override
        require_extra("hflocal", EXTRA_MODULES, name)
        self.name, self.model_path = name, model_path
        self.max_new_tokens, self.batch_size, self.batch_tokens = max_new_tokens, batch_size, batch_tokens
        self.device = resolve_device(device)
        require(
            not compile or self.device.startswith("cuda"),
            "screener.compile",
            f"compiling the decoding step needs a GPU (transformers compiles it on cuda); device is {self.device}",
        )
        self.dtype_setting, self._dtype = dtype, cast("str | None", None)
        self.device_map = device_map
        # compile runs on the static cache (a dynamic one changes shape every step)
        self.static_cache, self.compile = bool(static_cache or compile), bool(compile)
        # not in `provenance`, so not in the generations key: the shared prefix computed once gives the answers
        # of every prompt computed whole (same tokens, positions, attention; tested): either serves both
        self.prefix_cache = bool(prefix_cache)
        self.invariance_check = invariance_check
        self.trust_remote_code = trust_remote_code
        self.store_location = cache_url or cache_dir
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoConfig, AutoTokenizer

        self.config = AutoConfig.from_pretrained(model_path, local_files_only=True, trust_remote_code=trust_remote_code)
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=trust_remote_code
        )
        require(
            bool(getattr(self.tokenizer, "chat_template", None)),
            "screener.model_path",
            f"the tokenizer in {model_path!r} has no chat_template; hf_local needs a chat (instruction-tuned) model",
        )
        self.tokenizer.padding_side = "left"  # generation continues from the right edge
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.system_role = accepts_system_role(self.tokenizer)
        self._model: Any = None
        self._identity: str | None = None
        self._budget: int | None = None
        self._prefixes = SharedPrefixes(None, "", 0)  # the last call's shared prefixes
        self.last_stats: dict[str, float] = {}
        self.run_tags: dict[str, str] = {}  # filled when screening: building stays free of CUDA calls

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    # --- the model and what identifies its answers --------------------------------------------------
    @property
    def model(self) -> Any:
        """The causal LM, loaded on first use straight onto its device (`device_map`: a model larger
        than the host's memory never passes through it); construction stays cheap for dry runs."""
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            self._model = AutoModelForCausalLM.from_pretrained(
                self.model_path,
                dtype=getattr(torch, self.dtype),
                device_map=self.device_map or self.device,
                local_files_only=True,
                trust_remote_code=self.trust_remote_code,
            ).eval()
        return self._model

    @property
    def dtype(self) -> str:
        """The dtype weights load in (auto resolved on first use: it asks the GPU, which a sweep's
        parent process, building screeners it will fork cases from, must not do)."""
        if self._dtype is None:
            self._dtype = resolve_dtype(self.dtype_setting, self.device)
        return self._dtype

    @property
    def input_device(self) -> str:
        """Where prompts go: the device, or the first device of a model spread over several."""
        return str(self.model.device) if self.device_map else self.device

    @property
    def device_label(self) -> str:
        label = device_name(self.device)
        return f"{label}, device_map {self.device_map}" if self.device_map else label

    @property
    def identity(self) -> str:
        """What a stored answer depends on besides its prompt: the model's configuration and tokenizer
        files, its weight files (names, sizes and 16 evenly spaced samples of each: reading every byte
        of an 8B model would take longer than many cases), dtype, device, library versions, decoding
        settings and whether the template takes a system message."""
        if self._identity is None:
            folder = Path(self.model_path)
            files = {name: (folder / name).read_bytes() for name in TOKENIZER_FILES if (folder / name).is_file()}
            weights = {
                str(path.relative_to(folder)): file_samples(path)
                for pattern in ("*.safetensors", "*.bin")
                for path in sorted(folder.rglob(pattern))
            }
            self._identity = content_key(SCHEMA, files, weights, self.provenance, self.system_role)
        return self._identity

    @property
    def provenance(self) -> dict[str, Any]:
        """What computed an answer, beside the model: recorded with each answer and in the run's tags."""
        return {
            "dtype": self.dtype,
            "device": self.device_label,
            "static_cache": self.static_cache,
            "compile": self.compile,
            "versions": runtime_versions(),
        }

    def new_tokens(self, outcome: Outcome) -> int:
        """The token cap of a reply: `max_new_tokens`, or for auto the few a yes/no or a score needs."""
        if self.max_new_tokens != "auto":
            return int(self.max_new_tokens)
        return AUTO_JSON_NEW_TOKENS if outcome == "score" and self.score_reply == "json_decimal" else AUTO_NEW_TOKENS

    def budget(self) -> int:
        """Padded tokens per batch: `batch_tokens`, or for auto what half the device's free memory
        holds after loading (keys, values and prefill activations per token), 16,384 off a GPU."""
        if self._budget is None:
            if self.batch_tokens != "auto":
                self._budget = int(self.batch_tokens)
            elif self.device.startswith("cuda"):
                import torch

                _ = self.model  # loaded first: its weights are not free memory
                free, _ = torch.cuda.mem_get_info(torch.device(self.input_device))
                per_token = token_bytes(self.config, torch.finfo(getattr(torch, self.dtype)).bits // 8)
                self._budget = int(np.clip(GPU_MEMORY_SHARE * free / per_token, *BUDGET_RANGE))
            else:
                self._budget = CPU_BATCH_TOKENS
        return self._budget

    def _tags(self) -> dict[str, str]:
        settings = self.provenance
        versions = settings.pop("versions")
        tags = {f"hf_local.{key}": str(value) for key, value in settings.items()}
        tags.update({f"hf_local.version.{lib}": v for lib, v in versions.items()})
        tags["hf_local.max_new_tokens"] = str(self.max_new_tokens)
        tags["hf_local.batch_tokens"] = str(self.batch_tokens)
        tags["hf_local.prefix_cache"] = str(self.prefix_cache)
        return tags

    def prompt_text(self, job: Job, document: Document, outcome: Outcome) -> str:
        """The chat-formatted prompt string, ending where the assistant's answer begins."""
        prompt = self.prompts.build(outcome, job, document)
        if self.system_role:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        else:
            messages = [{"role": "user", "content": f"{prompt.system}\n\n{prompt.user}"}]
        return cast(str, self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    # --- screening ----------------------------------------------------------------------------------
    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        images = [d.applicant_id for d in documents if d.kind == "image"]
        if images:
            raise ConfigError(
                f"screener {self.name} reads text only, but the renderer produced image "
                f"documents (e.g. {images[0]!r}); use renderer=text or a VLM screener"
            )
        if not documents:
            return []
        self.run_tags = self._tags()
        prompts = [self.prompt_text(jobs[d.job_id], d, outcome) for d in documents]
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        lengths = np.array([len(row) for row in ids])
        cap = self.new_tokens(outcome)
        context = getattr(text_config(self.config), "max_position_embeddings", None)
        too_long = (lengths + cap > context) if context else np.zeros(len(ids), bool)
        reading = "logprobs" if self.score_from == "logprobs" else cap  # logprobs: apart from replies, no cap
        keys = [content_key(self.identity, outcome, reading, prompt) for prompt in prompts]
        stats = {"generated": 0, "batches": 0, "rows_in_batches": 0, "cut_short": 0, "checked": 0, "differ": 0}
        start = time.perf_counter()
        with open_blob_store_or_memory(
            self.store_location, GENERATIONS, f"screener {self.name}", "answers are not kept"
        ) as store:
            records = {key: json.loads(blob) for key, blob in store.get_many(keys).items()}
            cached = set(records)
            todo: dict[str, int] = {}  # identical prompts: generated once
            for i, key in enumerate(keys):
                if not too_long[i] and key not in records:
                    todo.setdefault(key, i)
            if todo:
                rows = [ids[i] for i in todo.values()]
                groups = [documents[i].job_id for i in todo.values()] if self.prefix_cache else None
                fill = first_token_records if self.score_from == "logprobs" else type(self)._generate  # no decode
                records.update(fill(self, store, rows, list(todo), outcome, stats, groups))
        elapsed = time.perf_counter() - start
        results = []
        for i, (document, key) in enumerate(zip(documents, keys)):
            if too_long[i]:
                reason = f"prompt of {lengths[i]} tokens + max_new_tokens {cap} exceeds the model context {context}"
                results.append(ScreenResult(document.applicant_id, None, None, reason, int(lengths[i])))
                continue
            record = records[key]
            stored = "value" in record  # a probability score (score_from=logprobs), stored with its answer
            value, error = (
                (record["value"], record["error"]) if stored else parse_answer(record["raw"], outcome, self.score_reply)
            )
            if error is not None and record["cut_short"]:
                error += f" (cut short at {cap} new tokens: raise screener.max_new_tokens)"
            results.append(
                ScreenResult(
                    document.applicant_id,
                    record["raw"],
                    value,
                    error,
                    int(lengths[i]),
                    int(record["new_tokens"]),
                    cached=key in cached,
                )
            )
        self._summarise(results, records, keys, stats, elapsed)
        return results

    def _generate(
        self, store: BlobStore, rows: list[list[int]], keys: list[str], outcome: Outcome, stats: dict, groups: Any
    ) -> dict[str, dict[str, Any]]:
        """Answer `rows` in token-budget batches, each batch stored as it is done (a stopped case keeps
        them); a sample of `invariance_check` rows is also answered alone right after its batch. Rows of
        one group (`groups`: their job) are batched together and share their common prefix's cache,
        computed once per group (None: every prompt computed whole)."""
        import torch

        decoding = Decoding(self.new_tokens(outcome), self.static_cache, self.compile)
        end_ids = end_token_ids(self.model, self.tokenizer)
        parse = lambda text: parse_answer(text, outcome, self.score_reply)  # noqa: E731
        lengths = np.array([len(r) for r in rows])
        sample = set(np.random.default_rng(0).permutation(len(rows))[: self.invariance_check].tolist())
        provenance = self.provenance
        out: dict[str, dict[str, Any]] = {}

        def answer(batch_rows: list[list[int]], prefix: Any) -> list[Reply]:
            return generate(self.model, self.tokenizer, batch_rows, parse, decoding, end_ids, self.input_device, prefix)

        pending = plan_batches(rows, groups, decoding.max_new_tokens, self.budget(), self.batch_size)
        pad_id = self.tokenizer.pad_token_id
        shared = self._prefixes = SharedPrefixes(self.model, self.input_device, int(lengths.sum()), pad_id)
        bar = tqdm(total=len(rows), desc=f"screen {self.name}", unit="prompt", leave=False)
        while pending:
            prefix_ids, batch = pending.pop(0)
            prefix = shared.for_batch(prefix_ids, int(lengths[batch].max()) + decoding.max_new_tokens)
            try:
                replies = answer([rows[i] for i in batch], prefix)
            except torch.OutOfMemoryError:
                if len(batch) == 1:
                    raise
                torch.cuda.empty_cache()
                self._budget = max(BUDGET_RANGE[0], self.budget() // 2)
                log.warning(
                    "screener %s: out of device memory at %d prompts; batch_tokens now %d",
                    self.name,
                    len(batch),
                    self._budget,
                )
                pending[:0] = [(prefix_ids, batch[: len(batch) // 2]), (prefix_ids, batch[len(batch) // 2 :])]
                continue
            prefix_tokens, width = shared.answered(prefix, [rows[i] for i in batch])
            fresh, padded = [], len(batch) * (width + decoding.max_new_tokens)
            for i, reply, prefix_length in zip(batch, replies, prefix_tokens):
                alone = None
                if i in sample and len(batch) > 1:
                    alone = answer([rows[i]], prefix)[0]
                    stats["checked"] += 1
                    stats["differ"] += alone.text != reply.text
                out[keys[i]] = _record(reply, len(batch), padded, provenance, alone)
                out[keys[i]]["prefix_tokens"] = prefix_length
                fresh.append((keys[i], json.dumps(out[keys[i]], sort_keys=True).encode()))
                stats["cut_short"] += reply.cut_short
            kept_batch(store, fresh, self.name, stats, len(batch))
            bar.update(len(batch))
        bar.close()
        shared.last = None  # the last prefix's cache: freed
        return out

    def _summarise(
        self,
        results: list[ScreenResult],
        records: Mapping[str, dict[str, Any]],
        keys: list[str],
        stats: dict[str, int],
        elapsed: float,
    ) -> None:
        n = len(results)
        failed = sum(r.error is not None for r in results)
        generated = stats["generated"]
        self.last_stats = {
            "screen.rows": n,
            "screen.rows_from_cache": sum(r.cached for r in results),
            "screen.generated": generated,
            "screen.failed_rows": failed,
            "screen.unparseable_rows": sum(r.error is not None and r.raw is not None for r in results),
            "screen.failure_rate": failed / n if n else 0.0,
            "screen.cut_short_rows": sum(bool(records[k]["cut_short"]) for k in set(keys) if k in records),
            "screen.output_tokens_mean": float(np.mean([r.output_tokens for r in results])) if n else 0.0,
        }
        if generated:
            self.last_stats.update(
                {
                    "screen.batches": stats["batches"],
                    "screen.batch_size_mean": stats["rows_in_batches"] / stats["batches"],
                    "screen.batch_tokens": self.budget(),
                    "screen.prompts_per_s": generated / max(elapsed, 1e-9),
                    **self._prefixes.metrics(),
                }
            )
        if stats["checked"]:  # answered alone as well: the share whose answer depended on the batch
            self.last_stats["screen.invariance_checked"] = stats["checked"]
            self.last_stats["screen.batch_variant_share"] = stats["differ"] / stats["checked"]
            if stats["differ"]:
                log.warning(
                    "screener %s: %d of %d prompts answered alone differ from their batched answer "
                    "(greedy answers depend on the batch in %s on %s)",
                    self.name,
                    stats["differ"],
                    stats["checked"],
                    self.dtype,
                    self.device_label,
                )

    def metrics(self) -> dict[str, float]:
        """Figures of the last `screen` call (rows, cached, generated, batches, cut short, invariance)."""
        return dict(self.last_stats)


def _record(reply: Reply, rows: int, padded: int, provenance: Mapping[str, Any], alone: Reply | None) -> dict[str, Any]:
    """One stored answer: the reply and what produced it."""
    return {
        "raw": reply.text,
        "new_tokens": reply.new_tokens,
        "cut_short": reply.cut_short,
        "batch_size": rows,
        "batch_padded_tokens": padded,
        **provenance,
        "alone_differs": None if alone is None else alone.text != reply.text,
        "created_at": time.time(),
    }
