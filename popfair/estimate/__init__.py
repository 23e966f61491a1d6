"""The estimate stage: estimators are functions of the scored table and the SFM roles.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "estimate_pse": "popfair.estimate.pse.dml.estimator",
    "PseResult": "popfair.estimate.pse.dml.estimator",
    "PseDml": "popfair.estimate.pse.dml.estimator",
    "PseSettings": "popfair.estimate.pse.settings",
    "TuningGrid": "popfair.estimate.pse.settings",
    "paired_gap": "popfair.estimate.gap.paired",
    "PairedGap": "popfair.estimate.gap.paired",
    "PairedGapResult": "popfair.estimate.gap.paired",
    "impact_ratios": "popfair.estimate.impact_ratio.ratios",
    "ImpactRatio": "popfair.estimate.impact_ratio.ratios",
    "ImpactRatios": "popfair.estimate.impact_ratio.ratios",
    "ImpactRatioSettings": "popfair.estimate.impact_ratio.ratios",
    "impact_ratios_from_counts": "popfair.estimate.impact_ratio.ratios",
    "impact_ratio_inference": "popfair.estimate.impact_ratio.inference",
    "RatioInference": "popfair.estimate.impact_ratio.inference",
    "OutcomeGap": "popfair.estimate.gap.outcome_gap",
    "Interventional": "popfair.estimate.pse.design.interventional",
    "SideBySide": "popfair.estimate.pse.design.side_by_side",
    "Estimator": "popfair.estimate.base",
    "EFFECTS": "popfair.estimate.pse.sfm",
    "TARGETS": "popfair.estimate.pse.sfm",
    "CONTRASTS": "popfair.estimate.pse.sfm",
    "pattern_labels": "popfair.estimate.pse.sfm",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
