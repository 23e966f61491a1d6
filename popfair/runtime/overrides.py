"""The command line's overrides checked before Hydra sees them: a group option, a config key or a route
that does not exist, and a `+key` that nothing reads, each stopped with one line naming the closest
option or key (difflib), instead of Hydra's multi-line error or a run of the default case.
Config nodes whose keys are the user's own (OPEN_MAPPINGS: category values, coefficients, headers)
take new keys with or without the `+`.

Used by every Hydra entry point (`popfair`, `popfair doctor`, `popfair-export`). Group options come
from the config folder's listing (no composition); keys and routes are checked against one
composition of the groups the overrides choose (the first value of each sweep), about 0.2 s."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from popfair.core.errors import ConfigError

# Hydra flags followed by a value (the value is not an override).
_FLAGS_WITH_VALUE = {"--cfg", "-c", "--package", "-p", "--experimental-rerun", "--info", "-i"}
# Flags under which popfair cannot know the config folder or what is asked: the check stands aside.
_FLAGS_UNCHECKED = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--help",
    "-h",
    "--hydra-help",
    "--shell-completion",
    "-sc",
    "--info",
    "-i",
    "--version",
    "--experimental-rerun",
}


# Config nodes that are mappings read whole, whose keys the user chooses (a raw category value, a
# profile column, a header), as opposed to a component's settings: a new key below one is read, so
# `+key=v` and `key=v` both add it. `*` stands for any one key. Price is not here: its keys are fixed.
OPEN_MAPPINGS = (
    "table.values.*",  # raw category value -> popfair category (sex, race)
    "table.read_options",  # DuckDB reader options
    "screener.coefficients",  # simulated screener: profile column -> {level: coef} or a slope
    "screener.strengths",  # simulated ranker: '<race> <sex>' -> log-worth
    "screener.position_bonus",  # simulated ranker: position -> log-worth
    "screener.routes",  # route name -> route
    "screener.generation.extra",  # request-body fields sent verbatim
    "screener.headers",  # http screener: literal headers
    "screener.secret_headers",  # http screener: header -> environment variable
    "screener.params",  # http screener: query-string template
    "screener.body",  # http screener: request-body template
    "screener.values.labels",  # http screener: answer label -> number
)


def open_mapping(key: str, config: Any) -> str | None:
    """The open mapping of `config` (OPEN_MAPPINGS) that `key` lies below, as a dotted path, or None
    (also when the composed config has no such node: `screener.coefficients` of screener=tfidf)."""
    parts = key.split(".")
    for pattern in OPEN_MAPPINGS:
        shape = pattern.split(".")
        if len(parts) > len(shape) and all(p == "*" or p == k for p, k in zip(shape, parts)):
            node = ".".join(parts[: len(shape)])
            if _has(config, node):
                return node
    return None


def _merges_new_keys(override: Any, key: str, config: Any) -> bool:
    """`table.values.race={01: white}`: a map set on an open mapping (or below one) merges into it, and
    Hydra's struct mode refuses its new keys ("Key '01' is not in struct") unless it goes as `++`."""
    if override.is_add() or override.is_force_add() or not any(isinstance(v, dict) for v in _values(override)):
        return False
    return open_mapping(key, config) is not None or open_mapping(f"{key}._", config) is not None


def _closest(word: str, choices: Sequence[str]) -> str:
    """'; did you mean X?' for the closest choice (a key's siblings first), or ''."""
    parent = word.rpartition(".")[0]
    siblings = [c for c in choices if c.rpartition(".")[0] == parent]
    match = difflib.get_close_matches(word, siblings, n=1, cutoff=0.6) or difflib.get_close_matches(
        word, list(choices), n=1, cutoff=0.6
    )
    return f"; did you mean {match[0]}?" if match else ""


def override_strings(args: Sequence[str]) -> list[str] | None:
    """The overrides among command-line arguments (flags and their values left out); None when a flag
    makes the check stand aside (another config folder, --help, --info, shell completion)."""
    overrides: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _FLAGS_UNCHECKED:
            return None
        if arg.startswith("-"):
            skip = flag in _FLAGS_WITH_VALUE and "=" not in arg
            continue
        overrides.append(arg)
    return overrides


def _values(override: Any) -> list[Any]:
    """Every value an override sets: the choices of a sweep, the one value otherwise ([] for a glob
    sweep, which only Hydra's config loader can expand)."""
    from hydra.core.override_parser.types import ValueType

    if override.is_delete():
        return []
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
        return []
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.value()]


def _first(override: Any) -> str:
    """The override with a sweep replaced by its first value (what one composition can check)."""
    if not override.is_sweep_override():
        return str(override.input_line)
    values = _values(override)
    return f"{override.get_key_element()}={values[0]}" if values else ""


def _paths(node: Any, prefix: str = "") -> Iterator[str]:
    """Every key path of a composed config (nodes and leaves), dotted."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        for key in node.keys():
            path = f"{prefix}{key!s}"
            yield path
            try:
                child = node._get_node(key)
            except Exception:  # noqa: BLE001 - an unreadable node: its own path is listed
                continue
            yield from _paths(child, path + ".")


def _accepts(target: str, key: str) -> bool:
    """Whether the class or function a `_target_` names takes `key` (or any keyword); True when it
    cannot be looked up (building it says why)."""
    from hydra.utils import get_object

    try:
        parameters = inspect.signature(get_object(target)).parameters
    except Exception:  # noqa: BLE001 - an unknown target is reported when the case is built
        return True
    return key in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def _check_added(key: str, config: Any, paths: Sequence[str], conf_dir: Path | None = None) -> None:
    """A `+key` must add to something that reads it: a component's keyword (its `_target_` takes it),
    or an open map (OPEN_MAPPINGS, an empty `{}`, or a map of dicts such as routes)."""
    from omegaconf import DictConfig, OmegaConf

    if open_mapping(key, config) is not None:
        return
    parent_path, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_path) if parent_path else config
    if isinstance(parent, DictConfig) and parent_path:
        if "_target_" in parent:
            if _accepts(str(parent.get("_target_")), leaf):
                return
        elif len(parent) == 0 or all(isinstance(parent._get_node(k), DictConfig) for k in parent.keys()):
            return
    owners = _options_with_key(key, conf_dir)
    if owners:
        raise ConfigError(_belongs_to(f"+{key}", owners))
    raise ConfigError(
        f"+{key}: nothing reads {key}, so the case would run as if it were not there{_closest(key, paths)} "
        f"(drop the +, or run `popfair --cfg job` to list the keys)"
    )


def _options_with_key(key: str, conf_dir: Path | None) -> list[str]:
    """`group=option` for each option of the key's group (its first part) whose own file has the key,
    or the open mapping it adds to (read without composing: a fraction of a second)."""
    top, _, rest = key.partition(".")
    if conf_dir is None or not rest or not (conf_dir / top).is_dir():
        return []
    from omegaconf import OmegaConf

    owners = []
    for path in sorted((conf_dir / top).glob("*.yaml")):
        try:
            option = OmegaConf.create({top: OmegaConf.load(path)})
        except Exception:  # noqa: BLE001 - an unreadable option is Hydra's to report
            continue
        if _has(option, key) or open_mapping(key, option) is not None:
            owners.append(f"{top}={path.stem}")
    return owners


def _belongs_to(key: str, owners: Sequence[str]) -> str:
    """One line: the options a key belongs to, and the override choosing the first."""
    shown = " or ".join(owners[:4]) + (f" (and {len(owners) - 4} more)" if len(owners) > 4 else "")
    return (
        f"{key}: belongs to {shown}, not to the {key.lstrip('+~').partition('.')[0]} this case uses; "
        f"choose one too: {owners[0]} {key}=..."
    )


def _check_route(key: str, values: Sequence[Any], config: Any) -> None:
    """`<component>.route=X`: X must be `auto` or one of the component's routes."""
    from omegaconf import DictConfig, OmegaConf

    parent_path = key.rpartition(".")[0]
    node = OmegaConf.select(config, parent_path) if parent_path else None
    if not isinstance(node, DictConfig) or not isinstance(node.get("routes"), DictConfig):
        return
    routes = [str(name) for name in node.routes.keys()]
    for value in values:
        if value is not None and str(value) != "auto" and str(value) not in routes:
            raise ConfigError(
                f"{key}={value}: no such route for {node.get('name', parent_path)}{_closest(str(value), routes)} "
                f"(routes: auto, {', '.join(routes)})"
            )


def check_overrides(args: Sequence[str], conf_dir: Path, *, config_name: str = "config") -> list[str]:
    """Raise ConfigError with one line for the first override that names a group option, a key or a
    route that does not exist, or adds a key nothing reads. Hydra's own keys (hydra.*, hydra/...) and
    anything this check cannot read are left to Hydra.

    Returns the arguments as Hydra is to get them: `key=v` that adds a key to an open mapping
    (OPEN_MAPPINGS) becomes `++key=v` (add or set), which Hydra's struct mode would otherwise refuse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from popfair.runtime.cli_help import config_groups

    args = list(args)
    strings = override_strings(args)
    if strings is None:
        return args
    try:
        overrides = OverridesParser.create().parse_overrides(strings)
    except HydraException:
        return args  # a syntax error: Hydra's own message points at the character
    if any(o.key_or_group.startswith("hydra.searchpath") for o in overrides):
        return args
    overrides = [
        o for o in overrides if not (o.key_or_group == "hydra" or o.key_or_group.startswith(("hydra.", "hydra/")))
    ]
    groups = config_groups(conf_dir)
    group_overrides, key_overrides = [], []
    for override in overrides:
        group = override.key_or_group
        if group not in groups:
            key_overrides.append(override)
            continue
        group_overrides.append(override)
        for value in _values(override):
            if value is not None and str(value) not in groups[group]:
                raise ConfigError(
                    f"{group}={value}: no such option in group {group}{_closest(str(value), groups[group])} "
                    f"(options: {', '.join(groups[group])})"
                )
    multirun = _multirun(args, group_overrides, conf_dir)
    for override in overrides:
        _check_plain(override, multirun, override.key_or_group in groups)
    if not key_overrides or _in_primary(key_overrides, conf_dir, config_name):
        return args
    config = _compose(conf_dir, config_name, [s for s in (_first(o) for o in group_overrides) if s])
    if config is None:
        return args
    paths = sorted({p for p in _paths(config) if "._" not in p and not p.startswith("_")} | set(groups))
    deleted: set[str] = set()
    added: dict[str, str] = {}  # `key=v` adding to an open mapping -> `++key=v`
    for override in key_overrides:
        key = override.key_or_group
        exists = _has(config, key) and key not in deleted
        if override.is_delete():
            if not exists:
                raise ConfigError(f"~{key}: there is no key {key} to delete{_closest(key, paths)}")
            deleted.add(key)
        elif override.is_add() and not override.is_force_add():
            if not exists:
                _check_added(key, config, paths, conf_dir)
        elif override.is_force_add():
            if not exists:
                _check_added(key, config, paths, conf_dir)
        elif not exists and open_mapping(key, config) is not None:
            added[str(override.input_line)] = f"++{override.input_line}"
        elif exists and _merges_new_keys(override, key, config):
            added[str(override.input_line)] = f"++{override.input_line}"
        elif not exists:
            top = key.split(".", 1)[0]
            owners = _options_with_key(key, conf_dir) if top in groups and top in config else []
            if owners:
                raise ConfigError(_belongs_to(key, owners))
            hint = (
                f"; the {top} group is not selected here (choose one: {top}={'|'.join(groups[top])})"
                if top in groups and top not in config
                else _closest(key, paths)
            )
            raise ConfigError(f"{key}: no such config key{hint} (run `popfair --cfg job` to list the keys)")
        if key.endswith(".route") or key == "route":
            _check_route(key, _values(override), config)
    return [added.get(arg, arg) for arg in args]


URL_KEYS = ("base_url", "url", "endpoint_url")  # a screener's settings that take an http(s) URL (table.url: a database)


def _multirun(args: Sequence[str], group_overrides: Sequence[Any], conf_dir: Path) -> bool:
    """Whether Hydra runs these arguments as a sweep: -m, hydra.mode=MULTIRUN, or a chosen option
    that sets it (the sweep presets: experiment=popresume_grid)."""
    if any(a in ("-m", "--multirun") or a.replace(" ", "") == "hydra.mode=MULTIRUN" for a in args):
        return True
    for override in group_overrides:
        for value in _values(override):
            path = conf_dir / override.key_or_group / f"{value}.yaml"
            try:
                if "MULTIRUN" in path.read_text():
                    return True
            except OSError:
                continue
    return False


def _check_plain(override: Any, multirun: bool, group: bool = False) -> None:
    """What one override says on its own: a comma list (a sweep) needs -m, where Hydra's own answer is
    six lines ending "Ambiguous value"; a URL setting needs its scheme, where the build would refuse it
    only after the config is composed (tens of seconds at load)."""
    key = override.key_or_group
    if override.is_sweep_override() and not multirun:
        value = "" if group else f"; for one value that is a list write {key}=[...]"
        raise ConfigError(
            f"{override.input_line}: a comma list is a sweep, one case per value: add -m "
            f"(-m {override.input_line}){value}"
        )
    if key == "seed" and not override.is_delete():
        for value in _values(override):
            whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            if not (whole or (isinstance(value, str) and value.isdigit())):  # a sweep's values come as text
                raise ConfigError(f"seed={value}: must be an integer >= 0 (numpy's generators take no negative seed)")
    if key.startswith("screener.") and key.rsplit(".", 1)[-1] in URL_KEYS and not override.is_delete():
        for value in _values(override):
            if isinstance(value, str) and value and not value.startswith(("http://", "https://", "${")):
                raise ConfigError(f"{key}={value}: must be an http(s) URL; did you mean {key}=http://{value}?")


def integer_literals(args: Sequence[str]) -> list[str]:
    """`population.n=1e3` as `population.n=1000`: Hydra reads an exponent as a float, which an integer
    setting refuses ("must be an integer, got 1000.0"). A number written with an exponent whose value
    is a whole number below 10**15 is given as that integer (a float setting takes an integer too)."""
    import re

    number = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)[eE][+-]?\d+$")

    def whole(text: str) -> str:
        if not number.match(text):
            return text
        value = float(text)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else text

    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep and not arg.startswith("-") and value:
            value = ",".join(whole(part) for part in value.split(","))
        out.append(f"{key}{sep}{value}")
    return out


def _in_primary(overrides: Sequence[Any], conf_dir: Path, config_name: str) -> bool:
    """Whether every key override simply sets a key of the primary config file itself (`dry_run=true`,
    `seed=1`): every composed config has those keys (composition adds and replaces keys, never drops
    one), so there is nothing to check, and no config to compose for it (a third of a second)."""
    if any(
        o.is_delete() or o.is_add() or o.is_force_add() or o.key_or_group.split(".")[-1] == "route" for o in overrides
    ):
        return False
    try:
        from omegaconf import OmegaConf

        primary = OmegaConf.load(conf_dir / f"{config_name}.yaml")
    except Exception:  # noqa: BLE001 - unreadable here: the full check composes, and Hydra says why
        return False
    return all(o.key_or_group.split(".")[0] != "defaults" and _has(primary, o.key_or_group) for o in overrides)


def _has(config: Any, key: str) -> bool:
    """Whether the composed config has the key path (a `???` value counts: it is there to be set)."""
    from omegaconf import DictConfig, ListConfig

    node = config
    for part in key.split("."):
        child: Any
        if isinstance(node, DictConfig):
            child = node._get_node(part) if part in node.keys() else None
        elif isinstance(node, ListConfig) and part.isdigit():
            child = node._get_node(int(part)) if int(part) < len(node) else None
        else:
            return False
        if child is None:
            return False
        node = child
    return True


def _compose(conf_dir: Path, config_name: str, overrides: list[str]) -> Any:
    """The config the group overrides choose (None when it cannot be composed: Hydra then says why)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    was = GlobalHydra.instance().is_initialized()
    if was:
        return None  # inside a running Hydra app (a test's compose): nothing to check against safely
    try:
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            return compose(config_name, overrides=overrides)
    except Exception:  # noqa: BLE001 - Hydra's own run reports what is wrong with the groups
        return None
    finally:
        GlobalHydra.instance().clear()


def check_command_line(args: Sequence[str], conf_dir: Path, program: str) -> list[str]:
    """check_overrides (the arguments for Hydra returned), its error printed as one line
    `<program>: ...` on standard error, exit 2."""
    import sys

    try:
        return check_overrides(integer_literals(args), conf_dir)
    except ConfigError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
