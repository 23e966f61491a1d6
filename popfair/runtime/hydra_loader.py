"""Hydra's composition, faster, for every Hydra config loader `python -m popfair` creates (Hydra's own
results, node for node: tests/test_sweeper_plugin.py). Composing is mostly parsing the same YAML files
and merging the same configs again:

- `MemoConfigRepository` parses each config file once per process (kept by modification time);
- `PopfairConfigLoader` composes once where Hydra composes twice (`Hydra.get_mode`, then the run or
  sweep), installed for the whole process by `install_config_loader`;
- `MemoConfigLoader`, for a sweep planned in this process (hydra_plugins/popfair_sweeper), merges
  Hydra's own configs and the primary config once for all cases and copies a parsed config only
  where Hydra would take its nodes as they are; `_interpolation_map_if_needed` builds Hydra's map of
  known choices only for defaults lists with an interpolated entry.

Here and not in the sweeper plugin's module: Hydra's plugin scan executes that module again, which
would make a second set of these classes (and of their memos) beside the one already in use."""

from __future__ import annotations

import copy
import functools
import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

from hydra._internal import defaults_list as hydra_defaults_list
from hydra._internal import hydra as hydra_internal_hydra
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository, IConfigRepository
from hydra.core.default_element import ResultDefault
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, flag_override
from omegaconf.errors import OmegaConfBaseException

_PARSED: dict[tuple[Any, ...], ConfigResult | None] = {}  # (config sources, config path) -> parsed file


class MemoConfigRepository(ConfigRepository):
    """Hydra's config repository, parsing each config file once per process. Every load hands out a
    deep copy (a tenth of the cost of parsing): composition may modify what it is given. With
    `share` (under `MemoConfigLoader`) a load hands out the parsed config itself, and the loader
    copies it where Hydra would take its nodes as they are (see `MemoConfigLoader._load_single_config`)."""

    def __init__(self, config_search_path: Any, share: bool = False) -> None:
        super().__init__(config_search_path=config_search_path)
        self.share = share

    def load_config(self, config_path: str) -> ConfigResult | None:
        key = (tuple((source.provider, source.path) for source in self.sources), config_path, self._stamp(config_path))
        if key not in _PARSED:
            _PARSED[key] = super().load_config(config_path)
        parsed = _PARSED[key]
        if not self.share or parsed is None:
            return copy.deepcopy(parsed)
        loaded = copy.copy(parsed)  # the parsed config itself; its header and defaults list copied
        loaded.header, loaded.defaults_list = dict(parsed.header), copy.deepcopy(parsed.defaults_list)
        loaded.shared_config = parsed.config  # type: ignore[attr-defined]  # copied before Hydra takes its nodes
        return loaded

    def _stamp(self, config_path: str) -> tuple[tuple[int, int], ...]:
        """The modification time and size of the file each folder source holds under `config_path`: a
        file edited while the process lives (a notebook, a test) is parsed again."""
        name = ConfigSource._normalize_file_name(filename=config_path)
        stamps = []
        for source in self.sources:
            if source.scheme() == "file":
                try:
                    found = os.stat(os.path.join(source.path.split("://", 1)[-1], name))
                except OSError:
                    continue
                stamps.append((found.st_mtime_ns, found.st_size))
        return tuple(stamps)

    def __deepcopy__(self, memo: dict[int, Any]) -> MemoConfigRepository:
        """Hydra deep-copies the repository for every case it composes (`CachingConfigRepository`), so
        that re-initialising the copy's sources (a primary config's `hydra.searchpath`) leaves this one
        as it is. A copy with its own list of sources does the same (`initialize_sources` builds a new
        list; loading reads a source, never changes it), without copying every source."""
        twin = copy.copy(self)
        twin.sources = list(self.sources)
        return twin


class PopfairConfigLoader(ConfigLoaderImpl):
    """Hydra's config loader for every Hydra this process creates once `install_config_loader` ran:
    each config file parsed once (MemoConfigRepository), and the whole config composed once where
    Hydra composes it twice. `Hydra.get_mode` composes it (as for a sweep: sweep overrides not
    checked, a missing default skipped) only to read `hydra.mode`, and the run or sweep then composes
    it again from the same overrides, at most with `hydra.mode=RUN|MULTIRUN` added. That second
    composition is the first config itself, its overrides checked for the mode and the added one
    applied and recorded as Hydra applies and records it; a config with a skipped default (an error
    for a run) is composed again, as Hydra does."""

    _mode_check: tuple[str | None, list[str], bool, DictConfig] | None = None  # get_mode's composition

    def __init__(self, config_search_path: Any) -> None:
        super().__init__(config_search_path=config_search_path)
        self.repository = MemoConfigRepository(config_search_path=config_search_path)

    def load_configuration(
        self,
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        kept, self._mode_check = self._mode_check, None  # handed on once, to the next composition only
        if kept is not None and (cfg := self._reused(kept, config_name, overrides, run_mode, from_shell)) is not None:
            return cfg
        cfg = super().load_configuration(config_name, overrides, run_mode, from_shell, validate_sweep_overrides)
        if run_mode == RunMode.MULTIRUN and not validate_sweep_overrides:  # Hydra.get_mode's, read and dropped
            self._mode_check = (config_name, list(overrides), from_shell, cfg)
        return cfg

    def _reused(
        self,
        kept: tuple[str | None, list[str], bool, DictConfig],
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool,
    ) -> DictConfig | None:
        name, checked, shell, cfg = kept
        added = overrides[len(checked) :]
        if (name, shell, overrides[: len(checked)]) != (config_name, from_shell, checked):
            return None
        if added not in ([], [f"hydra.mode={run_mode.name}"]):
            return None
        choices = cfg.hydra.runtime.choices
        if run_mode == RunMode.RUN and any(OmegaConf.is_missing(choices, group) for group in choices):
            return None
        parsed = OverridesParser.create().parse_overrides(overrides=overrides)
        try:
            self.validate_sweep_overrides_legal(overrides=parsed, run_mode=run_mode, from_shell=from_shell)
            if added:
                self._apply_overrides_to_config(parsed[-1:], cfg)
                cfg.hydra.overrides.hydra.append(parsed[-1].input_line)
        except OmegaConfBaseException as e:
            raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e
        return cfg


def install_config_loader() -> None:
    """Every Hydra this process creates from now on composes with PopfairConfigLoader. One
    `python -m popfair` composes its config three times: popfair's check of the command line
    (popfair.runtime.overrides), `Hydra.get_mode` and the run or sweep itself; with it the twenty-odd
    files are parsed once and the last two compositions are one. Hydra creates its loader with no
    hook before the first composition, so its module's name for the loader class is pointed here."""
    hydra_internal_hydra.ConfigLoaderImpl = PopfairConfigLoader  # type: ignore[misc]


class MemoConfigLoader(PopfairConfigLoader):
    """Hydra's config loader, merging the start of every case's defaults list once per process: Hydra's
    own configs (hydra/*) and the primary config, the same for every case of a sweep, are about a
    third of composing a case. That merge is kept pickled, and each case goes on from a fresh copy of
    it with its own entries: the same merges, in the same order, as
    `ConfigLoaderImpl._compose_config_from_defaults_list` (its loop, from the first entry after the
    primary config)."""

    def _compose_config_from_defaults_list(self, defaults: list[ResultDefault], repo: IConfigRepository) -> DictConfig:
        shared = next((i + 1 for i, default in enumerate(defaults) if default.primary), 0)
        if not shared:
            return super()._compose_config_from_defaults_list(defaults, repo)
        key = (
            tuple((source.provider, source.path) for source in repo.get_sources()),
            tuple((d.config_path, d.package, d.parent, d.is_self, d.primary) for d in defaults[:shared]),
        )
        if key not in _MERGED:
            _MERGED[key] = pickle.dumps(self._merged(OmegaConf.create, defaults[:shared], repo))
        cfg = self._merged(functools.partial(pickle.loads, _MERGED[key]), defaults[shared:], repo)
        _strip_defaults(cfg)
        return cfg

    def _load_single_config(self, default: ResultDefault, repo: IConfigRepository) -> ConfigResult:
        """Hydra's, on a private copy of a shared parsed config (`MemoConfigRepository(share=True)`)
        wherever Hydra takes the loaded config's nodes into the composed config as they are: the primary
        config and a config merged at the top level (package `_global_`). Any other config Hydra places
        under its package, which copies it; the defaults list reads it without changing it."""
        loaded = repo.load_config(config_path=str(default.config_path))
        if loaded is not None and loaded.config is getattr(loaded, "shared_config", None):
            package = default.package if default.package is not None else loaded.header.get("package")
            if default.primary or not package:
                loaded.config = copy.deepcopy(loaded.config)
            elif not _has_schema(repo, str(default.config_path)):
                # placed under its package: the same copy for every case, made once and kept pickled
                # (unpickling it is a fraction of Hydra's copy into a new package node)
                key = (tuple((s.provider, s.path) for s in repo.get_sources()), default.config_path, package)
                if key not in _EMBEDDED:
                    _EMBEDDED[key] = pickle.dumps(super()._load_single_config(default, repo).config)
                embedded = copy.copy(loaded)
                embedded.config = pickle.loads(_EMBEDDED[key])
                return embedded
        return super()._load_single_config(default, repo)

    def _merged(
        self, start: Callable[[], DictConfig], defaults: list[ResultDefault], repo: IConfigRepository
    ) -> DictConfig:
        """Hydra's merge loop: each entry loaded and merged onto a new `start()`, in order, here in one
        `merge_with` call, as `OmegaConf.merge` merges several configs: OmegaConf re-links the whole
        tree's parents after each call, and once per case instead of once per entry saves a third of
        composing it. Where the merge fails, it is redone entry by entry, as Hydra merges, onto a new
        `start()`, so the error names the entry as Hydra's does."""
        loaded = [self._load_single_config(default=default, repo=repo).config for default in defaults]
        cfg = start()
        try:
            with flag_override(cfg, "no_deepcopy_set_nodes", True):
                cfg.merge_with(*loaded)
            return cfg
        except OmegaConfBaseException:
            pass
        cfg = start()
        with flag_override(cfg, "no_deepcopy_set_nodes", True):
            for default in defaults:
                config = self._load_single_config(default=default, repo=repo).config
                try:
                    cfg.merge_with(config)
                except OmegaConfBaseException as e:
                    raise ConfigCompositionException(  # noqa: B904 - chained as Hydra chains it
                        f"In '{default.config_path}': {type(e).__name__} raised while composing config:\n{e}"
                    ).with_traceback(sys.exc_info()[2])
        return cfg


_MERGED: dict[tuple[Any, ...], bytes] = {}  # (config sources, defaults up to the primary config) -> merged
_EMBEDDED: dict[tuple[Any, ...], bytes] = {}  # (config sources, config path, package) -> the config placed under it


def _has_schema(repo: IConfigRepository, config_path: str) -> bool:
    """Whether Hydra would validate the config against a ConfigStore schema of the same name (then it
    is loaded as Hydra loads it, with Hydra's deprecation warning each time)."""
    try:
        return repo.get_schema_source().load_config(ConfigSource._normalize_file_name(filename=config_path)) is not None
    except ConfigLoadError:
        return False


# Hydra's own function, kept on Hydra's module: a module executed again would find
# `_interpolation_map_if_needed` in its place
_INTERPOLATION_MAP = getattr(
    hydra_defaults_list, "popfair_original_interpolation_map", hydra_defaults_list._create_interpolation_map
)
hydra_defaults_list.popfair_original_interpolation_map = _INTERPOLATION_MAP  # type: ignore[attr-defined]
_UNUSED_MAP = OmegaConf.create()  # handed out where no entry is an interpolation: nothing reads it


def _interpolation_map_if_needed(overrides: Any, defaults_list: list[Any], self_added: bool) -> DictConfig:
    """Hydra's map of known choices for the interpolated entries of a defaults list (`${group}`), built
    only where the list has one: Hydra builds it for every node of every case's defaults tree (a new
    DictConfig of every choice so far), and reads it only to resolve those entries. An entry that is
    not an interpolation here is none later (Hydra refuses `${` in option lists)."""
    if any(not d.is_override() and d.is_interpolation() for d in defaults_list):
        return _INTERPOLATION_MAP(overrides, defaults_list, self_added)
    return _UNUSED_MAP


def _strip_defaults(cfg: Any) -> None:
    """What is left of defaults lists removed from every node (Hydra's `strip_defaults`)."""
    if isinstance(cfg, DictConfig):
        if cfg._is_missing() or cfg._is_none():
            return
        with flag_override(cfg, ["readonly", "struct"], False):
            if cfg._get_flag("HYDRA_REMOVE_TOP_LEVEL_DEFAULTS"):
                cfg._set_flag("HYDRA_REMOVE_TOP_LEVEL_DEFAULTS", None)
                cfg.pop("defaults", None)
        for _key, value in cfg.items_ex(resolve=False):
            _strip_defaults(value)
