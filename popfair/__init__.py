"""popfair: declarative audits of automated resume screeners for race and gender discrimination.

The public API is importable from here; each name is imported on first use, so `import popfair`
(and `popfair --help`) stays light instead of pulling pandas, MLflow and the whole pipeline:

>>> import popfair
>>> popfair.estimate_pse  # doctest: +ELLIPSIS
<function estimate_pse at ...>
"""

from __future__ import annotations

from popfair.core.lazy import lazy_exports
from popfair.runtime.routes import register_resolver
from popfair.runtime.version import __version__

_EXPORTS = {
    "Experiment": "popfair.case.population:PopulationCase",  # the population case; its public name since 0.1
    "RunResult": "popfair.case.result",
    "TableCase": "popfair.case.table",
    "TableRunResult": "popfair.case.table",
    "TableSettings": "popfair.design.table.settings",
    "TableSource": "popfair.design.table.mapped",
    "TableCounts": "popfair.design.table.mapped",
    "estimate_pse": "popfair.estimate.pse.dml.estimator",
    "PseResult": "popfair.estimate.pse.dml.estimator",
    "PseSettings": "popfair.estimate.pse.settings",
    "paired_gap": "popfair.estimate.gap.paired",
    "PairedGapResult": "popfair.estimate.gap.paired",
    "impact_ratios": "popfair.estimate.impact_ratio.ratios",
    "ImpactRatioSettings": "popfair.estimate.impact_ratio.ratios",
    "impact_ratios_from_counts": "popfair.estimate.impact_ratio.ratios",
    "impact_ratio_inference": "popfair.estimate.impact_ratio.inference",
    "RatioInference": "popfair.estimate.impact_ratio.inference",
    "panel_report": "popfair.report.panel",
    "parse_ranking": "popfair.design.ranking.parse",
    "RankingEstimator": "popfair.estimate.ranking.estimator",
    "Effects": "popfair.core.types",
    "Profiles": "popfair.core.types",
    "Roles": "popfair.core.types",
    "Document": "popfair.core.types",
    "Job": "popfair.core.types",
    "WorldDesign": "popfair.core.types:WorldRequest",  # the estimator's worlds; its public name since 0.1
    "DocumentStore": "popfair.render.store",
    "PopfairError": "popfair.core.errors",
    "ConfigError": "popfair.core.errors",
    "DataError": "popfair.core.errors",
    "EstimationError": "popfair.core.errors",
}

__all__ = [*_EXPORTS, "__version__"]


def _load_providers() -> None:
    """Import the provider adapters, which declare their credential chains as they register (a route
    may need one to be chosen; runtime, a layer below, cannot import them itself)."""
    import popfair.screen.providers  # noqa: F401


register_resolver(_load_providers)  # `route: auto` in the screener configs resolves through it
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
