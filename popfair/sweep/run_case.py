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
from typing import TYPE_CHECKING, Any, cast

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from popfair.core.errors import PopfairError, TrackingFailed
from popfair.sweep.state import ENV_PARENT_RUN_ID, ENV_SWEEP_DIR, CaseRecord, SweepInfo, varying_tags

if TYPE_CHECKING:
    from popfair.case.table import TableCase

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
MAX_RUN_NAME = 240  # MLflow keeps run names up to 250 characters


def name_parts(experiment: Any) -> list[tuple[str, str]]:
    """What a case's run name leads with, as (group, option): the screener, occupation, protected
    attribute, renderer and estimator (design) of a generated case; a table audit's case name."""
    if hasattr(experiment, "screener") and hasattr(experiment, "occupation"):
        return [
            ("screener", experiment.screener.name),
            ("occupation", experiment.occupation.key),
            ("protected_attr", experiment.protected.name),
            ("renderer", experiment.renderer.kind),
            ("estimator", experiment.estimator.name),
        ]
    return [("table", experiment.case_name())]


def run_name_for(
    lead: str | list[tuple[str, str]], overrides: list[str], groups: set[str], varying: Iterable[str] = ()
) -> str:
    """The case's MLflow run name, what tells runs apart first (MLflow's run list shows about 20
    characters): the screener, occupation, protected attribute, renderer and design (`lead`, from
    `name_parts`; a string is used as it is), then each override that sets a value rather than a
    group's option (`tfidf-nurse-gender-text-pse_dml population.n=2000`), then `#` and a short hash
    of the overrides too long to show that change the result (`table.columns.*`, `table.values.*`),
    so two runs with different settings never share a name. In a sweep (`varying`: the keys it
    varies) the varying groups and overrides come first, so the first 24 characters differ."""
    import hashlib

    from popfair.sweep.state import key_and_value

    varied = {k.lstrip("+~") for k in varying}
    parts = [(group, option) for group, option in ([("", lead)] if isinstance(lead, str) else lead)]
    parts = [p for p in parts if p[0] in varied] + [p for p in parts if p[0] not in varied]
    front: list[str] = []
    differs: list[str] = []
    hashed: list[str] = []
    for override in overrides:
        key, value = key_and_value(override)
        key = key.lstrip("+~")
        if key in groups or key.split("/")[0] in groups:  # a group's option: in the lead already
            continue
        if any(key == k or key.startswith(k + ".") for k in HASHED_IN_RUN_NAME):
            hashed.append(f"{key}={value}")
            continue
        if any(key == k or key.startswith(k + ".") for k in NOT_IN_RUN_NAME):
            continue
        (front if key in varied else differs).append(f"{key}={value}")
    words = [*front, "-".join(option for _, option in parts), *differs]
    if hashed:
        words.append("#" + hashlib.sha256(" ".join(sorted(hashed)).encode()).hexdigest()[:6])
    name = " ".join(words)
    return name if len(name) <= MAX_RUN_NAME else name[: MAX_RUN_NAME - 3] + "..."


def run_case(cfg: DictConfig) -> float | None:
    """Run (or, with dry_run=true, plan) the composed case; returns the first effect estimate."""
    from popfair.case.table import TableCase
    from popfair.sweep.in_process import resolved_of
    from popfair.sweep.plan import plan_case

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
    experiment = None
    alert = False  # a watch's look crossed its boundary: exit status 3 (popfair.case.table_watch)
    try:
        experiment = case_from_config(cfg, dry_run=dry_run, values=resolved_of(cfg))
        record.case_name = experiment.case_name()
        if dry_run:
            plan = plan_table(experiment) if isinstance(experiment, TableCase) else plan_case(experiment)
            print(plan.line())
            record.status, record.plan = "planned", plan.as_dict()
            value = None
        else:
            experiment.parent_run_id = sweep.parent_run_id if sweep else None
            experiment.tags = tags
            if experiment.run_name is None:  # run_name=null: say what differs from the defaults
                groups = {
                    part for key in hydra_cfg.runtime.choices for part in str(key).split("@")
                }  # estimator@outcome_audit
                varying = [k for k, v in sweep.varying.items() if len(v) > 1] if sweep else []
                experiment.run_name = run_name_for(name_parts(experiment), overrides, groups, varying)
            try:
                result = experiment.run()
            except TrackingFailed as failed:  # the store failed, not the case: its results first
                if failed.result is not None:
                    _print_summary(experiment, failed.result, start)
                raise
            watch = getattr(result, "watch", None)
            if watch is None or watch.rows_read:
                _print_summary(experiment, result, start)
            if getattr(result, "periods", None) is not None:
                print(f"By {result.periods.period}:\n" + "\n".join(f"  {line}" for line in result.periods.sentences()))
            if watch is not None:
                print(watch.line())
                alert = watch.alert
            record.status, record.run_id = "finished", result.run_id
            table = result.effects.table
            value = float(table["estimate"].iloc[0]) if len(table) else None
    except Exception as exc:  # noqa: BLE001 - a sweep records every failure and goes on
        if not in_sweep:
            if isinstance(exc, PopfairError):
                log.error("popfair: %s", exc)
                sys.exit(2)
            raise
        log.error("popfair: case %d (%s) failed: %s: %s", job, " ".join(overrides), type(exc).__name__, exc)
        record.status, record.error, record.error_type = "failed", str(exc) or repr(exc), type(exc).__name__
        if not dry_run:
            record.run_id = _record_failed_run(cfg, experiment, sweep, tags, traceback.format_exc(), exc)
        value = None
    record.seconds = time.perf_counter() - start
    if sweep:
        record.write(sweep.sweep_dir)
    if alert and not in_sweep:  # for schedulers: the look's line is printed, the run logged
        from popfair.case.table_watch import EXIT_ALERT

        sys.exit(EXIT_ALERT)
    return value


def _print_summary(experiment: Any, result: Any, start: float) -> None:
    """The case's console summary: the effects table, counts, timings and where the run went."""
    from popfair.case.table import TableCase
    from popfair.report.console import summary

    print(
        summary(
            experiment.case_name(),
            result.effects,
            result.run_id,
            result.n_rows,
            result.n_failed,
            experiment.tracker.uri,
            timings=result.timings,
            total=time.perf_counter() - start,
            failed_label="rows left out" if isinstance(experiment, TableCase) else "failed screens",
            sequential=result.sequential.sentences() if getattr(result, "sequential", None) else None,
        )
    )


def case_from_config(cfg: DictConfig, *, dry_run: bool = False, values: dict[Any, Any] | None = None) -> Any:
    """The composed case: an audit of an existing table when the `table` group is set
    (`popfair.case.table.TableCase`), else the generated pipeline (`popfair.case.population.PopulationCase`).
    `values`: `cfg` already resolved (a dry run planned in process resolved it for its checks)."""
    from popfair.case.population import PopulationCase
    from popfair.case.table import TableCase

    if cfg.get("table") is not None:
        return TableCase.from_config(cfg, dry_run=dry_run)
    return PopulationCase.from_config(cfg, dry_run=dry_run, values=values)


def plan_table(case: TableCase) -> Any:
    """A table case's dry run: the table is read and checked; nothing is screened, so nothing costs."""
    from popfair.sweep.plan import CasePlan

    print(case.check())
    power = case.checked_power
    return CasePlan(
        case.case_name(), "none (table)", "none (table)", 0, 0, 0, 0, 0.0, 0, 0, 0, 0.0,
        power="" if power is None else power.line(), mde=None if power is None else power.mde,
    )  # fmt: skip


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
    cfg: DictConfig, experiment, sweep: SweepInfo | None, tags: dict[str, str], trace: str, exc: Exception
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
