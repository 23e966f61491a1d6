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


def require(condition: bool, key: str, message: str) -> None:
    """Raise ConfigError('<key>: <message>') unless condition holds."""
    if not condition:
        raise ConfigError(f"{key}: {message}")
