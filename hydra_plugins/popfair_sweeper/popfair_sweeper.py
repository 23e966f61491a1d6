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

import multiprocessing
import pickle
from collections.abc import Sequence
from typing import Any

from hydra._internal import defaults_list as hydra_defaults_list
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_loader import ConfigLoader
from hydra.core.object_type import ObjectType
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig

from popfair.runtime.hydra_loader import (
    MemoConfigLoader,
    MemoConfigRepository,
    PopfairConfigLoader,
    _interpolation_map_if_needed,
)
from popfair.runtime.parallel import forked_call

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
        if here and type(loader) in (ConfigLoaderImpl, PopfairConfigLoader):  # PopfairConfigLoader: python -m popfair's
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
