"""The shared prefix of hf_local's prompts, computed once per job (`screener.prefix_cache`).

A case asks one question of many resumes: the chat template's start, the system prompt and the job
description (in a paired design the posting: each posting is a job) are the same tokens in every
prompt of a job, and only the resume after them changes. The prompts of a job are tokenised as
usual; the tokens all of them begin with (their longest common prefix, so whatever the tokenizer
does at the seams is already in it) are run through the model once, and that key-value cache
(transformers' own `DynamicCache`) is copied and expanded across each batch of the job's resumes
(`Cache.batch_select_indices`), or written into a `StaticCache` when the static cache is on. Jobs
with few resumes (a paired audit's postings: 8 or 16 prompts each) are packed whole into one batch
up to the token budget, their prefixes computed together in one pass (left-padded), each row
starting from its own job's.

Each row of a batch is then [left padding][its job's prefix][left padding][its own tokens]: the
attention mask hides the padding and the position ids (the mask's running count, as generate
computes them) continue from the prefix, so every row sees the keys and values it would see alone,
at the same positions. Greedy answers are those of
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
Prefix = tuple[int, ...]
Batch = tuple[tuple[Prefix, ...] | None, list[int]]  # (the prefixes of the batch's jobs, or None; row indices)


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
    new_tokens: int,
    budget: int,
    max_rows: int | None,
) -> list[Batch]:
    """Token-budget batches of row indices (popfair.screen.hf_generate.token_budget_batches), each with
    the prefixes of its jobs. The rows of a group (a job) of at least two rows whose common prefix has
    MIN_PREFIX_TOKENS share it: a group larger than a batch is cut into batches of its own; smaller
    groups, longest prefix first, are packed whole into batches while the padded size, rows x (longest
    prefix + longest rest + new_tokens), stays within `budget`. The other rows are batched together
    with none. `groups` None: no reuse, every row in the plain batches."""
    from popfair.screen.hf_generate import token_budget_batches

    lengths = np.array([len(r) for r in rows])

    def cut(indices: list[int]) -> list[list[int]]:
        return [[indices[j] for j in b] for b in token_budget_batches(lengths[indices], new_tokens, budget, max_rows)]

    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups if groups is not None else [None] * len(rows)):
        members.setdefault(group, []).append(i)
    shared, plain = [], []
    for indices in members.values():
        prefix = common_prefix([rows[i] for i in indices]) if groups is not None and len(indices) > 1 else ()
        if len(prefix) < MIN_PREFIX_TOKENS:
            plain.extend(indices)
        else:
            shared.append((prefix, indices))
    planned: list[Batch] = []
    pack: list[tuple[Prefix, list[int]]] = []
    for prefix, indices in sorted(shared, key=lambda item: -len(item[0])):
        parts = cut(indices)
        if len(parts) > 1:  # more rows than a batch holds: batches of its own
            planned.extend(((prefix,), part) for part in parts)
            continue
        packed = [*pack, (prefix, indices)]
        head = max(len(p) for p, _ in packed)
        rest = max(int(lengths[i]) - len(p) for p, members_ in packed for i in members_)
        n = sum(len(members_) for _, members_ in packed)
        if pack and (n * (head + rest + new_tokens) > budget or (max_rows is not None and n > max_rows)):
            planned.append((tuple(p for p, _ in pack), [i for _, members_ in pack for i in members_]))
            packed = [(prefix, indices)]
        pack = packed
    if pack:
        planned.append((tuple(p for p, _ in pack), [i for _, members_ in pack for i in members_]))
    if plain:
        planned.extend((None, batch) for batch in cut(plain))
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
    """The key-value cache of the prefixes of a batch's jobs (one row each, left-padded to the longest),
    computed in one pass and copied for every batch that starts from them."""

    def __init__(self, model: Any, prefixes: Sequence[Prefix], device: str, pad_id: int) -> None:
        import torch
        from transformers import DynamicCache

        self.model, self.prefixes, self.device = model, tuple(prefixes), device
        self.argument = cache_argument(model)
        width = max(len(p) for p in self.prefixes)
        self.ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in self.prefixes])
        self.mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in self.prefixes])
        # the position ids generate gives left-padded rows: the mask's running count
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            out = model(
                input_ids=self.ids.to(device),
                attention_mask=self.mask.to(device),
                position_ids=positions.to(device),
                use_cache=True,
                logits_to_keep=1,
                **{self.argument: DynamicCache(config=model.config)},
            )
        self.cache = out[self.argument] if self.argument in out else out.past_key_values
        self._longest_first = sorted(range(len(self.prefixes)), key=lambda k: -len(self.prefixes[k]))

    def which(self, row: Sequence[int]) -> int:
        """The index of the (longest) prefix `row` begins with."""
        for k in self._longest_first:
            if tuple(row[: len(self.prefixes[k])]) == self.prefixes[k]:
                return k
        raise ValueError("a row begins with none of its batch's prefixes")

    def inputs(self, tokenizer: Any, rows: Sequence[Sequence[int]], new_tokens: int, static: bool) -> dict[str, Any]:
        """generate's keyword arguments for `rows` (each beginning with one of the prefixes): the ids
        as [padding][its prefix][padding][own tokens], the mask hiding the padding, and the prefixes'
        cache selected row by row (a StaticCache sized for the replies when `static`)."""
        import torch

        index = [self.which(r) for r in rows]
        own = [list(r[len(self.prefixes[k]) :]) for r, k in zip(rows, index)]
        padded = tokenizer.pad({"input_ids": own}, return_tensors="pt")  # padding_side: left
        ids = torch.cat([self.ids[index], padded["input_ids"]], dim=1).to(self.device)
        mask = torch.cat([self.mask[index], padded["attention_mask"]], dim=1).to(self.device)
        cache = copy.deepcopy(self.cache)  # generate appends to it: the prefixes' own stays as computed
        cache.batch_select_indices(torch.tensor(index, device=self.device))
        if static:
            cache = self._static(cache, ids.shape[1] + new_tokens)
        return {"input_ids": ids, "attention_mask": mask, self.argument: cache}

    def _static(self, dynamic: Any, length: int) -> Any:
        """A StaticCache of `length` tokens holding the selected prefixes (Cache.update per layer)."""
        import torch
        from transformers import StaticCache

        static = StaticCache(config=self.model.config, max_cache_len=length)
        positions = {"cache_position": torch.arange(self.ids.shape[1], device=self.device)}
        for index, layer in enumerate(dynamic.layers):
            static.update(layer.keys, layer.values, index, positions)
        return static


class SharedPrefixes:
    """The prefixes of one screening call: each computed once (the batches of a job come one after
    another, so the last one is kept), and what they saved, as the run's metrics."""

    def __init__(self, model: Any, device: str, prompt_tokens: int, pad_id: int = 0) -> None:
        self.model, self.device, self.prompt_tokens, self.pad_id = model, device, prompt_tokens, pad_id
        self.last: PrefixCache | None = None
        self.computed = self.rows = self.saved_tokens = 0

    def for_batch(self, prefixes: tuple[Prefix, ...] | None, longest: int) -> PrefixCache | None:
        """The cache a batch of rows of up to `longest` tokens (prefix, padding and replies) starts
        from; None where it has no prefix or cannot reuse one (`reusable`)."""
        if prefixes is None or not reusable(self.model, max(len(p) for p in prefixes) + longest):
            return None
        if self.last is None or self.last.prefixes != prefixes:
            self.last = PrefixCache(self.model, prefixes, self.device, self.pad_id)
            self.computed += len(prefixes)
            self.saved_tokens -= sum(map(len, prefixes))  # computed once: what is saved is every other row's copy
        return self.last

    def answered(self, prefix: PrefixCache | None, rows: Sequence[Sequence[int]]) -> tuple[list[int], int]:
        """Count a batch answered from `prefix`: each row's prefix length in tokens (0: none), and the
        batch's padded width (the prefixes' width and the longest rest; without: the longest row)."""
        if prefix is None:
            return [0] * len(rows), max(len(r) for r in rows)
        used = [len(prefix.prefixes[prefix.which(r)]) for r in rows]
        self.rows += len(rows)
        self.saved_tokens += sum(used)
        return used, int(prefix.ids.shape[1]) + max(len(r) - n for r, n in zip(rows, used))

    def metrics(self) -> dict[str, float]:
        """Prompts started from a shared prefix's cache, the prefixes computed (one per job) and the
        share of the generated prompts' tokens not computed again thanks to them."""
        return {
            "screen.prefix_rows": self.rows,
            "screen.prefixes_computed": self.computed,
            "screen.prefix_token_share": self.saved_tokens / max(self.prompt_tokens, 1),
        }
