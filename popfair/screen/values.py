"""Turn a screener's answer (an HTTP response field, a cell of a results file, a matcher's score) into y.

Vendors answer in their own vocabulary: a score on their own scale, a label ("advance", "reject"),
a boolean. `ValueMapping` is the one rule the HTTP and file screeners and the offline matchers
(TF-IDF, embeddings: `scored_results`) apply, so the same answer gives the same y whichever way it
reached popfair, and a callback is "the score reaches callback_threshold" everywhere."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popfair.core.errors import require
from popfair.core.types import Document, Outcome, ScreenResult


@dataclass(frozen=True)
class ValueMapping:
    """labels: answer label -> number (matched case-insensitively after trimming), e.g. advance: 1.
    range: the closed interval a score must lie in (the tool's own scale; default 0-100).
    callback_threshold: for yes/no designs, a numeric answer >= this is a callback (1), else 0;
    null means the answer itself must be 0/1 (or a label or boolean meaning it)."""

    labels: Mapping[str, float] = field(default_factory=dict)
    range: tuple[float, float] = (0.0, 100.0)
    callback_threshold: float | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, key: str) -> ValueMapping:
        values = dict(config or {})
        allowed = {"labels", "range", "callback_threshold"}
        unknown = set(values) - allowed
        require(not unknown, key, f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        labels = values.get("labels") or {}
        require(isinstance(labels, Mapping), f"{key}.labels", "must be a mapping label -> number")
        clean: dict[str, float] = {}
        for label, number in labels.items():
            require(
                _is_number(number) and math.isfinite(number),
                f"{key}.labels.{label}",
                f"must be a number, got {number!r}",
            )
            clean[str(label).strip().lower()] = float(number)
        bounds = values.get("range", [0, 100])
        require(
            isinstance(bounds, (list, tuple))
            and len(bounds) == 2
            and all(_is_number(b) for b in bounds)
            and bounds[0] < bounds[1],
            f"{key}.range",
            f"must be [low, high] with low < high, got {bounds!r}",
        )
        threshold = values.get("callback_threshold")
        require(
            threshold is None or _is_number(threshold),
            f"{key}.callback_threshold",
            f"must be a number or null, got {threshold!r}",
        )
        return cls(
            labels=clean,
            range=(float(bounds[0]), float(bounds[1])),
            callback_threshold=None if threshold is None else float(threshold),
        )

    def parse(self, answer: Any, outcome: Outcome) -> tuple[float | None, str | None]:
        """(value, None), or (None, reason naming the answer) when it cannot be read as y."""
        number, problem = self._number(answer)
        if problem is not None:
            return None, problem
        assert number is not None
        low, high = self.range
        if outcome == "callback":
            if self.callback_threshold is not None:
                if not low <= number <= high:
                    return None, f"value {answer!r} is outside the range [{low:g}, {high:g}]"
                return (1.0 if number >= self.callback_threshold else 0.0), None
            if number not in (0.0, 1.0):
                return None, (
                    f"value {answer!r} is not a yes/no decision (0/1, true/false or a label in "
                    f"{sorted(self.labels)}); set callback_threshold to read scores as decisions"
                )
            return number, None
        if not low <= number <= high:
            return None, f"value {answer!r} is outside the range [{low:g}, {high:g}]"
        return number, None

    def values(self, scores: np.ndarray, outcome: Outcome) -> np.ndarray:
        """Many numeric answers at once by `parse`'s rule: the scores themselves, or for a callback
        design 1 where a score reaches callback_threshold, else 0."""
        if outcome != "callback":
            return scores
        require(self.callback_threshold is not None, "callback_threshold", "a callback design needs one to read scores")
        return (scores >= self.callback_threshold).astype(float)

    def _number(self, answer: Any) -> tuple[float | None, str | None]:
        if isinstance(answer, bool):
            return float(answer), None
        if _is_number(answer):
            value = float(answer)
            if math.isnan(value):  # an empty cell read by pandas
                return None, "empty value"
            return (value, None) if math.isfinite(value) else (None, f"value {answer!r} is not a finite number")
        if answer is None:
            return None, "empty value"
        if isinstance(answer, str):
            text = answer.strip()
            if not text:
                return None, "empty value"
            label = self.labels.get(text.lower())
            if label is not None:
                return label, None
            if text.lower() in ("true", "false"):
                return float(text.lower() == "true"), None
            try:
                value = float(text)
            except ValueError:
                known = f" or one of the labels {sorted(self.labels)}" if self.labels else ""
                return None, f"value {answer!r} is not a number{known}"
            return (value, None) if math.isfinite(value) else (None, f"value {answer!r} is not a finite number")
        return None, f"value {answer!r} ({type(answer).__name__}) is not a number or label"


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def scored_results(
    documents: Sequence[Document], scores: np.ndarray, mapping: ValueMapping, outcome: Outcome
) -> list[ScreenResult]:
    """An offline matcher's results: each document's score (kept as the raw answer) and its value."""
    values = mapping.values(scores, outcome)
    return [
        ScreenResult(applicant_id=d.applicant_id, raw=f"{s:.4f}", value=float(v))
        for d, s, v in zip(documents, scores, values)
    ]
