"""One seam per kind of change (docs/concepts/architecture.md): a toy design, a toy screener and a
toy estimator plug in from this file alone, each with one registry entry, and a case runs through
all three; the designs' estimator lists, the table case and the sweep report follow the registry.
A toy provider is one class here, its registry line and its YAML: route choice, log redaction,
pricing and pre-flight read what it declares."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import popfair.design
from popfair.case import base as case_base
from popfair.case.base import CaseDescription, CasePlan, CaseResult, CaseSettings, register_case
from popfair.case.compose import build
from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, MissingSecretError, require
from popfair.core.types import CallPlan, Document, Effects, Job, Outcome, Profiles, Roles, ScreenResult
from popfair.design import DESIGNS, design_named, for_outcome
from popfair.design.base import OnePromptPerDocument
from popfair.design.population.planning import PopulationLooks
from popfair.estimate import power as pw
from popfair.estimate import registry
from popfair.estimate.power import PowerPlan, PowerSettings
from popfair.population.popresume import PopResumePopulation
from popfair.runtime.routes import CREDENTIAL_CHAINS, CredentialChain
from popfair.runtime.secrets import SECRET_VARIABLES, redact
from popfair.screen.base import Screener
from popfair.screen.failures import FailureHints
from popfair.screen.preflight import probe_endpoint, screener_checks
from popfair.screen.pricing import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, PricingUnit
from popfair.screen.providers import PROVIDERS, Completion, PermanentError, Provider, register_provider
from popfair.sweep.plan import Planner
from popfair.sweep.run_case import _print_summary, case_from_config
from tests.conftest import compose_config
from tests.screen_helpers import JOBS, png

GRADES = {"A": 100.0, "B": 75.0, "C": 50.0, "D": 25.0, "F": 0.0}


class GradedDesign(OnePromptPerDocument):
    """A fifth design: the screener answers a letter grade, read as 100, 75, 50, 25 or 0."""

    name = "graded"
    outcome: Outcome = "grade"  # type: ignore[assignment] - a design of one's own asks its own question
    prompt_files: Mapping[str, str] = {"system": "score_system.txt", "user": "score_user.txt"}

    def parse_reply(self, raw: str) -> tuple[float | None, str | None]:
        match = re.search(r"\b([ABCDF])\b", raw)
        return (GRADES[match.group(1)], None) if match else (None, "unparseable answer: no letter grade")


class GradedLooks(PopulationLooks):
    """The graded design's sequential audit: an applicant is a unit, the gap of mean grades its only target."""

    targets: tuple[str, ...] = ("gap",)

    def value_bounds(self, target: str, profiles: Profiles) -> tuple[float, float]:
        return (0.0, 100.0)


def graded_power(profiles: Profiles, settings: PowerSettings, previous: Any, scale: Any = None) -> PowerPlan:
    """The graded design's power line: a two-sample t test of the grades (SD 35 points: five grades)."""
    n1 = int((profiles.table[profiles.roles.x] == profiles.roles.x1).sum())
    n0 = int((profiles.table[profiles.roles.x] == profiles.roles.x0).sum())
    mde = pw.mean_difference_mde(n1, n0, 35.0, settings.alpha, settings.power)
    return PowerPlan("gap of mean grades", "points", "applicants", n1 + n0, settings.alpha, settings.power, mde,
                     "two-sample t test", ("a grade SD of 35 points",), settings.effect, None)  # fmt: skip


GradedDesign.power_line = staticmethod(graded_power)  # type: ignore[assignment]
GradedDesign.sequential = GradedLooks()
DESIGN = GradedDesign()


class GradedPopulation(PopResumePopulation):
    """PopResume applicants, drawn for the graded design."""

    design = "graded"

    def sample(self, occupation: Any, protected: Any, seed: int) -> Profiles:
        profiles = super().sample(occupation, protected, seed)
        profiles.outcome = "grade"  # type: ignore[assignment]
        return profiles


class LetterScreener(Screener):
    """A toy screener: grades a resume by its length (longer = better), replying in words; the reply
    becomes a value by the rule of the design that asked (`for_outcome`)."""

    name = "letters"

    def __init__(self, **_: Any) -> None:
        self.calls = 0

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        rule = for_outcome(outcome)
        results = []
        for document in documents:
            self.calls += 1
            grade = "ABCDF"[len(document.text) % 5]
            value, error = rule.parse_reply(f"I would give this resume a {grade}.")
            results.append(ScreenResult(document.applicant_id, f"grade {grade}", value, error))
        return results

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=len(documents))

    def metrics(self) -> dict[str, float]:
        return {"toy.calls": float(self.calls)}


class MedianGap:
    """A toy estimator: the difference in median outcome of x1 and x0 (no inference)."""

    name = "median_gap"
    counterfactuals = None

    def __init__(self, **_: Any) -> None:
        pass

    def effect_unit(self, effect: str, outcome: str) -> str:
        """Its own unit (popfair.estimate.base.DeclaresUnits): no report module names it."""
        return "grade points"

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        by = data.groupby(roles.x)[y].median()
        gap = float(by[roles.x1] - by[roles.x0])
        table = pd.DataFrame(
            {"estimate": [gap], "se": [np.nan], "ci_low": [np.nan], "ci_high": [np.nan]},
            index=pd.Index(["median_gap"], name="effect"),
        )
        return Effects(table=table)


@pytest.fixture
def plugged(monkeypatch):
    """The one registry entry each: DESIGNS for the design, the estimator registry for the estimator
    (the screener needs none: its config names its class)."""
    monkeypatch.setitem(DESIGNS, "graded", __name__)
    monkeypatch.setitem(registry.ESTIMATORS, "median_gap", registry.EstimatorEntry(("graded", "table")))


def _case(*overrides: str, estimator: str = f"{__name__}.MedianGap"):
    return compose_config(
        [
            f"population._target_={__name__}.GradedPopulation",
            f"screener._target_={__name__}.LetterScreener",
            "estimator=outcome_gap",
            f"estimator._target_={estimator}",
            "population.n=300",
            "tracking=none",
            "outcome_audit=null",
            "document_store=false",
            *overrides,
        ]
    )


def test_a_case_runs_through_a_toy_design_screener_and_estimator(plugged):
    experiment = PopulationCase.from_config(_case())
    assert experiment.design is DESIGN and isinstance(experiment.screener, LetterScreener)
    result = experiment.run()
    assert set(result.scored["y"].dropna().unique()) <= set(GRADES.values())
    assert result.scored["raw"].str.startswith("grade ").all()  # the screener's own answers, read by the design
    assert result.screening == {"toy.calls": 300.0}  # a declared ability: the screener's metrics
    by = result.scored.groupby("gender")["y"].median()
    assert result.effects.table.loc["median_gap", "estimate"] == pytest.approx(by["male"] - by["female"])
    assert result.units == ["grade points"]  # the estimator's declared unit, beside its estimate


def test_a_design_declares_its_power_line_and_sequential_audit(plugged):
    """The dry run's power line and a sequential audit of the toy design come from its own declarations:
    popfair.design.base.plan_power and popfair.design.sequential name no design."""
    experiment = PopulationCase.from_config(_case("dry_run=true"))
    power = experiment.run().power
    assert power is not None and power.estimand == "gap of mean grades" and power.mde > 0
    result = PopulationCase.from_config(_case("sequential.rule=budget", "sequential.looks=3")).run()
    assert result.sequential.target.name == "gap" and [look.n_units for look in result.sequential.looks] == [
        100,
        200,
        300,
    ]
    with pytest.raises(ConfigError, match="sequential.target: 'impact_ratio' does not apply to the graded design"):
        PopulationCase.from_config(_case("sequential.rule=budget", "sequential.target=impact_ratio"))
    for module in ("base.py", "sequential.py"):
        source = (Path(popfair.design.__file__).parent / module).read_text()
        assert not re.search(r"""["'](population|paired|ranking|table)["']""", source), module


def test_the_registry_decides_which_estimators_apply(plugged):
    assert design_named("graded").estimators == ("median_gap",)
    assert "median_gap" in design_named("table").estimators  # registered for tables too
    assert "median_gap" not in design_named("population").estimators
    with pytest.raises(ConfigError, match="does not apply to the graded design; choose one of median_gap"):
        PopulationCase.from_config(
            _case(estimator="popfair.estimate.gap.outcome_gap.OutcomeGap")
        )  # not registered for it


def test_a_component_that_is_not_a_screener_is_refused_by_name(plugged):
    with pytest.raises(ConfigError, match="MedianGap is not a screener: subclass popfair.screen.base.Screener"):
        PopulationCase.from_config(_case(f"screener._target_={__name__}.MedianGap"))


def test_the_sweep_report_sections_follow_the_registry(monkeypatch):
    from popfair.report import sweep

    effects = pd.DataFrame(
        {
            "estimator": ["pse_dml", "paired_gap", "ranking", "own_gap"],
            **{key: ["x"] * 4 for key in sweep.CASE_KEYS},
            "effect": ["TE", "gap", "top1", "gap"],
            "estimate": [1.0, 2.0, 3.0, 4.0],
            **{c: [0.0] * 4 for c in ("se", "ci_low", "ci_high", "p_value", "significant", "pattern", "case_name")},
            "run_id": list("abcd"),
        }
    )
    kept = set(sweep.popresume_effects(effects)["estimator"])
    assert kept == {"pse_dml", "own_gap"}  # an unregistered estimator's effects are shown as effects
    monkeypatch.setitem(registry.ESTIMATORS, "own_gap", registry.EstimatorEntry(("paired",), section="paired"))
    assert set(sweep.popresume_effects(effects)["estimator"]) == {"pse_dml"}


# --- a kind of case: one class with compose, run, plan and describe, one registration line ---------
@dataclass(kw_only=True)
class PollResult(CaseResult):
    """A poll's result: the share that said yes, over the answers read."""

    answers: int

    @property
    def n_rows(self) -> int:
        return self.answers

    @property
    def n_failed(self) -> int:
        return 0


@dataclass
class PollCase:
    """A toy kind of case: the share of yes (1) among a poll's answers (config `+poll.answers=[...]`),
    with a normal-approximation 95% interval; nothing rendered or screened."""

    answers: tuple[int, ...]
    tracker: Any
    name: str = "poll"

    @classmethod
    def compose(cls, parts: Any, settings: CaseSettings) -> PollCase:
        answers = parts.values("poll").get("answers") or []
        require(all(a in (0, 1) for a in answers), "poll.answers", f"must be 0s and 1s, got {answers!r}")
        return cls(tuple(answers), parts.build("tracking"), f"poll-{len(answers)}-seed{settings.seed}")

    def case_name(self) -> str:
        return self.name

    def describe(self) -> CaseDescription:
        return CaseDescription(self.name, "poll")

    def plan(self, planner: Any) -> CasePlan:
        return CasePlan.free(self.name, "poll")

    def run(self) -> PollResult:
        share = float(np.mean(self.answers))
        se = math.sqrt(share * (1 - share) / len(self.answers))
        table = pd.DataFrame(
            {"estimate": [share], "se": [se], "ci_low": [share - 1.96 * se], "ci_high": [share + 1.96 * se],
             "unit": ["proportion"]},
            index=pd.Index(["yes_share"], name="effect"),
        )  # fmt: skip
        return PollResult(effects=Effects(table=table), answers=len(self.answers), failed_label="unanswered")


@pytest.fixture
def poll_kind():
    """The toy case's one registration line (popfair.case.base.register_case), undone after the test."""
    register_case("poll", f"{__name__}.PollCase", chosen_by="poll")
    yield
    del case_base.CASE_KINDS["poll"]


def test_a_toy_kind_of_case_is_one_class_and_one_registration_line(poll_kind, capsys):
    """The config's `poll` group chooses the toy kind (compose reads the config once); the command
    runs and plans it through the Case contract, reading the result's declared fields."""
    answers = "+poll.answers=[1,0,1,1,0,1,1,1]"
    case = case_from_config(compose_config([answers, "tracking=none"]))
    assert isinstance(case, PollCase) and case.describe() == CaseDescription("poll-8-seed0", "poll")
    result = case.run()
    assert result.effects.table.loc["yes_share", "estimate"] == 0.75 and result.units == ["proportion"]
    assert result.periods is None and result.watch is None and result.sequential is None and result.printed()
    with pytest.raises(ConfigError, match=r"poll.answers: must be 0s and 1s, got \[2\]"):
        case_from_config(compose_config(["+poll.answers=[2]", "tracking=none"]))
    # what the command prints of a case: the result's declared fields (popfair.sweep.run_case)
    _print_summary(case, result, time.perf_counter())
    shown = capsys.readouterr().out
    assert "yes_share     0.75" in shown and "applicants: 8   unanswered: 0" in shown
    assert case.plan(Planner()).line().startswith("plan poll-8-seed0: 0 documents")
    # without the registration line the poll group chooses nothing: the default (population) case
    others = {name: kind for name, kind in case_base.CASE_KINDS.items() if name != "poll"}
    assert case_base.kind_for({"poll"}, others).name == "population"


# --- a provider: one class declaring its facts, one registry line, one YAML -----------------------
TOY_YAML = """\
defaults:
  - base/llm@_here_
  - _self_
name: toy
default_route: hosted
routes:
  hosted: {provider: toy_chat, model: toy-1, api_key_env: TOY_API_KEY, base_url: "http://toy.invalid/v1"}
  chain: {provider: toy_chat, model: toy-1, base_url: "http://toy.invalid/v1"}
vision: true
price: {input_per_mtok: 1.0, output_per_mtok: 2.0}
"""
TOY_SECRET = "toy-secret-value-0123456789"


class ToyChat(Provider):
    """A toy provider answering 70 to every prompt, without a network. Everything pre-flight, pricing,
    routes and secrets know of it is declared here."""

    key_variables = ("TOY_SECRET",)  # redacted from logs even when popfair does not read it
    credentials = CredentialChain("toy credentials", "TOY_TOKEN", ("TOY_TOKEN",))  # when a route names no key
    pricing = PricingUnit("tokens; 258 per image", image_rule=lambda width, height: 258)
    hints = FailureHints("screener.routes.<route>.base_url", "screener.routes.<route>.model")
    models = ("toy-1",)  # what its endpoint lists

    @classmethod
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        require(base_url is not None, "screener.base_url", f"is required for provider {cls.kind}")

    def probe(self, timeout_s: float) -> bool:
        if os.environ.get("TOY_API_KEY") == "revoked":
            raise PermanentError("HTTP 401: the token was revoked", auth=True, cause="HTTP 401")
        return self.model in self.models

    def body(self, prompt: Any, image: Any) -> dict[str, Any]:
        return {"model": self.model, "system": prompt.system, "user": prompt.user, "image": image}

    async def send(self, body: dict[str, Any]) -> Completion:
        return Completion(text="70", input_tokens=5, output_tokens=1)


@pytest.fixture
def toy(monkeypatch, tmp_path):
    """Registers ToyChat (the one registry line) and writes its YAML; a composer of configs using it.
    The registries are put back afterwards."""
    register_provider("toy_chat")(ToyChat)
    (tmp_path / "conf" / "screener").mkdir(parents=True)
    (tmp_path / "conf" / "screener" / "toy.yaml").write_text(TOY_YAML)
    for variable in ("TOY_API_KEY", "TOY_TOKEN", "TOY_SECRET"):
        monkeypatch.delenv(variable, raising=False)

    def screener(*overrides: str, require_key: bool = True) -> Any:
        cfg = compose_config(
            ["screener=toy", f"hydra.searchpath=[file://{tmp_path / 'conf'}]", *overrides], tmp_path=tmp_path
        )
        return build(cfg.screener, "screener", require_key=require_key)

    yield screener
    PROVIDERS.pop("toy_chat")
    CREDENTIAL_CHAINS.pop("toy_chat")
    SECRET_VARIABLES.discard("TOY_SECRET")


def test_a_toy_provider_is_one_class_and_its_routes_follow_its_declared_keys(toy, monkeypatch):
    with pytest.raises(MissingSecretError, match="hosted: export TOY_API_KEY .*; chain: export TOY_TOKEN"):
        toy()  # no credentials at all: every route named with what enables it
    monkeypatch.setenv("TOY_TOKEN", "t")  # the provider's own chain: the keyless route is ready
    screener = toy()
    assert screener.route == "chain" and isinstance(screener.provider, ToyChat)
    assert (
        screener.run_tags["route_reason"] == "auto: TOY_TOKEN is set; TOY_API_KEY, for the default route hosted, is not"
    )
    monkeypatch.setenv("TOY_API_KEY", "k" * 12)
    assert toy().route == "hosted"
    with pytest.raises(ConfigError, match="screener.base_url: is required for provider toy_chat"):
        toy("screener.routes.hosted.base_url=null")  # the setting it declares it cannot do without


def test_a_toy_providers_secrets_pricing_and_preflight_come_from_its_declaration(toy, monkeypatch, tmp_path):
    monkeypatch.setenv("TOY_SECRET", TOY_SECRET)
    monkeypatch.setenv("TOY_API_KEY", "toy-key-0123456789")
    screener = toy()
    assert redact(f"sent {TOY_SECRET}") == "sent [REDACTED]"  # its key variable, redacted once built

    pages = [png(seed, (800, 1000)) for seed in range(2)]
    docs = [Document(f"a{i}", "nurse", "image", "", pages[i % 2]) for i in range(4)]
    plan = screener.plan(JOBS, docs, "score")
    prompts = [screener.prompts.build("score", JOBS["nurse"], d) for d in docs[:2]]
    text = sum(math.ceil((len(p.system) + len(p.user)) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS for p in prompts)
    assert (plan.calls, plan.input_tokens) == (2, text + 2 * 258)  # its pricing unit: 258 tokens an image
    results = screener.screen(JOBS, docs, "score")
    assert [r.value for r in results] == [70.0] * 4 and screener.metrics()["screen.answered"] == 2

    checks = {c.name: c for c in screener_checks(screener) + probe_endpoint(screener)}
    assert all(c.ok for c in checks.values()) and checks["model id"].detail.endswith(
        "toy-1 is known to http://toy.invalid/v1"
    )
    unknown = {c.name: c for c in probe_endpoint(toy("screener.routes.hosted.model=toy-2"))}["model id"]
    assert not unknown.ok and unknown.fix == "check screener.routes.<route>.model (the route's model id)"  # its hints
    monkeypatch.setenv("TOY_API_KEY", "revoked")
    (rejected,) = probe_endpoint(toy())
    assert rejected.name == "key" and rejected.fix == "the key was rejected: check TOY_API_KEY"
    monkeypatch.delenv("TOY_API_KEY")
    keyless = toy("screener.route=chain", require_key=False)
    assert {c.name: c for c in screener_checks(keyless)}["key"].fix == "export TOY_TOKEN"  # its chain, named
