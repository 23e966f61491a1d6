"""The one door from config to case: `compose_case` reads the composed config once into the case's
`CaseSettings` and its components (`Parts`), every setting checked against the constraints its
`_target_` declares before anything is built (errors name the config key), and builds the kind of
case the config chooses (popfair.case.base's registry). A dry run's builds need no API key or photo
folder and are made once per process. Nothing below this module reads the config."""

from __future__ import annotations

import inspect
import json
from functools import lru_cache
from typing import Any, cast

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from popfair.case.base import CASE_KINDS, CaseSettings, RunContext, kind_for
from popfair.core.constraints import DeclaresConstraints, ParameterError, validate
from popfair.core.errors import ConfigError, PopfairError, require
from popfair.design.sequential import SequentialSettings
from popfair.render.placebo import KEYS as PLACEBO_KEYS
from popfair.render.placebo import without_placebo
from popfair.screen.failures import DEFAULT_MAX_FAILURE_SHARE

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
    constraints = target.parameter_constraints if isinstance(target, DeclaresConstraints) else {}
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


class Parts:
    """The config groups of one case, each built on request and checked against the constraints its
    `_target_` declares (errors name the config key); in a dry run built without the external
    resources planning does not need (`build_for_plan`). What a case kind's `compose` reads: it never
    sees the config itself."""

    def __init__(self, cfg: DictConfig, values: dict[Any, Any] | None, dry_run: bool) -> None:
        self._cfg, self._values, self.dry_run = cfg, values, dry_run

    def has(self, group: str) -> bool:
        """Whether the config sets the group (not null)."""
        return group in self._cfg and self._cfg[group] is not None

    def require(self, *groups: str) -> None:
        for group in groups:
            require(self.has(group), group, f"missing config group; pick an option, e.g. {group}=<option>")

    def values(self, group: str) -> Any:
        """The group's settings, interpolations resolved, as plain values (None: not set)."""
        if self._values is not None:
            return self._values.get(group)
        node = self._cfg.get(group)
        return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node

    def build(self, group: str) -> Any:
        """The group's component, built (once per distinct settings in a dry run)."""
        own = self._values and self._values[group]
        return build_for_plan(self._cfg[group], group, dry_run=self.dry_run, values=own)


def case_settings(
    cfg: DictConfig, values: dict[Any, Any] | None, *, dry_run: bool, context: RunContext
) -> CaseSettings:
    """The case's own settings (`CaseSettings`), read from the config once and checked: a bad value
    fails naming its key."""
    from popfair.case.power_plan import CasePower

    whole = values if values is not None else resolved(cfg)
    if whole is None:  # a broken interpolation: its key and why, in one line
        try:
            whole = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{exc.full_key or 'config'}: {str(exc).splitlines()[0]}") from None
    seed = whole.get("seed", 0)
    require(
        isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**63,
        "seed",
        f"must be an integer >= 0 (numpy's generators take no negative seed), got {seed!r}",
    )
    report = whole.get("audit_report", "auto")
    require(report in ("auto", True, False), "audit_report", f"must be auto, true or false, got {report!r}")
    share = whole.get("max_failure_share", DEFAULT_MAX_FAILURE_SHARE)
    require(
        share is None or (isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1),
        "max_failure_share",
        f"must be a share in [0, 1] or null (estimate whatever failed), got {share!r}",
    )
    store = whole.get("document_store", True)
    require(isinstance(store, bool), "document_store", f"must be true or false, got {store!r}")
    location = whole.get("cache_url") or whole.get("cache_dir")
    run_name = whole.get("run_name")
    return CaseSettings(
        seed=int(seed),
        run_name=None if run_name is None else str(run_name),
        config=whole,
        audit_report=report,
        max_failure_share=None if share is None else float(share),
        cache_location=str(location) if store and location and not dry_run else None,
        sequential=SequentialSettings.from_config(whole.get("sequential")),
        power=CasePower.of(whole.get("plan"), whole.get("tracking")),
        dry_run=dry_run,
        context=context,
    )


def compose_case(
    cfg: DictConfig,
    *,
    dry_run: bool = False,
    values: dict[Any, Any] | None = None,
    context: RunContext | None = None,
    kind: str | None = None,
) -> Any:
    """The composed case (popfair.case.base.Case): the registered kind of case the config chooses
    (`register_case`: a table audit when the `table` group is set, else the generated pipeline), its
    settings read once (`case_settings`) and its components built (`Parts`), every one checked
    before any work. `values`: `cfg` already resolved, when the caller has it; `context`: what the
    command knows of the run (a sweep's parent run, tags, the run name's suffix); `kind`: a kind by
    name instead of the config's choice."""
    chosen = {str(group) for group in cfg if cfg.get(group) is not None}
    case_kind = CASE_KINDS[kind] if kind is not None else kind_for(chosen)
    if values is None:
        values = resolved(cfg)  # one resolved copy: checked per group, logged, and a dry run's memo key
    settings = case_settings(cfg, values, dry_run=dry_run, context=context or RunContext())
    return case_kind.load().compose(Parts(cfg, values, dry_run), settings)
