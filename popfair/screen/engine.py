"""The call engine: asyncio with bounded (adaptive) concurrency, requests/min and tokens/min limits,
tenacity retries with exponential backoff and jitter that honour Retry-After, a per-request timeout,
a dollar budget, and a progress bar. Each answer is parsed and committed to the cache as it arrives;
one misbehaving request becomes a recorded failure and never stops the run.

What does stop a run (ScreeningStopped, one line: endpoint, cause, fix) is an endpoint that cannot
answer at all: before any request of the run has succeeded, failures that retrying cannot fix
(connection refused, DNS, TLS, proxy, HTTP 400/404) or a call whose every attempt could not reach it
(a hanging endpoint: one call's timeouts and retries, not rows x timeout); at any time, a rejected key
(401/403); and mid-run, a circuit breaker: after `breaker_failures` consecutive transport failures no
new request is sent, one probe goes out every `breaker_probe_s`, and after `breaker_max_s` without
an answer the run stops. Answers received are committed, claims released, nothing failed is cached.

Ctrl-C or SIGTERM: nothing new is sent, and the requests already in flight (answers the provider is
producing, and will bill) get up to `interrupt_grace_s` to arrive and be committed before the run stops;
a second signal exits at once (those in flight are then lost, the committed ones kept)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tqdm.auto import tqdm

from popfair.core.errors import Interrupted, ScreeningStopped
from popfair.core.types import Outcome
from popfair.runtime.interrupts import engine_signals
from popfair.runtime.secrets import safe_url
from popfair.screen import collector
from popfair.screen.calls import EARLY_FAILURES, FAIL_FAST_CAUSES, Answer, Call, EngineSettings, EngineStats
from popfair.screen.failures import FailureHints, stop_message
from popfair.screen.limits import (
    AdaptiveLimit,
    Breaker,
    Budget,
    InFlight,
    RateLimiter,
    SendingStopped,
    log,
    run_coroutine,
    within,
)
from popfair.screen.parse import logprob_value, parse_answer
from popfair.screen.pricing import Price
from popfair.screen.providers import PermanentError, Provider, TransientError
from popfair.store.claims import CacheThread, ClaimBroker
from popfair.store.responses import CachedAnswer, ResponseCache


@dataclass
class Engine:
    """Runs the calls of one screening job against one provider."""

    settings: EngineSettings
    provider: Provider
    cache: ResponseCache
    price: Price
    outcome: Outcome
    budget_usd: float | None = None
    key_hint: str = ""  # e.g. "check OPENAI_API_KEY" for auth failures
    stats: EngineStats = field(default_factory=EngineStats)
    name: str = "screener"  # the screener, for stop messages
    url_key: str = "screener.base_url"  # where the endpoint is set (stop messages' fixes)
    request_keys: str = "screener.model and screener.generation"  # what shapes the request
    _halt: str | None = field(default=None, init=False)  # why the run stopped (one line), when it did
    _interrupted: str | None = field(default=None, init=False)  # the signal that stopped it (SIGINT, SIGTERM)
    _n_ignored: bool = field(default=False, init=False)  # the endpoint answered fewer than an `n` asked
    max_calls: int | None = None  # call budget: requests started in this run (retries not counted)
    parse: Callable[[str, Outcome], tuple[float | None, str | None]] = parse_answer  # raw text -> y
    score_from: str = "text"  # logprobs: y from the first token's top log-probabilities (parse.logprob_value)
    more: dict[str, Answer] = field(default_factory=dict)  # answers of calls' siblings (n > 1), by key

    def run(self, calls: Sequence[Call], rows_total: int, rows_done: int, desc: str) -> dict[str, Answer]:
        """Answer every call (key -> Answer); never raises for a single call's failure. Raises
        ScreeningStopped when the endpoint cannot answer (see the module docstring), after committing
        what was answered and releasing the claims."""
        if not calls:
            return {}
        self._interrupted, self._abandoned = None, 0
        answers = run_coroutine(lambda: self._run(calls, rows_total, rows_done, desc))
        answers.update(self.more)  # the further answers of requests that asked for several (n)
        if self._interrupted is not None:
            st = self.stats
            lost = (
                f" {self._abandoned} requests still in flight after {self.settings.interrupt_grace_s:g} s were "
                "abandoned (the rerun asks them again)."
                if self._abandoned
                else " Nothing is asked twice."
            )
            raise Interrupted(
                f"screener {self.name}: stopped by {self._interrupted}; {st.answered} answers received this run are "
                f"saved (${st.cost_usd:.4f}), claims released. Rerun the same command to resume.{lost}",
                st.as_metrics(),
            )
        if self._halt is not None:
            raise ScreeningStopped(self._halt)
        return answers

    def _hints(self) -> FailureHints:
        return FailureHints(self.url_key, self.request_keys, self.key_hint or "check the key", self.settings.timeout_s)

    def _stop(self, cause: str, detail: str) -> None:
        """Stop the run (the first reason wins): nothing more is sent, retries end."""
        if self._halt is None:
            self._halt = stop_message(self.name, self.provider.display_url, cause, detail, self._hints())
            self._breaker.stop(self._halt)

    def _breaker_message(self, since: float) -> str:
        url = safe_url(self.provider.display_url)
        return (
            f"screener {self.name}: endpoint {url} unreachable since {time.strftime('%H:%M', time.localtime(since))} "
            f"({self._last_transport or 'no answer'}); nothing lost ({self.stats.answered} answers of this run "
            "are saved): rerun to resume"
        )

    def _start_run(self, rows_total: int, rows_done: int, desc: str) -> None:
        """A run's fresh state: rate and concurrency limits, budget, fail-fast counters, breaker,
        retry rule and progress bar."""
        s = self.settings
        self._rate = RateLimiter(s.requests_per_minute, s.tokens_per_minute)
        self._limit = AdaptiveLimit(s.concurrency, s.adaptive)
        self._budget = Budget(self.budget_usd)
        self._halt = None
        self._budget_reason: str | None = None
        self._calls_started = 0
        self._answered_any = False  # fail-fast rules apply until a request of this run succeeds
        self._early_failures: Counter[str] = Counter()
        self._last_transport: str | None = None
        self._breaker = Breaker(s.breaker_failures, s.breaker_probe_s, s.breaker_max_s)
        self._stop_after = stop_after_attempt(s.max_attempts)
        self._bar = tqdm(
            total=rows_total,
            initial=rows_done,
            desc=desc,
            unit="row",
            dynamic_ncols=True,
            disable=not s.progress,
            mininterval=0.5,
            smoothing=0.1,
        )
        self._failed_rows = 0
        self._unsent_rows = 0
        self._last_postfix = 0.0

    async def _run(self, calls: Sequence[Call], rows_total: int, rows_done: int, desc: str) -> dict[str, Answer]:
        s = self.settings
        self._start_run(rows_total, rows_done, desc)
        answers: dict[str, Answer] = {}
        started = time.perf_counter()
        self._db = CacheThread(self.cache)
        broker = ClaimBroker(
            self._db, calls, lambda call: call.key, lease_s=s.claim_lease_s, poll_s=s.claim_poll_s, chunk=s.concurrency
        )

        async def worker() -> None:
            while self._interrupted is None and (item := await broker.next()) is not None:
                call, elsewhere = item
                answer = Answer.from_cache(elsewhere) if elsewhere else await self._answer(call, broker)
                answers[call.key] = answer
                self._progress(call, answer)

        main = asyncio.current_task()
        self._in_flight = InFlight()

        async def stop_when_settled() -> None:
            # the provider is producing (and will bill) the answers in flight: commit them if they come soon
            with contextlib.suppress(asyncio.TimeoutError):
                await within(self._in_flight.idle.wait(), s.interrupt_grace_s)
            self._abandoned = self._in_flight.count
            if main is not None:
                main.cancel()  # what still waits (backoff, rate limit, claims of others) sent nothing

        def interrupt(name: str) -> None:  # Ctrl-C / SIGTERM: send nothing new, keep what arrives
            self._interrupted = name
            self._stop("interrupted", name)
            if self._in_flight.count:
                sys.stderr.write(
                    f"popfair: waiting up to {s.interrupt_grace_s:g} s for {self._in_flight.count} requests in "
                    "flight; press Ctrl-C again to stop now (their answers are then lost)\n"
                )
                sys.stderr.flush()
            # held here: the loop keeps only a weak reference to its tasks
            self._stopping = asyncio.get_running_loop().create_task(stop_when_settled())

        await self.provider.start()
        try:
            with collector.relaxed(), engine_signals(asyncio.get_running_loop(), interrupt):
                async with broker:  # on the way out (also when cancelled) every claim is released
                    # More workers than the concurrency limit, so requests sleeping in backoff do not idle it.
                    workers = min(len(calls), max(4, 4 * s.concurrency))
                    await asyncio.gather(*(worker() for _ in range(workers)))
        except asyncio.CancelledError:
            if self._interrupted is None:
                raise
        finally:
            await self.provider.stop()
            self._db.close()
            self._close_bar()
            self.stats.min_concurrency = self._limit.lowest
            self.stats.waited += broker.waited
            self.stats.taken_over += broker.taken_over
            self.stats.wall_s += time.perf_counter() - started
        return answers

    def _close_bar(self) -> None:
        """The bar's last state: rows done, failed and, for a stopped case, how many were not sent."""
        st = self.stats
        stopped = f" STOPPED: {self._unsent_rows} not sent" if self._unsent_rows else ""
        self._bar.set_postfix_str(
            f"fail={self._failed_rows} tok={st.input_tokens + st.output_tokens:,} ${st.cost_usd:,.4f}{stopped}",
            refresh=True,
        )
        self._bar.close()

    def _progress(self, call: Call, answer: Answer) -> None:
        if answer.raw is None and answer.error is not None and "not sent" in answer.error:
            self._unsent_rows += call.rows  # a stopped case: the bar must not run to 100%
            return
        if answer.error is not None:
            self._failed_rows += call.rows
        self._bar.update(call.rows)
        now = time.monotonic()
        if now - self._last_postfix >= 0.5:
            self._last_postfix = now
            st = self.stats
            self._bar.set_postfix_str(
                f"fail={self._failed_rows} tok={st.input_tokens + st.output_tokens:,} ${st.cost_usd:,.4f}",
                refresh=False,
            )

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when the server sent one (plus up to 10% jitter), else exponential backoff
        initial * 2^(attempt-1) capped at backoff_max_s, plus uniform jitter."""
        s = self.settings
        exc = state.outcome.exception() if state.outcome else None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            capped = min(retry_after, s.retry_after_max_s)
            return capped + random.uniform(0, 0.1 * capped)
        exponential = min(s.backoff_initial_s * 2 ** (state.attempt_number - 1), s.backoff_max_s)
        return exponential + random.uniform(0, s.backoff_jitter_s)

    async def _answer(self, call: Call, broker: ClaimBroker[Call]) -> Answer:
        """Send one claimed call and store its answer; a call that gets none is released."""
        answer = await self._send_and_store(call)
        if answer.raw is None:
            await broker.release(call)
        return answer

    def _retryable(self, exc: BaseException) -> bool:
        """Retry a TransientError unless the run stopped, or the fail-fast rules make it final."""
        if not isinstance(exc, TransientError) or self._halt is not None:
            return False
        return not (self._early and exc.cause in FAIL_FAST_CAUSES)

    @property
    def _early(self) -> bool:
        """Fail-fast rules apply: nothing of this run has succeeded yet."""
        return self.settings.fail_fast and not self._answered_any

    def _failed_early(self, exc: TransientError | PermanentError) -> None:
        """A call ended as a failure before any request of the run succeeded: stop the run when it says
        the endpoint cannot answer (a refused connection, a 404, or every attempt of a call timing out or
        unable to connect); a 400 could be one odd request, so it takes a few calls agreeing."""
        if not self._early:
            return
        cause = exc.cause
        if cause in FAIL_FAST_CAUSES or (isinstance(exc, TransientError) and exc.transport):
            self._early_failures[cause] += 1
            if cause != "HTTP 400" or self._early_failures[cause] >= EARLY_FAILURES:
                self._stop(cause, str(exc))

    def _unreachable(self, exc: TransientError) -> None:
        """One attempt could not reach the endpoint. The breaker counts it; when it opens before any
        request of the run succeeded, the endpoint has never answered: the run stops at once."""
        self._last_transport = exc.cause
        self._breaker.failed(transport=True, quiet=self._early)
        if self._early and self._breaker.opened_at is not None:
            self._stop(exc.cause, f"{self._breaker.streak} requests in a row, none answered: {exc}")

    async def _send_and_store(self, call: Call) -> Answer:
        # a stopped run (rejected key, endpoint down) sends nothing more, retries in flight included; an
        # exhausted budget only stops new calls (the calls already started were within it and finish)
        if self._halt or self._budget_reason:
            reason = f"not sent: case stopped: {self._halt}" if self._halt else self._budget_reason
            return Answer(raw=None, value=None, error=reason)
        if self.max_calls is not None and self._calls_started >= self.max_calls:
            self._budget_reason = f"call budget exhausted: max_calls={self.max_calls} reached; not sent"
            log.warning("%s; remaining rows are recorded as failures", self._budget_reason)
            return Answer(raw=None, value=None, error=self._budget_reason)
        worst_case = self.price.cost(call.input_tokens_estimate, self.provider.generation.max_tokens * call.n)
        if not self._budget.try_reserve(worst_case):
            self._budget_reason = (
                f"budget exhausted: max_cost_usd={self.budget_usd} reached (spent ${self._budget.spent:.4f}); not sent"
            )
            log.warning("%s; remaining rows are recorded as failures", self._budget_reason)
            return Answer(raw=None, value=None, error=self._budget_reason)
        self._calls_started += 1
        actual = 0.0
        completion = None
        try:
            completion, latency = await self._send_with_retries(call)
            actual = self.price.cost(completion.input_tokens, completion.output_tokens)
            try:
                stored = await self._commit(call, completion, latency)
            finally:
                await self._limit.release(False, True)  # the slot held since the send: see _send_with_retries
            if len(stored) < call.n:  # an endpoint that ignores `n` answered fewer
                actual += await self._fill(call, len(stored))
            return Answer.from_cache(stored[0], paid_now=True)
        except TransientError as exc:
            self.stats.failed += 1
            self._failed_early(exc)
            return Answer(raw=None, value=None, error=f"API failure: {exc}")
        except SendingStopped as exc:
            self._halt = self._halt or str(exc)  # the breaker gave up on the endpoint
            return Answer(raw=None, value=None, error=f"not sent: case stopped: {exc}")
        except PermanentError as exc:
            self.stats.failed += 1
            if exc.auth:
                self._stop(exc.cause, str(exc))
            else:
                self._failed_early(exc)
            return Answer(raw=None, value=None, error=f"API failure: {exc}")
        except Exception as exc:  # a bug or surprise in one request must not end the run
            self.stats.failed += 1
            log.exception("unexpected error for one request")
            return Answer(raw=None, value=None, error=f"unexpected error: {type(exc).__name__}: {exc}"[:500])
        finally:
            self._budget.settle(worst_case, actual)
            if completion is not None:  # its answer is committed (or failed to be): settled
                self._in_flight.settled()

    async def _commit(self, call: Call, completion: Any, latency: float) -> list[CachedAnswer]:
        """Store a response's answers (one commit) and count them; the answers of the call's siblings
        are kept in `more`."""
        stored = self._stored(call, completion, latency)
        keys = (call.key, *call.siblings)[: len(stored)]
        kind, model = self.provider.kind, self.provider.model
        await self._db.put_all([(key, kind, model, one) for key, one in zip(keys, stored)])
        for key, one in zip(keys[1:], stored[1:]):
            self.more[key] = Answer.from_cache(one, paid_now=True)
        st = self.stats
        st.answered += len(keys)
        st.input_tokens += completion.input_tokens
        st.output_tokens += completion.output_tokens
        st.cost_usd += self.price.cost(completion.input_tokens, completion.output_tokens)
        return stored

    async def _fill(self, call: Call, got: int) -> float:
        """The answers an `n` request did not bring (the endpoint ignores `n`, as some OpenAI-compatible
        gateways do), asked again for the rest until each is answered; a failure leaves the rest to the
        rerun (the answers received are stored). Returns the dollars paid."""
        if not self._n_ignored:
            self._n_ignored = True
            log.warning("%s: the endpoint answered %d of n=%d; the rest are asked again", self.name, got, call.n)
        paid, remaining = 0.0, (call.key, *call.siblings)[got:]
        try:
            while remaining:
                rest = Call(remaining[0], call.prompt, call.input_tokens_estimate, 0, tuple(remaining[1:]))
                completion, latency = await self._send_with_retries(rest)
                try:
                    answered = await self._commit(rest, completion, latency)
                finally:
                    await self._limit.release(False, True)
                    self._in_flight.settled()
                paid += self.price.cost(completion.input_tokens, completion.output_tokens)
                self.more[rest.key] = Answer.from_cache(answered[0], paid_now=True)
                remaining = remaining[len(answered) :]
        except (TransientError, PermanentError, SendingStopped) as exc:
            log.warning(
                "%s: %d answers of one prompt not received (the rerun asks them): %s", self.name, len(remaining), exc
            )
        return paid

    def _stored(self, call: Call, completion: Any, latency: float) -> list[CachedAnswer]:
        """What is cached of a response: one answer per choice (at most the `n` asked). The request's
        input tokens (and their dollars) go with its first answer, its output tokens are shared out."""
        texts = completion.texts[: call.n]
        per, extra = divmod(completion.output_tokens, len(texts))
        stored, now = [], time.time()
        for i, text in enumerate(texts):
            if self.score_from == "logprobs":
                top = completion.top_logprobs[i] if i < len(completion.top_logprobs) else ()
                value, parse_error = logprob_value(top, self.outcome)
            else:
                value, parse_error = self.parse(text, self.outcome)
            tokens_in = completion.input_tokens if i == 0 else 0
            tokens_out = per + (extra if i == 0 else 0)
            stored.append(
                CachedAnswer(
                    raw=text,
                    value=value,
                    parse_error=parse_error,
                    input_tokens=tokens_in,
                    output_tokens=tokens_out,
                    cost_usd=self.price.cost(tokens_in, tokens_out),
                    latency_s=latency,
                    created_at=now,
                )
            )
        return stored

    async def _send(self, body: Any) -> Any:
        """One request, counted in flight: settled here when it fails, by _send_and_store once its
        answer is committed (a clean stop waits for both)."""
        self._in_flight.sent()
        try:
            return await within(self.provider.send(body), self.settings.timeout_s)
        except BaseException:
            self._in_flight.settled()
            raise

    async def _send_with_retries(self, call: Call):
        """Send `call` until it is answered or its retries run out. A successful send returns with its
        concurrency slot still held: the caller releases it once the answer is committed, so at most
        `concurrency` prompts are ever sent-but-uncommitted, the most a kill -9 can lose (README)."""
        s, st = self.settings, self.stats
        body = self.provider.request_body(call.prompt, call.n)
        tokens = call.input_tokens_estimate + self.provider.generation.max_tokens * call.n
        retrying = AsyncRetrying(
            stop=self._stop_after, wait=self._wait, reraise=True, retry=retry_if_exception(self._retryable)
        )
        async for attempt in retrying:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    st.retries += 1
                probe = await self._breaker.gate(self._breaker_message)
                await self._rate.acquire(tokens)
                await self._limit.acquire()
                if self._halt:  # e.g. the key was rejected while this request waited
                    await self._limit.release(False, False)
                    raise SendingStopped(self._halt)
                rate_limited = succeeded = False
                start = time.perf_counter()
                st.requests += 1
                try:
                    completion = await self._send(body)
                    succeeded = self._answered_any = True
                    self._breaker.succeeded()
                except asyncio.TimeoutError:
                    st.timeouts += 1
                    timed_out = TransientError(f"timed out after {s.timeout_s}s", cause="timeout")
                    self._unreachable(timed_out)
                    raise timed_out from None
                except TransientError as exc:
                    rate_limited = exc.rate_limited
                    st.rate_limited += rate_limited
                    st.timeouts += exc.cause == "timeout"
                    if exc.transport:
                        self._unreachable(exc)
                    else:
                        self._breaker.failed(transport=False)
                    raise
                except PermanentError:
                    self._breaker.failed(transport=False)
                    raise
                finally:
                    if probe:
                        self._breaker.probed()
                    if not succeeded:  # a success keeps its slot until its answer is committed
                        await self._limit.release(rate_limited, False)
                return completion, time.perf_counter() - start
        raise AssertionError("unreachable: tenacity reraises the last error")
