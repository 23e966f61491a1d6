"""One verdict per row: p-values never print as 0, shares print with the precision that decides them,
every ranking row called significant shows the p-value behind it and agrees with its CI."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from popfair.core.formats import decisive_percent, format_p
from popfair.estimate.ranking.estimator import binomial_share, normal_p


def test_p_values_never_print_as_zero():
    assert format_p(1.9e-12) == "1.9e-12"
    assert format_p(0.0) == "< 1e-12" and format_p(3e-15) == "< 1e-12"
    assert format_p(0.04213) == "0.0421" and format_p(float("nan")) == ""


def test_shares_print_with_the_precision_that_decides_them():
    assert decisive_percent(0.019986, 0.02) == "1.999%"  # under a 2% rule: below it, and it says so
    assert decisive_percent(0.02, 0.02) == "2.00%"
    assert decisive_percent(0.020004, 0.02) == "2.0004%"
    assert decisive_percent(0.35, 0.02) == "35.00%"


@pytest.mark.parametrize("selected", [0, 3, 9, 17, 25, 40])
def test_a_top1_share_is_significant_exactly_where_its_ci_excludes_the_null(selected):
    n, null, alpha = 120, 1 / 8, 0.05
    share, se, low, high, p = binomial_share(selected, n, null, alpha)
    assert share == selected / n and low <= share <= high
    assert (p <= alpha) == (null < low or null > high)  # Clopper-Pearson inverts the central binomial test


def test_normal_rows_p_inverts_their_ci():
    rng = np.random.default_rng(0)
    estimate, se = rng.normal(0.5, 0.05, 200), np.full(200, 0.02)
    p = normal_p(estimate, se, 0.5)
    z = stats.norm.ppf(0.975)
    assert ((p <= 0.05) == ((estimate - z * se > 0.5) | (estimate + z * se < 0.5))).all()


def test_the_ranking_audit_has_no_significant_row_without_a_p_value():
    from popfair.case.population import PopulationCase
    from tests.conftest import compose_config

    cfg = compose_config(["experiment=ranking_race_gender", "population.n_trials=200", "tracking=none"])
    table = PopulationCase.from_config(cfg).run().effects.table
    assert table["p_value"].notna().all(), table.index[table["p_value"].isna()].tolist()
    ratio = table[table.index.str.startswith("impact_ratio.")]
    assert not (ratio["significant"] & (ratio["ci_high"] >= 1)).any()
    others = table[~table.index.str.startswith("impact_ratio.")]
    assert (others["significant"] == (others["p_value"] <= 0.05)).all()


def test_the_designs_forest_colours_by_significance_marks_methods_and_not_identified():
    import pandas as pd

    from popfair.track.figures import SIGNIFICANT, forest_plot

    table = pd.DataFrame(
        {
            "estimate": [0.05, 0.0],
            "ci_low": [0.01, -0.02],
            "ci_high": [0.09, 0.02],
            "significant": [True, False],
            "dml_estimate": [0.06, float("nan")],
            "dml_ci_low": [-0.01, float("nan")],
            "dml_ci_high": [0.13, float("nan")],
            "dml_identified": [True, False],
            "unit": ["points", "points"],
        },
        index=["TE", "NDE"],
    )
    series = (("", "counterfactual design", "C3"), ("dml_", "DML-UCA (factual data)", "C0"))
    fig = forest_plot(table, "gender", series)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "effect (points)"
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["DML-UCA: n.i."]  # NDE: DML does not identify it, said at its place
    drawn = [c for c in ax.collections if len(c.get_offsets()) and len(c.get_facecolor())]
    shapes = {c.get_paths()[0].vertices.shape for c in drawn}
    assert len(shapes) >= 2  # one marker shape per method (circle, square)
    red = np.array([int(SIGNIFICANT[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    filled_red = [c for c in drawn if np.allclose(c.get_facecolor()[0][:3], red)]
    # the design's TE only: its CI excludes 0; DML's TE CI covers 0
    assert len(filled_red) == 1 and filled_red[0].get_offsets()[0][0] == 0.05
