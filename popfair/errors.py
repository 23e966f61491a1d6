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


def settings_from_config(cls, config, key: str):
    """Build settings dataclass `cls` from a config mapping; unknown keys are a ConfigError naming
    `key` and the allowed keys (the dataclass's own checks run afterwards in the caller)."""
    values = dict(config or {})
    allowed = set(cls.__dataclass_fields__)
    unknown = set(values) - allowed
    require(not unknown, key, f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    return cls(**values)
