"""The request loop every screener that sends requests shares (LLMScreener, HttpScreener): answers
from the response cache where present; the distinct requests still missing asked online (engine.py)
or as a provider batch (batch.py); one result per document; the counters of the screening.

A screener holds one `RequestLoop` and supplies what is its own: the cache key and request of each
document, how a reply becomes a value, and how cached replies are read back."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popfair.core.types import Document, Outcome, ScreenResult
from popfair.screen import collector
from popfair.screen.calls import Answer, Call, EngineSettings, EngineStats, sample_key
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
    samples: int = 1  # answers asked per prompt (screener.samples); a document's value is their mean
    temperature: float | None = None  # what the requests ask for (None: the provider's default, sampling)
    score_from: str = "text"  # logprobs: values from the first token's top log-probabilities

    @property
    def asks_n(self) -> bool:
        """One request asks for a prompt's missing answers (`n`): an OpenAI-style endpoint, online, and
        sampling (at temperature 0 separate requests are what a determinism check compares)."""
        sampling = self.temperature is None or self.temperature > 0
        return self.samples > 1 and self.provider.asks_n and self.batch is None and sampling

    def sample_todo(self, keys: list[str], request: Callable[[str], Any], cached: Mapping[str, Any]) -> list[Call]:
        """The calls still missing of every prompt's `samples` answers: one request per prompt for all
        of them where the endpoint takes `n`, else one request per missing answer."""
        tokens = self.provider.pricing.request_tokens
        calls: list[Call] = []
        for base, rows in Counter(keys).items():
            missing = [key for j in range(self.samples) if (key := sample_key(base, j)) not in cached]
            if not missing:
                continue
            prompt = request(base)
            estimate = tokens(prompt)
            if self.asks_n:
                calls.append(Call(missing[0], prompt, estimate, rows * len(missing), tuple(missing[1:])))
            else:
                calls.extend(Call(key, prompt, estimate, rows) for key in missing)
        return calls

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
        if self.samples > 1:
            return self._run_samples(documents, keys, request, outcome, budget_usd, max_calls)
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

    def _run_samples(
        self,
        documents: Sequence[Document],
        keys: list[str],
        request: Callable[[str], Any],
        outcome: Outcome,
        budget_usd: float | None,
        max_calls: int | None,
    ) -> list[ScreenResult]:
        """`run` with `samples` answers per prompt, each its own cache entry (`sample_key`): what is
        cached is read, only the missing answers are asked; a document's value is the mean of its
        prompt's answers, and the spread of the answers within prompts is the screener's noise."""
        k = self.samples
        every = [sample_key(base, j) for base in dict.fromkeys(keys) for j in range(k)]
        answers = self.read_cached(self.cache.get_replies(every), outcome)
        stats = EngineStats()
        todo = self.sample_todo(keys, request, answers) if len(answers) < len(every) else []
        if todo:
            answers.update(self._ask(todo, outcome, stats, len(documents) * k, budget_usd, max_calls))
            left = [key for key in every if key not in answers]  # answered by another worker's `n` request
            if left:
                answers.update(self.read_cached(self.cache.get_replies(left), outcome))
        results, prompts = _sampled_results(documents, keys, answers, k)
        self._summarise(results, stats, len(todo))
        self.last_stats.update(noise_metrics(prompts, k))
        self._say_noise()
        return results

    def _say_noise(self) -> None:
        """One console line on the answers' spread within prompts; a warning when answers asked at
        temperature 0 differ (the endpoint is not deterministic)."""
        m = self.last_stats
        if "screen.flip_rate" not in m:
            return
        line = (
            f"screener {self.name}: {self.samples} answers per prompt; {100 * m['screen.flip_rate']:.1f}% of "
            f"{int(m['screen.noise_prompts'])} prompts answered differently; noise share of outcome variance "
            f"{m['screen.noise_share']:.3f}"
        )
        if self.temperature == 0 and m["screen.flip_rate"] > 0:
            log.warning("%s at temperature 0: the endpoint is not deterministic", line)
        else:
            log.info("%s", line)

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
            score_from=self.score_from,
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


def _sampled_results(
    documents: Sequence[Document], keys: list[str], answers: Mapping[str, Answer], k: int
) -> tuple[list[ScreenResult], list[list[float]]]:
    """One result per document from its prompt's k answers: the mean of the answers that parsed; a
    failure when one of them got no answer (an API failure: the rerun asks it again) or none parsed.
    Tokens and dollars of the k answers are counted on the first document of the prompt. Also the
    values of every prompt whose k answers all parsed (for `noise_metrics`)."""
    missing = Answer(raw=None, value=None, error="API failure: no answer for this sample (the rerun asks it)")
    by_prompt: dict[str, ScreenResult] = {}
    prompts: list[list[float]] = []
    results: list[ScreenResult] = []
    for document, base in zip(documents, keys):
        shared = by_prompt.get(base)
        if shared is not None:  # a duplicate prompt: its answers, nothing charged
            results.append(
                shared._replace(
                    applicant_id=document.applicant_id, input_tokens=0, output_tokens=0, cost_usd=0.0, cached=True
                )
            )
            continue
        got = [answers.get(sample_key(base, j), missing) for j in range(k)]
        values = [a.value for a in got if a.value is not None]
        unanswered = next((a.error for a in got if a.raw is None), None)
        if len(values) == k:
            prompts.append([float(v) for v in values])
        error = unanswered or (None if values else got[0].error)
        result = ScreenResult(
            document.applicant_id,
            got[0].raw,
            None if error else sum(values) / len(values),
            error,
            sum(a.input_tokens for a in got),
            sum(a.output_tokens for a in got),
            sum(a.cost_usd for a in got),
            all(a.cached for a in got),
        )
        by_prompt[base] = result
        results.append(result)
    return results, prompts


def noise_metrics(prompts: Sequence[Sequence[float]], k: int) -> dict[str, float]:
    """The spread of the answers within prompts (every prompt with all k answers): the flip rate (share
    of prompts whose answers are not all equal), the mean within-prompt variance s_w^2 (ddof 1), the
    variance of the prompts' own outcomes s_b^2 = max(0, var(prompt means) - s_w^2 / k) (one-way random
    effects), and the noise share s_w^2 / (s_w^2 + s_b^2): the share of one answer's variance that
    is the screener's noise, not the documents (docs/concepts/screener_noise.md)."""
    n = len(prompts)
    if n == 0 or k < 2:
        return {}
    means = [sum(v) / k for v in prompts]
    within = sum(sum((x - m) ** 2 for x in v) / (k - 1) for v, m in zip(prompts, means)) / n
    grand = sum(means) / n
    spread = sum((m - grand) ** 2 for m in means) / (n - 1) if n > 1 else 0.0
    between = max(0.0, spread - within / k)
    total = within + between
    return {
        "screen.samples": float(k),
        "screen.noise_prompts": float(n),
        "screen.flip_rate": sum(len(set(v)) > 1 for v in prompts) / n,
        "screen.within_prompt_sd": math.sqrt(within),
        "screen.between_prompt_sd": math.sqrt(between),
        "screen.noise_share": within / total if total > 0 else 0.0,
    }
