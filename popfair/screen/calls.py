"""What the call engine is given and returns: its settings (`EngineSettings`), one call, one answer
and the counters of a screening (`EngineStats`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from popfair.core.constraints import Boolean, Interval, settings_from_config
from popfair.screen.prompts import ChatPrompt
from popfair.store.responses import CachedAnswer, StoredReply

POSITIVE = Interval(float, 0, None, closed="neither")


NON_NEGATIVE = Interval(float, 0, None)


# Before any request of a run succeeds, these failures stop it (retrying cannot fix them): the
# endpoint cannot be reached, or does not take the request.
FAIL_FAST_CAUSES = frozenset(
    {
        "connection refused",
        "DNS lookup failed",
        "TLS error",
        "proxy error",
        "HTTP 400",
        "HTTP 404",
        "HTTP 401",
        "HTTP 403",
    }
)


EARLY_FAILURES = 3  # 400s from this many different calls (and no success) stop the run


@dataclass(frozen=True)
class EngineSettings:
    """How hard to push a provider. Every field is a key under `screener.engine`."""

    concurrency: int = 8  # most requests in flight at once
    requests_per_minute: float | None = None  # provider RPM limit; null = none
    tokens_per_minute: float | None = None  # provider TPM limit (input + max output); null = none
    timeout_s: float = 60.0  # per request
    max_attempts: int = 6  # tries per request before it is a recorded failure
    backoff_initial_s: float = 1.0  # first retry wait (doubles each try)
    backoff_max_s: float = 60.0  # longest exponential wait
    backoff_jitter_s: float = 1.0  # uniform random extra wait, de-synchronises clients
    retry_after_max_s: float = 300.0  # longest Retry-After honoured
    adaptive: bool = True  # halve concurrency on bursts of 429s, regrow on success
    progress: bool = True  # tqdm bar on stderr
    claim_lease_s: float = 60.0  # a claimed call is ours this long unless renewed (heartbeat)
    claim_poll_s: float = 0.5  # how often a call another worker holds is looked up
    fail_fast: bool = True  # stop a run whose first requests fail for a reason retrying cannot fix
    breaker_failures: int = 20  # consecutive transport failures that pause sending (circuit breaker)
    breaker_probe_s: float = 5.0  # while paused, one probe request this often
    breaker_max_s: float = 120.0  # paused this long without an answer: the run stops (rerun resumes)
    interrupt_grace_s: float = 30.0  # after Ctrl-C/SIGTERM, wait this long for the requests in flight

    parameter_constraints: ClassVar[dict[str, Any]] = {
        "concurrency": Interval(int, 1, None),
        "requests_per_minute": [None, POSITIVE],
        "tokens_per_minute": [None, POSITIVE],
        "timeout_s": POSITIVE,
        "max_attempts": Interval(int, 1, None),
        "backoff_initial_s": NON_NEGATIVE,
        "backoff_max_s": NON_NEGATIVE,
        "backoff_jitter_s": NON_NEGATIVE,
        "retry_after_max_s": NON_NEGATIVE,
        "adaptive": Boolean(),
        "progress": Boolean(),
        "claim_lease_s": POSITIVE,
        "claim_poll_s": POSITIVE,
        "fail_fast": Boolean(),
        "breaker_failures": Interval(int, 1, None),
        "breaker_probe_s": POSITIVE,
        "breaker_max_s": POSITIVE,
        "interrupt_grace_s": NON_NEGATIVE,
    }

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> EngineSettings:
        """The settings under the screener's `engine` key (errors name `engine.<key>`)."""
        return settings_from_config(cls, config, "engine")


def sample_key(key: str, index: int) -> str:
    """The cache key of answer `index` (0-based) of a prompt whose answers are asked several times
    (`screener.samples`): the prompt's own key for the first answer, so a cache written with one answer
    per prompt stays valid, and a key derived from it (sha256 of key and index) for each further one."""
    if index == 0:
        return key
    return hashlib.sha256(f"{key}:sample:{index}".encode()).hexdigest()


@dataclass(frozen=True)
class Call:
    """One unique request to make; `rows` documents share its answer. `siblings`: the cache keys of
    further answers of the same prompt this request also asks for (an OpenAI-style `n`: one request,
    one prompt's input tokens, 1 + len(siblings) answers)."""

    key: str
    prompt: ChatPrompt
    input_tokens_estimate: int
    rows: int = 1
    siblings: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Answers this request asks for."""
        return 1 + len(self.siblings)


class Answer(NamedTuple):
    """Outcome of one unique call: parsed value, or an error (API failure or unparseable text).
    Its first five fields are a StoredReply's, so a cached reply becomes an Answer without a
    per-row constructor call (a named tuple: cheap to make by the 60,000)."""

    raw: str | None
    value: float | None
    error: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False

    @classmethod
    def from_cache(cls, cached: CachedAnswer, *, paid_now: bool = False) -> Answer:
        return cls(
            raw=cached.raw,
            value=cached.value,
            error=cached.parse_error,
            input_tokens=cached.input_tokens,
            output_tokens=cached.output_tokens,
            cost_usd=cached.cost_usd if paid_now else 0.0,
            cached=not paid_now,
        )

    @classmethod
    def from_replies(cls, replies: Mapping[str, StoredReply]) -> dict[str, Answer]:
        """Answers of cached replies in bulk (nothing paid now)."""
        new, tail = tuple.__new__, (0.0, True)
        return {key: new(cls, reply + tail) for key, reply in replies.items()}


@dataclass
class EngineStats:
    requests: int = 0  # HTTP attempts, including retried ones
    answered: int = 0  # unique calls answered (and cached) in this run
    failed: int = 0  # unique calls that ended as API failures (not cached)
    retries: int = 0
    rate_limited: int = 0  # 429 responses
    timeouts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    min_concurrency: int = 0  # lowest adaptive concurrency reached
    waited: int = 0  # unique calls another worker (process, machine) answered while this one waited
    taken_over: int = 0  # calls claimed from a worker whose lease had run out (it died)
    wall_s: float = 0.0

    def as_metrics(self, prefix: str = "screen.") -> dict[str, float]:
        return {f"{prefix}{name}": float(value) for name, value in vars(self).items()}
