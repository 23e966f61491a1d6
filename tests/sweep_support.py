"""Test-only screeners for sweep tests, selected with screener._target_=tests.sweep_support.<Class>
(the tfidf config's keys arrive as keyword arguments and are ignored)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from popfair.core.errors import MissingSecretError
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.screen.base import Screener

PRICE_PER_INPUT_TOKEN = 1e-6
OUTPUT_TOKENS_PER_CALL = 3


class ExplodingScreener(Screener):
    """Builds fine, raises in the middle of a case (at the screen stage)."""

    def __init__(self, name: str = "exploding", **_: Any) -> None:
        self.name = "exploding"

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)

    def screen(self, jobs, documents, outcome) -> list[ScreenResult]:
        raise RuntimeError("boom: the model endpoint fell over")


class CountingScreener(Screener):
    """A priced 'API' screener: one call per distinct (job, text), tokens = characters / 4.
    Reads its key at construction (MissingSecretError unless require_key=False); never screens."""

    def __init__(
        self, name: str = "counting", api_key_env: str = "POPFAIR_TEST_KEY", require_key: bool = True, **_: Any
    ) -> None:
        if require_key and not os.environ.get(api_key_env):
            raise MissingSecretError(f"screener.api_key_env: environment variable {api_key_env} is not set")
        self.name = "counting"

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        distinct = {(d.job_id, d.text) for d in documents}
        tokens = sum((len(jobs[j].description) + len(text)) // 4 for j, text in distinct)
        return CallPlan(
            calls=len(distinct),
            input_tokens=tokens,
            output_tokens=OUTPUT_TOKENS_PER_CALL * len(distinct),
            cost_usd=tokens * PRICE_PER_INPUT_TOKEN,
        )

    def screen(self, jobs, documents, outcome) -> list[ScreenResult]:
        raise AssertionError("a dry run must not screen")
