"""Parse a model's raw answer by the rule of the design that asked it (popfair.design): callback =
the first occurrence of "yes" or "no" (design/paired), score = first integer, 0-100, or with
`score_reply="json_decimal"` the `"score":` number to two decimals (design/population).

Anything else is a parse failure: the raw text is kept and the row is excluded from analysis."""

from __future__ import annotations

from popfair.core.types import Outcome
from popfair.design import for_outcome
from popfair.design.population.design import SCORE_REPLIES, parse_json_score

__all__ = ["SCORE_REPLIES", "parse_answer"]


def parse_answer(raw: str, outcome: Outcome, score_reply: str = "integer") -> tuple[float | None, str | None]:
    """(value, None) on success, (None, reason) on failure."""
    if outcome == "score" and score_reply == "json_decimal":
        return parse_json_score(raw)
    return for_outcome(outcome).parse_reply(raw)
