"""Dry runs: what a case, or every case of a sweep, would cost, computed without calling a model.

A case builds its population and documents and asks the screener's `plan`. Image renderers are
planned cheaply: the screener plans the text layout of every resume (one distinct resume = one
call), and the per-call difference between one real rendered image and its text is added to every
call (tokens and dollars are linear in it), instead of rasterising thousands of PNGs. One `Planner`
holds what the cases of a sweep planned in one process share: the drawn samples and their
documents, the prompts already planned per screener, the image deltas and the power lines. A
document a screener was already planned for in this sweep counts as a cache hit (`new_*` figures):
the second protected attribute of an occupation re-uses the first one's answers through the
response cache."""

from __future__ import annotations

import atexit
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.case import pilot
from popfair.case.base import CasePlan
from popfair.case.population import PopulationCase
from popfair.case.power_plan import answers_note
from popfair.core.types import WORLD, CallPlan, Document, Job, Profiles
from popfair.design.base import ScoreScale
from popfair.estimate import registry
from popfair.estimate.power import PowerPlan
from popfair.population.cache import cached_path, keep_frame, read_kept_frame
from popfair.population.worlds import CounterfactualPopulation
from popfair.render.base import Renderer, displayed_attributes
from popfair.render.store import code_digest
from popfair.render.text import TextRenderer
from popfair.runtime.parallel import forked_call, frozen_heap
from popfair.sweep.plan_layout import TEXT_PARAMETERS, text_layout_renderer, with_shown

__all__ = ["CasePlan", "Planner", "default_planner", "plan_case"]


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


KEPT_RENDERERS = ("text", "json")  # kinds whose plan documents are text alone: kept on disk (_kept_render)
_PLAN_COLUMNS = ["applicant_id", "job_id", "kind", "text"]  # a kept plan document, in Document's order
_WRITES: list[Callable[[], Any]] = []  # kept documents still being written (finish_writes waits for them)


def _kept_render(renderer: Renderer, document_key: str, jobs: Mapping[str, Job]) -> Callable[..., Any]:
    """The plan's render stage, through popfair's disk cache for popfair's own text and JSON
    renderers: a plan's documents are their applicant, job, kind and text (no page; a plan reads no
    profile row, `profile_rows=False`, so the kept ones have none), kept as Parquet (`keep_frame`:
    read back exactly before it is kept) under the rows' digest and the renderer's settings
    (`document_key`), the jobs, the renderer's class and the render package's source and resume data
    (`code_digest`). A grid's occupation renders its text resumes in about a second and reads them
    back in a tenth, so planning a sweep again, with other models, prices or budgets, renders
    nothing. Rendered documents are kept by a forked worker while the plan goes on (`_keep_later`).
    Other renderers (pages, a user's own class) render every time."""
    if renderer.kind not in KEPT_RENDERERS or not type(renderer).__module__.startswith("popfair.render."):
        return _rendered_here
    # the jobs as tuples: asdict of a panel's 6,006 postings takes 0.3 s
    parts = [
        document_key,
        f"{type(renderer).__module__}.{type(renderer).__qualname__}",
        _key([(job.job_id, job.title, job.description, job.attributes) for job in jobs.values()]),
        code_digest(),
    ]

    def stage(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if name != "render":
            return fn(*args)
        path = cached_path("plan_documents", parts, [sys.modules[__name__]], suffix=".parquet")
        kept = read_kept_frame(path)
        if kept is not None:
            return [Document(*row) for row in zip(*(kept[column].tolist() for column in _PLAN_COLUMNS))]
        rendered = fn(*args)
        if path is not None and all(d.image_png is None and d.pdf is None for d in rendered):
            _keep_later(path, rendered)
        return rendered

    return stage


def _keep_later(path: Path, documents: list[Document]) -> None:
    """Keep a plan's documents at `path` in a forked worker (it inherits them: nothing is pickled),
    so the plan does not wait the fifth of a second a grid occupation's frame takes to write and
    check; in this process where it cannot fork (a daemonic worker, one CPU). Waited for at exit."""
    if len(_WRITES) >= _PENDING_WRITES:  # long done by now: their workers joined, not left waiting till exit
        finish_writes()
    try:
        _WRITES.append(forked_call(_keep_documents, path, documents))
    except (AssertionError, OSError):  # multiprocessing refuses a daemonic process children
        _keep_documents(path, documents)


def _keep_documents(path: Path, documents: list[Document]) -> bool:
    frame = pd.DataFrame([(d.applicant_id, d.job_id, d.kind, d.text) for d in documents], columns=_PLAN_COLUMNS)
    return keep_frame(path, frame)


def finish_writes() -> None:
    """Wait until every plan document set being kept is written (at exit; tests)."""
    while _WRITES:
        try:
            _WRITES.pop(0)()
        except Exception:  # noqa: BLE001 - a set not kept is only rendered again next time
            pass


atexit.register(finish_writes)
_PENDING_WRITES = 4  # document sets being kept at once, at most (a sweep over many occupations)


def _rendered_here(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


@dataclass
class Planner:
    """Prices the cases of a sweep in one process (`price`), with what they share: each drawn sample
    (by the population, occupation, attribute, seed and worlds), each document set (by the
    renderer's identity and the rows; a headshot page's set is its text layout's, marked), the sets
    already planned per screener and format, each rendered image of a first resume, and each power
    line (by the design, settings and sample). Equal documents of different sets are one object
    (`texts`, `marked`: the gender and race samples of an occupation share their factual applicants).
    Nothing is process-wide but the planner `default_planner` returns (a command's sweep)."""

    samples: dict[str, tuple[Profiles, str]] = field(default_factory=dict)
    documents: dict[str, tuple[list[Document], Profiles]] = field(default_factory=dict)
    identities: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    job_texts: dict[str, frozenset[str]] = field(default_factory=dict)
    planned: dict[str, list[str]] = field(default_factory=dict)
    fresh: dict[tuple[str, ...], list[Document]] = field(default_factory=dict)
    images: dict[str, Document] = field(default_factory=dict)
    power: dict[tuple[str, str, int], tuple[Profiles, Any]] = field(default_factory=dict)
    eligible: dict[int, tuple[Profiles, int]] = field(default_factory=dict)
    factual: dict[int, tuple[list[Document], list[Document]]] = field(default_factory=dict)
    factual_counts: dict[tuple[int, int], tuple[list[Document], int]] = field(default_factory=dict)
    texts: dict[str, Document] = field(default_factory=dict)
    marked: dict[str, Document] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget what earlier cases planned (a new sweep in the same process)."""
        for memo in (self.samples, self.documents, self.identities, self.job_texts, self.planned, self.fresh,
                     self.images, self.power, self.eligible, self.factual, self.factual_counts, self.texts,
                     self.marked):  # fmt: skip
            memo.clear()

    def price(self, experiment: PopulationCase) -> CasePlan:
        """Ask the screener what this case would cost; nothing is called and nothing is logged. What the
        planner holds is left out of the case's garbage collections (`frozen_heap`): a sweep's document
        sets are many objects, none of them garbage, and every full collection walked them all again as
        they grew."""
        with frozen_heap():
            return self._price(experiment)

    def _price(self, experiment: PopulationCase) -> CasePlan:
        profiles, documents, document_key, image = self._planning_documents(experiment)
        screener = experiment.screener
        power = self._power(experiment, profiles)
        # ranking: the trials its power effect needs
        estimator: Any = experiment.estimator
        plan_note = estimator.plan_note if registry.entry_of(estimator.name).plan_note else None
        total = screener.plan(profiles.jobs, documents, profiles.outcome)
        # same screener, same renderer, same text = the same prompt (an image_photo page differs from
        # the image page of the same resume, so those two never share answers)
        fresh = self._unplanned(_key([experiment.config.get("screener"), experiment.renderer.kind]), document_key)
        new = total if fresh is documents else screener.plan(profiles.jobs, fresh, profiles.outcome)
        if image and documents:
            delta = self.image_call_delta(experiment, profiles, documents[0])
            total, new = _with_delta(total, delta), _with_delta(new, delta)
        return CasePlan(
            case_name=experiment.case_name(),
            screener=screener.name,
            renderer=experiment.renderer.kind,
            documents=len(documents),
            calls=total.calls,
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            cost_usd=total.cost_usd,
            new_calls=new.calls,
            new_input_tokens=new.input_tokens,
            new_output_tokens=new.output_tokens,
            new_cost_usd=new.cost_usd,
            image_estimated_from_text=image,
            estimator_documents=0 if profiles.worlds is None else len(profiles.worlds),
            note="\n  ".join(
                n
                for n in (
                    str(plan_note(profiles)) if plan_note else "",
                    self.estimator_costs(experiment, profiles, total, documents, power),
                    _sequential_note(experiment),
                    answers_note(experiment.screener, power, total),
                )
                if n
            ),
            cached_calls=total.cached,
            power="" if power is None else power.line(),
            mde=None if power is None else power.mde,
        )

    def _planning_documents(self, experiment: PopulationCase) -> tuple[Profiles, list[Document], str, bool]:
        # screeners priced per call, not per token (http, file), plan the real pages: their cache keys
        # and file placeholders need the PNG itself
        image = str(experiment.renderer.kind).startswith("image") and not experiment.screener.plans_real_documents
        config = experiment.config
        sample_key = _key(
            {
                "population": config.get("population"),
                "occupation": config.get("occupation"),
                "protected_attr": config.get("protected_attr"),
                "seed": experiment.seed,
                "design": repr(experiment.estimator.counterfactuals),
            }
        )
        if sample_key not in self.samples:
            # a plan logs no diagnostics (figures and tables logged with a run): half a PopResume sample
            profiles = experiment.sample(diagnostics=False)
            rows = profiles.rows().drop(columns=WORLD)
            digest = hashlib.sha256(pd.util.hash_pandas_object(rows, index=False).to_numpy().tobytes())
            digest.update(repr(list(rows.columns)).encode())
            self.samples[sample_key] = (profiles, digest.hexdigest())  # not the rows: rebuilt where a set is made
        profiles, rows_digest = self.samples[sample_key]
        renderer_config = config.get("renderer") or {}
        text_layout = image or type(experiment.renderer) is TextRenderer  # text and image formats agree on it
        identity: Any = (
            {"text_layout": {k: v for k, v in renderer_config.items() if k in TEXT_PARAMETERS}}
            if text_layout
            else renderer_config
        )
        # a page that shows protected attributes (a headshot) differs where they differ, as its text layout
        # does not: two worlds of one applicant that differ only in X are two calls (image_photo)
        shown = sorted(displayed_attributes(experiment.renderer) or ()) if image else []
        layout = self._with_placebo(experiment, identity)
        document_key = self._with_placebo(experiment, {"layout": identity, "shown": shown}) if shown else layout
        document_key, layout_key = (_key({"renderer": k, "rows": rows_digest}) for k in (document_key, layout))
        if document_key not in self.documents:
            # the run's own step (`PopulationCase.prompts`): what the screener is shown, per prompt. A page
            # with a headshot is its text layout, rendered once for every format of the sample, marked
            renderer = text_layout_renderer(renderer_config) if text_layout else None
            if layout_key not in self.documents:
                stage = _kept_render(renderer or experiment.renderer, layout_key, profiles.jobs)
                documents = experiment.prompts(
                    profiles, renderer=renderer, progress=False, profile_rows=False, stage=stage
                ).screened  # the design's prompts, then any placebo re-screens (renderer.placebo)
                self.documents[layout_key] = (self._shared(documents), profiles)
            documents = self.documents[layout_key][0]
            if shown:
                rows = profiles.rows().drop(columns=WORLD)
                if len(documents) == len(rows):
                    documents = with_shown(documents, rows, shown, self.marked)
                self.documents[document_key] = (documents, profiles)
        return profiles, self.documents[document_key][0], document_key, image

    @staticmethod
    def _with_placebo(experiment: PopulationCase, identity: Any) -> Any:
        """A document set's identity with the case's placebo re-screens: part of what the screener is shown."""
        if experiment.placebo is None:
            return identity
        return {"documents": identity, "placebo": repr(experiment.placebo), "seed": experiment.seed}

    def _shared(self, documents: Any) -> list[Document]:
        """The documents, each resume one string and each equal document one object for the sweep
        (`texts`, by text): the gender and race samples of an occupation draw the same factual applicants,
        whose documents are then held once and compared by identity where a set's unplanned ones are found."""
        texts, shared = self.texts, []
        for d in documents:
            first = texts.setdefault(d.text, d)
            if first is not d and first != d:  # the same text for another applicant or job
                first = Document(d.applicant_id, d.job_id, d.kind, first.text, d.image_png, d.profile, d.pdf)
            shared.append(first)
        return shared

    def _identities(self, document_key: str) -> list[tuple[str, str]]:
        """What makes two documents of a set the same prompt for one screener: the job text and the
        document. Built the first time a set is compared with another (the grid's occupations never are:
        their two protected attributes plan the same set)."""
        if document_key not in self.identities:
            documents, profiles = self.documents[document_key]
            self.identities[document_key] = [(profiles.jobs[d.job_id].description, d.text) for d in documents]
        return self.identities[document_key]

    def _job_texts(self, document_key: str) -> frozenset[str]:
        """The job descriptions a set's documents may be screened for (its sample's jobs)."""
        if document_key not in self.job_texts:
            jobs = self.documents[document_key][1].jobs
            self.job_texts[document_key] = frozenset(job.description for job in jobs.values())
        return self.job_texts[document_key]

    def _unplanned(self, screener_key: str, document_key: str) -> list[Document]:
        """The documents of a set that no earlier case of this sweep planned for the same screener and
        format, and the set marked as planned. Memoised as lists, so the many models of a sweep share
        each list (and the screener's per-list prompt table, `PromptTable`)."""
        documents = self.documents[document_key][0]
        earlier = self.planned.setdefault(screener_key, [])
        if document_key in earlier:
            return []
        memo = (document_key, *sorted(earlier))
        if not earlier:
            fresh = documents
        elif memo in self.fresh:
            fresh = self.fresh[memo]
        else:  # only sets with one of this set's jobs can hold one of its prompts
            jobs = self._job_texts(document_key)
            seen = {i for key in earlier if not jobs.isdisjoint(self._job_texts(key)) for i in self._identities(key)}
            fresh = [d for d, i in zip(documents, self._identities(document_key)) if i not in seen]
            # none planned before (another occupation's set): the set's own list, so that the screener
            # prices it once with its total, and its prompt table is the one the total built
            fresh = self.fresh[memo] = documents if len(fresh) == len(documents) else fresh
        earlier.append(document_key)
        return fresh

    def image_call_delta(self, experiment: PopulationCase, profiles: Profiles, text_document: Document) -> CallPlan:
        """Input tokens and dollars one image call costs beyond the same resume as text: the screener
        plans one really rendered image and its text layout. Zero when either is already cached."""
        row = profiles.table.iloc[0].to_dict()
        job = profiles.jobs[row["job_id"]]
        key = _key([experiment.config.get("renderer"), row, asdict(job)])  # a renderer is deterministic given these
        if key not in self.images:
            self.images[key] = experiment.renderer.render(row, job)
        image_document = self.images[key]
        as_image = experiment.screener.plan(profiles.jobs, [image_document], profiles.outcome)
        as_text = experiment.screener.plan(profiles.jobs, [text_document], profiles.outcome)
        if as_image.calls != 1 or as_text.calls != 1:
            return CallPlan(calls=0)
        return CallPlan(
            calls=0,
            input_tokens=as_image.input_tokens - as_text.input_tokens,
            cost_usd=as_image.cost_usd - as_text.cost_usd,
        )

    def _factual_calls(
        self, experiment: PopulationCase, profiles: Profiles, documents: list[Document], total: CallPlan
    ) -> int:
        """The calls of the factual documents alone (the first `len(profiles.table)` of `documents`).
        Where the response cache holds none of this list's prompts (`total.cached == 0`: every distinct
        prompt is a call), that is the number of distinct prompts among them, counted once per document
        set for every screener of the sweep: a prompt is its job's title and description and the
        document's text and image. Else the screener plans the factual documents (one list per set, so
        its prompt table is built once)."""
        n_factual = len(profiles.table)
        if total.cached:
            key = id(documents)
            if key not in self.factual or self.factual[key][0] is not documents:
                self.factual[key] = (documents, documents[:n_factual])
            return experiment.screener.plan(profiles.jobs, self.factual[key][1], profiles.outcome).calls
        memo = (id(documents), n_factual)
        hit = self.factual_counts.get(memo)
        if hit is None or hit[0] is not documents:
            jobs = profiles.jobs
            distinct = {
                (jobs[d.job_id].title, jobs[d.job_id].description, d.text, d.image_png) for d in documents[:n_factual]
            }
            hit = self.factual_counts[memo] = (documents, len(distinct))
        return hit[1]

    def _power(self, experiment: PopulationCase, profiles: Profiles) -> Any:
        """The case's power plan (`CasePower.plan`), once per design, settings and sample: the models of a
        sweep plan the same sample (a power line costs a root search)."""
        design = experiment.design.name if experiment.design else "population"
        score_range = experiment.screener.score_range
        samples = experiment.screener.samples  # answers per prompt: with a known noise share, the MDE counts them
        key = (
            design,
            repr(
                (experiment.power.settings, experiment.power.previous, score_range, experiment.estimator.name, samples)
            ),
            id(profiles),
        )
        if key not in self.power:
            scale = ScoreScale.of_range(*score_range)
            self.power[key] = (
                profiles,
                pilot.piloted_power(experiment, profiles).plan(design, profiles, scale, experiment.estimator, samples),
            )
        return self.power[key][1]

    def estimator_costs(
        self,
        experiment: PopulationCase,
        profiles: Profiles,
        total: CallPlan,
        documents: list[Document],
        power: PowerPlan | None = None,
    ) -> str:
        """The calls and dollars the estimators of the chosen one's family (the registry's `family`: the
        PSE estimators) need beyond the factual screening, so a paid audit chooses knowingly. With worlds
        in this plan (counterfactual, interventional, both), exactly: this plan's calls less those of its
        factual documents (an applicant's own world is its factual document, and identical documents are
        one call). Without (pse_dml: it reads the factual scores and reports what they cannot identify as
        not identified), the members that draw worlds beside it, each at its own default budget, as an
        upper bound (a new document for every world but the applicant's own), priced at this case's mean
        cost per call. With `plan.effect` and a world budget that detects it (`power.n_needed`), that
        budget priced at this plan's calls per sampled applicant."""
        name = experiment.estimator.name
        members = registry.family_members(name)
        if not members or not isinstance(experiment.population, CounterfactualPopulation):
            return ""
        per_call = total.cost_usd / total.calls if total.calls else 0.0
        n_factual = len(profiles.table)
        if profiles.worlds is not None and len(documents) > n_factual:
            factual = self._factual_calls(experiment, profiles, documents, total)
            extra = total.calls - factual
            n = int(profiles.worlds["applicant_id"].nunique())
            line = (
                f"{name} screens {n:,} applicants' counterfactual worlds: {extra:,} calls beyond the factual "
                f"screening (~${extra * per_call:,.2f}; {total.calls / max(factual, 1):.2f}x the factual screening's "
                f"{factual:,} calls, all that an estimator on factual data alone needs)"
            )
            # a world budget's plan (popfair.estimate.pse.design.budget.world_plan) logs its n as plan.world_n
            needed = power.n_needed if power is not None and "world_n" in power.extra else None
            if needed and n:
                calls = round(extra * needed / n)
                line += f"; plan.effect's budget of {needed:,} applicants: about {calls:,} calls (~${calls * per_call:,.2f})"
            return line
        eligible = self._eligible(profiles)
        priced = []
        for other in members:
            built = registry.at_defaults(other)
            request = None if built is None else built.counterfactuals
            if request is not None:
                n = request.size(eligible)
                extra = (len(request.worlds) - 1) * n
                priced.append(f"{other} ({n:,} applicants' worlds) at most {extra:,} (~${extra * per_call:,.2f})")
        if not priced:
            return ""
        return (
            f"{name} needs no calls beyond the factual screening (effects the factual data cannot identify are "
            f"reported as not identified); measuring all five effects on counterfactual resumes costs "
            + "; ".join(priced)
            + " more"
        )

    def _eligible(self, profiles: Profiles) -> int:
        """Applicants in either compared group, once per sample (the models of a sweep share it)."""
        hit = self.eligible.get(id(profiles))
        if hit is None or hit[0] is not profiles:
            roles = profiles.roles
            hit = self.eligible[id(profiles)] = (
                profiles,
                int(profiles.table[roles.x].isin([roles.x0, roles.x1]).sum()),
            )
        return hit[1]


@lru_cache(maxsize=1)
def default_planner() -> Planner:
    """The planner of this process's command (a sweep's cases planned in one process share it)."""
    return Planner()


def plan_case(experiment: PopulationCase, planner: Planner | None = None) -> CasePlan:
    """What the case would cost (`Planner.price`; default: this process's planner)."""
    return (planner or default_planner()).price(experiment)


def _with_delta(plan: CallPlan, delta: CallPlan) -> CallPlan:
    return replace(
        plan,
        input_tokens=plan.input_tokens + plan.calls * delta.input_tokens,
        cost_usd=plan.cost_usd + plan.calls * delta.cost_usd,
    )


def _sequential_note(experiment: PopulationCase) -> str:
    """A sequential case (config `sequential`): the plan is its budget, the most it can cost."""
    settings = experiment.sequential
    if settings is None:
        return ""
    looks = f"{settings.looks} looks" if settings.looks is not None else f"a look every {settings.batch} units"
    return (
        f"sequential ({settings.rule}, {looks}): this plan is the budget, the most the case can cost; it stops "
        "earlier once the anytime-valid CI settles the rule"
    )
