"""Screen stage interface: a screener reads (job, document) and answers a score or a callback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult


class Screener(Protocol):
    name: str

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document, in order. `outcome` says what to answer: "score" (0-100)
        or "callback" (1 yes / 0 no). Failures are results with `error` set, never dropped."""
        ...

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Calls, tokens and dollars `screen` would spend (for dry runs and budgets); no calls made."""
        ...
