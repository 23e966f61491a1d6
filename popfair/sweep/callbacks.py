"""Hydra callback for sweeps (registered in conf/config.yaml under hydra.callbacks).

on_run_start (a single case): every location the case writes checked before Hydra makes its output
folder (popfair.sweep.storage): one line and exit status 2 for the first that cannot be written.
on_multirun_start: the sweep's folder checked the same way; then one MLflow parent run for the sweep; the sweep info file and environment
variables that tell every case (in this process, joblib workers or SLURM jobs) its parent.
on_multirun_end: the summary of every case (failed ones with their error), the dry-run totals,
the comparison report logged to the parent run, and the parent run closed; then exit status 1 when
any case failed or never reported back."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from popfair.core.errors import ConfigError
from popfair.sweep.fork_server import runs_cases_here, start_fork_server
from popfair.sweep.preflight import check_shared_services
from popfair.sweep.state import ENV_PARENT_RUN_ID, ENV_SWEEP_DIR, SweepInfo, read_case_records, sweep_grid

if TYPE_CHECKING:
    from popfair.track.mlflow_tracker import MlflowTracker

log = logging.getLogger("popfair")

# sweepers that expand the whole grid up front (so the case count is known)
GRID_SWEEPERS = (
    "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
    "hydra_plugins.popfair_sweeper.popfair_sweeper.PopfairSweeper",
)


def abandon_parent(config: DictConfig, reason: str) -> None:
    """Close the sweep's parent run FAILED, tagged with why, when the sweep stops before any case
    (its pre-flight checks failed); on_multirun_end, which would close it, is not reached then."""
    from popfair.case.compose import build

    parent_run_id = os.environ.pop(ENV_PARENT_RUN_ID, None)
    os.environ.pop(ENV_SWEEP_DIR, None)
    if not parent_run_id:
        return
    try:
        build(config.tracking, "tracking").finish_parent(
            parent_run_id, status="FAILED", tags={"sweep.stopped": reason}, metrics={"cases": 0}
        )
    except Exception as exc:  # noqa: BLE001 - the sweep stops either way; say what was left open
        log.error("popfair: could not close the sweep's parent run %s: %s", parent_run_id, exc)


def stop_on_storage_problem(problem: Any) -> None:
    """One line on standard error and exit status 2 (Hydra turns a callback's Exception into a
    warning and goes on; it lets SystemExit through)."""
    if problem is not None:
        print(f"popfair: {problem.line()}", file=sys.stderr)
        raise SystemExit(2)


class SweepCallback(Callback):
    """Pre-flight of a single case's storage; parent run, case summary and report for
    `python -m popfair -m ...`."""

    def __init__(self, report: bool = True) -> None:
        self.report = report  # write and log the comparison report when the sweep ends
        self.info: SweepInfo | None = None
        self.tracker: MlflowTracker | None = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Before Hydra makes the output folder and the case builds or pays for anything: every
        location the case writes (popfair doctor checks all but the output folder in its table)."""
        from popfair.sweep.storage import first_problem, folder_problem

        if config.get("check", False):  # popfair doctor: Hydra still needs its output folder
            run_dir = config.hydra.run.dir
            stop_on_storage_problem(
                folder_problem(
                    "hydra.run.dir", run_dir, Path(str(run_dir)), "hydra.run.dir=<a folder you can write in>"
                )
            )
            return
        stop_on_storage_problem(first_problem(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from popfair.case.compose import build
        from popfair.sweep.storage import sweep_problem

        if config.get("check", False):  # popfair doctor: the sweeper checks the cases and exits
            return
        stop_on_storage_problem(sweep_problem(config))  # its case records, summary and report go there
        if runs_cases_here(config):  # its imports run beside MLflow's and the pre-flight checks
            start_fork_server(config)
        try:
            check_shared_services(config)
        except ConfigError as exc:  # Hydra turns a callback's Exception into a warning and goes on
            raise SystemExit(f"popfair: {exc}") from None
        sweep_dir = str(Path(config.hydra.sweep.dir).resolve())
        params_node = config.hydra.sweeper.get("params")
        params = cast(dict[str, Any], OmegaConf.to_container(params_node, resolve=False)) if params_node else {}
        varying, count = sweep_grid(config.hydra.overrides.task, params)
        basic = config.hydra.sweeper.get("_target_") in GRID_SWEEPERS
        dry_run = bool(config.get("dry_run", False))
        parent_run_id = None
        if not dry_run:
            self.tracker = tracker = build(config.tracking, "tracking")
            changing = {k: v for k, v in varying.items() if len(v) > 1}
            experiment = next(
                (o.split("=", 1)[1] for o in config.hydra.overrides.task if o.startswith("experiment=")), None
            )
            parent_run_id = tracker.start_parent(
                f"sweep-{experiment or 'multirun'}-{Path(sweep_dir).name}",
                {
                    "popfair.sweep": "parent",
                    "sweep_dir": shown_dir(sweep_dir),  # no local absolute path in a tag
                    "sweep.experiment": experiment or "none",
                    "sweep.varying": ",".join(changing) or "none",
                    "sweep.cases_expected": count if basic else "unknown",
                    "sweep.command_overrides": " ".join(config.hydra.overrides.task),
                },
            )
        self.info = SweepInfo(
            sweep_dir=sweep_dir,
            parent_run_id=parent_run_id,
            tracking_uri=self.tracker.uri if self.tracker else None,
            varying=varying,
            expected_cases=count if basic else None,
            dry_run=dry_run,
        )
        self.info.write()
        os.environ[ENV_SWEEP_DIR] = sweep_dir
        if parent_run_id:
            os.environ[ENV_PARENT_RUN_ID] = parent_run_id
            log.info("popfair sweep: MLflow parent run %s", parent_run_id)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(ENV_SWEEP_DIR, None)
        os.environ.pop(ENV_PARENT_RUN_ID, None)
        if self.info is None:
            return
        import pandas as pd  # here, not at Hydra's start: a sweep's process imports it beside its composing worker

        sweep_dir = Path(self.info.sweep_dir)
        records = read_case_records(sweep_dir)
        summary = pd.DataFrame(
            [
                {
                    "job": r.job,
                    "status": r.status,
                    "case": r.case_name,
                    "run_id": r.run_id,
                    "seconds": round(r.seconds, 2),
                    "error": r.error,
                    "overrides": " ".join(r.overrides),
                }
                for r in records
            ]
        )
        summary.to_csv(sweep_dir / "summary.csv", index=False)
        failed = [r for r in records if r.status == "failed"]
        missing = (self.info.expected_cases - len(records)) if self.info.expected_cases else 0
        lines = [
            f"\n=== popfair sweep: {len(records)} cases reported"
            + (f" of {self.info.expected_cases}" if self.info.expected_cases else "")
            + f", {len(failed)} failed ===",
            f"sweep dir: {sweep_dir}",
        ]
        lines += [
            f"FAILED job {r.job} {r.case_name or ''} [{' '.join(r.overrides)}]: {r.error_type}: {r.error}"
            for r in failed
        ]
        if missing > 0:
            lines.append(f"{missing} cases never reported back (killed or lost by the launcher)")
        if self.info.dry_run:
            lines.append(self._plan_totals(records, sweep_dir))
        print("\n".join(lines))
        report_failed = False
        if self.info.parent_run_id and self.tracker is not None:
            report_failed = self._finish_parent(records, failed, missing, sweep_dir)
        if failed or missing > 0 or report_failed:  # after the summary: scripts and CI see that the sweep is incomplete
            raise SystemExit(1)

    @staticmethod
    def _plan_totals(records: list, sweep_dir: Path) -> str:
        import pandas as pd

        from popfair.sweep.plan_totals import format_totals, plan_totals

        plans = [r.plan for r in records if r.plan]
        if not plans:
            return "dry run: no case could be planned"
        pd.DataFrame(plans).to_csv(sweep_dir / "plan.csv", index=False)
        totals = plan_totals(plans)
        totals.to_csv(sweep_dir / "plan_totals.csv")
        return (
            f"dry run: {len(plans)} cases planned, nothing called\n{format_totals(totals)}\n"
            f"(new_* = calls not already bought by an earlier case of this sweep: the response cache)"
        )

    def _finish_parent(self, records: list, failed: list, missing: int, sweep_dir: Path) -> bool:
        """Write the report (if any case finished), log it with the summary to the parent, its tables
        as the parent's description and the effects of every case as its table artifact, close it;
        True when the report failed (the sweep then exits non-zero, its runs kept)."""
        import pandas as pd

        assert self.tracker and self.info and self.info.parent_run_id  # a parent run was started
        report_dir = sweep_dir / "report"
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "summary.csv").write_bytes((sweep_dir / "summary.csv").read_bytes())
        finished = sum(r.status == "finished" for r in records)
        report_error = None
        page: dict[str, str] = {}  # the parent run's description: the comparison's tables
        tables: dict[str, Any] = {}
        if self.report and finished:
            try:
                from popfair.report.sweep import write_report

                files = write_report(
                    self.tracker.uri, self.tracker.experiment_name, report_dir, parent_run_id=self.info.parent_run_id
                )
                page["mlflow.note.content"] = files["comparison.md"].read_text()
                tables["comparison.json"] = pd.read_csv(files["effects.csv"])
                if "cases.csv" in files:  # one row per case: what the parent's table view charts
                    tables["cases.json"] = pd.read_csv(files["cases.csv"])
                print(f"report: {report_dir / 'report.html'}")
            except Exception as exc:  # noqa: BLE001 - the sweep's runs stay valid without a report
                log.error("popfair: sweep report failed: %s: %s", type(exc).__name__, exc)
                report_error = f"{type(exc).__name__}: {exc}"
        self.tracker.finish_parent(
            self.info.parent_run_id,
            status="FINISHED" if finished else "FAILED",
            tags={
                "sweep.cases": len(records),
                "sweep.failed": len(failed),
                "sweep.failed_jobs": ",".join(str(r.job) for r in failed) or "none",
                **({"sweep.report_error": report_error[:4900]} if report_error else {}),
                **page,
            },
            metrics={
                "cases": len(records),
                "cases_finished": finished,
                "cases_failed": len(failed),
                "cases_missing": max(missing, 0),
            },
            artifact_dir=report_dir,
            tables=tables,
        )
        self._print_links(records)
        return report_error is not None

    def _print_links(self, records: list) -> None:
        """The parent run's page and MLflow's compare view of the cases' runs (Model training view)."""
        from popfair.report.console import compare_page, run_page
        from popfair.track.mlflow_tracker import EXPERIMENT_OF

        assert self.tracker and self.info and self.info.parent_run_id
        parent = self.info.parent_run_id
        lines = [f"the sweep:     {run_page(self.tracker.uri, parent)}"]
        children = [str(r.run_id) for r in records if r.run_id]
        if children and parent in EXPERIMENT_OF:
            lines.append(f"compare cases: {compare_page(self.tracker.uri, children, EXPERIMENT_OF[parent])}")
        print("\n".join(lines))


def shown_dir(path: str) -> str:
    """A sweep's folder as a tag shows it: relative to the current folder, else its last three parts
    (multirun/<date>/<time>), never this machine's absolute path."""
    folder = Path(path)
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(Path(*folder.parts[-3:]))
