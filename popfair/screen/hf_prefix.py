"""The shared prefix of hf_local's prompts, computed once per job (`screener.prefix_cache`).

A case asks one question of many resumes: the chat template's start, the system prompt and the job
description (in a paired design the posting: each posting is a job) are the same tokens in every
prompt of a job, and only the resume after them changes. The prompts of a job are tokenised as
usual; the tokens all of them begin with (their longest common prefix, so whatever the tokenizer
does at the seams is already in it) are run through the model once, and that key-value cache
(transformers' own `DynamicCache`) is copied and expanded across each batch of the job's resumes
(`Cache.batch_repeat_interleave`), or written into a `StaticCache` when the static cache is on.

Each row of a batch is then [prefix][left padding][its own tokens]: the attention mask hides the
padding and generate's position ids (the mask's running count) continue from the prefix, so every
row sees the keys and values it would see alone, at the same positions. Greedy answers are those of
computing the whole prompt (the same arithmetic up to summation order; test_screen_hf_local shows
them equal in fp32). It is not used where that could fail: models whose cache holds recurrent state
(linear-attention layers), and batches longer than a sliding attention window (the padding in the
middle would take a place in the window)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

MIN_PREFIX_TOKENS = 16  # a shorter common start saves less than the copy of its cache costs
Batch = tuple[tuple[int, ...] | None, list[int]]  # (the shared prefix's tokens or None, row indices)


def common_prefix(rows: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The tokens every row begins with, leaving each row at least one token of its own (the last
    position's logits start the answer)."""
    first = np.asarray(rows[0])
    n = min(len(r) for r in rows) - 1
    for row in rows[1:]:
        same = first[:n] == np.asarray(row[:n])
        n = int(np.argmin(same)) if not same.all() else n
    return tuple(int(t) for t in first[: max(n, 0)])


def plan_batches(
    rows: Sequence[Sequence[int]],
    groups: Sequence[Hashable] | None,
    batches: Any,
) -> list[Batch]:
    """Batches of row indices, each with the prefix its rows share: the rows of a group (a job) of at
    least two rows whose common prefix has MIN_PREFIX_TOKENS are batched among themselves with it
    (`batches(indices)`: the token-budget cut of those rows); the others together, with none.
    `groups` None: no reuse, every row in the plain batches."""
    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups if groups is not None else [None] * len(rows)):
        members.setdefault(group, []).append(i)
    planned: list[Batch] = []
    plain: list[int] = []
    for indices in members.values():
        prefix = common_prefix([rows[i] for i in indices]) if groups is not None and len(indices) > 1 else ()
        if len(prefix) < MIN_PREFIX_TOKENS:
            plain.extend(indices)
            continue
        planned.extend((prefix, [indices[j] for j in batch]) for batch in batches(indices))
    if plain:
        planned.extend((None, [plain[j] for j in batch]) for batch in batches(plain))
    return planned


def cache_argument(model: Any) -> str:
    """The name model.forward and generate take a Cache by: `cache` in current transformers,
    `past_key_values` before it was renamed."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def reusable(model: Any, longest: int) -> bool:
    """Whether a batch whose rows (prefix, padding and reply) reach `longest` tokens can reuse a prefix:
    not for caches with recurrent state, nor past a sliding attention window."""
    from popfair.screen.local_runtime import text_config

    supports = getattr(model, "_supports_default_dynamic_cache", None)  # False: a model keeping state of its own
    if supports is not None and not supports():
        return False
    text = text_config(model.config)
    types = getattr(text, "layer_types", None) or []
    if any("linear" in str(t) or "mamba" in str(t) for t in types):
        return False
    window = getattr(text, "sliding_window", None)
    if window is None or (types and not any("sliding" in str(t) for t in types)):
        return True
    return longest <= int(window)


class PrefixCache:
    """The key-value cache of one prefix (batch of one), computed once and copied for every batch."""

    def __init__(self, model: Any, prefix: Sequence[int], device: str) -> None:
        import torch
        from transformers import DynamicCache

        self.model, self.prefix, self.device = model, tuple(prefix), device
        self.argument = cache_argument(model)
        ids = torch.tensor([self.prefix], device=device)
        with torch.inference_mode():
            out = model(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                use_cache=True,
                logits_to_keep=1,
                **{self.argument: DynamicCache(config=model.config)},
            )
        self.cache = out[self.argument] if self.argument in out else out.past_key_values

    def inputs(self, tokenizer: Any, rows: Sequence[Sequence[int]], new_tokens: int, static: bool) -> dict[str, Any]:
        """generate's keyword arguments for `rows` (each beginning with the prefix): the ids as
        [prefix][left padding][own tokens], the mask hiding the padding, and the prefix's cache expanded
        to the batch (a StaticCache sized for the replies when `static`)."""
        import torch

        n, p = len(rows), len(self.prefix)
        own = tokenizer.pad({"input_ids": [list(r[p:]) for r in rows]}, return_tensors="pt")  # padding_side: left
        head = torch.tensor([self.prefix] * n)
        ids = torch.cat([head, own["input_ids"]], dim=1).to(self.device)
        mask = torch.cat([torch.ones_like(head), own["attention_mask"]], dim=1).to(self.device)
        cache = copy.deepcopy(self.cache)  # generate appends to it: the prefix's own stays as computed
        cache.batch_repeat_interleave(n)
        if static:
            cache = self._static(cache, ids.shape[1] + new_tokens)
        return {"input_ids": ids, "attention_mask": mask, self.argument: cache}

    def _static(self, dynamic: Any, length: int) -> Any:
        """A StaticCache of `length` tokens holding the expanded prefix (Cache.update per layer)."""
        import torch
        from transformers import StaticCache

        static = StaticCache(config=self.model.config, max_cache_len=length)
        positions = {"cache_position": torch.arange(len(self.prefix), device=self.device)}
        for index, layer in enumerate(dynamic.layers):
            static.update(layer.keys, layer.values, index, positions)
        return static


class SharedPrefixes:
    """The prefixes of one screening call: each computed once (the batches of a job come one after
    another, so the last one is kept), and what they saved, as the run's metrics."""

    def __init__(self, model: Any, device: str, prompt_tokens: int) -> None:
        self.model, self.device, self.prompt_tokens = model, device, prompt_tokens
        self.last: PrefixCache | None = None
        self.computed = self.rows = self.saved_tokens = 0

    def for_batch(self, prefix: tuple[int, ...] | None, longest: int) -> PrefixCache | None:
        """The cache a batch of rows of up to `longest` tokens (with their replies) starts from; None
        where it has no prefix or cannot reuse one (`reusable`)."""
        if prefix is None or not reusable(self.model, longest):
            return None
        if self.last is None or self.last.prefix != prefix:
            self.last = PrefixCache(self.model, prefix, self.device)
            self.computed += 1
            self.saved_tokens -= len(prefix)  # computed once: what is saved is every other row's copy
        return self.last

    def answered(self, prefix: PrefixCache | None, rows: int) -> int:
        """Count a batch of `rows` answered from `prefix`; its length in tokens (0: none)."""
        if prefix is None:
            return 0
        self.rows += rows
        self.saved_tokens += rows * len(prefix.prefix)
        return len(prefix.prefix)

    def metrics(self) -> dict[str, float]:
        """Prompts started from a shared prefix's cache, the prefixes computed (one per job) and the
        share of the generated prompts' tokens not computed again thanks to them."""
        return {
            "screen.prefix_rows": self.rows,
            "screen.prefixes_computed": self.computed,
            "screen.prefix_token_share": self.saved_tokens / max(self.prompt_tokens, 1),
        }
