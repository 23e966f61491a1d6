"""Parse a model's raw answer: callback = the first occurrence of "yes" or "no" (the callback paper's
rule; popfair matches whole words in any case); score = first integer, 0-100 (popfair's rule).

Anything else is a parse failure: the raw text is kept and the row is excluded from analysis."""

from __future__ import annotations

import re

from popfair.types import Outcome

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_answer(raw: str, outcome: Outcome) -> tuple[float | None, str | None]:
    """(value, None) on success, (None, reason) on failure."""
    if outcome == "callback":
        match = _YES_NO.search(raw)
        if match is None:
            return None, "unparseable answer: no 'yes' or 'no' in the reply"
        return (1.0 if match.group(1).lower() == "yes" else 0.0), None
    match = _NUMBER.search(raw)
    if match is None:
        return None, "unparseable answer: no integer in the reply"
    token = match.group(0)
    if "." in token or token.startswith("-"):
        return None, f"unparseable answer: first number {token} is not an integer in 0-100"
    value = int(token)
    if value > 100:
        return None, f"unparseable answer: first integer {value} is outside 0-100"
    return float(value), None
