"""Parse a model's raw answer by the rule of the design that asked it (popfair.design): callback =
the first occurrence of "yes" or "no" (design/paired), score = first integer, 0-100, or with
`score_reply="json_decimal"` the `"score":` number to two decimals (design/population).

Anything else is a parse failure: the raw text is kept and the row is excluded from analysis."""

from __future__ import annotations

import math
from collections.abc import Sequence

from popfair.core.types import Outcome
from popfair.design import for_outcome
from popfair.design.population.design import SCORE_REPLIES, parse_json_score

__all__ = ["SCORE_FROM", "SCORE_REPLIES", "logprob_value", "parse_answer"]


def parse_answer(raw: str, outcome: Outcome, score_reply: str = "integer") -> tuple[float | None, str | None]:
    """(value, None) on success, (None, reason) on failure."""
    if outcome == "score" and score_reply == "json_decimal":
        return parse_json_score(raw)
    return for_outcome(outcome).parse_reply(raw)


SCORE_FROM = ("text", "logprobs")


def logprob_value(top: Sequence[tuple[str, float]], outcome: Outcome) -> tuple[float | None, str | None]:
    """The answer as a probability score from the top log-probabilities at its first token
    (`screener.score_from=logprobs`): a callback is P(yes) = p(yes) / (p(yes) + p(no)), summing every
    token that reads yes or no once stripped of spaces and case (" Yes", "yes", "YES"); a 0-100 score is
    the expected value over the tokens that are integers 0-100, their probabilities normalised over
    those tokens. (value, None), or (None, reason) when no such token is among the alternatives."""
    if not top:
        return None, "no log-probabilities in the response (the endpoint ignored logprobs)"
    if outcome == "callback":
        mass = {"yes": 0.0, "no": 0.0}
        for token, logprob in top:
            word = token.strip().lower()
            if word in mass:
                mass[word] += math.exp(logprob)
        total = mass["yes"] + mass["no"]
        if total <= 0:
            return None, f"neither yes nor no among the first token's top log-probabilities ({len(top)} tokens)"
        return mass["yes"] / total, None
    if outcome == "score":
        weights: dict[int, float] = {}
        for token, logprob in top:
            word = token.strip()
            if word.isdigit() and 0 <= int(word) <= 100:
                weights[int(word)] = weights.get(int(word), 0.0) + math.exp(logprob)
        total = sum(weights.values())
        if total <= 0:
            return None, f"no 0-100 number among the first token's top log-probabilities ({len(top)} tokens)"
        return sum(v * w for v, w in weights.items()) / total, None
    return None, f"score_from=logprobs reads yes/no or 0-100 answers, not {outcome!r}"
