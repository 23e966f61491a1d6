"""The estimator seam: every estimator registered once, by its `name`, with the study designs whose
scored table it takes and the section of the sweep report its effects go to. The designs, the
table case, the sweep report and the dry run (popfair.sweep.plan) read this registry; a new
estimator is one module, one config file under conf/estimator/ and one `register_estimator` entry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.utils import get_object

from popfair.core.errors import ConfigError
from popfair.core.types import Effects
from popfair.estimate.base import CaseFacts, ExplainsEffects

SECTIONS = ("effects", "paired", "ranking")  # the sweep report's tables of effects


@dataclass(frozen=True)
class EstimatorEntry:
    """designs: the study designs (popfair.design) whose scored table the estimator takes.
    section: the sweep report's table of its effects (effects: one row per case x effect; paired:
    the panel's gap table; ranking: the ranking table).
    family: estimators that answer the same question ("pse": the five path-specific effects); a dry
    run prices the other members beside the one chosen, so a paid audit chooses knowingly.
    target: its class (module.Class), built with its defaults to price it when another member of
    its family was chosen (its own defaults, not a copy of its YAML's).
    plan_note: it has a `plan_note(profiles) -> str` method whose line a dry run prints (ranking:
    the trials its power effect needs)."""

    designs: tuple[str, ...]
    section: str = "effects"
    family: str = ""
    target: str = ""
    plan_note: bool = False


ESTIMATORS: dict[str, EstimatorEntry] = {}


def register_estimator(
    name: str,
    designs: tuple[str, ...],
    section: str = "effects",
    family: str = "",
    target: str = "",
    plan_note: bool = False,
) -> None:
    """Register (or re-register) the estimator called `name` (fields: `EstimatorEntry`)."""
    if section not in SECTIONS:
        raise ConfigError(f"estimator {name!r}: section must be one of {', '.join(SECTIONS)}, got {section!r}")
    ESTIMATORS[name] = EstimatorEntry(tuple(designs), section, family, target, plan_note)


def entry_of(name: str) -> EstimatorEntry:
    """The registry entry of `name`; an unregistered estimator (a user's own class) has the defaults."""
    return ESTIMATORS.get(name, EstimatorEntry(()))


def family_members(name: str) -> tuple[str, ...]:
    """The other registered estimators of `name`'s family, in registration order (none without one)."""
    family = entry_of(name).family
    return tuple(other for other, e in ESTIMATORS.items() if family and e.family == family and other != name)


def at_defaults(name: str) -> Any:
    """The estimator `name` built with its own defaults (its entry's `target`); None without one."""
    target = entry_of(name).target
    if not target:
        return None
    return get_object(target)()


FAMILY_EXPLAINERS: dict[str, str] = {}  # family -> its `explain(estimator, effects, facts)` (module.function)


def register_family(family: str, explain: str) -> None:
    """Declare what every member of `family` explains of its effects (`ExplainsEffects`, once for the
    family): `explain` names a function `(estimator, effects, facts) -> Effects` (module.function)."""
    FAMILY_EXPLAINERS[family] = explain


def explained(estimator: Any, effects: Effects, facts: CaseFacts) -> Effects:
    """`effects` as the estimator explains them in this case: its own `explain` (`ExplainsEffects`),
    else its registered family's, else as they are."""
    if isinstance(estimator, ExplainsEffects):
        return estimator.explain(effects, facts)
    target = FAMILY_EXPLAINERS.get(entry_of(str(estimator.name)).family)
    return effects if target is None else get_object(target)(estimator, effects, facts)


def estimators_for(design: str) -> tuple[str, ...]:
    """The names of the estimators that apply to a design, in registration order."""
    return tuple(name for name, entry in ESTIMATORS.items() if design in entry.designs)


def in_section(section: str) -> set[str]:
    """The estimators whose effects go to one section of the sweep report."""
    return {name for name, entry in ESTIMATORS.items() if entry.section == section}


register_estimator("paired_gap", ("paired", "table"), section="paired")  # first: the paired design's own
PSE = "pse"  # the five path-specific effects, by design (worlds) or from factual data
register_family(PSE, explain="popfair.estimate.pse.estimand.explain_effects")  # estimand notes, structural gate
register_estimator(  # the population design's default
    "counterfactual", ("population",), family=PSE, target="popfair.estimate.pse.design.counterfactual.Counterfactual"
)
register_estimator("pse_dml", ("population", "table"), family=PSE)
register_estimator("pse_paper", ("population", "table"), family=PSE, plan_note=True)  # the PopResume authors' own
register_estimator("interventional", ("population",), family=PSE)
register_estimator("both", ("population",), family=PSE)
register_estimator("outcome_gap", ("population", "paired", "table"))
register_estimator("impact_ratio", ("population", "paired", "table"))
register_estimator("ranking", ("ranking",), section="ranking", plan_note=True)
