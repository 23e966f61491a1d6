"""popfair: declarative audits of automated resume screeners for race and gender discrimination.

The public API is importable from here; each name is imported on first use, so `import popfair`
(and `popfair --help`) stays light instead of pulling pandas, MLflow and the whole pipeline:

>>> import popfair
>>> popfair.estimate_pse  # doctest: +ELLIPSIS
<function estimate_pse at ...>
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from popfair._lazy import lazy_exports
from popfair.screen.routes import register_resolver

try:
    __version__ = version("popfair")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

_EXPORTS = {
    "Experiment": "popfair.experiment",
    "RunResult": "popfair.experiment",
    "TableCase": "popfair.table.case",
    "TableRunResult": "popfair.table.case",
    "TableSettings": "popfair.table.settings",
    "TableSource": "popfair.table.mapped",
    "TableCounts": "popfair.table.mapped",
    "estimate_pse": "popfair.estimate.pse",
    "PseResult": "popfair.estimate.pse",
    "PseSettings": "popfair.estimate.dml",
    "paired_gap": "popfair.estimate.paired",
    "PairedGapResult": "popfair.estimate.paired",
    "impact_ratios": "popfair.estimate.impact_ratio",
    "ImpactRatioSettings": "popfair.estimate.impact_ratio",
    "impact_ratios_from_counts": "popfair.estimate.impact_ratio",
    "impact_ratio_inference": "popfair.estimate.impact_inference",
    "RatioInference": "popfair.estimate.impact_inference",
    "panel_report": "popfair.report.panel",
    "parse_ranking": "popfair.design.ranking.parse",
    "RankingEstimator": "popfair.design.ranking.estimate",
    "Effects": "popfair.types",
    "Profiles": "popfair.types",
    "Roles": "popfair.types",
    "Document": "popfair.types",
    "Job": "popfair.types",
    "WorldDesign": "popfair.types",
    "DocumentStore": "popfair.render.store",
    "PopfairError": "popfair.errors",
    "ConfigError": "popfair.errors",
    "DataError": "popfair.errors",
    "EstimationError": "popfair.errors",
}

__all__ = [*_EXPORTS, "__version__"]
register_resolver()  # `route: auto` in the screener configs resolves through it
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
