"""Dry runs: what a case, or every case of a sweep, would cost, computed without calling a model.

A case builds its population and documents and asks the screener's `plan`. Image renderers are
planned cheaply: the screener plans the text layout of every resume (one distinct resume = one
call), and the per-call difference between one real rendered image and its text is added to every
call (tokens and dollars are linear in it), instead of rasterising thousands of PNGs. Within one process
the documents are memoised across cases, and a document a screener was already planned for in this
sweep counts as a cache hit (`new_*` figures): the second protected attribute of an occupation
re-uses the first one's answers through the response cache."""

from __future__ import annotations

import atexit
import hashlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.case.population import PopulationCase
from popfair.core.types import WORLD, CallPlan, Document, Job, Profiles
from popfair.design.base import ScoreScale
from popfair.estimate import registry
from popfair.estimate.power import PowerPlan
from popfair.population.cache import cached_path, keep_frame, read_kept_frame
from popfair.population.worlds import CounterfactualPopulation
from popfair.render.base import Renderer, displayed_attributes
from popfair.render.store import code_digest
from popfair.render.text import TextRenderer
from popfair.runtime.parallel import forked_call

# planning memo: population config -> profiles, their rows and the rows' digest
_SAMPLES: dict[str, tuple[Profiles, pd.DataFrame, str]] = {}
# planning memo: (renderer, profile rows) -> documents and the profiles whose jobs they are screened for
_DOCUMENTS: dict[str, tuple[list[Document], Profiles]] = {}
_IDENTITIES: dict[str, list[tuple[str, str]]] = {}  # document set -> each document's prompt identity, once asked
_PLANNED: dict[str, list[str]] = {}  # screener config and format -> document sets already planned
_FRESH: dict[tuple[str, ...], list[Document]] = {}  # (document set, earlier sets) -> its documents not in those
# planning memo: (renderer config, profile row, job) -> that row rendered as an image: the VLM cases of a
# sweep render the same first resume, and the samples of an occupation's two protected attributes
# start with the same row
_IMAGES: dict[str, Document] = {}
# planning memo: (design, power settings, previous run, profiles by identity) -> the profiles and the power plan
_POWER: dict[tuple[str, str, int], tuple[Profiles, Any]] = {}
_ELIGIBLE: dict[int, tuple[Profiles, int]] = {}  # profiles by identity -> the profiles and their x0 or x1 rows


@dataclass
class CasePlan:
    """Calls, tokens and dollars of one case; `new_*` leave out answers earlier cases already bought."""

    case_name: str
    screener: str
    renderer: str
    documents: int
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    new_calls: int
    new_input_tokens: int
    new_output_tokens: int
    new_cost_usd: float
    image_estimated_from_text: bool = False
    estimator_documents: int = 0  # of `documents`, the counterfactual worlds the estimator declared (interventional)
    note: str = ""  # what the estimator says about the case's size (ranking: trials needed for a given effect)
    cached_calls: int = 0  # distinct prompts the response cache already answers: reused, not paid (a grown case)
    power: str = ""  # what the main test can detect at this n, and its assumptions (config plan.*)
    mde: float | None = None  # the minimum detectable effect, in plan.effect's unit

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        estimate = " (image tokens from the text layout)" if self.image_estimated_from_text else ""
        own = f" ({self.estimator_documents:,} for the estimator)" if self.estimator_documents else ""
        return (
            f"plan {self.case_name}: {self.documents:,} documents{own}, {self.calls:,} calls "
            f"({self.new_calls:,} not yet planned), {self.input_tokens:,} input + "
            f"{self.output_tokens:,} output tokens, ${self.cost_usd:,.2f} "
            f"(${self.new_cost_usd:,.2f} new){estimate}"
            + (f"; {self.cached_calls:,} answers reused from the response cache" if self.cached_calls else "")
            + (f"\n  {self.note}" if self.note else "")
            + (f"\n  {self.power}" if self.power else "")
        )


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


_TEXT_PARAMETERS = set(inspect.signature(TextRenderer).parameters)


def text_layout_renderer(renderer_config: dict[str, Any]) -> TextRenderer:
    """The text renderer with the image renderer's content settings (pools, seed, ...): the same
    resume as the image, as text."""
    return TextRenderer(**{k: v for k, v in renderer_config.items() if k in _TEXT_PARAMETERS})


def _planning_documents(experiment: PopulationCase) -> tuple[Profiles, list[Document], str, bool]:
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
    if sample_key not in _SAMPLES:
        profiles = _sample(experiment)
        rows = profiles.rows().drop(columns=WORLD)
        digest = hashlib.sha256(pd.util.hash_pandas_object(rows, index=False).to_numpy().tobytes())
        digest.update(repr(list(rows.columns)).encode())
        _SAMPLES[sample_key] = (profiles, rows, digest.hexdigest())
    profiles, rows, rows_digest = _SAMPLES[sample_key]
    renderer_config = config.get("renderer") or {}
    text_layout = image or type(experiment.renderer) is TextRenderer  # text and image formats agree on it
    identity: Any = (
        {"text_layout": {k: v for k, v in renderer_config.items() if k in _TEXT_PARAMETERS}}
        if text_layout
        else renderer_config
    )
    # a page that shows protected attributes (a headshot) differs where they differ, as its text layout
    # does not: two worlds of one applicant that differ only in X are two calls (image_photo)
    shown = sorted(displayed_attributes(experiment.renderer) or ()) if image else []
    if shown:
        identity = {"layout": identity, "shown": shown}
    document_key = _key({"renderer": identity, "rows": rows_digest})
    if document_key not in _DOCUMENTS:
        renderer = text_layout_renderer(renderer_config) if text_layout else None
        # the run's own step (`PopulationCase.prompts`): what the screener is shown, per prompt
        stage = _kept_render(renderer or experiment.renderer, document_key, profiles.jobs)
        documents = list(
            experiment.prompts(profiles, renderer=renderer, progress=False, profile_rows=False, stage=stage).prompts
        )
        if shown and len(documents) == len(rows):
            documents = with_shown(documents, rows, shown)
        _DOCUMENTS[document_key] = (documents, profiles)
    return profiles, _DOCUMENTS[document_key][0], document_key, image


def with_shown(documents: list[Document], rows: pd.DataFrame, shown: list[str]) -> list[Document]:
    """Text layouts marked with the protected attributes the page shows (`Renderer.shows`: the
    headshot's gender and race), so that the plan counts the pages that differ only in them apart."""
    marks = rows[shown].astype(str).agg(" ".join, axis=1).tolist()
    return [replace(d, text=f"{d.text}\n[photo: {mark}]") for d, mark in zip(documents, marks)]


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
    kind = getattr(renderer, "kind", None)
    if kind not in KEPT_RENDERERS or not type(renderer).__module__.startswith("popfair.render."):
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


def _identities(document_key: str) -> list[tuple[str, str]]:
    """What makes two documents of a set the same prompt for one screener: the job text and the
    document. Built the first time a set is compared with another (the grid's occupations never are:
    their two protected attributes plan the same set)."""
    if document_key not in _IDENTITIES:
        documents, profiles = _DOCUMENTS[document_key]
        _IDENTITIES[document_key] = [(profiles.jobs[d.job_id].description, d.text) for d in documents]
    return _IDENTITIES[document_key]


def _sample(experiment: PopulationCase) -> Profiles:
    """The case's sample, without the population's diagnostics (`population.diagnostics`: figures and
    tables logged with a run as MLflow artifacts, which a plan never logs): the same applicants and
    worlds, at half the cost of a PopResume sample."""
    population = experiment.population
    if getattr(population, "diagnostics", None) is not True:
        return experiment.sample()
    population.diagnostics = False  # type: ignore[attr-defined]
    try:
        return experiment.sample()
    finally:
        population.diagnostics = True  # type: ignore[attr-defined]


def _unplanned(screener_key: str, document_key: str) -> list[Document]:
    """The documents of a set that no earlier case of this sweep planned for the same screener and
    format, and the set marked as planned. Memoised as lists, so the many models of a sweep share
    each list (and the screener's per-list prompt table, `PromptTable`)."""
    documents = _DOCUMENTS[document_key][0]
    earlier = _PLANNED.setdefault(screener_key, [])
    if document_key in earlier:
        return []
    memo = (document_key, *sorted(earlier))
    if not earlier:
        fresh = documents
    elif memo in _FRESH:
        fresh = _FRESH[memo]
    else:
        seen = {identity for key in earlier for identity in _identities(key)}
        fresh = _FRESH[memo] = [d for d, i in zip(documents, _identities(document_key)) if i not in seen]
    earlier.append(document_key)
    return fresh


def image_call_delta(experiment: PopulationCase, profiles: Profiles, text_document: Document) -> CallPlan:
    """Input tokens and dollars one image call costs beyond the same resume as text: the screener
    plans one really rendered image and its text layout. Zero when either is already cached."""
    row = profiles.table.iloc[0].to_dict()
    job = profiles.jobs[row["job_id"]]
    key = _key([experiment.config.get("renderer"), row, asdict(job)])  # a renderer is deterministic given these
    if key not in _IMAGES:
        _IMAGES[key] = experiment.renderer.render(row, job)
    image_document = _IMAGES[key]
    as_image = experiment.screener.plan(profiles.jobs, [image_document], profiles.outcome)
    as_text = experiment.screener.plan(profiles.jobs, [text_document], profiles.outcome)
    if as_image.calls != 1 or as_text.calls != 1:
        return CallPlan(calls=0)
    return CallPlan(
        calls=0,
        input_tokens=as_image.input_tokens - as_text.input_tokens,
        cost_usd=as_image.cost_usd - as_text.cost_usd,
    )


def _with_delta(plan: CallPlan, delta: CallPlan) -> CallPlan:
    return replace(
        plan,
        input_tokens=plan.input_tokens + plan.calls * delta.input_tokens,
        cost_usd=plan.cost_usd + plan.calls * delta.cost_usd,
    )


def piloted_power(experiment: Any, profiles: Any) -> Any:
    """The case's power settings, with an offline screener's pilot of its own applicants and worlds as
    the previous run the plan scales (popfair.case.pilot): the dry run, `popfair doctor` and the run
    then state their MDE on the same score scale and world correlation."""
    import dataclasses

    from popfair.case.pilot import pilot_run

    pilot = pilot_run(experiment, profiles)
    return experiment.power if pilot is None else dataclasses.replace(experiment.power, previous=pilot)


def _power(experiment: PopulationCase, profiles: Profiles) -> Any:
    """The case's power plan (`CasePower.plan`), once per design, settings and sample: the models of a
    sweep plan the same sample (a power line costs a root search)."""
    design = experiment.design.name if experiment.design else "population"
    score_range = experiment.screener.score_range
    key = (
        design,
        repr((experiment.power.settings, experiment.power.previous, score_range, experiment.estimator.name)),
        id(profiles),
    )
    if key not in _POWER:
        scale = ScoreScale.of_range(*score_range)
        _POWER[key] = (
            profiles,
            piloted_power(experiment, profiles).plan(design, profiles, scale, experiment.estimator),
        )
    return _POWER[key][1]


def _sequential_note(experiment: PopulationCase) -> str:
    """A sequential case (config `sequential`): the plan is its budget, the most it can cost."""
    settings = getattr(experiment, "sequential", None)
    if settings is None:
        return ""
    looks = f"{settings.looks} looks" if settings.looks is not None else f"a look every {settings.batch} units"
    return (
        f"sequential ({settings.rule}, {looks}): this plan is the budget, the most the case can cost; it stops "
        "earlier once the anytime-valid CI settles the rule"
    )


def plan_case(experiment: PopulationCase) -> CasePlan:
    """Ask the screener what this case would cost; nothing is called and nothing is logged."""
    profiles, documents, document_key, image = _planning_documents(experiment)
    screener = experiment.screener
    power = _power(experiment, profiles)
    # ranking: the trials its power effect needs
    estimator: Any = experiment.estimator
    plan_note = estimator.plan_note if registry.entry_of(estimator.name).plan_note else None
    total = screener.plan(profiles.jobs, documents, profiles.outcome)
    # same screener, same renderer, same text = the same prompt (an image_photo page differs from
    # the image page of the same resume, so those two never share answers)
    fresh = _unplanned(_key([experiment.config.get("screener"), experiment.renderer.kind]), document_key)
    new = total if fresh is documents else screener.plan(profiles.jobs, fresh, profiles.outcome)
    if image and documents:
        delta = image_call_delta(experiment, profiles, documents[0])
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
                estimator_costs(experiment, profiles, total, documents, power),
                _sequential_note(experiment),
            )
            if n
        ),
        cached_calls=total.cached,
        power="" if power is None else power.line(),
        mde=None if power is None else power.mde,
    )


def estimator_costs(
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
        factual = experiment.screener.plan(profiles.jobs, documents[:n_factual], profiles.outcome).calls
        extra = total.calls - factual
        n = int(profiles.worlds["applicant_id"].nunique())
        line = (
            f"{name} screens {n:,} applicants' counterfactual worlds: {extra:,} calls beyond the factual "
            f"screening (~${extra * per_call:,.2f}; {total.calls / max(factual, 1):.2f}x the factual screening's "
            f"{factual:,} calls, all that an estimator on factual data alone needs)"
        )
        # a world budget's plan (popfair.estimate.pse.budget.world_plan) logs its n as plan.world_n
        needed = power.n_needed if power is not None and "world_n" in power.extra else None
        if needed and n:
            calls = round(extra * needed / n)
            line += (
                f"; plan.effect's budget of {needed:,} applicants: about {calls:,} calls (~${calls * per_call:,.2f})"
            )
        return line
    eligible = _eligible(profiles)
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


def _eligible(profiles: Profiles) -> int:
    """Applicants in either compared group, once per sample (the models of a sweep share it)."""
    hit = _ELIGIBLE.get(id(profiles))
    if hit is None or hit[0] is not profiles:
        roles = profiles.roles
        hit = _ELIGIBLE[id(profiles)] = (profiles, int(profiles.table[roles.x].isin([roles.x0, roles.x1]).sum()))
    return hit[1]


PLAN_SUMS = [
    "cases",
    "documents",
    "calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "new_calls",
    "new_input_tokens",
    "new_output_tokens",
    "new_cost_usd",
]


def plan_totals(plans: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-screener sums of case plans plus a TOTAL row (what a sweep's dry run prints at the end)."""
    table = pd.DataFrame(plans).assign(cases=1)
    per_model = table.groupby("screener")[PLAN_SUMS].sum()
    per_model.loc["TOTAL"] = per_model.sum()
    return per_model


def format_totals(totals: pd.DataFrame) -> str:
    shown = totals.copy()
    for column in ("cost_usd", "new_cost_usd"):
        shown[column] = shown[column].map("${:,.2f}".format)
    for column in [c for c in PLAN_SUMS if c not in ("cost_usd", "new_cost_usd")]:
        shown[column] = shown[column].map("{:,.0f}".format)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        return shown.to_string()
