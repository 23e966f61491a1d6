"""Errors popfair raises on bad input. Each message names the problem and how to fix it."""


class PopfairError(Exception):
    """Base class: an error the user can fix (bad config, bad data, missing key)."""


class ConfigError(PopfairError):
    """A config value is invalid. The message names the key and the allowed values."""


class DataError(PopfairError):
    """A data file is missing or malformed. The message names the file and the problem."""


class MissingSecretError(ConfigError):
    """An API key environment variable is not set. The message names the variable."""


class EstimationError(PopfairError):
    """The data cannot support the requested estimate (e.g. a group is empty, Y is constant)."""


class ScreeningStopped(PopfairError):
    """A case stopped while screening because its endpoint cannot answer: refused or unresolvable,
    TLS or proxy failures, a rejected key, a wrong model or path, a request it cannot take, an
    endpoint that hangs, or one that went down mid-run (circuit breaker). The message is one line:
    the endpoint (no secrets), the cause, the fix. Answers received before are in the cache: the
    rerun reuses them."""


class TooManyFailures(PopfairError):
    """More screens of a case failed than `max_failure_share` allows, so the estimator was not run;
    the message counts the failures by cause."""


class TrackingFailed(PopfairError):
    """The MLflow tracking store failed while a case was being logged. The case's results are not
    lost: its artifacts are written to `folder` and `result` (set by the case) holds what it computed,
    so the command prints the effects table and exits non-zero, naming the server in one line."""

    def __init__(self, message: str, uri: str = "", folder: str | None = None) -> None:
        super().__init__(message)
        self.uri, self.folder = uri, folder
        self.result: object | None = None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a case: answers received are committed and claims released. A
    KeyboardInterrupt, so a sweep stops too; `metrics` holds what was done (rows answered, dollars)."""

    def __init__(self, message: str, metrics: dict[str, float] | None = None) -> None:
        super().__init__(message)
        self.metrics = dict(metrics or {})


def require(condition: bool, key: str, message: str) -> None:
    """Raise ConfigError('<key>: <message>') unless condition holds."""
    if not condition:
        raise ConfigError(f"{key}: {message}")
