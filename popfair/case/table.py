"""A table case: the estimators run on decisions that already exist, nothing rendered or screened.

`python -m popfair experiment=table_audit table.path=decisions.csv table.columns.outcome=hired ...`
composes the `table` group; `popfair.sweep.run_case.case_from_config` then builds a `TableCase` instead of
the generated pipeline. The case reads the table (`popfair.design.table.source`), maps it
(`popfair.design.table.mapped`) and runs the configured estimator:

- `impact_ratio` (the default for tables): on cluster x sex x race counts reduced in SQL, so a
  10-million-row table costs what its clusters cost (`impact_ratios_from_counts`);
- `paired_gap`, `outcome_gap`, `pse_dml`: on the row-level frame, with the roles X (the
  protected_attr group, from the mapped sex or race column), Z, B, R (table.columns.z / b / r).

One MLflow run per case like any other, logging the source (path, or the URL without password and
the table or query), the file's sha256 or the rows' checksum, the row counts before and after the
filters, the mapping and, when rows had problems, `table_report.csv`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
import yaml
from omegaconf import DictConfig

from popfair.case.base import CaseDescription, CasePlan, CaseResult, CaseSettings, Planner, RunName, run_name_of
from popfair.case.power_plan import CasePower, table_categories
from popfair.case.run_log import log_effects_table, page_tags, table_dataset
from popfair.core.errors import ConfigError, PopfairError, TrackingFailed, require
from popfair.core.types import Effects, Roles
from popfair.design import design_named
from popfair.design.table.mapped import FRAME_NAMES, MappedTable, TableCounts, TableSource
from popfair.design.table.settings import TableSettings
from popfair.design.table.source import open_source
from popfair.estimate.base import Estimator, with_units
from popfair.estimate.power import PowerPlan
from popfair.population.protected import ProtectedAttribute
from popfair.runtime.paths import output_dir
from popfair.runtime.version import __version__
from popfair.track.mlflow_tracker import MlflowTracker, flatten, git_commit

if TYPE_CHECKING:
    from popfair.case.compose import Parts

log = logging.getLogger("popfair")

IMPACT_RATIO = "impact_ratio"
CONFIG_GROUPS = ("table", "estimator", "protected_attr", "outcome_audit", "tracking", "plan")  # what a table case uses


@dataclass(kw_only=True)
class TableRunResult(CaseResult):
    """What `TableCase.run` returns (popfair.case.base.CaseResult): the estimator's effects, the
    impact-ratio add-on, the table's source record and counts, and the MLflow run id."""

    source: TableSource
    counts: TableCounts | None = None
    ratios: Any = None  # the ImpactRatios behind `effects` (impact_ratio) or `audit` (the add-on)
    mapping: pd.DataFrame | None = None
    outcome: str = "callback"  # what the table's outcome holds: callback (0/1), score or rank
    sample: pd.DataFrame | None = None  # a few of the rows the estimator read: the run's dataset schema
    failed_label: str = "rows left out"

    @property
    def n_rows(self) -> int:
        return self.source.rows_used

    @property
    def n_failed(self) -> int:
        return self.source.rows_dropped


@dataclass
class TableCase:
    """One audit of an existing table (see the module docstring).

    Parameters
    ----------
    table : TableSettings
        The `table` config node.
    estimator : Estimator
        impact_ratio, paired_gap, outcome_gap or pse_dml.
    protected : ProtectedAttribute
        X and its levels for the estimators that contrast two groups.
    tracker : MlflowTracker
        Where the run is logged.
    outcome_audit : Estimator or None
        The impact-ratio add-on (config `outcome_audit`), run beside another estimator when the
        table has sex or race.
    seed, run_name, config, parent_run_id, tags, audit_report, report_dir
        As for `PopulationCase`; `report_dir` is where `table_report.csv` goes (Hydra's output folder).

    Returns
    -------
    `run()` returns a `TableRunResult` (effects, source record, counts, MLflow run id).

    Examples
    --------
    >>> from pathlib import Path
    >>> from hydra import compose, initialize_config_dir
    >>> from popfair.sweep.run_case import case_from_config
    >>> with initialize_config_dir(version_base="1.3", config_dir=str(Path("conf").resolve())):  # doctest: +SKIP
    ...     cfg = compose(config_name="config", overrides=["experiment=table_audit", "table.path=decisions.csv",
    ...                   "table.columns.outcome=hired", "table.columns.sex=gender", "table.columns.race=race"])
    >>> result = case_from_config(cfg).run()  # doctest: +SKIP
    >>> result.ratios.summary()  # doctest: +SKIP
    """

    table: TableSettings
    estimator: Estimator
    protected: ProtectedAttribute
    tracker: MlflowTracker
    outcome_audit: Any = None
    seed: int = 0
    run_name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    parent_run_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    audit_report: bool = True
    report_dir: Path = field(default_factory=Path.cwd)
    power: CasePower = field(default_factory=CasePower.of)  # config plan.*
    run_naming: RunName = field(default_factory=RunName)  # what the run name adds when run_name is null

    @classmethod
    def from_config(cls, cfg: DictConfig, *, dry_run: bool = False) -> TableCase:
        """The table case of a composed config (`popfair.case.compose.compose_case`)."""
        from popfair.case.compose import compose_case

        return cast(TableCase, compose_case(cfg, dry_run=dry_run, kind="table"))

    @classmethod
    def compose(cls, parts: Parts, settings: CaseSettings) -> TableCase:
        """Check the table settings and build the estimator, protected attribute and tracker;
        nothing is read yet."""
        table = TableSettings.from_config(parts.values("table"))
        parts.require("estimator", "protected_attr", "tracking")
        estimator = parts.build("estimator")
        design_named("table").check_case({"estimator": estimator})  # the estimators registered for tables
        require(
            not settings.sequential.on,
            "sequential.rule",
            "a table audit reads decisions that exist and asks no screener: it has no looks to stop at; "
            "set sequential.rule=off",
        )
        audit = None
        if parts.has("outcome_audit") and estimator.name != IMPACT_RATIO:
            audit = parts.build("outcome_audit")
        return cls(
            table=table,
            estimator=estimator,
            protected=parts.build("protected_attr"),
            tracker=parts.build("tracking"),
            outcome_audit=audit,
            seed=settings.seed,
            run_name=settings.run_name,
            config={
                group: settings.config.get(group) for group in (*CONFIG_GROUPS, "seed") if group in settings.config
            },
            audit_report=settings.audit_report != False,  # noqa: E712 - auto: an existing table is what LL144 audits
            report_dir=output_dir(),
            power=settings.power or CasePower.of(),
            parent_run_id=settings.context.parent_run_id,
            tags=dict(settings.context.tags),
            run_naming=settings.context.name,
        )

    def describe(self) -> CaseDescription:
        return CaseDescription(self.case_name(), "table")

    def plan(self, planner: Planner) -> CasePlan:
        """A table case's dry run: the table is read and checked; nothing is screened, so nothing costs."""
        line, power = self.checked()
        print(line)
        return CasePlan.free(self.case_name(), "table", power)

    @property
    def mlflow_name(self) -> str:
        return run_name_of(self.name_parts(), self.run_name, self.run_naming)

    def name_parts(self) -> list[tuple[str, str]]:
        """What the run name leads with, as (config group, option)."""
        return [("table", self.case_name())]

    def case_name(self) -> str:
        source = Path(self.table.path).stem if self.table.path else (self.table.name or "query")
        return f"table-{source}-{self.estimator.name}"

    def shown_source(self) -> str:
        """The table as reports name it: the file's name (its sha256 says which file), or the table or query."""
        if self.table.path:
            return Path(str(self.table.path)).name
        return str(self.table.name or "query")

    def read(self) -> MappedTable:
        """Open and map the table (errors name their config key); the caller closes `.source`."""
        source = open_source(self.table)
        try:
            return MappedTable(self.table, source, self.report_dir)
        except BaseException:
            source.close()
            raise

    def check(self) -> str:
        """dry_run: read and map the table (every check runs), estimate nothing; one line on what was read."""
        return self.checked()[0]

    def checked(self) -> tuple[str, PowerPlan | None]:
        """`check`'s line and the power line of the table's categories (None without sex or race)."""
        mapped = self.read()
        try:
            record = mapped.record
            nothing, power = "", None
            if mapped.columns.sex is not None or mapped.columns.race is not None:
                counts = mapped.counts()
                power = self.power.plan("table", table_categories(counts, self.protected.name))
                nothing = self._nothing_compared(counts)
            line = (
                f"table {record.description}: {record.rows_read:,} rows read, {record.rows_after_filters:,} after "
                f"filters, {record.rows_used:,} used; outcome {mapped.coding.kind}{nothing}"
            )
            return line, power
        finally:
            mapped.source.close()

    def _nothing_compared(self, counts: Any) -> str:
        """For the dry run: the impact ratios would compare nothing (one category of sex and of race),
        which the real run stops on; said now, before anything is estimated."""
        ratios: Any = self.estimator if self.estimator.name == IMPACT_RATIO else self.outcome_audit
        if ratios is None:
            return ""
        from popfair.estimate.impact_ratio.ratios import uncompared

        lone = uncompared(counts.counts, ratios.settings)
        if len(lone) < 2:
            return ""
        log.warning("dry run: the impact ratios would compare nothing: %s and %s", lone["sex"], lone["race"])
        return (
            f"; NOTHING TO COMPARE: {lone['sex']}, and {lone['race']} (a comparison needs at least two categories "
            "of sex or of race; the run would stop)"
        )

    def run(self) -> TableRunResult:
        if self.table.watch:  # one look of a watch: the rows added since the last one
            return self._watch()
        timings: dict[str, float] = {}
        start = time.perf_counter()
        self.tracker.prepare()  # MLflow imported in the tracking worker while the table is read
        mapped = self.read()
        try:  # take what the estimators need from DuckDB, then free its memory before they run
            frame = roles = None
            add_on, counts, notes = self.outcome_audit, None, list(mapped.notes)
            by_period = None
            if self.estimator.name == IMPACT_RATIO:  # names the missing sex / race columns if need be
                counts = mapped.counts(self._metrics(self.estimator, mapped))
                if self.table.period is not None:
                    by_period = mapped.counts(self._metrics(self.estimator, mapped), by_period=True)
            elif add_on is not None and (mapped.columns.sex is not None or mapped.columns.race is not None):
                try:
                    counts = mapped.counts(self._metrics(add_on, mapped))
                    if self.table.period is not None:
                        by_period = mapped.counts(self._metrics(add_on, mapped), by_period=True)
                except PopfairError as exc:  # an add-on: report it, keep the case
                    log.warning("outcome audit skipped: %s", exc)
                    notes.append(f"outcome audit (impact ratios) skipped: {exc}")
            if self.table.period is not None and by_period is None:
                notes.append(
                    f"table.period={self.table.period}: no impact ratios by period (they need a sex or race column "
                    "and the impact-ratio audit: estimator=impact_ratio, or outcome_audit)"
                )
            if self.estimator.name != IMPACT_RATIO:
                frame = mapped.frame()
                roles = self.roles(mapped, frame)
            result = TableRunResult(
                effects=Effects(table=pd.DataFrame()),
                source=mapped.record,
                counts=counts,
                mapping=mapped.mapping,
                notes=notes,
                timings=timings,
                report_path=mapped.report_path,
                outcome=str(mapped.coding.outcome),
                sample=(frame if frame is not None else counts.counts if counts is not None else pd.DataFrame()).head(
                    200
                ),
            )
        finally:
            mapped.source.close()
        timings["read"] = time.perf_counter() - start
        start = time.perf_counter()
        if counts is not None:
            result.power = self.power.quietly("table", table_categories(counts, self.protected.name))
        if frame is None:  # impact_ratio
            assert counts is not None
            result.ratios = _impact_ratios(self.estimator, counts)
            result.effects = result.ratios.effects()
        else:
            assert roles is not None
            result.effects = self.estimator.estimate(frame, roles, "y")
            if counts is not None:
                result.audit = self._impact_add_on(counts, result)
        result.effects.table = with_units(result.effects.table, self.estimator, result.outcome)
        if by_period is not None:
            from popfair.case.table_watch import periods_of

            ratios_estimator: Any = self.estimator if self.estimator.name == IMPACT_RATIO else self.outcome_audit
            result.periods = periods_of(by_period, str(self.table.period), ratios_estimator.settings)
        timings["estimate"] = time.perf_counter() - start
        try:
            result.run_id = self._track(result)
        except TrackingFailed as exc:  # the results are kept: the command prints them, then the error
            exc.result = result
            raise
        return result

    def _watch(self) -> TableRunResult:
        """One look of a watch (`popfair.case.table_watch`): logged when it read new rows."""
        from popfair.case.table_watch import watch_look

        outcome = watch_look(self)
        result = TableRunResult(
            effects=outcome.ratios.effects() if outcome.ratios is not None else Effects(table=pd.DataFrame()),
            source=outcome.source,
            ratios=outcome.ratios,
            periods=outcome.periods,
            watch=outcome.look,
            notes=outcome.notes,
            timings={"estimate": outcome.seconds},
        )
        if outcome.ratios is not None:
            result.effects.table = with_units(result.effects.table, self.estimator, result.outcome)
            result.run_id = self._track(result)
        return result

    def _impact_add_on(self, counts: TableCounts, result: TableRunResult) -> Effects | None:
        """The LL144 tables beside another estimator (a note instead when they cannot be computed)."""
        try:
            result.ratios = _impact_ratios(self.outcome_audit, counts)
            return result.ratios.effects()
        except PopfairError as exc:
            log.warning("outcome audit skipped: %s", exc)
            result.notes.append(f"outcome audit (impact ratios) skipped: {exc}")
            return None

    @staticmethod
    def _metrics(estimator: Any, mapped: MappedTable) -> list[Any]:
        """The impact-ratio metrics of the table's outcome: selection rates, or for scores the LL144
        scoring rate and the estimator's top-share / minimum-score rules."""
        from popfair.estimate.impact_ratio.settings import metrics_for

        wanted = estimator.settings.outcome
        if wanted == "callback" and mapped.coding.outcome == "score":
            raise ConfigError(
                f"estimator.outcome: callback needs a 0/1 outcome; {mapped.columns.outcome!r} holds scores"
            )
        return metrics_for("score" if wanted == "score" else mapped.coding.outcome, estimator.settings)

    def roles(self, mapped: MappedTable, frame: pd.DataFrame) -> Roles:
        """X from protected_attr (the mapped sex or race column), Z / B / R from table.columns."""
        x = self.protected.name
        source_role = "sex" if x == "gender" else "race"
        require(
            mapped.columns.of(source_role) is not None,
            f"table.columns.{source_role}",
            f"protected_attr={x} needs the table's {source_role} column (table.columns.{source_role}=COLUMN)",
        )
        present = frame[FRAME_NAMES[source_role]].value_counts()
        for key, level in (("x0", self.protected.x0), ("x1", self.protected.x1)):
            if present.get(level, 0) == 0:
                raise ConfigError(
                    f"protected_attr.{key}: no row of the table has {x}={level!r} after mapping "
                    f"(categories present: {present.to_dict()}); check table.values.{source_role}"
                )
        columns = mapped.columns
        return Roles(
            x=x,
            x0=self.protected.x0,
            x1=self.protected.x1,
            z=tuple(mapped.role_column(c) for c in columns.z),
            b=tuple(mapped.role_column(c) for c in columns.b),
            r=tuple(mapped.role_column(c) for c in columns.r),
        )

    def _audit_report(self, result: TableRunResult) -> dict[str, str | bytes]:
        """The auditor's report of a table (`popfair.report.audit`); a note instead when it cannot be written."""
        from popfair.report import audit

        try:
            return audit.table_audit_report(self, result)
        except PopfairError as exc:
            result.notes.append(f"audit report skipped: {exc}")
            return {}

    def _track(self, result: TableRunResult) -> str | None:
        """Log the case's run; the auditor's report is written meanwhile, while the tracking worker
        logs the rest (the `report` stage, and `track`: the time spent waiting for the worker)."""
        from popfair.case.result import effects_metrics

        source = result.source
        metrics: dict[str, float] = {
            "n_rows": source.rows_used,
            "table.rows_read": source.rows_read,
            "table.rows_after_filters": source.rows_after_filters,
            "table.rows_dropped": source.rows_dropped,
            "table.rows_used": source.rows_used,
            **effects_metrics(result.effects),
            **(result.power.metrics() if result.power is not None else {}),
        }
        tags = {
            "pattern": result.effects.pattern,
            "case_name": self.case_name(),
            "design": "table",
            "data_kind": source.kind,
            # a file by its name (table.sha256 says which), never this machine's path; a database
            # by its redacted URL and table or query
            "table.source": (self.shown_source() if self.table.path else source.description)[:4900],
            **{f"table.{k}": v for k, v in source.fingerprint.items()},
            "git_commit": git_commit(),
            "popfair_version": __version__,
            "protected_attr": self.protected.name,
            "estimator": self.estimator.name,
            **(result.power.tags() if result.power is not None else {}),
            **page_tags(
                self.mlflow_name,
                result.effects,
                {"rows used": f"{source.rows_used:,}", "estimator": self.estimator.name, "source": self.shown_source()},
                ratios=result.ratios,
                notes=[*source.notes, *result.notes],
                power=result.power,
            ),
            **self.tags,
        }
        artifacts: dict[str, Any] = {
            "config.yaml": yaml.safe_dump(self.config, sort_keys=False),
            "effects.csv": result.effects.table,
            "table/source.yaml": yaml.safe_dump(source.as_dict(), sort_keys=False),
            **result.effects.artifacts,
        }
        if result.mapping is not None and len(result.mapping):
            artifacts["table/mapping.csv"] = result.mapping.set_index(["role", "column"])
        if result.counts is not None:
            cells = result.counts.counts.drop(columns="cluster").groupby(["sex", "race"]).sum()
            artifacts["table/counts.csv"] = cells
        if result.report_path is not None:
            artifacts["table/table_report.csv"] = result.report_path.read_bytes()
        if result.audit is not None:
            metrics.update(result.audit.metrics)
            artifacts.update(result.audit.artifacts)
        steps = []
        for part in (result.periods, result.watch):
            if part is not None:  # by period (each period a step) and a watch's look
                metrics.update(part.metrics())
                artifacts.update(part.artifacts())
                tags.update(part.tags())
                steps += part.steps()
        timings, start = result.timings, time.perf_counter()
        with self.tracker.run(self.mlflow_name, tags, self.parent_run_id) as run:
            run.params(flatten(self.config))
            run.metrics(metrics)
            if steps:
                run.steps(steps)
            run.artifacts(artifacts)  # figures (Plot) are drawn by the tracking worker
            log_effects_table(run, result.effects)
            if result.sample is not None and len(result.sample.columns):
                run.dataset(table_dataset(source, self.shown_source(), result.sample))
            result.run_id = run.run_id  # the report names its run
            if self.audit_report:  # drawn here while the worker logs the above
                drawn = time.perf_counter()
                result.report = self._audit_report(result)
                timings["report"] = time.perf_counter() - drawn
            final = {f"audit_report/{name}": content for name, content in result.report.items()}
            if result.notes:
                final["notes.txt"] = "\n".join(result.notes)
            run.artifacts(final)
            run.metrics({f"time.{k}_s": v for k, v in timings.items()})
            run_id = run.end()
        timings["track"] = time.perf_counter() - start - timings.get("report", 0.0)
        return run_id


def _impact_ratios(estimator: Any, counts: TableCounts) -> Any:
    """The LL144 tables of the counts (`popfair.estimate.impact_ratio.ratios.impact_ratios_from_counts`)."""
    from popfair.estimate.impact_ratio.ratios import impact_ratios_from_counts

    return impact_ratios_from_counts(
        counts.counts,
        outcome=counts.outcome,
        thresholds=counts.thresholds,
        cluster=None if counts.cluster is None else "cluster",
        settings=estimator.settings,
    )
