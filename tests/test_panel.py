"""Model-panel report: per-axis tables with Bonferroni across models, chart, race-gender correlation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from popfair.core.errors import DataError, EstimationError
from popfair.estimate.gap.paired import paired_gap
from popfair.report.panel import format_panel_table, panel_report, panel_row, panel_tables, race_gender_correlation
from tests.test_paired_gap import pairs_with_counts

# (model, release date, race b, race c, gender b, gender c): counts chosen to span the significance levels
PANEL = [
    ("gpt-3.5-turbo", "2023-05-01", 953, 443, 1750, 827),
    ("claude-3-haiku", "2024-03-07", 700, 730, 900, 3600),
    ("gpt-4o-mini", "2024-07-18", 500, 646, 700, 1500),
    ("gemini-2.5-flash", "2025-06-17", 600, 650, 800, 815),
    ("llama-3.1-8b", "2024-07-23", 1460, 2183, 1500, 2300),
]


@pytest.fixture(scope="module")
def results() -> pd.DataFrame:
    rows = []
    for i, (model, date, rb, rc, gb, gc) in enumerate(PANEL):
        race = paired_gap(
            pairs_with_counts(6006, 4, rb, rc, 8000, seed=i),
            y_adv="y_white",
            y_other="y_black",
            cluster="posting",
            n_bootstrap=300,
        )
        gender = paired_gap(
            pairs_with_counts(6006, 8, gb, gc, 16000, seed=i),
            y_adv="y_white",
            y_other="y_black",
            cluster="posting",
            n_bootstrap=300,
        )
        rows += [panel_row(model, "race", date, race), panel_row(model, "gender", date, gender)]
    return pd.DataFrame(rows)


def test_tables_per_axis_with_paper_columns_and_bonferroni(results):
    tables = panel_tables(results)
    assert set(tables) == {"race", "gender"}
    race = tables["race"]
    assert race["release_date"].is_monotonic_increasing and race["model"].iloc[0] == "gpt-3.5-turbo"
    first = race.iloc[0]
    assert round(first["gap_pp"], 2) == 2.12 and round(first["bc_ratio"], 2) == 2.15
    assert first["discordant_share"] == pytest.approx(1396 / 24024) and first["stars"] == "***"
    assert (race["bonferroni_alpha"] == 0.05 / 5).all()
    assert (race["significant_bonferroni"] == (race["cluster_p"] < 0.01)).all()
    expected_stars = np.where(
        race["mcnemar_p"] < 0.001,
        "***",
        np.where(race["mcnemar_p"] < 0.01, "**", np.where(race["mcnemar_p"] < 0.05, "*", "")),
    )
    assert (race["stars"] == expected_stars).all()
    gemini = race.set_index("model").loc["gemini-2.5-flash"]
    assert not gemini["significant_bonferroni"]  # 600 vs 650: not significant after correction
    by_mcnemar = panel_tables(results, bonferroni_on="mcnemar_p")["race"]
    assert (by_mcnemar["significant_bonferroni"] == (by_mcnemar["mcnemar_p"] < 0.01)).all()
    text = format_panel_table(race)
    assert "+2.12***" in text and "953:443" in text and "2.15" in text and "5.8%" in text


def test_correlation_chart_and_report(results):
    corr = race_gender_correlation(results)
    wide = results.pivot(index="model", columns="axis", values="gap_pp")
    assert corr["pearson_r"] == pytest.approx(stats.pearsonr(wide["race"], wide["gender"]).statistic)
    assert corr["n_models"] == 5
    report = panel_report(results)
    assert isinstance(report.figure, Figure) and len(report.figure.axes) == 2
    assert report.correlation is not None and "Pearson r=" in report.to_text()


def test_one_model_panel_and_bad_inputs_are_clear_errors(results):
    one = results[results["model"] == "gpt-3.5-turbo"]
    with pytest.raises(EstimationError, match="has one model .*Bonferroni"):
        panel_tables(one)
    with pytest.raises(DataError, match="lack columns \\['release_date'\\]"):
        panel_tables(results.drop(columns="release_date"))
    with pytest.raises(DataError, match="repeat model x axis"):
        panel_tables(pd.concat([results, results.head(1)]))
    with pytest.raises(EstimationError, match="at least 3 models"):
        race_gender_correlation(results[results["model"].isin(["gpt-3.5-turbo", "gpt-4o-mini"])])


def test_release_dates_of_month_and_day_precision_mix():
    # the panel's configs hold both (gpt35_turbo: "2023-05"; most: YYYY-MM-DD); a format inferred from
    # the first row must not turn the others into missing dates
    from popfair.report.panel import panel_tables

    rows = [
        {"model": m, "axis": "race", "release_date": d, "gap_pp": 1.0, "ci_low": 0.0, "ci_high": 2.0}
        | {"b": 10, "c": 5, "n_pairs": 100, "mcnemar_chi2": 1.0, "mcnemar_p": 0.1, "cluster_p": 0.1}
        for m, d in [("old", "2023-05"), ("new", "2024-03-07")]
    ]
    table = panel_tables(pd.DataFrame(rows))["race"]
    assert list(table["release_date"]) == ["2023-05-01", "2024-03-07"]
