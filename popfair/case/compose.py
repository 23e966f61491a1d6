"""Building a case's components from a composed config: every setting checked against the constraints
its `_target_` declares before anything is built (errors name the config key), and a dry run's
builds that need no API key or photo folder, made once per process."""

from __future__ import annotations

import inspect
import json
from functools import lru_cache
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from popfair.core.constraints import ParameterError, validate
from popfair.core.errors import ConfigError, PopfairError
from popfair.render.placebo import KEYS as PLACEBO_KEYS
from popfair.render.placebo import without_placebo

PARSED_KEPT = 4096  # distinct interpolation strings whose parse trees a process keeps


def memoise_interpolation_parsing() -> None:
    """From now on in this process, OmegaConf parses each distinct interpolation string ("${x.y}")
    once: it parses one with its ANTLR grammar (about 0.7 ms) every time it resolves or dereferences
    it, and a sweep resolves the same few strings in every case (half of resolving a case). A parse
    tree depends on the string and the rule only, and resolving reads it without changing it."""
    import omegaconf.base
    from omegaconf import grammar_parser

    if omegaconf.base.parse is grammar_parser.parse:
        omegaconf.base.parse = lru_cache(maxsize=PARSED_KEPT)(grammar_parser.parse)


def resolved(node: DictConfig) -> dict[Any, Any] | None:
    """A config node's values, interpolations resolved, as plain values; None when an interpolation
    is broken (building the node then says which)."""
    try:
        values = OmegaConf.to_container(node, resolve=True)
    except Exception:  # noqa: BLE001 - a broken interpolation: instantiate says why
        return None
    assert isinstance(values, dict)
    return values


def check_node(node: DictConfig, path: str, values: dict[Any, Any] | None = None) -> None:
    """Check a config node, and every nested component node, against the `parameter_constraints`
    its `_target_` declares, before anything is built; errors name the full config path. `values`:
    the node already resolved (one resolved copy is checked as plain values)."""
    values = values if values is not None else resolved(node)
    if values is not None:
        _check_values(values, path)


def _check_values(values: dict[Any, Any], path: str) -> None:
    try:
        target = get_object(values["_target_"]) if "_target_" in values else None
    except Exception:  # noqa: BLE001 - an unknown target: instantiate says why
        return
    constraints = getattr(target, "parameter_constraints", {})
    for key, value in values.items():
        if value == MISSING:  # `???`: instantiate names it as required
            continue
        if isinstance(value, dict) and "_target_" in value:
            _check_values(value, f"{path}.{key}")
        else:
            try:
                validate(constraints, {str(key): value})
            except ParameterError as exc:
                raise exc.at(path) from None


def build(node: DictConfig, group: str, *, values: dict[Any, Any] | None = None, **kwargs: Any) -> Any:
    """Instantiate one config group, after checking its settings against their declared constraints;
    surface our own validation errors unwrapped, with the config path of the setting. `values`: the
    node already resolved, when the caller has it."""
    if group == "renderer" and any(key in node for key in PLACEBO_KEYS):  # the case's, not the renderer's
        values = values if values is not None else resolved(node)
        if values is not None:
            values = without_placebo(values)
            node = OmegaConf.create(values)
    check_node(node, group, values)
    try:
        return instantiate(node, _convert_="all", **kwargs)
    except MissingMandatoryValue as exc:  # a `???` the user must fill (screener.url, screener.dir)
        raise ConfigError(f"{exc.full_key}: is required; set it on the command line ({exc.full_key}=...)") from None
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ParameterError):  # named relative to the component
            raise cause.at(group) from None
        if isinstance(cause, PopfairError):
            raise cause from None
        raise ConfigError(f"{group}: cannot build {node.get('_target_')}: {cause or exc}") from None


# What a dry run may build a component without: keyword -> the external resource it waives.
PLANNING_RELAXATIONS = {"screener": "require_key", "renderer": "require_photos"}


def build_for_plan(node: DictConfig, group: str, *, dry_run: bool = False, values: dict[Any, Any] | None = None) -> Any:
    """Build a component; in a dry run with `<PLANNING_RELAXATIONS[group]>=False` when its class takes
    that keyword: it can plan without the external resource (an API key, a photo folder) and still
    uses the resource when it is there.

    A dry run builds each distinct component once per process: the cases of a sweep share most of
    their components (one estimator, a few renderers and populations, a dozen screeners), and
    planning only reads them. The memo is keyed by the resolved settings, not by the contents of
    files they name: a process that edits a data file between two dry runs plans with the first
    build. `values`: the node already resolved, when the caller has it."""
    if not dry_run:
        return build(node, group, values=values)
    relax = PLANNING_RELAXATIONS.get(group)
    kwargs: dict[str, Any] = {relax: False} if relax is not None and relax in _keywords(node.get("_target_")) else {}
    values = values if values is not None else resolved(node)
    if values is None:  # a broken interpolation: building says which
        return build(node, group, **kwargs)
    key = json.dumps([group, values, kwargs], sort_keys=True, default=repr)
    if key not in _PLANNING_PARTS:
        _PLANNING_PARTS[key] = build(node, group, values=values, **kwargs)
    return _PLANNING_PARTS[key]


_PLANNING_PARTS: dict[str, Any] = {}  # dry runs: (group, resolved settings, relaxation) -> built component


def keep_for_plan(node: DictConfig, group: str, values: dict[Any, Any] | None, component: Any) -> None:
    """A component the pre-flight checks built as the run builds it, kept as a dry run's build of the
    same settings (`build_for_plan`), so that each part is built once: it built with its key, extra
    and files, so the relaxation would change nothing."""
    if values is None:
        return
    relax = PLANNING_RELAXATIONS.get(group)
    kwargs: dict[str, Any] = {relax: False} if relax is not None and relax in _keywords(node.get("_target_")) else {}
    _PLANNING_PARTS.setdefault(json.dumps([group, values, kwargs], sort_keys=True, default=repr), component)


def _keywords(target: Any) -> set[str]:
    """The keyword parameters of a config's `_target_` (none when it cannot be resolved)."""
    try:
        return set(inspect.signature(get_object(str(target))).parameters)
    except Exception:  # noqa: BLE001 - an unknown target: building it says why
        return set()
