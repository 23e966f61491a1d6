"""API keys: read only from environment variables, and kept out of logs.

Config names the *variable* (e.g. `api_key_env: OPENAI_API_KEY`), never the value. Every value read
through `read_secret` (plus the variables the provider adapters declare) is redacted from log records by
`RedactSecrets`, as defence in depth: popfair never logs a key on purpose."""

from __future__ import annotations

import logging
import os
import threading
from urllib.parse import urlsplit, urlunsplit

from popfair.core.errors import MissingSecretError

# Variables whose values are redacted even when popfair did not read them itself: each provider
# adapter adds the ones it declares (`Provider.key_variables`) as it registers; the model hub's
# token is read by every library that downloads weights or data, so it is here from the start.
SECRET_VARIABLES: set[str] = {"HF_TOKEN"}
MIN_SECRET_CHARS = 8  # shorter values would redact ordinary words
REDACTED = "[REDACTED]"

_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret_variables(*variables: str) -> None:
    """Redact the values of these variables from logs once `install_log_redaction` runs."""
    with _lock:
        SECRET_VARIABLES.update(variables)


def register_secret(value: str | None) -> None:
    """Remember a secret value so that log records containing it are redacted."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _secrets.add(value)


def read_secret(variable: str, key: str) -> str:
    """The value of environment variable `variable`; MissingSecretError naming it if unset or empty.
    `key` is the config key that named the variable (for the message)."""
    value = os.environ.get(variable, "")
    if not value.strip():
        raise MissingSecretError(
            f"{key}: environment variable {variable} is not set. Export it before running "
            f"(export {variable}=...); popfair reads API keys only from the environment."
        )
    register_secret(value)
    return value


def redact(text: str) -> str:
    """`text` with every registered secret value replaced by [REDACTED]."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class RedactSecrets(logging.Filter):
    """Logging filter that rewrites any record whose message contains a registered secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _secrets:
            return True
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_filter = RedactSecrets()


def install_log_redaction() -> None:
    """Register the values of the declared secret variables (`SECRET_VARIABLES`) and attach the filter
    to the root logger's handlers (handler filters see records propagated from every logger, including
    SDK loggers)."""
    with _lock:
        variables = sorted(SECRET_VARIABLES)
    for variable in variables:
        register_secret(os.environ.get(variable))
    root = logging.getLogger()
    for target in [root, *root.handlers]:
        if _filter not in target.filters:
            target.addFilter(_filter)


def safe_url(url: str) -> str:
    """A URL fit for messages and logs, by one rule: the password hidden (user:***@), the query and
    fragment dropped (where tokens hide); scheme, user, host, port and path kept. Works for HTTP
    endpoints and database URLs (postgresql+psycopg://user:***@host/db) alike."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    if not parts.scheme or not parts.netloc:
        return url.split("?")[0].split("#")[0]
    user = f"{parts.username}{':***' if parts.password is not None else ''}@" if parts.username else ""
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme, f"{user}{host}{f':{port}' if port else ''}", parts.path, "", ""))
