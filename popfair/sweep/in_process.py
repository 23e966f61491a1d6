"""A dry-run sweep planned in the sweep's own process: each case run as Hydra's basic launcher runs it,
without the per-case copies and files that only a real run needs.

Hydra's `run_job` copies every composed case twice (the task config and the Hydra config), makes a
masked copy for `HydraConfig` twice, and writes the case's `.hydra/` folder (config.yaml, hydra.yaml,
overrides.yaml): on the 120-case grid that is a quarter of the dry run, for cases that only plan.
Here a case's task config is a view of its composed config (the same nodes, without `hydra`),
`HydraConfig` holds the composed config itself, and `.hydra/` is not written. Everything else is
Hydra's: the same composed config (the sweeper's, composed once), the "#N : overrides" lines, the
case's folder and log file, `hydra.job.chdir`, `hydra.job.env_set`, the job callbacks, the job's
return. The pre-flight checks and the case share one view and one resolved copy of each case
(`prepare`), so a case is resolved once, not once for the checks and again to build it.

`hydra.sweeper.plan_in_process=false` plans through Hydra's launcher, as a real run launches."""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import (
    JobReturn,
    JobRuntime,
    JobStatus,
    _flush_loggers,
    configure_log,
    env_override,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

# Hydra's basic launcher's logger: its lines ("Launching N jobs locally", "#N : ...") read the same
log = logging.getLogger("hydra._internal.core_plugins.basic_launcher")

BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"

# composed config (by identity) -> (that config, its task view, the view resolved or None)
_PREPARED: dict[int, tuple[DictConfig, DictConfig, dict[Any, Any] | None]] = {}
_NUMBERED: dict[int, int] = {}  # composed config (by identity) -> the job number its output_dir was set for


def plans_here(config: DictConfig, launcher: Any, enabled: bool) -> bool:
    """Whether a sweep's cases are planned in this process: a dry run (not `popfair doctor`) under
    Hydra's basic launcher, which runs the cases in this process anyway, unless switched off."""
    kind = f"{type(launcher).__module__}.{type(launcher).__qualname__}"
    return bool(enabled and config.get("dry_run", False) and not config.get("check", False) and kind == BASIC_LAUNCHER)


def task_view(config: DictConfig) -> DictConfig:
    """The config a case's task sees, sharing the composed config's nodes: everything but `hydra`,
    with the composed config's flags and resolver cache (Hydra's `run_job` makes the same config as a
    deep copy). The nodes belong to the view from now on; the `hydra` node keeps the composed
    config as its parent, so its interpolations into the case's settings still resolve."""
    content = {key: config._get_node(key) for key in config if key != "hydra"}
    view = DictConfig(content=content, flags={"no_deepcopy_set_nodes": True})
    view._set_flag("no_deepcopy_set_nodes", None)
    for flag in ("struct", "readonly"):
        view._set_flag(flag, config._get_node_flag(flag))
    OmegaConf.copy_cache(from_config=config, to_config=view)
    return view


def prepare(configs: Sequence[DictConfig], first_job: int, ready: Mapping[int, Any] | None = None) -> None:
    """Before the pre-flight checks of a batch planned here: each case numbered as the launcher
    numbers it, and its task view and one resolved copy, resolved as the case itself resolves
    (`HydraConfig` holding the case, `hydra.job.env_set` applied), which the checks read and the
    case then takes (`task_of`, `resolved_of`). `ready`: cases prepared already while the batch was
    composed (`prepare_case`, `prepare_in_worker`), by identity -> (the case, what was prepared)."""
    _PREPARED.clear()
    _NUMBERED.clear()
    for job, config in enumerate(configs, start=first_job):
        if not config.get("dry_run", False):  # a case that runs (dry_run swept): Hydra's run_job runs it
            continue
        done = (ready or {}).get(id(config))
        if done is None or done[0] is not config or done[1][0] != job:
            done = (config, prepare_case(config, job))
        _, (_, view, values) = done
        _PREPARED[id(config)] = (config, view if view is not None else task_view(config), values)
        _NUMBERED[id(config)] = job


def warm_up(config: DictConfig) -> None:
    """What a sweep's cases build with, imported while a forked worker composes the batch (the
    sweeper's `compose_all`): the case's modules and its design's power line (its `power_imports`: a
    population case's t test imports statsmodels and scipy.stats, a paired case's McNemar neither),
    read from `config`, the batch's first case."""
    from importlib import import_module

    import popfair.case.population  # noqa: F401 - the pre-flight checks' import
    from popfair.design import design_named
    from popfair.population.base import design_name

    if not OmegaConf.select(config, "plan.enabled", default=True):
        return
    try:
        from hydra.utils import get_class

        design = design_name(get_class(str(OmegaConf.select(config, "population._target_"))))
    except Exception:  # noqa: BLE001 - an unknown population: its case reports it, nothing to warm
        return
    for module in design_named(design).power_imports:
        import_module(module)


def prepare_case(config: DictConfig, job: int) -> tuple[int, DictConfig, dict[Any, Any] | None]:
    """One case of a dry run planned here, numbered as job `job`: (job, its task view, the view
    resolved as the case itself resolves it)."""
    from popfair.case.compose import resolved

    hydra_config = HydraConfig.instance()
    previous = hydra_config.cfg
    try:
        hydra_config.cfg = config  # type: ignore[assignment]
        _number(config, job)
        view = task_view(config)
        with env_override(config.hydra.job.env_set):
            return job, view, resolved(view)
    finally:
        hydra_config.cfg = previous


def prepare_in_worker(config: DictConfig, job: int) -> Any:
    """In the forked worker that composes part of a batch (the sweeper's `compose_all`):
    `prepare_case` beside the parent's. The case numbered, pickled as numbered, then its task view
    resolved; the parent takes both (its own view of its own copy: a view takes the case's nodes).
    A case that runs (`dry_run` swept) is returned as composed."""
    if not config.get("dry_run", False):
        return config
    _number(config, job)
    numbered = pickle.dumps(config)
    _, _, values = prepare_case(config, job)
    return numbered, (job, None, values)


def _number(config: DictConfig, job: int) -> None:
    """The case's job number and its folder, set as the launcher and `run_job` set them."""
    with open_dict(config):
        config.hydra.job.id = job
        config.hydra.job.num = job
    _output_dir(config)
    _NUMBERED[id(config)] = job


def _output_dir(config: DictConfig) -> None:
    """`hydra.runtime.output_dir` of a numbered case, as `run_job` sets it."""
    output_dir = os.path.join(
        str(OmegaConf.select(config, "hydra.sweep.dir")), str(OmegaConf.select(config, "hydra.sweep.subdir"))
    )
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = os.path.abspath(output_dir)


def task_of(config: DictConfig) -> DictConfig | None:
    """The prepared task view of a composed case, if `prepare` made one."""
    entry = _PREPARED.get(id(config))
    return entry[1] if entry is not None and entry[0] is config else None


def resolved_of(task: DictConfig) -> dict[Any, Any] | None:
    """The prepared resolved copy of a task view (None: not prepared, or an interpolation is broken)."""
    for _, view, values in _PREPARED.values():
        if view is task:
            return values
    return None


def _chdir(config: DictConfig) -> bool:
    from hydra import version

    chdir = config.hydra.job.chdir
    if chdir is None:
        return not version.base_at_least("1.2")  # run_job's rule (its deprecation warning aside)
    return bool(chdir)


def run_here(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> JobReturn:
    """One composed case run as `hydra.core.utils.run_job` runs it (sweep folder keys), without its
    copies of the config and its `.hydra/` files."""
    callbacks = hydra_context.callbacks
    hydra_config = HydraConfig.instance()
    previous, old_cwd = hydra_config.cfg, os.getcwd()
    OmegaConf.set_readonly(config.hydra, True)
    hydra_config.cfg = config  # type: ignore[assignment]  # HydraConfig.get() is config.hydra, as set_config makes it
    if _NUMBERED.get(id(config)) != config.hydra.job.num:  # else `prepare` set it for this very job number
        _output_dir(config)
    output_dir = str(config.hydra.runtime.output_dir)
    chdir = False
    try:
        task = task_of(config) or task_view(config)
        overrides = OmegaConf.to_container(config.hydra.overrides.task)
        assert isinstance(overrides, list)
        ret = JobReturn(overrides=overrides, cfg=task, hydra_cfg=config)
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        chdir = _chdir(config)
        if chdir:
            os.chdir(output_dir)
        ret.working_dir = os.getcwd()
        configure_log(config.hydra.job_logging, config.hydra.verbose)
        with env_override(config.hydra.job.env_set):
            callbacks.on_job_start(config=config, task_function=task_function)
            try:
                ret.return_value = task_function(task)
                ret.status = JobStatus.COMPLETED
            except Exception as exc:  # noqa: BLE001 - as run_job: the sweeper raises it from the return
                ret.return_value = exc
                ret.status = JobStatus.FAILED
        ret.task_name = JobRuntime.instance().get("name")
        _flush_loggers()
        callbacks.on_job_end(config=config, job_return=ret)
        return ret
    finally:
        _PREPARED.pop(id(config), None)
        _NUMBERED.pop(id(config), None)
        hydra_config.cfg = previous
        if chdir:
            os.chdir(old_cwd)


class InProcessPlanner(Launcher):
    """In place of Hydra's basic launcher for a dry run: the same loop (`BasicLauncher.launch`), each
    case through `run_here` (a case whose own config runs it, `dry_run` being swept, through
    Hydra's `run_job`)."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher  # the basic launcher, set up by the sweeper

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.launcher.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        launcher = self.launcher
        assert launcher.config is not None and launcher.hydra_context is not None
        setup_globals()
        configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
        Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        log.info(f"Launching {len(job_overrides)} jobs locally")
        runs = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = idx
                config.hydra.job.num = idx
            if config.get("dry_run", False):
                runs.append(run_here(launcher.hydra_context, launcher.task_function, config))
            else:  # a case that runs (dry_run swept): as Hydra's basic launcher runs it
                runs.append(
                    run_job(
                        hydra_context=launcher.hydra_context,
                        task_function=launcher.task_function,
                        config=config,
                        job_dir_key="hydra.sweep.dir",
                        job_subdir_key="hydra.sweep.subdir",
                    )
                )
            configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
        return runs
