"""Screen stage interface: a screener reads (job, document) and answers a score or a callback."""
from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from popfair.types import Document, Job, Outcome, ScreenResult


class Screener(Protocol):
    name: str
    outcome: Outcome  # "score" (0-100) or "callback" (0/1)

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document]) -> list[ScreenResult]:
        """One result per document, in order; failures are results with `error` set, never dropped."""
        ...
