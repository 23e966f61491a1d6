"""PopulationCase: one audit case composed from config, run as population -> render -> screen -> estimate,
logged to MLflow. Nothing downstream of `PopulationCase.from_config` reads the raw config."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
import yaml
from omegaconf import DictConfig

from popfair.case.base import CaseDescription, CasePlan, CaseSettings, Planner, RunName, run_name_of
from popfair.case.pilot import run_power
from popfair.case.placebo import placebo_changes, placebo_set, placebo_settings, with_placebo
from popfair.case.power_plan import CasePower
from popfair.case.result import CasePrompts, RunResult, effects_metrics
from popfair.case.run_log import generated_page_tags, log_effects_table, population_dataset
from popfair.case.stages import Stages, logged_when_done, timed, untimed
from popfair.core.errors import Interrupted, PopfairError, TrackingFailed, require
from popfair.core.types import FACTUAL, WORLD, Effects, Profiles, WorldRequest
from popfair.design import design_of
from popfair.design.base import ScoreScale, ScreenedDesign
from popfair.design.sequential import SequentialSettings, check_sequential
from popfair.estimate.base import CaseFacts, DeclaresDocuments, Estimator, SizesWorlds, with_units
from popfair.estimate.controls.names import with_name_effects
from popfair.estimate.registry import explained
from popfair.population import worlds
from popfair.population.base import GroupsColumns, LogsDiagnostics, Population, population_name
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute
from popfair.render.base import Renderer, displayed_attributes, render_all, sample_artifacts
from popfair.render.placebo import PlaceboSettings
from popfair.render.store import DocumentStore
from popfair.report import patterns
from popfair.report.units import units_on_figures
from popfair.runtime.interrupts import sigterm_as_interrupt
from popfair.runtime.parallel import forked_call, frozen_heap
from popfair.runtime.version import __version__
from popfair.screen.base import Screener
from popfair.screen.failures import DEFAULT_MAX_FAILURE_SHARE, check_failure_share
from popfair.track.mlflow_tracker import MlflowTracker, RunLogger, flatten, git_commit

if TYPE_CHECKING:
    from popfair.case.compose import Parts

log = logging.getLogger("popfair")

COMPONENT_GROUPS = ("population", "occupation", "renderer", "screener", "estimator", "protected_attr")


def _audit_report_wanted(setting: Any, screener: Screener, design: str) -> bool:
    """`audit_report`: auto = for population cases and screeners that audit an outside tool (http,
    file), true, false (checked by popfair.case.compose)."""
    return (screener.audits_a_tool or design == "population") if setting == "auto" else bool(setting)


@dataclass
class PopulationCase:
    """One audit case: population -> render -> screen -> estimate, logged as one MLflow run.

    Built from a composed Hydra config with `PopulationCase.from_config`, which validates and builds
    every component before any work (a bad value fails naming its config key); nothing downstream
    reads the raw config. Counterfactual worlds the estimator declares (`estimator.counterfactuals`) are
    drawn by the population and rendered and screened with the factual applicants.

    Parameters
    ----------
    population, occupation, renderer, screener, estimator, protected
        The case's components (config groups population, occupation, renderer, screener,
        estimator, protected_attr).
    tracker : MlflowTracker
        Where the run is logged (config group tracking).
    seed : int
        The population sample's seed.
    run_name, config, outcome_audit, parent_run_id, tags
        MLflow run name, the resolved config (logged only), the impact-ratio add-on estimator,
        the sweep's parent run and extra tags.
    audit_report : bool, default False
        Write the auditor's report (LL144 summary and effects), logged as `audit_report/`.
    max_failure_share : float or None
        A case whose share of failed screens exceeds this stops before the estimator (None: never).
    design : ScreenedDesign, optional
        The study design (popfair.design): how the documents are grouped into prompts, what is
        asked, how replies are read and which estimators apply. Default: the population's.
    documents : DocumentStore, optional
        Rendered documents kept for every later case (config `document_store`).
    power : CasePower, optional
        The `plan.*` settings: what the case's main test can detect (popfair.case.power_plan).

    Returns
    -------
    `run()` returns a `RunResult` (effects, scored table, MLflow run id).

    Examples
    --------
    >>> from pathlib import Path
    >>> from hydra import compose, initialize_config_dir
    >>> import popfair
    >>> with initialize_config_dir(version_base="1.3", config_dir=str(Path("conf").resolve())):  # doctest: +SKIP
    ...     cfg = compose(config_name="config", overrides=["population.n=300", "estimator=outcome_gap"])
    >>> result = popfair.Experiment.from_config(cfg).run()  # doctest: +SKIP
    >>> result.effects.table.loc["gap", ["estimate", "ci_low", "ci_high"]]  # doctest: +SKIP
    """

    population: Population
    occupation: Occupation
    renderer: Renderer
    screener: Screener
    estimator: Estimator
    protected: ProtectedAttribute
    tracker: MlflowTracker
    seed: int = 0
    run_name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # resolved config, for logging only
    outcome_audit: Estimator | None = None  # impact ratios for every case (config `outcome_audit`)
    parent_run_id: str | None = None  # MLflow parent run when the case belongs to a sweep
    tags: dict[str, str] = field(default_factory=dict)  # extra MLflow tags (e.g. the sweep's varying overrides)
    audit_report: bool = False  # write the auditor's report (logged as audit_report/)
    max_failure_share: float | None = DEFAULT_MAX_FAILURE_SHARE  # more failed screens: no estimate (None: any)
    design: ScreenedDesign | None = None  # how applicants become prompts and answers (default: the population's)
    documents: DocumentStore | None = None  # rendered documents kept for every later case (config document_store)
    sequential: SequentialSettings | None = None  # screen in looks and stop by a rule (config sequential)
    power: CasePower = field(default_factory=CasePower.of)  # config plan.*: the power line
    run_naming: RunName = field(default_factory=RunName)  # what the run name adds when run_name is null
    placebo: PlaceboSettings | None = None  # config renderer.placebo: edits re-screened (popfair.case.placebo)

    @classmethod
    def from_config(
        cls, cfg: DictConfig, *, dry_run: bool = False, values: dict[Any, Any] | None = None
    ) -> PopulationCase:
        """The population case of a composed config (`popfair.case.compose.compose_case`): every
        component validated and built before any work. `dry_run`: API screeners without keys and
        photo renderers without photos (planning needs neither); `values`: `cfg` already resolved."""
        from popfair.case.compose import compose_case

        return cast(PopulationCase, compose_case(cfg, dry_run=dry_run, values=values, kind="population"))

    @classmethod
    def compose(cls, parts: Parts, settings: CaseSettings) -> PopulationCase:
        """Build the case from its composed parts and settings (popfair.case.compose)."""
        parts.require(*COMPONENT_GROUPS)
        built = {group: parts.build(group) for group in COMPONENT_GROUPS}
        require(
            isinstance(built["screener"], Screener),
            "screener",
            f"{type(built['screener']).__name__} is not a screener: subclass popfair.screen.base.Screener",
        )
        design = design_of(built["population"])
        design.check_case(built)  # cross-group checks (a paired design needs postings, its estimators)
        sequential = settings.sequential
        if sequential.on:  # the target and the design's units, checked before any work
            check_sequential(design, sequential, built["population"])
        renderer = built["renderer"]
        placebo, store = placebo_settings(parts.values("renderer"), renderer.kind, design.name, sequential.on)
        location = settings.cache_location
        return cls(
            population=built["population"],
            occupation=built["occupation"],
            renderer=renderer,
            screener=built["screener"],
            estimator=built["estimator"],
            protected=built["protected_attr"],
            design=design,
            tracker=parts.build("tracking"),
            seed=settings.seed,
            run_name=settings.run_name,
            outcome_audit=parts.build("outcome_audit") if parts.has("outcome_audit") else None,
            config=settings.config,
            audit_report=_audit_report_wanted(settings.audit_report, built["screener"], design.name),
            max_failure_share=settings.max_failure_share,
            documents=DocumentStore.for_case(location, renderer, store) if location and store is not None else None,
            sequential=sequential if sequential.on else None,
            power=settings.power or CasePower.of(),
            parent_run_id=settings.context.parent_run_id,
            tags=dict(settings.context.tags),
            run_naming=settings.context.name,
            placebo=placebo,
        )

    def describe(self) -> CaseDescription:
        return CaseDescription(self.case_name(), "population")

    def plan(self, planner: Planner) -> CasePlan:
        """What the case would cost (the screener's calls and dollars), nothing called."""
        return planner.price(self)

    @property
    def mlflow_name(self) -> str:
        return run_name_of(self.name_parts(), self.run_name, self.run_naming)

    def name_parts(self) -> list[tuple[str, str]]:
        """What the run name leads with, as (config group, option)."""
        return [
            ("screener", self.screener.name),
            ("occupation", self.occupation.key),
            ("protected_attr", self.protected.name),
            ("renderer", self.renderer.kind),
            ("estimator", self.estimator.name),
        ]

    def case_name(self) -> str:
        return "-".join(
            [self.occupation.key, self.protected.name, self.renderer.kind, self.screener.name, self.estimator.name]
        )

    def __post_init__(self) -> None:
        if self.design is None:
            self.design = design_of(self.population)
        # worlds the estimator declares but the population cannot draw fail here, before any work
        worlds.check_request(self.population, self.estimator.counterfactuals)

    def sample(self, diagnostics: bool = True) -> Profiles:
        """The population stage: the applicants and the counterfactual worlds the estimator declares;
        `diagnostics=False`: without the population's diagnostics where it draws them (`LogsDiagnostics`)."""
        population: Population = self.population
        if not diagnostics and isinstance(population, LogsDiagnostics):
            population = population.without_diagnostics()
        profiles = population.sample(self.occupation, self.protected, self.seed)
        request = self.world_request(profiles)
        if request is not None:
            profiles.worlds = worlds.draw_worlds(self.population, profiles, request)  # type: ignore[arg-type]
        return profiles

    def world_request(self, profiles: Profiles) -> WorldRequest | None:
        """The worlds the estimator declares, sized for these applicants where it sizes them by the
        case's plan (a target precision: `SizesWorlds`)."""
        request = self.estimator.counterfactuals
        if request is None or not isinstance(self.estimator, SizesWorlds):
            return request
        roles = profiles.roles
        eligible = int(profiles.table[roles.x].isin([roles.x0, roles.x1]).sum())
        scale = ScoreScale.of_range(*self.screener.score_range)  # no scores before the run
        return self.estimator.sized(request, eligible, self.power.settings, self.power.previous, scale)

    def prompts(
        self,
        profiles: Profiles,
        *,
        renderer: Renderer | None = None,
        progress: bool = True,
        store: DocumentStore | None = None,
        stage: Callable[..., Any] = untimed,
        profile_rows: bool = True,
    ) -> CasePrompts:
        """The render step and the design's grouping: what the screener is shown, one Document per
        prompt, for the factual applicants then the counterfactual worlds (one render pass, one
        screening, one cache). The run and the dry-run plan both take this step; a plan passes the
        text layout of an image renderer (`renderer`), no document store, and may leave out the
        documents' profile rows (`profile_rows`, see render_all)."""
        rows = profiles.rows()
        documents = stage(
            "render",
            render_all,
            renderer or self.renderer,
            rows.drop(columns=WORLD),
            profiles.jobs,
            progress,
            None,
            store,
            profile_rows,
        )
        design = self.design or design_of(self.population)
        placebo = placebo_set(self, design, profiles, rows, documents, renderer or self.renderer)
        return CasePrompts(rows, documents, design.prompts(profiles, rows, documents), placebo)

    def run(self) -> RunResult:
        # frozen: what exists before the run is left out of its garbage collections. The MLflow run
        # is logged in the background while the stages compute and is complete when this returns.
        name, tags = self.mlflow_name, {"case_name": self.case_name(), **self.tags}
        with frozen_heap(), sigterm_as_interrupt():
            try:
                with self.tracker.run(name, tags, self.parent_run_id) as run:
                    return self._run(run)
            except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: a KILLED run says what was done
                raise self._killed(exc) from None

    def _killed(self, exc: KeyboardInterrupt) -> Interrupted:
        """Record what the stopped case did (rows answered, dollars) on its KILLED MLflow run;
        the message says how to resume."""
        interrupted = (
            exc
            if isinstance(exc, Interrupted)
            else Interrupted(
                f"case {self.case_name()} stopped by {exc or 'SIGINT'}; answers received are saved. "
                "Rerun the same command to resume: nothing is asked twice."
            )
        )
        metrics = interrupted.metrics or self.screener.metrics()
        message = f"{interrupted}"
        try:
            run_id = self.tracker.record_failure(
                self.mlflow_name,
                {"case_name": self.case_name(), **self.tags, **self.screener.run_tags},
                flatten(self.config),
                message,
                parent_run_id=self.parent_run_id,
                metrics=metrics,
                status="KILLED",
            )
        except Exception as tracking_exc:  # noqa: BLE001 - the interrupt, not the tracking store, is the news
            log.warning("could not record the interrupted case in MLflow: %s", tracking_exc)
            run_id = None
        where = f" (MLflow run {run_id}, KILLED)" if run_id else ""
        return Interrupted(f"{message}{where}", metrics)

    def _run(self, run: RunLogger) -> RunResult:
        stage = Stages()
        profiles, dataset = self._population(run, stage)
        profiles, prompts, results, screening, scored_rows, sequential, placebo = self._screen(run, profiles, stage)
        is_factual = (scored_rows[WORLD] == FACTUAL).to_numpy()
        scored = scored_rows[is_factual].drop(columns=WORLD)
        ok = scored[scored["error"].isna()]
        # the estimator sees the factual rows that were scored, and the world rows it asked for
        scored_worlds = (
            None if self.estimator.counterfactuals is None else scored_rows[~is_factual].reset_index(drop=True)
        )
        data = (
            ok
            if scored_worlds is None
            else pd.concat([ok.assign(**{WORLD: FACTUAL}), scored_worlds], ignore_index=True)
        )
        audit_result = self._start_outcome_audit(run, ok, profiles)
        samples = sample_artifacts(prompts[: len(scored)])  # factual prompts come first
        run.artifacts({"scored.parquet": scored, **samples})
        if isinstance(self.estimator, DeclaresDocuments):  # what is exact by design: the documents and screener
            self.estimator.declare_documents(displayed_attributes(self.renderer), self.screener.reads)
        effects = stage("estimate", self.estimator.estimate, data, profiles.roles, "y")
        effects = explained(self.estimator, effects, self.facts(profiles))  # its notes and gate, in this case
        effects.table = with_units(effects.table, self.estimator, profiles.outcome)
        units_on_figures(effects.table, effects.artifacts)  # the forest's x axis names the unit
        if placebo is not None and self.placebo is not None:  # beside the demographic effects, same unit
            effects = with_placebo(effects, placebo, self.estimator, profiles.outcome, self.placebo)
        effects = with_name_effects(effects, ok, profiles.roles, self.design.name if self.design else "")
        run.artifacts(effects.artifacts)  # the worker draws and writes them while the report is written
        audit = self._outcome_audit(audit_result, stage.timings, profiles)
        result = RunResult(
            effects=effects,
            scored=scored,
            run_id=None,
            notes=profiles.notes,
            timings=stage.timings,
            audit=audit,
            samples=samples,
            screening=screening,
            profiles=profiles,
            scored_worlds=scored_worlds,
            sequential=None if sequential is None else sequential.record,
        )
        scale = ScoreScale.of_scores(ok["y"]) if profiles.outcome == "score" else None
        result.power = run_power(self, dict(effects.metrics)).quietly(  # the run's line on its own variance
            (self.design or design_of(self.population)).name, profiles, scale, self.estimator, self.screener.samples
        )
        result.run_id = run.run_id  # the report names its run
        result.data_sha256 = str(dataset.profile["sha256"])
        if self.audit_report:
            from popfair.report.audit import audit_report

            result.report = stage("report", audit_report, self, result)
        try:
            result.run_id = stage("track", self._track, run, result, profiles)
        except TrackingFailed as exc:  # the results are kept: the command prints them, then the error
            exc.result = result
            raise
        return result

    def _population(self, run: RunLogger, stage: Stages) -> tuple[Profiles, Any]:
        """The applicants (and the worlds the estimator asks for), logged as the run's dataset input
        with the config and roles."""
        profiles: Profiles = stage("population", self.population.sample, self.occupation, self.protected, self.seed)
        request = self.world_request(profiles)
        if request is not None:
            profiles.worlds = stage("worlds", worlds.draw_worlds, self.population, profiles, request)
        for note in profiles.notes:
            log.warning("note: %s", note)
        run.params(flatten(self.config))
        dataset = population_dataset(profiles, population_name(self.population), self.seed)
        run.dataset(dataset)
        run.artifacts(
            {
                "config.yaml": yaml.safe_dump(self.config, sort_keys=False),
                "roles.yaml": yaml.safe_dump(profiles.roles.as_dict(), sort_keys=False),
                **profiles.artifacts,
            }
        )
        return profiles, dataset

    def _screen(self, run: RunLogger, profiles: Profiles, stage: Stages) -> tuple[Any, ...]:
        """Render and screen every applicant and world at once, or in looks stopped by the sequential
        rule: (profiles, prompts, results, screening metrics, scored rows, the looks or None)."""
        design = self.design or design_of(self.population)
        if self.sequential is not None:  # rendered and screened in looks, stopped by the rule (popfair.case.looks)
            from popfair.case.looks import record_artifacts, screen_in_looks

            looks = stage("screen", screen_in_looks, self, profiles)
            run.artifacts(record_artifacts(looks.record))
            check_failure_share(self.screener.name, [r.error for r in looks.results], self.max_failure_share)
            return looks.profiles, looks.prompts, looks.results, looks.metrics, looks.scored_rows, looks, None
        # factual applicants and counterfactual worlds: one render pass, one screening (one cache);
        # placebo re-screens (renderer.placebo) in the same pass, after the case's own prompts
        shown = self.prompts(profiles, store=self.documents, stage=stage)
        results = stage("screen", self.screener.screen, profiles.jobs, shown.screened, profiles.outcome)
        results, placebo_results = results[: len(shown.prompts)], results[len(shown.prompts) :]
        # most screens failed: say why, by cause, instead of letting the estimator complain of empty groups
        check_failure_share(self.screener.name, [r.error for r in results], self.max_failure_share)
        screening = self.screener.metrics()  # API screeners: calls, cache hits, dollars
        scored_rows = design.scored(profiles, shown.rows, shown.documents, shown.prompts, results)
        placebo = placebo_changes(shown.placebo, design, profiles, placebo_results, scored_rows)
        return profiles, shown.prompts, results, screening, scored_rows, None, placebo

    def _start_outcome_audit(self, run: RunLogger, ok: pd.DataFrame, profiles: Profiles) -> Any:
        """The impact ratios of the factual scored rows, started in a forked process beside the
        estimator (forked before any of its threads start); None where the case has none."""
        if self.outcome_audit is None or self.outcome_audit.name == self.estimator.name:
            return None
        log.info("stage outcome_audit ... (beside estimate)")
        pending = forked_call(timed, self.outcome_audit.estimate, ok, profiles.roles, "y")
        return logged_when_done(run, pending, report=self.audit_report)

    def _outcome_audit(self, pending: Any, timings: dict[str, float], profiles: Profiles) -> Effects | None:
        """The outcome audit's effects once done; its failure is a note, the case's own results are kept."""
        if pending is None:
            return None
        try:
            audit, timings["outcome_audit"] = pending()
        except PopfairError as exc:  # an add-on: report it, keep the case's own results
            log.warning("outcome audit skipped: %s", exc)
            profiles.notes.append(f"outcome audit (impact ratios) skipped: {exc}")
            return None
        log.info("stage outcome_audit done in %.2fs", timings["outcome_audit"])
        return audit

    def facts(self, profiles: Profiles) -> CaseFacts:
        """What the estimator's explanation of its effects reads of this case (`ExplainsEffects`)."""
        return CaseFacts(
            roles=profiles.roles,
            shows=displayed_attributes(self.renderer),
            grouped_from=self.population.grouped_from if isinstance(self.population, GroupsColumns) else {},
            documents=self.renderer.kind,
            reads=self.screener.reads,
        )

    def _track(self, run: RunLogger, result: RunResult, profiles: Profiles) -> str | None:
        """Log what the estimate and report stages made (the config, roles, population artifacts,
        documents, scored table and the estimator's artifacts are logged as their stages finish) and
        wait for the run."""
        effects = result.effects
        metrics: dict[str, float] = {
            "n_rows": result.n_rows,
            "n_failed": result.n_failed,
            "failure_rate": result.failure_rate,
            **effects_metrics(effects),
        }
        metrics.update(result.screening)
        metrics.update(result.power.metrics() if result.power is not None else {})
        metrics.update({f"time.{k}_s": v for k, v in result.timings.items()})
        # PopResume reads NDE != 0 as Case 1 only where the resume shows no demographics (section 5.2).
        pattern = "; ".join(patterns.applicable_labels(effects.pattern, self.renderer.kind)) or "none"
        tags = {
            "pattern": pattern,
            "case_name": self.case_name(),
            "git_commit": git_commit(),
            "popfair_version": __version__,
            "occupation": self.occupation.key,
            "protected_attr": self.protected.name,
            "screener": self.screener.name,
            "renderer": self.renderer.kind,
            "estimator": self.estimator.name,
            **({"context": str(self.config["context"].get("name"))} if self.config.get("context") else {}),
            **profiles.tags,
            **generated_page_tags(self, result),
            **self.tags,
        }
        tags.update(result.power.tags() if result.power is not None else {})
        tags.update(self.screener.run_tags)  # e.g. the route `route: auto` chose, and why
        # Choices neither paper states (screener route, snapshot, thinking ...), one tag each.
        tags.update({f"popfair_choice.{key}": value for key, value in self.screener.popfair_choices.items()})
        artifacts: dict[str, Any] = {"effects.csv": effects.table}
        if result.notes:
            artifacts["notes.txt"] = "\n".join(result.notes)
        artifacts.update({f"audit_report/{name}": content for name, content in result.report.items()})
        if result.audit is not None:  # its artifacts were queued when it ended
            metrics.update(result.audit.metrics)
        if result.sequential is not None:  # the looks, why it stopped, both intervals
            metrics.update(result.sequential.metrics())
            tags.update(result.sequential.tags())
        run.artifacts(artifacts)
        log_effects_table(run, effects)
        run.log(metrics=metrics, tags=tags)
        return run.end()
