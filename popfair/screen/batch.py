"""Batch mode: OpenAI Batch API and Anthropic Message Batches (about half the list price).

submit -> poll -> collect. Batch ids (with the cache keys they answer) are stored in the cache DB the
moment a batch is accepted, so an interrupted run resumes: the rerun polls and collects the batches
already submitted and submits only prompts that no batch covers. Results are committed to the cache
one by one; failed or expired entries are recorded as failures (not cached) and are asked again next run."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popfair.errors import require, settings_from_config
from popfair.screen.cache import CachedAnswer, ResponseCache
from popfair.screen.engine import Answer, Call, EngineStats, run_coroutine
from popfair.screen.parse import parse_answer
from popfair.screen.pricing import Price
from popfair.screen.providers import Completion, Provider
from popfair.types import Outcome

log = logging.getLogger("popfair.screen")


@dataclass(frozen=True)
class BatchSettings:
    """Keys under `screener.batch`."""

    poll_interval_s: float = 30.0      # seconds between status checks
    max_wait_s: float | None = None    # stop waiting after this long (batches keep running; rerun collects)
    max_requests: int = 50_000         # requests per submitted batch (OpenAI's cap)
    completion_window: str = "24h"     # OpenAI batch completion window

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> BatchSettings:
        settings = settings_from_config(cls, config, "screener.batch")
        require(settings.poll_interval_s > 0, "screener.batch.poll_interval_s", "must be > 0")
        require(settings.max_wait_s is None or settings.max_wait_s > 0, "screener.batch.max_wait_s",
                "must be > 0 or null (wait until done)")
        require(isinstance(settings.max_requests, int) and settings.max_requests >= 1,
                "screener.batch.max_requests", "must be an integer >= 1")
        return settings


class BatchRunner:
    def __init__(self, settings: BatchSettings, provider: Provider, cache: ResponseCache, price: Price,
                 outcome: Outcome, stats: EngineStats, budget_usd: float | None = None) -> None:
        self.settings, self.provider, self.cache, self.price = settings, provider, cache, price
        self.outcome, self.stats, self.budget_usd = outcome, stats, budget_usd
        if provider.batch_api is None:
            raise ValueError(f"provider {provider.kind!r} has no batch endpoint")
        self.api = provider.batch_api(provider)

    def run(self, calls: Sequence[Call]) -> dict[str, Answer]:
        return run_coroutine(lambda: self._run(calls))

    async def _run(self, calls: Sequence[Call]) -> dict[str, Answer]:
        wanted = {c.key: c for c in calls}
        answers: dict[str, Answer] = {}
        p = self.provider
        await p.start()
        try:
            open_batches = [b for b in self.cache.open_batches(p.kind, p.endpoint, p.model)
                            if set(b.keys) & set(wanted)]
            covered = {k for b in open_batches for k in b.keys}
            batch_ids = [b.batch_id for b in open_batches]
            if batch_ids:
                log.info("resuming %d submitted batch(es): %s", len(batch_ids), ", ".join(batch_ids))
            fresh = [c for c in calls if c.key not in covered]
            fresh, over_budget = self._within_budget(fresh)
            for call in over_budget:
                answers[call.key] = Answer(None, None, f"budget exhausted: max_cost_usd={self.budget_usd}; not sent")
            for start in range(0, len(fresh), self.settings.max_requests):
                chunk = fresh[start:start + self.settings.max_requests]
                lines = [(c.key, p.request_body(c.prompt)) for c in chunk]
                batch_id = await self.api.submit(lines, self.settings.completion_window)
                self.cache.add_batch(batch_id, p.kind, p.endpoint, p.model, self.outcome, [c.key for c in chunk])
                self.stats.requests += 1
                log.info("submitted batch %s with %d requests", batch_id, len(chunk))
                batch_ids.append(batch_id)
            deadline = None if self.settings.max_wait_s is None else time.monotonic() + self.settings.max_wait_s
            for batch_id in batch_ids:
                status = await self._wait(batch_id, deadline)
                if status is None:
                    continue  # still running: its rows stay pending; a rerun collects them
                async for key, result in self.api.results(batch_id):
                    self._record(key, result, answers)
                self.cache.finish_batch(batch_id, status)
        finally:
            await p.stop()
        for key in wanted:
            if key not in answers:
                answers[key] = Answer(None, None, "batch not finished or entry missing; rerun to collect")
                self.stats.failed += 1
        return answers

    def _within_budget(self, calls: list[Call]) -> tuple[list[Call], list[Call]]:
        if self.budget_usd is None:
            return calls, []
        total, fits = 0.0, []
        for call in calls:
            worst = self.price.cost(call.input_tokens_estimate, self.provider.generation.max_tokens, batch=True)
            if total + worst > self.budget_usd:
                break
            total += worst
            fits.append(call)
        return fits, calls[len(fits):]

    async def _wait(self, batch_id: str, deadline: float | None) -> str | None:
        while True:
            status, done = await self.api.status(batch_id)
            if done:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                log.warning("batch %s still %s after screener.batch.max_wait_s; rerun later to collect",
                            batch_id, status)
                return None
            await asyncio.sleep(self.settings.poll_interval_s)

    def _record(self, key: str, result: Completion | str, answers: dict[str, Answer]) -> None:
        if isinstance(result, str):
            answers[key] = Answer(None, None, f"batch entry failed: {result}")
            self.stats.failed += 1
            return
        cost = self.price.cost(result.input_tokens, result.output_tokens, batch=True)
        value, parse_error = parse_answer(result.text, self.outcome)
        stored = CachedAnswer(raw=result.text, value=value, parse_error=parse_error,
                              input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                              cost_usd=cost, latency_s=0.0, created_at=time.time())
        self.cache.put(key, self.provider.kind, self.provider.model, stored)
        st = self.stats
        st.answered += 1
        st.input_tokens += result.input_tokens
        st.output_tokens += result.output_tokens
        st.cost_usd += cost
        answers[key] = Answer.from_cache(stored, paid_now=True)
