"""Run one case from the command line: alone, or as one case of a sweep (Hydra multirun).

In a sweep a case never raises: whatever goes wrong is logged, recorded as a FAILED MLflow run
tagged `error` under the sweep's parent run, and written to the sweep's case records, so the other
cases finish and the sweep summary lists it."""

from __future__ import annotations

import copy
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from popfair.case.base import Case, CaseResult, RunContext, RunName
from popfair.core.errors import PopfairError, TrackingFailed
from popfair.runtime.progress import preparing_done
from popfair.sweep.state import ENV_PARENT_RUN_ID, ENV_SWEEP_DIR, CaseRecord, SweepInfo, varying_tags

log = logging.getLogger("popfair")


def current_sweep(hydra_cfg: Any = None) -> SweepInfo | None:
    """The sweep this Hydra job (default: the current one) belongs to (None outside a multirun or
    without the callback)."""
    hydra_cfg = hydra_cfg if hydra_cfg is not None else HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    sweep_dir = os.environ.get(ENV_SWEEP_DIR) or str(Path(hydra_cfg.runtime.cwd) / hydra_cfg.sweep.dir)
    info = SweepInfo.read(sweep_dir)
    if info is None and os.environ.get(ENV_PARENT_RUN_ID):
        info = SweepInfo(
            sweep_dir=sweep_dir,
            parent_run_id=os.environ[ENV_PARENT_RUN_ID],
            tracking_uri=None,
            varying={},
            expected_cases=None,
        )
    return info


TABLE_GROUPS = ("table", "estimator", "protected_attr")  # the groups a table audit's case is made of


def case_tags(hydra_cfg: Any, sweep: SweepInfo | None) -> dict[str, str]:
    """The config option chosen per group (what the report groups by: renderer image vs image_photo)
    and, in a sweep, the overrides of this case whose key varies across the sweep."""
    from popfair.case.population import COMPONENT_GROUPS

    choices = hydra_cfg.runtime.choices
    # a table audit screens nothing: its population, occupation, renderer and screener are not its own
    groups = TABLE_GROUPS if choices.get("table") is not None else COMPONENT_GROUPS
    tags = {
        f"choice.{group}": str(option) for group, option in choices.items() if group in groups and option is not None
    }
    tags.update(varying_tags(list(hydra_cfg.overrides.task), sweep.varying) if sweep else {})
    return tags


# overrides that change where and how a case is kept or read, not what it finds: left out of its run name
NOT_IN_RUN_NAME = ("tracking", "cache_dir", "cache_url", "document_store", "dry_run", "check", "run_name",
                   "hydra", "audit_report", "table.path")  # fmt: skip
# overrides that change the result but would make the name long: a short hash of them names the run
HASHED_IN_RUN_NAME = ("table.columns", "table.values")


def run_naming(overrides: list[str], groups: set[str], varying: Iterable[str] = ()) -> RunName:
    """What a case's run name shows beside its parts (`popfair.case.base.RunName`): of the overrides
    that set a value rather than a group's option, those a sweep varies (`varying`: its keys) first,
    the others after, and a short hash of those too long to show (`table.columns.*`, `table.values.*`)."""
    import hashlib

    from popfair.sweep.state import key_and_value

    varied = frozenset(k.lstrip("+~") for k in varying)
    front: list[str] = []
    differs: list[str] = []
    hashed: list[str] = []
    for override in overrides:
        key, value = key_and_value(override)
        key = key.lstrip("+~")
        if key in groups or key.split("/")[0] in groups:  # a group's option: among the case's parts already
            continue
        if any(key == k or key.startswith(k + ".") for k in HASHED_IN_RUN_NAME):
            hashed.append(f"{key}={value}")
            continue
        if any(key == k or key.startswith(k + ".") for k in NOT_IN_RUN_NAME):
            continue
        (front if key in varied else differs).append(f"{key}={value}")
    digest = hashlib.sha256(" ".join(sorted(hashed)).encode()).hexdigest()[:6] if hashed else ""
    return RunName(varied, tuple(front), tuple(differs), digest)


def run_name_for(
    lead: str | list[tuple[str, str]], overrides: list[str], groups: set[str], varying: Iterable[str] = ()
) -> str:
    """The MLflow run name of a case whose parts are `lead` (`Case.name_parts`; a string is used as
    it is) run with `overrides` (config `run_name` null): `run_naming`'s words around them."""
    parts = [("", lead)] if isinstance(lead, str) else lead
    return run_naming(overrides, groups, varying).of(parts)


def run_case(cfg: DictConfig) -> float | None:
    """Run (or, with dry_run=true, plan) the composed case; returns the first effect estimate."""
    from popfair.sweep.in_process import resolved_of
    from popfair.sweep.plan import default_planner

    if cfg.get("check", False):  # popfair doctor for one case (a sweep's cases are checked by the sweeper)
        from popfair.sweep.doctor import doctor_case

        sys.exit(doctor_case(cfg))
    hydra_cfg = HydraConfig.get()
    sweep = current_sweep()
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    overrides = list(hydra_cfg.overrides.task)
    job = int(hydra_cfg.job.num) if in_sweep else 0
    tags = case_tags(hydra_cfg, sweep)
    dry_run = bool(cfg.get("dry_run", False))
    start = time.perf_counter()
    record = CaseRecord(job=job, overrides=overrides, status="running", tags=tags)
    case: Case | None = None
    alert = False  # a watch's look crossed its boundary: exit status 3 (popfair.case.table_watch)
    groups = {part for key in hydra_cfg.runtime.choices for part in str(key).split("@")}  # estimator@outcome_audit
    varying = [k for k, v in sweep.varying.items() if len(v) > 1] if sweep else []
    context = RunContext(sweep.parent_run_id if sweep else None, tags, run_naming(overrides, groups, varying))
    try:
        case = case_from_config(cfg, dry_run=dry_run, values=resolved_of(cfg), context=context)
        preparing_done()  # built: the preparation's bar goes (the stages have their own)
        record.case_name = case.describe().name
        if dry_run:
            plan = case.plan(default_planner())
            print(plan.line())
            record.status, record.plan = "planned", plan.as_dict()
            value = None
        else:
            try:
                result = case.run()
            except TrackingFailed as failed:  # the store failed, not the case: its results first
                if isinstance(failed.result, CaseResult):
                    _print_summary(case, failed.result, start)
                raise
            if result.printed():
                _print_summary(case, result, start)
            if result.periods is not None:
                print(f"By {result.periods.period}:\n" + "\n".join(f"  {line}" for line in result.periods.sentences()))
            if result.watch is not None:
                print(result.watch.line())
                alert = result.watch.alert
            record.status, record.run_id = "finished", result.run_id
            table = result.effects.table
            value = float(table["estimate"].iloc[0]) if len(table) else None
    except Exception as exc:  # noqa: BLE001 - a sweep records every failure and goes on
        preparing_done()  # a case that failed before its first stage: its preparation's bar goes
        if not in_sweep:
            if isinstance(exc, PopfairError):
                log.error("popfair: %s", exc)
                sys.exit(2)
            raise
        log.error("popfair: case %d (%s) failed: %s: %s", job, " ".join(overrides), type(exc).__name__, exc)
        record.status, record.error, record.error_type = "failed", str(exc) or repr(exc), type(exc).__name__
        if not dry_run:
            record.run_id = _record_failed_run(cfg, case, sweep, tags, traceback.format_exc(), exc)
        value = None
    record.seconds = time.perf_counter() - start
    if sweep:
        record.write(sweep.sweep_dir)
    if alert and not in_sweep:  # for schedulers: the look's line is printed, the run logged
        from popfair.case.table_watch import EXIT_ALERT

        sys.exit(EXIT_ALERT)
    return value


def _print_summary(case: Case, result: CaseResult, start: float) -> None:
    """The case's console summary: the effects table, counts, timings and where the run went."""
    from popfair.report.console import summary

    print(
        summary(
            case.describe().name,
            result.effects,
            result.run_id,
            result.n_rows,
            result.n_failed,
            case.tracker.uri,
            timings=result.timings,
            total=time.perf_counter() - start,
            failed_label=result.failed_label,
            sequential=result.sequential.sentences() if result.sequential is not None else None,
        )
    )


def case_from_config(
    cfg: DictConfig,
    *,
    dry_run: bool = False,
    values: dict[Any, Any] | None = None,
    context: RunContext | None = None,
) -> Case:
    """The composed case (popfair.case.compose.compose_case): the registered kind of case the config
    chooses, built once with what the command knows of its run (`context`). `values`: `cfg` already
    resolved (a dry run planned in process resolved it for its checks)."""
    from popfair.case.compose import compose_case

    return cast(Case, compose_case(cfg, dry_run=dry_run, values=values, context=context))


class WorkerDied(Exception):
    """A case's process ended without reporting (killed by a signal, out of memory)."""


def record_lost_case(sweep_config: DictConfig, reason: str) -> None:
    """In the sweep process: the case record and a FAILED MLflow run (under the sweep's parent) of a
    case whose process died before it could record anything itself (hydra_plugins/popfair_launcher)."""
    hydra_cfg = sweep_config.hydra
    sweep = current_sweep(hydra_cfg)
    tags = case_tags(hydra_cfg, sweep)
    error = WorkerDied(reason)
    record = CaseRecord(
        job=int(hydra_cfg.job.num),
        overrides=list(hydra_cfg.overrides.task),
        status="failed",
        error=reason,
        error_type=type(error).__name__,
        tags=tags,
    )
    if not sweep_config.get("dry_run", False):
        case_config = copy.deepcopy(sweep_config)  # the config the case's task saw: no hydra node
        with open_dict(case_config):
            del case_config["hydra"]
        record.run_id = _close_orphan_run(case_config, sweep, tags, reason) or _record_failed_run(
            case_config, None, sweep, tags, reason, error
        )
    if sweep:
        record.write(sweep.sweep_dir)


def _close_orphan_run(cfg: DictConfig, sweep: SweepInfo | None, tags: dict[str, str], reason: str) -> str | None:
    """The case's own MLflow run, which it opens when it starts and a dead worker leaves RUNNING (or its
    tracking worker has just ended FAILED), closed FAILED with the reason; None when there is none (the worker died before opening it). The run is
    found under the sweep's parent by the case's `sweep.*` tags, which tell the cases apart."""
    if sweep is None or not sweep.parent_run_id or not any(key.startswith("sweep.") for key in tags):
        return None
    from mlflow import MlflowClient

    from popfair.case.compose import build

    try:
        tracker = build(cfg.tracking, "tracking")
        client = MlflowClient(tracker.uri)
        experiment = client.get_experiment_by_name(tracker.experiment_name)
        if experiment is None:
            return None
        # RUNNING, or already FAILED: the case's tracking worker ends its open runs FAILED when the
        # case's process dies, racing this search; either way the case keeps one run
        runs = client.search_runs([experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{sweep.parent_run_id}'")
        for run in runs:
            if run.info.status in ("RUNNING", "FAILED") and all(
                run.data.tags.get(key) == value for key, value in tags.items()
            ):
                client.set_tag(run.info.run_id, "error", reason)
                client.set_tag(run.info.run_id, "error_type", WorkerDied.__name__)
                client.set_terminated(run.info.run_id, status="FAILED")
                return str(run.info.run_id)
    except Exception as exc:  # noqa: BLE001 - a new FAILED run records the case instead
        log.warning("popfair: could not close the lost case's MLflow run: %s", exc)
    return None


def _record_failed_run(
    cfg: DictConfig, experiment: Case | None, sweep: SweepInfo | None, tags: dict[str, str], trace: str, exc: Exception
) -> str | None:
    """A FAILED MLflow run for the case, under the sweep's parent; None if tracking is unusable."""
    from popfair.case.compose import build
    from popfair.track.mlflow_tracker import flatten

    try:
        tracker = experiment.tracker if experiment is not None else build(cfg.tracking, "tracking")
        name = (
            experiment.case_name()
            if experiment is not None
            else "failed-" + "-".join(v for k, v in tags.items() if k.startswith("sweep."))
        )
        config = cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=False))
        return tracker.record_failure(
            name,
            {**tags, "error_type": type(exc).__name__, "case_name": name},
            flatten(config),
            f"{type(exc).__name__}: {exc}",
            trace,
            sweep.parent_run_id if sweep else None,
        )
    except Exception as tracking_exc:  # noqa: BLE001 - the case record still lists the failure
        log.error("popfair: could not record the failed case in MLflow: %s", tracking_exc)
        return None
