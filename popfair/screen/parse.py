"""Parse a model's raw answer by the rule of the design that asked it (popfair.design): callback =
the first occurrence of "yes" or "no" (design/paired), score = first integer, 0-100 (design/population).

Anything else is a parse failure: the raw text is kept and the row is excluded from analysis."""

from __future__ import annotations

from popfair.core.types import Outcome
from popfair.design import for_outcome


def parse_answer(raw: str, outcome: Outcome) -> tuple[float | None, str | None]:
    """(value, None) on success, (None, reason) on failure."""
    return for_outcome(outcome).parse_reply(raw)
