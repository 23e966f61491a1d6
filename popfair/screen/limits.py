"""The call engine's brakes: the circuit breaker that stops a failing case, concurrency and rate
limits (fixed and adaptive), the dollar budget, and the asyncio helpers they share."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger("popfair.screen")


T = TypeVar("T")


class SendingStopped(Exception):
    """The run stopped sending (rejected key, endpoint down) while this request was waiting."""


class Breaker:
    """Circuit breaker over transport failures (endpoint unreachable, timeouts, 502/503/504).
    `threshold` consecutive ones open it: requests wait at `gate` instead of being sent, except one
    probe every `probe_s`; an answer closes it. Open for `max_s`: `gate` raises SendingStopped for all."""

    def __init__(self, threshold: int, probe_s: float, max_s: float) -> None:
        self.threshold, self.probe_s, self.max_s = threshold, probe_s, max_s
        self.streak = 0
        self.streak_since = 0.0  # wall time of the streak's first failure
        self.opened_at: float | None = None  # monotonic
        self.probing = False
        self.next_probe = 0.0
        self.stopped: str | None = None
        self.closed = asyncio.Event()
        self.closed.set()

    def succeeded(self) -> None:
        self.streak = 0
        if self.opened_at is not None:
            log.warning("endpoint answers again after %.0fs: sending resumes", time.monotonic() - self.opened_at)
            self.opened_at = None
            self.closed.set()

    def failed(self, transport: bool, quiet: bool = False) -> None:
        if not transport:  # the endpoint answered (with an error): it is reachable
            self.streak = 0
            return
        if self.streak == 0:
            self.streak_since = time.time()
        self.streak += 1
        if self.streak >= self.threshold and self.opened_at is None:
            self.opened_at = time.monotonic()
            self.next_probe = self.opened_at + self.probe_s
            self.closed.clear()
            if quiet:  # the caller stops the run instead of waiting
                return
            log.warning(
                "%d consecutive requests could not reach the endpoint: new requests paused, one probe every "
                "%.0fs, the run stops after %.0fs without an answer",
                self.streak,
                self.probe_s,
                self.max_s,
            )

    async def gate(self, stop_message: Callable[[float], str]) -> bool:
        """Wait while the breaker is open; True when this request goes out as the probe."""
        while self.opened_at is not None or self.stopped is not None:
            now = time.monotonic()
            if self.stopped is not None:
                raise SendingStopped(self.stopped)
            assert self.opened_at is not None
            if now - self.opened_at >= self.max_s:
                self.stop(stop_message(self.streak_since))  # wakes every waiter: they all stop
                continue
            if not self.probing and now >= self.next_probe:
                self.probing = True
                return True
            wake = min(self.next_probe, self.opened_at + self.max_s) - now
            try:
                await asyncio.wait_for(self.closed.wait(), max(0.01, wake))
            except asyncio.TimeoutError:
                pass
        return False

    def stop(self, reason: str) -> None:
        """The run stopped: requests waiting at the gate stop too."""
        self.stopped = self.stopped or reason
        self.closed.set()

    def probed(self) -> None:
        self.probing = False
        self.next_probe = time.monotonic() + self.probe_s


class InFlight:
    """Requests sent and not yet settled (answer committed, or failed): what a clean stop waits for."""

    def __init__(self) -> None:
        self.count = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def sent(self) -> None:
        self.count += 1
        self.idle.clear()

    def settled(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.idle.set()


class RateLimiter:
    """Token buckets for requests/min and tokens/min, refilled continuously, one second of burst.
    A request larger than one second's allowance may drive a bucket negative (it then pays the debt)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.buckets = [
            [rate / 60.0, rate / 60.0] for rate in (requests_per_minute, tokens_per_minute) if rate is not None
        ]  # [level, rate per second]
        self.kinds = [
            k for k, rate in (("requests", requests_per_minute), ("tokens", tokens_per_minute)) if rate is not None
        ]
        self.last = time.monotonic()

    async def acquire(self, tokens: int) -> None:
        if not self.buckets:
            return
        amounts = {"requests": 1.0, "tokens": float(tokens)}
        while True:
            now = time.monotonic()
            elapsed, self.last = now - self.last, now
            wait = 0.0
            for bucket, kind in zip(self.buckets, self.kinds):
                capacity = bucket[1]  # one second's worth
                bucket[0] = min(capacity, bucket[0] + elapsed * bucket[1])
                need = min(amounts[kind], capacity)
                if bucket[0] < need:
                    wait = max(wait, (need - bucket[0]) / bucket[1])
            if wait <= 0:
                for bucket, kind in zip(self.buckets, self.kinds):
                    bucket[0] -= amounts[kind]
                return
            await asyncio.sleep(wait)


class AdaptiveLimit:
    """At most `limit` requests in flight. A 429 halves the limit (at most once per `cooldown_s`, so a
    burst counts once); every `limit` consecutive successes add one back, up to the configured maximum."""

    def __init__(self, maximum: int, adaptive: bool, cooldown_s: float = 1.0) -> None:
        self.maximum = self.limit = self.lowest = maximum
        self.adaptive, self.cooldown_s = adaptive, cooldown_s
        self.in_flight = self.streak = 0
        self.last_cut = -math.inf
        self.cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self.cond:
            await self.cond.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1

    async def release(self, rate_limited: bool, succeeded: bool) -> None:
        async with self.cond:
            self.in_flight -= 1
            if self.adaptive and rate_limited:
                now = time.monotonic()
                self.streak = 0
                if now - self.last_cut >= self.cooldown_s and self.limit > 1:
                    self.limit = max(1, self.limit // 2)
                    self.lowest = min(self.lowest, self.limit)
                    self.last_cut = now
                    log.warning("rate limited (HTTP 429): concurrency lowered to %d", self.limit)
            elif self.adaptive and succeeded and self.limit < self.maximum:
                self.streak += 1
                if self.streak >= self.limit:
                    self.limit, self.streak = self.limit + 1, 0
            self.cond.notify(max(0, self.limit - self.in_flight))  # wake only as many as may start


class Budget:
    """Dollar cap for one screening run: a call is sent only if its worst-case cost (estimated input,
    full max_tokens output) fits next to what is spent and reserved by calls in flight."""

    def __init__(self, limit_usd: float | None) -> None:
        self.limit, self.spent, self.reserved = limit_usd, 0.0, 0.0

    def try_reserve(self, amount: float) -> bool:
        if self.limit is not None and self.spent + self.reserved + amount > self.limit:
            return False
        self.reserved += amount
        return True

    def settle(self, reserved: float, actual: float) -> None:
        self.reserved -= reserved
        self.spent += actual


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """`awaitable` or asyncio.TimeoutError after `seconds`; on Python >= 3.11 without the extra task
    per request that wait_for makes."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


def run_coroutine(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, also when an event loop is already running
    (e.g. in Jupyter): then it runs in a fresh loop on a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()
