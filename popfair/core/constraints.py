"""One declarative vocabulary for the rules a setting must satisfy (in the spirit of scikit-learn's
`_parameter_constraints`).

A component declares `parameter_constraints = {"n_bootstrap": Interval(int, 100, None), "alpha":
Interval(float, 0, 0.5, closed="neither"), "ci": Options(("t", "bootstrap")), "n": [None, ...]}`
(a list allows any of its rules; None allows null) and checks its arguments with `validate`. Errors
name the parameter relative to the component (`n_bootstrap: must be an integer >= 100, got 5`);
the builder (`popfair.case.compose.build`) checks every config node against the constraints of its
`_target_` before anything is built and names the full config path
(`estimator.observational.folds: ...`), so neither the YAML nor the constructors carry their path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from numbers import Integral, Real
from os import PathLike
from typing import Any, Literal, Protocol, runtime_checkable

from popfair.core.errors import ConfigError


@runtime_checkable
class DeclaresConstraints(Protocol):
    """A component (class) that declares the constraints of its settings (`parameter_constraints`),
    checked before it is built (popfair.case.compose)."""

    parameter_constraints: Mapping[str, Any]


class ParameterError(ConfigError):
    """A setting breaks its constraint. `key` is relative to the component that raised it;
    `at(path)` names it under a config path."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message

    def at(self, path: str) -> ParameterError:
        return ParameterError(f"{path}.{self.key}" if path else self.key, self.message)


class Constraint:
    """A rule a value satisfies or not; `str()` is its description ("an integer >= 100").
    A rule on a structured value (a mapping) may override `check` to name the offending sub-key."""

    def is_satisfied_by(self, value: Any) -> bool:
        raise NotImplementedError

    def check(self, name: str, value: Any) -> None:
        if not self.is_satisfied_by(value):
            raise ParameterError(name, f"must be {self}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


class Interval(Constraint):
    """An integer (`int`) or finite number (`float`; integers count) within [low, high]; None = unbounded.
    `closed`: which ends belong to the interval ("both", "left", "right", "neither")."""

    def __init__(
        self,
        kind: type[int] | type[float],
        low: float | None,
        high: float | None,
        *,
        closed: Literal["both", "left", "right", "neither"] = "both",
    ) -> None:
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def is_satisfied_by(self, value: Any) -> bool:
        if not (_is_int(value) if self.kind is int else _is_real(value)):
            return False
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is not None and (value < self.low or (value == self.low and not left)):
            return False
        return self.high is None or not (value > self.high or (value == self.high and not right))

    def __str__(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is None and self.high is None:
            return noun
        if self.high is None:
            return f"{noun} {'>=' if left else '>'} {self.low:g}"
        if self.low is None:
            return f"{noun} {'<=' if right else '<'} {self.high:g}"
        return f"{noun} in {'[' if left else '('}{self.low:g}, {self.high:g}{']' if right else ')'}"


class Options(Constraint):
    """One of a fixed set of values."""

    def __init__(self, values: Iterable[Any]) -> None:
        self.values = tuple(values)

    def is_satisfied_by(self, value: Any) -> bool:
        return any(value == option and type(value) is type(option) for option in self.values)

    def __str__(self) -> str:
        return f"one of {list(self.values)}"


class Text(Constraint):
    """A non-empty string (a column name, a label)."""

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, str) and value != ""

    def __str__(self) -> str:
        return "a non-empty string"


class Boolean(Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, bool)

    def __str__(self) -> str:
        return "true or false"


class Path(Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, (str, PathLike)) and str(value) != ""

    def __str__(self) -> str:
        return "a path"


class ListOf(Constraint):
    """A list (or tuple) whose every item satisfies `item`; `what` names the items ("strings")."""

    def __init__(self, item: Constraint | type, what: str, *, non_empty: bool = False) -> None:
        self.item, self.what, self.non_empty = item, what, non_empty

    def _item_ok(self, value: Any) -> bool:
        return self.item.is_satisfied_by(value) if isinstance(self.item, Constraint) else isinstance(value, self.item)

    def is_satisfied_by(self, value: Any) -> bool:
        return (
            isinstance(value, (list, tuple))
            and (len(value) > 0 or not self.non_empty)
            and all(self._item_ok(v) for v in value)
        )

    def __str__(self) -> str:
        return f"a {'non-empty ' if self.non_empty else ''}list of {self.what}"


Rule = Constraint | None | list[Constraint | None]
Rules = Mapping[str, Rule]  # parameter -> rule, as a component declares them


def describe(rule: Rule) -> str:
    rules = rule if isinstance(rule, list) else [rule]
    return " or ".join("null" if r is None else str(r) for r in rules)


def satisfied(rule: Rule, value: Any) -> bool:
    rules = rule if isinstance(rule, list) else [rule]
    return any(value is None if r is None else r.is_satisfied_by(value) for r in rules)


def validate(constraints: Rules, params: Mapping[str, Any]) -> None:
    """ParameterError naming the first parameter of `params` that breaks its constraint (parameters
    without a constraint are not checked)."""
    for name, value in params.items():
        if name not in constraints:
            continue
        rule = constraints[name]
        if isinstance(rule, Constraint):
            rule.check(name, value)
        elif not satisfied(rule, value):
            raise ParameterError(name, f"must be {describe(rule)}, got {value!r}")


def settings_from_config(cls: type[Any], config: Mapping[str, Any] | None, key: str) -> Any:
    """Settings dataclass `cls` from the config mapping found under `key` (relative to the component),
    checked against `cls.parameter_constraints`; unknown keys name the allowed ones."""
    values = dict(config or {})
    allowed = set(cls.__dataclass_fields__)
    unknown = set(values) - allowed
    if unknown:
        raise ParameterError(key, f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    try:
        validate(cls.parameter_constraints, values)
    except ParameterError as exc:
        raise exc.at(key) from None
    return cls(**values)
