"""Parse a model's free-text answer into the outcome value, or a recorded failure.

A tiny pure module shared by every screener that asks a model (local or API), so one rule
decides what counts as an answer (as the callback paper): callback = the first word `yes` or
`no` (case-insensitive) -> 1.0 / 0.0; score = the first integer, which must lie in 0..100.
Anything else is a failure: the caller keeps the raw text and the reason."""
from __future__ import annotations

import re
from typing import NamedTuple

from popfair.types import Outcome

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
_INTEGER = re.compile(r"(?<![\d.])-?\d+")  # whole digit runs; "85.5" reads as 85, "-5" as -5
SCORE_RANGE = (0, 100)


class Parsed(NamedTuple):
    """The parsed value (None on failure) and, on failure, why."""

    value: float | None
    error: str | None = None


def parse_callback(text: str) -> Parsed:
    """First standalone `yes` or `no`, case-insensitive: yes -> 1.0, no -> 0.0."""
    match = _YES_NO.search(text or "")
    if match is None:
        return Parsed(None, "unparseable callback: no 'yes' or 'no' word in the answer")
    return Parsed(1.0 if match.group(1).lower() == "yes" else 0.0)


def parse_score(text: str) -> Parsed:
    """First integer in the answer; it must lie in 0..100 (else a failure, not a clipped value)."""
    match = _INTEGER.search(text or "")
    if match is None:
        return Parsed(None, "unparseable score: no integer in the answer")
    value = int(match.group(0))
    low, high = SCORE_RANGE
    if not low <= value <= high:
        return Parsed(None, f"unparseable score: first integer {value} is outside {low}..{high}")
    return Parsed(float(value))


def parse_answer(text: str, outcome: Outcome) -> Parsed:
    """Dispatch on the outcome kind the case asks for ("score" or "callback")."""
    if outcome == "callback":
        return parse_callback(text)
    if outcome == "score":
        return parse_score(text)
    raise ValueError(f"outcome must be 'score' or 'callback', got {outcome!r}")
