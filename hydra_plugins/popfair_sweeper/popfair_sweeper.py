"""`hydra/sweeper=popfair` (the default in conf/config.yaml): Hydra's basic sweeper, composing each
case once and running popfair's pre-flight checks over every case before the first is launched.

BasicSweeper composes every case of a batch to validate it before launching any (a bad override
fails the sweep before money is spent), then the launcher composes each case again to run it: on a
120-case grid the second pass costs as much as the first. Here the validation pass keeps each
composed config and the launcher, in this process, takes it instead of composing again. Grids,
batches, `hydra.sweeper.params` and every launcher behave as with the basic sweeper; a launcher
that composes in another process (joblib workers, SLURM jobs) composes there as before.

Composing itself is mostly reading and parsing the same YAML files again for every case; the
repository keeps each parsed file for the sweep (`MemoConfigRepository`) and the loader copies one
only where Hydra would take its nodes as they are (`MemoConfigLoader`: Hydra copies every config it
places under a package), and, in a dry run planned in this process, merges Hydra's own configs and
the primary config once for all cases (a real run's launcher may pickle the config: it composes as
Hydra does).
In such a dry run, a group config placed under its package is copied into it once and unpickled for
each case, and Hydra's map of known choices is built only for defaults lists with an interpolated
entry (`_interpolation_map_if_needed`).
A large batch is composed on both cores: a forked worker and the sweep's process each take the next
case nobody has taken, and the worker sends its configs back pickled (a twentieth of the cost of
composing one); in a dry run planned in process each process also prepares the cases it composed
(popfair.sweep.in_process.prepare_case)."""

from __future__ import annotations

import copy
import functools
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

from hydra._internal import defaults_list as hydra_defaults_list
from hydra._internal import hydra as hydra_internal_hydra
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository, IConfigRepository
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.core.default_element import ResultDefault
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig, OmegaConf, flag_override
from omegaconf.errors import OmegaConfBaseException

from popfair.runtime.parallel import forked_call

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


# Hydra's own function, kept on Hydra's module: this module may be executed again (Hydra's plugin scan)
# after the sweeper put `_interpolation_map_if_needed` in its place
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


FORKED_BATCH = 16  # batches from this size compose on two cores (a fork costs a few cases' composition)


def _next_case(counter: Any) -> int:
    """The next case nobody has taken yet (the shared counter of `compose_all`), taken."""
    with counter.get_lock():
        taken = counter.value
        counter.value += 1
    return taken


def _compose_taken(
    loader: ConfigLoader, master_config: DictConfig, batch: list[list[str]], counter: Any, first_job: int | None
) -> dict[int, Any]:
    """In a forked worker: the cases it takes from `counter` (beside the parent, which takes the
    others), each composed, until none is left or one fails (None: the parent composes it again and
    raises Hydra's error). With `first_job` (a dry run planned in process), each case also prepared
    here as the parent would prepare it as job `first_job + i` (popfair.sweep.in_process.prepare_in_worker)."""
    composed: dict[int, Any] = {}
    while (i := _next_case(counter)) < len(batch):
        try:
            config = loader.load_sweep_config(master_config, batch[i])
        except Exception:  # noqa: BLE001 - raised by the parent
            composed[i] = None
            break
        if first_job is not None:
            from popfair.sweep.in_process import prepare_in_worker

            config = prepare_in_worker(config, first_job + i)
        composed[i] = config
    return composed


class ComposeOnceLoader(ConfigLoader):
    """Hydra's config loader, handing out each validated case's composed config once."""

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self.composed: dict[tuple[str, ...], DictConfig] = {}
        self.prepared: dict[int, Any] = {}  # composed config (by identity) -> what the worker prepared of it

    def compose(self, master_config: DictConfig, overrides: Sequence[str]) -> None:
        self.composed[tuple(overrides)] = self.loader.load_sweep_config(master_config, list(overrides))

    def compose_all(
        self, master_config: DictConfig, batch: Sequence[Sequence[str]], first_job: int | None = None
    ) -> None:
        """Compose every case of a batch; from `FORKED_BATCH` cases on, on both cores: after this
        process composed the first case (the worker inherits the parsed files), a forked worker and
        this process each take the next case nobody has taken (a shared counter), so both finish
        together whatever each also does. This process first imports what the pre-flight checks
        build the cases with, which it would otherwise import alone after composing. A case that
        failed is composed here, in order, so the first failing case's error is raised exactly as
        Hydra raises it. With `first_job` (the batch's first job number, in a dry run planned in
        process) each process also prepares the cases it composed (`self.prepared`)."""
        self.prepared.clear()
        if not batch:
            return
        from popfair.case.compose import memoise_interpolation_parsing

        memoise_interpolation_parsing()  # before the fork: the worker resolves the same strings
        self.compose(master_config, batch[0])
        if len(batch) < FORKED_BATCH:
            for overrides in batch[1:]:
                self.compose(master_config, overrides)
            return
        cases = [list(overrides) for overrides in batch]
        counter = multiprocessing.get_context("fork").Value("i", 1)  # case 0 is composed
        pending = forked_call(_compose_taken, self.loader, master_config, cases, counter, first_job)
        from popfair.sweep.in_process import warm_up

        warm_up(self.composed[tuple(batch[0])])  # the checks' and the plans' imports, beside the worker

        mine, failed = [0], False
        while not failed and (i := _next_case(counter)) < len(cases):
            try:
                self.compose(master_config, cases[i])
                mine.append(i)
            except Exception:  # noqa: BLE001 - composed again below, in order, to raise Hydra's error
                failed = True
            if first_job is not None and not failed:
                self._prepare_here(batch, [i], first_job)
        if first_job is not None:
            self._prepare_here(batch, [0], first_job)
        theirs = pending()
        for i, overrides in enumerate(cases):
            config = theirs.get(i)
            if i in mine:
                continue
            if config is None:  # not composed, or failed: compose here (raising Hydra's error)
                self.compose(master_config, overrides)
                if first_job is not None:
                    self._prepare_here(batch, [i], first_job)
            elif isinstance(config, DictConfig):
                self.composed[tuple(overrides)] = config
            else:  # (the numbered case, pickled; its resolved task view)
                numbered = pickle.loads(config[0])
                self.composed[tuple(overrides)] = numbered
                self.prepared[id(numbered)] = (numbered, config[1])
        self.composed = {tuple(overrides): self.composed[tuple(overrides)] for overrides in cases}  # in order

    def _prepare_here(self, batch: Sequence[Sequence[str]], cases: Any, first_job: int) -> None:
        """`prepare_case` of cases composed in this process (popfair.sweep.in_process)."""
        from popfair.sweep.in_process import prepare_case

        for i in cases:
            config = self.composed[tuple(batch[i])]
            if config.get("dry_run", False):
                self.prepared[id(config)] = (config, prepare_case(config, first_job + i))

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        ready = self.composed.pop(tuple(sweep_overrides), None)
        return ready if ready is not None else self.loader.load_sweep_config(master_config, sweep_overrides)

    def __getstate__(self) -> dict[str, Any]:  # a launcher pickled to workers composes there
        return {"loader": self.loader, "composed": {}}

    # the rest of the interface, delegated
    def load_configuration(
        self,
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        return self.loader.load_configuration(config_name, overrides, run_mode, from_shell, validate_sweep_overrides)

    def get_search_path(self) -> Any:
        return self.loader.get_search_path()

    def get_sources(self) -> Any:
        return self.loader.get_sources()

    def list_groups(self, parent_name: str) -> list[str]:
        return self.loader.list_groups(parent_name)

    def get_group_options(
        self,
        group_name: str,
        results_filter: ObjectType | None = ObjectType.CONFIG,
        config_name: str | None = None,
        overrides: list[str] | None = None,
    ) -> list[str]:
        return self.loader.get_group_options(group_name, results_filter, config_name, overrides)

    def compute_defaults_list(self, config_name: str | None, overrides: list[str], run_mode: RunMode) -> Any:
        return self.loader.compute_defaults_list(config_name, overrides, run_mode)


class PopfairSweeper(BasicSweeper):
    """BasicSweeper whose validation pass composes each case for the launcher too, then checks them all.
    A dry run under the basic launcher plans its cases in this process (popfair.sweep.in_process)
    unless `plan_in_process` is false."""

    checked = 0  # cases already through the pre-flight checks: the next batch's first job number
    planner: Any = None  # popfair.sweep.in_process.InProcessPlanner, for a dry run planned here

    def __init__(self, max_batch_size: int | None, params: dict[str, str] | None = None, plan_in_process: bool = True):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.plan_in_process = plan_in_process

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        loader = hydra_context.config_loader
        self.compose_once = ComposeOnceLoader(loader)
        context = HydraContext(config_loader=self.compose_once, callbacks=hydra_context.callbacks)
        super().setup(hydra_context=context, task_function=task_function, config=config)
        from popfair.sweep.in_process import InProcessPlanner, plans_here

        here = plans_here(config, self.launcher, self.plan_in_process)
        # Only a sweep planned in this process merges the shared start once (MemoConfigLoader): its
        # pickled merge can hold a structured launcher config (submitit's LocalQueueConf) whose class
        # is no longer the one its module holds, which a launcher that pickles the config then refuses.
        if here and type(loader) in (ConfigLoaderImpl, PopfairConfigLoader):
            loader.__class__ = MemoConfigLoader  # the same loader, merging the shared start once
            hydra_defaults_list._create_interpolation_map = _interpolation_map_if_needed
        if isinstance(loader, ConfigLoaderImpl) and type(loader.repository) in (ConfigRepository, MemoConfigRepository):
            share = type(loader) is MemoConfigLoader  # which copies what Hydra would take as it is
            loader.repository = MemoConfigRepository(config_search_path=loader.config_search_path, share=share)
        if here:
            self.planner = self.launcher = InProcessPlanner(self.launcher)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Compose every case of the batch (Hydra's validation, kept for the launcher), then popfair's
        pre-flight checks over all of them before the first is launched (popfair.sweep.doctor.before_sweep)."""
        from popfair.sweep.doctor import before_sweep

        assert self.config is not None
        self.compose_once.composed.clear()  # a launcher composing elsewhere left the last batch's
        self.compose_once.compose_all(self.config, batch, self.checked if self.planner is not None else None)
        configs = [self.compose_once.composed[tuple(o)] for o in batch]
        if self.planner is not None:  # one task view and one resolved copy per case, for checks and plan
            from popfair.sweep.in_process import prepare

            prepare(configs, self.checked, self.compose_once.prepared)
        before_sweep(self.config, configs, self.checked)
        self.checked += len(batch)
