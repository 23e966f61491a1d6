"""The estimate stage: estimators are functions of the scored table and the SFM roles.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "estimate_pse": "popfair.estimate.pse",
    "PseResult": "popfair.estimate.pse",
    "PseDml": "popfair.estimate.pse",
    "PseSettings": "popfair.estimate.dml_settings",
    "TuningGrid": "popfair.estimate.dml_settings",
    "paired_gap": "popfair.estimate.paired",
    "PairedGap": "popfair.estimate.paired",
    "PairedGapResult": "popfair.estimate.paired",
    "impact_ratios": "popfair.estimate.impact_ratio",
    "ImpactRatio": "popfair.estimate.impact_ratio",
    "ImpactRatios": "popfair.estimate.impact_ratio",
    "ImpactRatioSettings": "popfair.estimate.impact_ratio",
    "impact_ratios_from_counts": "popfair.estimate.impact_ratio",
    "impact_ratio_inference": "popfair.estimate.impact_inference",
    "RatioInference": "popfair.estimate.impact_inference",
    "OutcomeGap": "popfair.estimate.outcome_gap",
    "Interventional": "popfair.estimate.interventional",
    "SideBySide": "popfair.estimate.side_by_side",
    "Estimator": "popfair.estimate.base",
    "EFFECTS": "popfair.estimate.sfm",
    "TARGETS": "popfair.estimate.sfm",
    "CONTRASTS": "popfair.estimate.sfm",
    "pattern_labels": "popfair.estimate.sfm",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
