"""Fisher's exact test and the two-standard-deviation Z test beside the reference-aware test: equal to
scipy's Fisher test, to audit-AI's published two-proportion Z (pooled rate) and to scipy's 2 x 2
chi-square without continuity correction (z squared) on a worked example, blank
for the reference, in the summary, the report, MLflow's metrics and the console; the flags still follow
the reference-aware test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from popfair import ImpactRatioSettings, impact_ratios_from_counts
from popfair.report.console import format_effects

SETTINGS = ImpactRatioSettings(n_bootstrap=500)


def audit_ai_z(selected_1: int, n_1: int, selected_2: int, n_2: int) -> tuple[float, float]:
    """audit-AI's published two-tailed Z test for proportions (auditai.utils.general.two_tailed_ztest),
    written from its formula: z = (p1 - p2) / sqrt(p (1 - p) (1/n1 + 1/n2)) with p the pooled rate,
    p-value = 2 P(Z > |z|)."""
    p1, p2 = selected_1 / n_1, selected_2 / n_2
    pooled = (selected_1 + selected_2) / (n_1 + n_2)
    z = (p1 - p2) / math.sqrt(pooled * (1 - pooled) * (1 / n_1 + 1 / n_2))
    return z, 2 * stats.norm.sf(abs(z))


@pytest.fixture(scope="module")
def worked():
    """200 women (50 selected) and 200 men (80 selected); races white 220 (85), black 120 (30), asian 60 (15)."""
    counts = pd.DataFrame(
        {
            "sex": ["female", "female", "female", "male", "male", "male"],
            "race": ["white", "black", "asian", "white", "black", "asian"],
            "n": [110, 60, 30, 110, 60, 30],
            "selection": [35, 10, 5, 50, 20, 10],
        }
    )
    return impact_ratios_from_counts(counts, settings=SETTINGS)


def test_the_worked_example_by_hand(worked):
    """Women against men: p1 = 0.25, p2 = 0.40, pooled 0.325, var = 0.325 * 0.675 * (1/200 + 1/200) =
    0.00219375, z = -0.15 / 0.046837 = -3.2026."""
    women = worked.table.query("dimension == 'sex' and category == 'female'").iloc[0]
    assert women["z"] == pytest.approx(-3.2026, abs=1e-4)
    assert women["z_p"] == pytest.approx(2 * stats.norm.sf(3.2026), rel=1e-3)
    assert women["fisher_p"] == pytest.approx(stats.fisher_exact([[50, 150], [80, 120]]).pvalue, rel=1e-12)


def test_every_category_against_the_reference_equals_scipy_and_audit_ai(worked):
    compared = 0
    for (_, _), block in worked.table.groupby(["metric", "dimension"]):
        reference = block[block["is_reference"]].iloc[0]
        for row in block.itertuples():
            if row.is_reference or row.status != "included":
                assert np.isnan(row.fisher_p) and np.isnan(row.z) and np.isnan(row.z_p)
                continue
            a, n, b, m = row.n_selected, row.n_applicants, reference["n_selected"], reference["n_applicants"]
            fisher = stats.fisher_exact([[a, n - a], [b, m - b]], alternative="two-sided").pvalue
            assert row.fisher_p == pytest.approx(fisher, rel=1e-12)
            z, p = audit_ai_z(a, n, b, m)
            assert row.z == pytest.approx(z, rel=1e-9) and row.z_p == pytest.approx(p, rel=1e-9)
            # scipy's view of the same test: the 2 x 2 chi-square without continuity correction is z squared
            chi2 = stats.chi2_contingency([[a, n - a], [b, m - b]], correction=False)
            assert row.z**2 == pytest.approx(chi2.statistic, rel=1e-9)
            assert row.z_p == pytest.approx(chi2.pvalue, rel=1e-9)
            compared += 1
    assert compared >= 8  # sex 1, race 2, sex x race 5


def test_the_flags_follow_the_reference_aware_test_not_fisher_or_z():
    """Eight races of 100, seven with 40 selected and one with 24: Fisher (p 0.023) and Z (|z| 2.43)
    call the eighth different from the reference, but the reference was picked as the most selected of
    eight, and the reference-aware test does not let the flag survive."""
    counts = pd.DataFrame(
        {
            "sex": ["female", "male"] * 8,
            "race": [f"r{i}" for i in range(8) for _ in range(2)],
            "n": [50] * 16,
            "selection": [20, 20] * 7 + [12, 12],
        }
    )
    result = impact_ratios_from_counts(counts, settings=ImpactRatioSettings(n_bootstrap=1000))
    low = result.table.query("dimension == 'race' and category == 'r7'").iloc[0]
    assert low["fisher_p"] < 0.05 and low["z_p"] < 0.05 and abs(low["z"]) > 2
    assert low["flag"] and low["p_adjusted"] > 0.05 and not low["flag_survives"]


def test_they_reach_the_summary_metrics_and_console_labelled_as_conditional(worked):
    summary = worked.summary()
    women = summary[(summary["dimension"] == "Sex") & (summary["category"] == "Female")].iloc[0]
    assert women["fisher_p"] == round(stats.fisher_exact([[50, 150], [80, 120]]).pvalue, 4)
    assert "conditional on the reference choice" in worked.markdown()
    metrics = worked.metrics()
    assert metrics["ll144.selection.sex.female.given_reference.z"] == pytest.approx(-3.2026, abs=1e-4)
    assert "ll144.selection.sex.male.given_reference.z" not in metrics  # the reference has none
    effects = worked.effects()
    printed = format_effects(effects)
    assert "fisher_p" in printed and "z_p" in printed
    assert "conditional on the reference choice" in printed


def test_the_report_table_has_them(worked, tmp_path):
    from popfair.report.ll144 import AuditData, ll144_blocks

    data = AuditData("test", "a worked example", "counts", "n/a", "400")
    blocks = ll144_blocks(worked, data, tmp_path)
    sex = next(b.content for b in blocks if b.kind == "table" and "Sex category" in b.content.columns)
    fisher = stats.fisher_exact([[50, 150], [80, 120]]).pvalue
    assert list(sex["Fisher p vs reference"]) == [f"{fisher:.4f}", ""]
    assert sex["Z vs reference (p)"].iloc[0] == "-3.20 (0.0014)"
    notes = [line for b in blocks if b.kind == "list" for line in b.content]
    assert any("conditional on the reference choice" in line for line in notes)
