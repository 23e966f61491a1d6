"""The estimator seam: every estimator registered once, by its `name`, with the study designs whose
scored table it takes and the section of the sweep report its effects go to. The designs, the
table case and the sweep report read this registry; a new estimator is one module, one config file
under conf/estimator/ and one `register_estimator` entry."""

from __future__ import annotations

from dataclasses import dataclass

from popfair.core.errors import ConfigError

SECTIONS = ("effects", "paired", "ranking")  # the sweep report's tables of effects


@dataclass(frozen=True)
class EstimatorEntry:
    """designs: the study designs (popfair.design) whose scored table the estimator takes.
    section: the sweep report's table of its effects (effects: one row per case x effect; paired:
    the panel's gap table; ranking: the ranking table)."""

    designs: tuple[str, ...]
    section: str = "effects"


ESTIMATORS: dict[str, EstimatorEntry] = {}


def register_estimator(name: str, designs: tuple[str, ...], section: str = "effects") -> None:
    """Register (or re-register) the estimator called `name`."""
    if section not in SECTIONS:
        raise ConfigError(f"estimator {name!r}: section must be one of {', '.join(SECTIONS)}, got {section!r}")
    ESTIMATORS[name] = EstimatorEntry(tuple(designs), section)


def estimators_for(design: str) -> tuple[str, ...]:
    """The names of the estimators that apply to a design, in registration order."""
    return tuple(name for name, entry in ESTIMATORS.items() if design in entry.designs)


def in_section(section: str) -> set[str]:
    """The estimators whose effects go to one section of the sweep report."""
    return {name for name, entry in ESTIMATORS.items() if entry.section == section}


register_estimator("paired_gap", ("paired", "table"), section="paired")  # first: the paired design's own
register_estimator("counterfactual", ("population",))  # the population design's default
register_estimator("pse_dml", ("population", "table"))
register_estimator("interventional", ("population",))
register_estimator("both", ("population",))
register_estimator("outcome_gap", ("population", "paired", "table"))
register_estimator("impact_ratio", ("population", "paired", "table"))
register_estimator("ranking", ("ranking",), section="ranking")
