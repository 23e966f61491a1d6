"""Why screens failed, in words a user can act on: the cause of each failure, the one-line message
that stops a case whose endpoint cannot answer (endpoint, cause, fix), and the check that keeps the
estimator off a table where most screens failed."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from popfair.core.errors import TooManyFailures
from popfair.runtime.secrets import safe_url

log = logging.getLogger("popfair.screen")

DEFAULT_MAX_FAILURE_SHARE = 0.2

# cause -> what to do about it ({url_key}, {request_keys}, {key_hint}, {timeout_s} filled per screener)
FIXES = {
    "connection refused": "nothing listens there: check {url_key} and that the server is running",
    "DNS lookup failed": "the host name does not resolve: check {url_key} for typos, and the network",
    "TLS error": "the TLS handshake failed: check http:// vs https:// in {url_key}, or point SSL_CERT_FILE at "
    "the certificate authority of a private server",
    "proxy error": "the proxy failed: check HTTPS_PROXY / HTTP_PROXY / NO_PROXY",
    "connection error": "check {url_key} and the network",
    "timeout": "no answer within screener.engine.timeout_s={timeout_s}s: check the endpoint, or raise "
    "screener.engine.timeout_s",
    "HTTP 401": "the key was rejected: {key_hint}",
    "HTTP 403": "the key has no access to this model or endpoint: {key_hint}, and the account's model access",
    "HTTP 404": "wrong model id or path: check {request_keys} and {url_key}",
    "HTTP 400": "the endpoint cannot take this request: check {request_keys}",
}
_CAUSE = re.compile(
    r"(HTTP \d{3}|connection refused|DNS lookup failed|TLS error|proxy error|connection error|timed? ?out"
    r"|malformed response|malformed JSON|unparseable|no result for document|call budget exhausted|budget exhausted"
    r"|rejected the API key|case stopped)",
    re.IGNORECASE,
)


def failure_cause(error: str) -> str:
    """A failure's cause, short ("HTTP 500", "timeout", "unparseable answer", ...), from its message."""
    match = _CAUSE.search(error)
    if match is None:
        return "other"
    cause = match.group(1)
    lowered = cause.lower()
    if lowered.startswith("time"):
        return "timeout"
    if lowered.startswith("malformed"):
        return "malformed response"
    if lowered == "unparseable":
        return "unparseable answer"
    if lowered == "no result for document":
        return "no result in the results files"
    if lowered == "rejected the api key":
        return "HTTP 401"
    return cause if cause.startswith("HTTP") else lowered.replace("dns", "DNS").replace("tls", "TLS")


def count_causes(errors: Iterable[str | None]) -> Counter[str]:
    """Failures by cause, most common first (None = no failure, not counted)."""
    return Counter(failure_cause(error) for error in errors if error is not None)


def describe_causes(causes: Counter[str]) -> str:
    return ", ".join(f"{n} {cause}" for cause, n in causes.most_common())


@dataclass(frozen=True)
class FailureHints:
    """Where a screener's settings live, for the fix in a stop message."""

    url_key: str = "screener.base_url"
    request_keys: str = "screener.model and screener.generation"
    key_hint: str = "check the API key"
    timeout_s: float = 60.0

    def fix(self, cause: str) -> str:
        template = FIXES.get(cause, "check the endpoint's status")
        return template.format(
            url_key=self.url_key, request_keys=self.request_keys, key_hint=self.key_hint, timeout_s=self.timeout_s
        )


def stop_message(screener: str, url: str, cause: str, detail: str, hints: FailureHints) -> str:
    """One line: the endpoint (no secrets), the cause, the fix, and that a rerun resumes."""
    detail = " ".join(detail.removeprefix(f"{cause}: ").split())[:160]
    return (
        f"screener {screener}: {safe_url(url)}: {cause} ({detail}). Fix: {hints.fix(cause)}. "
        "Answers received so far are kept: rerun to resume."
    )


def check_failure_share(screener: str, errors: list[str | None], max_share: float | None) -> None:
    """Warn with the causes when screens failed; raise TooManyFailures (the estimator is not run) when
    more than `max_share` of them did (None: never)."""
    causes = count_causes(errors)
    failed, total = sum(causes.values()), len(errors)
    if not failed:
        return
    summary = f"{failed} of {total} screens failed ({failed / total:.0%}): {describe_causes(causes)}"
    if max_share is not None and failed > max_share * total:
        raise TooManyFailures(
            f"screener {screener}: {summary}; above max_failure_share={max_share}, so the estimator was not run. "
            "Fix the cause and rerun (answers received are reused, failed calls are asked again), or set "
            "max_failure_share=1.0 to estimate on the rows that were scored."
        )
    log.warning("screener %s: %s (estimating on the rest)", screener, summary)
