"""The request loop every screener that sends requests shares (LLMScreener, HttpScreener): answers
from the response cache where present; the distinct requests still missing asked online (engine.py)
or as a provider batch (batch.py); one result per document; the counters of the screening.

A screener holds one `RequestLoop` and supplies what is its own: the cache key and request of each
document, how a reply becomes a value, and how cached replies are read back."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popfair.core.types import Document, Outcome, ScreenResult
from popfair.screen import collector
from popfair.screen.calls import Answer, Call, EngineSettings, EngineStats
from popfair.screen.engine import Engine
from popfair.screen.failures import FailureHints
from popfair.screen.pricing import Price
from popfair.screen.providers import Provider
from popfair.store.responses import ResponseCache, StoredReply

if TYPE_CHECKING:
    from popfair.screen.batch import BatchSettings

log = logging.getLogger("popfair.screen")

Parse = Callable[[str, Outcome], tuple[float | None, str | None]]


def cached_as_stored(replies: Mapping[str, StoredReply], outcome: Outcome) -> dict[str, Answer]:
    """Cached replies as answers, their values as stored (nothing paid now)."""
    return Answer.from_replies(replies)


@dataclass
class RequestLoop:
    """Screens documents through one provider: what is cached is read, what is missing is asked.

    `parse` turns a reply into y; `read_cached` turns cached replies into answers (a screener whose
    reading of a reply may change re-parses them); `batch` set: missing requests go as a provider
    batch instead of online."""

    name: str
    provider: Provider
    cache: ResponseCache
    price: Price
    settings: EngineSettings
    hints: FailureHints  # the fix named when a run stops (key variable and timeout filled)
    parse: Parse
    read_cached: Callable[[Mapping[str, StoredReply], Outcome], dict[str, Answer]] = cached_as_stored
    batch: BatchSettings | None = None
    last_stats: dict[str, float] = field(default_factory=dict)

    def todo(self, keys: list[str], request: Callable[[str], Any], cached: Mapping[str, Any]) -> list[Call]:
        """One Call per distinct request missing from the cache, with the number of rows sharing it."""
        tokens = self.provider.pricing.request_tokens
        return [
            Call(key, prompt := request(key), tokens(prompt), rows)
            for key, rows in Counter(keys).items()
            if key not in cached
        ]

    def run(
        self,
        documents: Sequence[Document],
        keys: list[str],
        request: Callable[[str], Any],
        outcome: Outcome,
        budget_usd: float | None = None,
        max_calls: int | None = None,
    ) -> list[ScreenResult]:
        """One result per document, in order (`keys[i]` is document i's cache key, `request(key)` its
        request): parsed value, or a failure with the reason (and the raw text when the endpoint
        answered something unparseable). `budget_usd` and `max_calls` cap what this run may spend."""
        with collector.paused():  # tens of thousands of small tuples, no cycles: collections would only cost time
            answers = self.read_cached(self.cache.get_replies(keys), outcome)
        stats = EngineStats()
        todo: list[Call] = []
        if len(answers) < len(keys):  # else fully cached: no claims, no engine
            todo = self.todo(keys, request, answers)
        if todo:
            answers.update(self._ask(todo, outcome, stats, len(documents), budget_usd, max_calls))
        with collector.paused():
            results = _results(documents, keys, answers)
        self._summarise(results, stats, len(todo))
        return results

    def _ask(
        self,
        todo: list[Call],
        outcome: Outcome,
        stats: EngineStats,
        rows: int,
        budget_usd: float | None,
        max_calls: int | None,
    ) -> dict[str, Answer]:
        """Answers of the requests missing from the cache: one provider batch, or the online engine."""
        if self.batch is not None:
            from popfair.screen.batch import BatchRunner

            runner = BatchRunner(
                self.batch,
                self.provider,
                self.cache,
                self.price,
                outcome,
                stats,
                budget_usd=budget_usd,
                engine=self.settings,
                name=self.name,
                hints=self.hints,
                parse=self.parse,
            )
            return runner.run(todo)
        engine = Engine(
            self.settings,
            self.provider,
            self.cache,
            self.price,
            outcome,
            budget_usd=budget_usd,
            stats=stats,
            key_hint=self.hints.key_hint,
            name=self.name,
            url_key=self.hints.url_key,
            request_keys=self.hints.request_keys,
            max_calls=max_calls,
            parse=self.parse,
        )
        cached_rows = rows - sum(c.rows for c in todo)
        return engine.run(todo, rows, cached_rows, f"screen {self.name}")

    def _summarise(self, results: list[ScreenResult], stats: EngineStats, asked: int) -> None:
        n = len(results)
        failed = sum(r.error is not None for r in results)
        unparseable = sum(r.error is not None and r.raw is not None for r in results)
        from_cache = sum(r.cached for r in results)
        self.last_stats = {
            "screen.rows": n,
            "screen.rows_from_cache": from_cache,
            "screen.calls_needed": asked,
            "screen.failed_rows": failed,
            "screen.unparseable_rows": unparseable,
            "screen.failure_rate": failed / n if n else 0.0,
            **stats.as_metrics(),
        }
        log.info(
            "screen %s: %d rows, %d from cache, %d distinct prompts asked, %d requests, %d failed "
            "(%.2f%%; %d unparseable), %d tokens, $%.4f",
            self.name,
            n,
            from_cache,
            asked,
            stats.requests,
            failed,
            100 * failed / max(n, 1),
            unparseable,
            stats.input_tokens + stats.output_tokens,
            stats.cost_usd,
        )

    def metrics(self) -> dict[str, float]:
        """Figures of the last run (rows, cache hits, requests, failures, tokens, dollars)."""
        return dict(self.last_stats)


def _results(documents: Sequence[Document], keys: list[str], answers: Mapping[str, Answer]) -> list[ScreenResult]:
    """One result per document; documents with the same prompt share one answer, whose tokens and
    dollars are counted on the first of them only."""
    new = tuple.__new__  # ScreenResult is a named tuple: skip its Python-level constructor (60,000 rows)
    results: list[ScreenResult] = []
    append, charged = results.append, set()
    for document, key in zip(documents, keys):
        a = answers[key]
        if key in charged:  # a duplicate prompt: cached, nothing charged
            append(new(ScreenResult, (document.applicant_id, a.raw, a.value, a.error, 0, 0, 0.0, True)))
        else:
            charged.add(key)
            append(
                new(
                    ScreenResult,
                    (
                        document.applicant_id,
                        a.raw,
                        a.value,
                        a.error,
                        a.input_tokens,
                        a.output_tokens,
                        a.cost_usd,
                        a.cached,
                    ),
                )
            )
    return results
