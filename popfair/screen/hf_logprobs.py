"""Probability scores for hf_local (`screener.score_from=logprobs`): one forward pass over each prompt
reads the model's distribution of the answer's first token from its own logits, nothing generated.

Unlike a hosted API, which returns only its top 20 alternatives, the whole vocabulary is at hand: every
token that reads yes or no (" Yes", "yes", "NO" ...) or a 0-100 integer is passed to
`popfair.screen.parse.logprob_value`, which normalises P(yes) over yes and no, or takes the expected
score over the numbers."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from popfair.core.types import Outcome
from popfair.screen.parse import logprob_value

log = logging.getLogger("popfair.screen")


def answer_tokens(tokenizer: Any) -> tuple[np.ndarray, list[str]]:
    """Ids and texts of the vocabulary's tokens that read yes, no or an integer 0-100 (spaces and case
    aside): what P(yes) and an expected score are computed over."""
    vocabulary = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(vocabulary)], skip_special_tokens=True)
    keep = [
        i
        for i, text in enumerate(texts)
        if text.strip().lower() in ("yes", "no") or (text.strip().isdigit() and int(text.strip()) <= 100)
    ]
    return np.array(keep, dtype=np.int64), [texts[i] for i in keep]


def first_token_values(
    model: Any,
    tokenizer: Any,
    rows: Sequence[Sequence[int]],
    outcome: Outcome,
    device: str,
    answers: tuple[np.ndarray, list[str]],
) -> list[tuple[str, float | None, str | None]]:
    """(most likely first token, value, problem) of each prompt (token ids, unpadded) from one
    left-padded forward pass: value = `logprob_value` over the answer tokens' log-probabilities."""
    import torch

    padded = tokenizer.pad({"input_ids": [list(r) for r in rows]}, return_tensors="pt")  # padding_side: left
    encoded = {key: value.to(device) for key, value in padded.items()}
    mask = encoded["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
    with torch.inference_mode():
        logits = model(**encoded, position_ids=positions).logits[:, -1, :].float()
        logp = torch.log_softmax(logits, dim=-1)
        best = logp.argmax(dim=-1).cpu().tolist()
        ids, texts = answers
        chosen = logp[:, torch.as_tensor(ids, device=logp.device)].cpu().numpy()
    tops = tokenizer.batch_decode([[b] for b in best], skip_special_tokens=True)
    out = []
    for row, top in zip(chosen, tops):
        value, problem = logprob_value(tuple(zip(texts, row.tolist())), outcome)
        out.append((top, value, problem))
    return out


def first_token_records(
    screener: Any,
    store: Any,
    rows: list[list[int]],
    keys: list[str],
    outcome: Outcome,
    stats: dict[str, int],
    groups: object = None,  # the jobs (hf_local's prefix groups): one forward pass has no decode to share
) -> dict[str, dict[str, Any]]:
    """hf_local with score_from=logprobs (`screener`: the HFLocalScreener): each prompt's value from its
    first-token logits, in the screener's token-budget batches, each batch stored as it is done (a
    stored record keeps the value, so a rerun computes nothing)."""
    from popfair.screen.hf_generate import token_budget_batches

    answers = answer_tokens(screener.tokenizer)
    lengths = np.array([len(r) for r in rows])
    out: dict[str, dict[str, Any]] = {}
    for batch in token_budget_batches(lengths, 1, screener.budget(), screener.batch_size):
        values = first_token_values(
            screener.model, screener.tokenizer, [rows[i] for i in batch], outcome, screener.input_device, answers
        )
        fresh = []
        for i, (top, value, problem) in zip(batch, values):
            out[keys[i]] = {
                "raw": top,
                "value": value,
                "error": problem,
                "new_tokens": 0,
                "cut_short": False,
                **screener.provenance,
                "created_at": time.time(),
            }
            fresh.append((keys[i], json.dumps(out[keys[i]], sort_keys=True).encode()))
        kept_batch(store, fresh, screener.name, stats, len(batch))
    return out


def kept_batch(store: Any, fresh: list[tuple[str, bytes]], name: str, stats: dict[str, int], rows: int) -> None:
    """A batch's answers stored as one write (a failed store only costs time: logged, the case goes
    on), and counted in the screener's batch statistics."""
    from popfair.store.blobs import STORE_ERRORS

    try:
        store.put_many(fresh)
    except STORE_ERRORS as exc:
        log.warning("screener %s: answers not stored (%s): %s", name, store.location, exc)
    stats["generated"] += rows
    stats["batches"] += 1
    stats["rows_in_batches"] += rows
