"""The public API: every documented name imports from `popfair` and its stage packages, lazily
(`import popfair` loads none of pandas, matplotlib, MLflow or a provider SDK)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import popfair

STAGES = [
    "popfair.estimate",
    "popfair.population",
    "popfair.design",
    "popfair.render",
    "popfair.screen",
    "popfair.track",
    "popfair.report",
    "popfair.design.table",
]
DOCUMENTED = ["Experiment", "RunResult", "estimate_pse", "paired_gap", "impact_ratios", "panel_report", "TableCase"]


@pytest.mark.parametrize("package", ["popfair", *STAGES])
def test_every_exported_name_imports(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, (package, name)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute"):
        module.not_a_public_name  # noqa: B018


def test_documented_names_are_the_defining_objects_with_numpydoc_sections():
    from popfair.estimate.pse.dml.estimator import estimate_pse
    from popfair.report.panel import panel_report

    assert popfair.estimate_pse is estimate_pse and popfair.panel_report is panel_report
    for name in DOCUMENTED:
        doc = getattr(popfair, name).__doc__ or ""
        for section in ("Parameters\n", "Examples\n"):
            assert section in doc, (name, section)


def test_import_popfair_loads_no_heavy_dependency():
    heavy = ["pandas", "matplotlib", "mlflow", "openai", "anthropic", "boto3", "xgboost", "hydra"]
    code = (
        "import sys, popfair, popfair.estimate, popfair.screen, popfair.report; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(
    "module",
    [
        "popfair",
        "popfair.estimate.gap.paired",
        "popfair.estimate.impact_ratio.ratios",
        "popfair.design.ranking.parse",
        "popfair.estimate.ranking.estimator",
    ],
)
def test_docstring_examples_run(module):
    import doctest

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# popfair.__all__ as it stood before the package was reorganised into layers (issue "One house"):
# moving code must not move, add or drop a public name.
PUBLIC_API = [
    "Experiment", "RunResult", "TableCase", "TableRunResult", "TableSettings", "TableSource", "TableCounts",
    "estimate_pse", "PseResult", "PseSettings", "paired_gap", "PairedGapResult", "impact_ratios",
    "ImpactRatioSettings", "impact_ratios_from_counts", "impact_ratio_inference", "RatioInference",
    "panel_report", "parse_ranking", "RankingEstimator", "Effects", "Profiles", "Roles", "Document", "Job",
    "WorldDesign", "DocumentStore", "PopfairError", "ConfigError", "DataError", "EstimationError", "__version__",
]  # fmt: skip


def test_the_public_api_is_unchanged():
    assert popfair.__all__ == PUBLIC_API
    from popfair.core.types import WorldRequest

    assert popfair.WorldDesign is WorldRequest  # public names kept when their classes were renamed
    from popfair.case.population import PopulationCase

    assert popfair.Experiment is PopulationCase
