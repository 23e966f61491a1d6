"""Batched greedy generation for hf_local: batches sized by a token budget, and decoding that
stops each reply as soon as its reading is settled.

A reply is settled when the design's parser reads a value from it that no continuation tried
changes: the parsers read the first "yes"/"no" or the first integer, and once a character that
cannot extend that match has followed it, nothing later can change the reading. Stopping there
gives the value decoding to the token cap would give, in a few tokens; a reply that reaches the cap
unsettled is "cut short" and recorded so. Each row's stop depends on its own text only, so with
left padding a batch answers as each prompt alone would (exactly so in fp32)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Parse = Callable[[str], tuple[float | None, str | None]]
# continuations that would extend a match still open: "7" -> "70", "ye"/"no" -> "nox", "7" -> "7.5"
PROBES = ("0", "x", ".5")


def settled(text: str, parse: Parse) -> bool:
    """Whether `text` parses to a value that none of the probe continuations changes."""
    value, error = parse(text)
    return error is None and all(parse(text + probe) == (value, None) for probe in PROBES)


@dataclass(frozen=True)
class Decoding:
    """What shapes every reply: the token cap, and the opt-in static KV cache and compiled step."""

    max_new_tokens: int
    static_cache: bool = False
    compile: bool = False


@dataclass(frozen=True)
class Reply:
    text: str
    new_tokens: int  # generated up to the end token, or to the token that settled the reading
    cut_short: bool  # reached max_new_tokens with neither an end token nor a settled reading


def token_budget_batches(lengths: np.ndarray, new_tokens: int, budget: int, max_rows: int | None) -> list[list[int]]:
    """Indices of `lengths` (prompt tokens), longest first, cut into batches whose padded size
    (rows x (longest prompt + new_tokens)) stays within `budget` tokens, at most `max_rows` rows (a
    prompt longer than the budget goes alone)."""
    order = [int(i) for i in np.argsort(-np.asarray(lengths), kind="stable")]
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        rows = max(1, budget // (int(lengths[order[start]]) + new_tokens))
        if max_rows is not None:
            rows = min(rows, max_rows)
        batches.append(order[start : start + rows])
        start += rows
    return batches


def settled_stop(tokenizer: Any, parse: Parse, width: int, rows: int) -> Any:
    """A transformers StoppingCriteria that ends each row once its reply is settled; its
    `settled_at[row]` is the number of new tokens that settled it (None: never)."""
    import torch
    from transformers import StoppingCriteria

    class SettledReplies(StoppingCriteria):
        def __init__(self) -> None:
            self.settled_at: list[int | None] = [None] * rows

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            new = input_ids[:, width:].tolist()  # one device-to-host copy per step
            open_rows = [row for row in range(rows) if self.settled_at[row] is None]
            texts = tokenizer.batch_decode([new[row] for row in open_rows], skip_special_tokens=True)
            for row, text in zip(open_rows, texts):
                if settled(text, parse):
                    self.settled_at[row] = len(new[row])
            done = [at is not None for at in self.settled_at]
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    return SettledReplies()


def generation_config(decoding: Decoding, end_ids: Sequence[int], pad_id: int, own_cache: bool = False) -> Any:
    """Greedy decoding to the cap; the static cache and transformers' compiled decoding step only
    when asked for (generate compiles by itself whenever the cache is static, unless told not to).
    `own_cache`: the caller passes the cache (a shared prefix's), static already where asked for."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False,
        max_new_tokens=decoding.max_new_tokens,
        eos_token_id=list(end_ids),
        pad_token_id=pad_id,
        cache_implementation="static" if decoding.static_cache and not own_cache else None,
        disable_compile=not decoding.compile,
    )


def generate(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Sequence[int]],
    parse: Parse,
    decoding: Decoding,
    end_ids: Sequence[int],
    device: str,
    prefix: Any = None,
) -> list[Reply]:
    """One batch of prompts (token ids, unpadded), left-padded and decoded greedily together; rows
    that begin with the prefixes of `prefix` (a popfair.screen.hf_prefix.PrefixCache) start from their
    computed cache."""
    import torch
    from transformers import StoppingCriteriaList

    if prefix is None:
        padded = tokenizer.pad({"input_ids": [list(r) for r in rows]}, return_tensors="pt")  # padding_side: left
        encoded = {key: value.to(device) for key, value in padded.items()}
    else:
        encoded = prefix.inputs(tokenizer, rows, decoding.max_new_tokens, decoding.static_cache)
    width = encoded["input_ids"].shape[1]
    stop = settled_stop(tokenizer, parse, width, len(rows))
    with torch.inference_mode():
        out = model.generate(
            **encoded,
            generation_config=generation_config(decoding, end_ids, tokenizer.pad_token_id, prefix is not None),
            stopping_criteria=StoppingCriteriaList([stop]),
        )
    generated = out[:, width:].cpu().numpy()
    lengths = [_reply_length(tokens, end_ids, at) for tokens, at in zip(generated, stop.settled_at)]
    texts = tokenizer.batch_decode([t[:n] for t, n in zip(generated, lengths)], skip_special_tokens=True)
    return [
        Reply(
            text=text,
            new_tokens=n,
            cut_short=at is None and n == decoding.max_new_tokens and not np.isin(t[:n], end_ids).any(),
        )
        for text, n, t, at in zip(texts, lengths, generated, stop.settled_at)
    ]


def _reply_length(tokens: np.ndarray, end_ids: Sequence[int], settled_at: int | None) -> int:
    """Tokens of a reply: up to and including its first end token, or up to the token that
    settled it, whichever came first (what follows is padding)."""
    ends = np.flatnonzero(np.isin(tokens, end_ids))
    n = int(ends[0] + 1) if len(ends) else len(tokens)
    return min(n, settled_at) if settled_at is not None else n


def end_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Token ids that end an answer: the generation config's eos id(s) and the tokenizer's."""
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids = list(configured) if isinstance(configured, list) else [configured]
    ids.append(tokenizer.eos_token_id)
    return sorted({int(i) for i in ids if i is not None})
