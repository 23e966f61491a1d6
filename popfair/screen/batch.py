"""Batch mode: OpenAI Batch API and Anthropic Message Batches (about half the list price).

submit -> poll -> collect. Batch ids (with the cache keys they answer) are stored in the cache DB the
moment a batch is accepted, so an interrupted run resumes: the rerun polls and collects the batches
already submitted and submits only prompts that no batch covers. Results are committed to the cache
one by one; failed or expired entries are recorded as failures (not cached) and are asked again next run.

Each call to the batch API (upload and create, status, results) is retried like an online request
(`screener.engine`: max_attempts, exponential backoff with jitter, Retry-After honoured) when it fails
for a reason that may pass (429, 5xx, timeouts, connection errors). One that cannot (a rejected key, a
wrong model or path) or that fails every attempt stops the case with one line: the endpoint, the
cause and the fix; the batches already submitted stay recorded, so the rerun collects them."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from popfair.core.constraints import Interval, Text, settings_from_config
from popfair.core.errors import ScreeningStopped
from popfair.core.types import Outcome
from popfair.screen.calls import POSITIVE, Answer, Call, EngineSettings, EngineStats
from popfair.screen.failures import FailureHints, stop_message
from popfair.screen.limits import run_coroutine
from popfair.screen.parse import parse_answer
from popfair.screen.pricing import Price
from popfair.screen.providers import Completion, Provider
from popfair.screen.providers.base import PermanentError, TransientError
from popfair.store.owners import new_owner
from popfair.store.responses import CachedAnswer, ResponseCache

log = logging.getLogger("popfair.screen")
SUBMIT_LEASE_S = 600.0  # claims last while a batch is being uploaded; a recorded batch covers its keys


@dataclass(frozen=True)
class BatchSettings:
    """Keys under `screener.batch`."""

    poll_interval_s: float = 30.0  # seconds between status checks
    max_wait_s: float | None = None  # stop waiting after this long (batches keep running; rerun collects)
    max_requests: int = 50_000  # requests per submitted batch (OpenAI's cap)
    completion_window: str = "24h"  # OpenAI batch completion window

    parameter_constraints: ClassVar[dict[str, Any]] = {
        "poll_interval_s": POSITIVE,
        "max_wait_s": [None, POSITIVE],  # null: wait until done
        "max_requests": Interval(int, 1, None),
        "completion_window": Text(),
    }

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> BatchSettings:
        """The settings under the screener's `batch` key (errors name `batch.<key>`)."""
        return settings_from_config(cls, config, "batch")


class BatchRunner:
    def __init__(
        self,
        settings: BatchSettings,
        provider: Provider,
        cache: ResponseCache,
        price: Price,
        outcome: Outcome,
        stats: EngineStats,
        budget_usd: float | None = None,
        engine: EngineSettings | None = None,
        name: str = "",
        hints: FailureHints | None = None,
        parse: Callable[[str, Outcome], tuple[float | None, str | None]] = parse_answer,
    ) -> None:
        self.settings, self.provider, self.cache, self.price = settings, provider, cache, price
        self.parse = parse  # how a reply becomes y: the screener's own reading (e.g. its score_reply)
        self.outcome, self.stats, self.budget_usd = outcome, stats, budget_usd
        self.engine = engine or EngineSettings()  # retries and backoff of each batch API call
        self.name = name or provider.kind
        self.hints = hints or FailureHints(timeout_s=self.engine.timeout_s)
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
            open_batches = [
                b for b in self.cache.open_batches(p.kind, p.endpoint, p.model) if set(b.keys) & set(wanted)
            ]
            covered = {k for b in open_batches for k in b.keys}
            batch_ids = [b.batch_id for b in open_batches]
            if batch_ids:
                log.info("resuming %d submitted batch(es): %s", len(batch_ids), ", ".join(batch_ids))
            fresh = [c for c in calls if c.key not in covered]
            # Claim before submitting, so that a parallel case (another process or machine) does not put
            # the same prompts in a batch of its own; once a batch is recorded, its keys are covered.
            owner = new_owner()
            held = set(self.cache.claim([c.key for c in fresh], owner, SUBMIT_LEASE_S)[0])
            self._elsewhere([c for c in fresh if c.key not in held], answers)
            fresh, over_budget = self._within_budget([c for c in fresh if c.key in held])
            for call in over_budget:
                answers[call.key] = Answer(None, None, f"budget exhausted: max_cost_usd={self.budget_usd}; not sent")
            try:
                for start in range(0, len(fresh), self.settings.max_requests):
                    chunk = fresh[start : start + self.settings.max_requests]
                    lines = [(c.key, p.request_body(c.prompt)) for c in chunk]
                    batch_id = await self._call(self.api.submit, lines, self.settings.completion_window)
                    self.cache.add_batch(batch_id, p.kind, p.endpoint, p.model, self.outcome, [c.key for c in chunk])
                    self.stats.requests += 1
                    log.info("submitted batch %s with %d requests", batch_id, len(chunk))
                    batch_ids.append(batch_id)
            finally:
                self.cache.release(owner)
            deadline = None if self.settings.max_wait_s is None else time.monotonic() + self.settings.max_wait_s
            for batch_id in batch_ids:
                status = await self._wait(batch_id, deadline)
                if status is None:
                    continue  # still running: its rows stay pending; a rerun collects them
                await self._call(self._collect, batch_id, answers)
                self.cache.finish_batch(batch_id, status)
        finally:
            await p.stop()
        for key in wanted:
            if key not in answers:
                answers[key] = Answer(None, None, "batch not finished or entry missing; rerun to collect")
                self.stats.failed += 1
        return answers

    def _elsewhere(self, calls: list[Call], answers: dict[str, Answer]) -> None:
        """Calls another process claimed: answered by now (from the cache), or being submitted there
        (a rerun collects them from the batch it records)."""
        found = self.cache.get_many([c.key for c in calls])
        for call in calls:
            if call.key in found:
                answers[call.key] = Answer.from_cache(found[call.key])
                self.stats.waited += 1
            else:
                answers[call.key] = Answer(
                    None, None, "another process is submitting this prompt in a batch; rerun to collect its answer"
                )

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
        return fits, calls[len(fits) :]

    async def _wait(self, batch_id: str, deadline: float | None) -> str | None:
        while True:
            status, done = await self._call(self.api.status, batch_id)
            if done:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                log.warning(
                    "batch %s still %s after screener.batch.max_wait_s; rerun later to collect", batch_id, status
                )
                return None
            await asyncio.sleep(self.settings.poll_interval_s)

    async def _collect(self, batch_id: str, answers: dict[str, Answer]) -> None:
        """Record every entry of a finished batch (a retry records again what it already did: the
        cache keeps the first answer of a key)."""
        async for key, result in self.api.results(batch_id):
            self._record(key, result, answers)

    async def _call(self, method: Any, *args: Any) -> Any:
        """`await method(*args)`, retried like an online request while it fails for a reason that may
        pass; ScreeningStopped (endpoint, cause, fix) when it cannot pass or every attempt failed."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.engine.max_attempts),
            wait=self._backoff,
            retry=retry_if_exception_type(TransientError),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    if attempt.retry_state.attempt_number > 1:
                        self.stats.retries += 1
                    return await method(*args)
        except (TransientError, PermanentError) as exc:
            raise ScreeningStopped(
                stop_message(self.name, self.provider.display_url, exc.cause, str(exc), self.hints)
            ) from None
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _backoff(self, state: RetryCallState) -> float:
        """Retry-After when the server sent one, else exponential backoff with jitter (screener.engine)."""
        s = self.engine
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return min(retry_after, s.retry_after_max_s)
        return min(s.backoff_initial_s * 2 ** (state.attempt_number - 1), s.backoff_max_s) + random.uniform(
            0, s.backoff_jitter_s
        )

    def _record(self, key: str, result: Completion | str, answers: dict[str, Answer]) -> None:
        if isinstance(result, str):
            answers[key] = Answer(None, None, f"batch entry failed: {result}")
            self.stats.failed += 1
            return
        cost = self.price.cost(result.input_tokens, result.output_tokens, batch=True)
        value, parse_error = self.parse(result.text, self.outcome)
        stored = CachedAnswer(
            raw=result.text,
            value=value,
            parse_error=parse_error,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cost_usd=cost,
            latency_s=0.0,
            created_at=time.time(),
        )
        self.cache.put(key, self.provider.kind, self.provider.model, stored)
        st = self.stats
        st.answered += 1
        st.input_tokens += result.input_tokens
        st.output_tokens += result.output_tokens
        st.cost_usd += cost
        answers[key] = Answer.from_cache(stored, paid_now=True)
