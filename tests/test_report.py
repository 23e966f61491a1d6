"""The sweep report on a synthetic MLflow store with known numbers: effects and significance per
case, the pattern tally, photo vs no-photo pairs, the callback panel with Bonferroni (checked
against statsmodels) and the race-gender correlation (against scipy)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from popfair.core.errors import DataError
from popfair.core.types import Effects
from popfair.estimate.pse.sfm import CASE_LABELS
from popfair.report.document import markdown_table
from popfair.report.patterns import pattern_tally
from popfair.report.runs import effects_long, load_runs
from popfair.report.sweep import case_table, write_report
from popfair.track.mlflow_tracker import MlflowTracker

PSE = ["TE", "NDE", "NIE", "BIE", "RIE"]
PANEL = {  # model -> release date, race gap, gender gap, cluster p (race), cluster p (gender)
    "old_model": ("2023-05-01", 2.12, 1.92, 0.0001, 0.0001),
    "mid_model": ("2024-07-18", -0.61, -1.10, 0.004, 0.03),
    "new_model": ("2025-10-01", -0.14, 0.11, 0.40, 0.60),
    "big_model": ("2026-01-15", -1.04, -2.12, 0.0005, 0.0002),
}


def _log(tracker: MlflowTracker, parent: str, name: str, tags: dict, params: dict, metrics: dict) -> str:
    with tracker.run(name, {"case_name": name, **tags}, parent) as run:
        run.params(params)
        run.metrics(metrics)
        return run.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    tracker = MlflowTracker(uri=f"sqlite:///{tmp}/mlflow.db", artifact_root=str(tmp / "artifacts"))
    parent = tracker.start_parent("sweep", {"popfair.sweep": "parent"})
    rng = np.random.default_rng(0)
    truth = {}
    for fmt in ("image", "image_photo"):
        for attr, pattern in (("gender", f"{CASE_LABELS[1]}; {CASE_LABELS[5]}"), ("race", "none")):
            estimates = rng.normal(0, 1, 5)
            metrics = {}
            for effect, value in zip(PSE, estimates):
                low, high = (value - 0.5, value + 0.5) if effect != "RIE" else (-1.0, 1.0)
                metrics.update(
                    {
                        f"{effect}.estimate": value,
                        f"{effect}.ci_low": low,
                        f"{effect}.ci_high": high,
                        f"{effect}.se": 0.25,
                    }
                )
            name = f"nurse-{attr}-{fmt}-vlm"
            truth[name] = estimates
            _log(
                tracker,
                parent,
                name,
                {
                    "occupation": "nurse",
                    "protected_attr": attr,
                    "renderer": "image",
                    "choice.renderer": fmt,
                    "screener": "vlm",
                    "estimator": "pse_dml",
                    "pattern": pattern,
                },
                {},
                metrics,
            )
    for model, (released, race_gap, gender_gap, p_race, p_gender) in PANEL.items():
        for attr, gap, p in (("race", race_gap, p_race), ("gender", gender_gap, p_gender)):
            metrics = {
                "gap.estimate": gap,
                "gap.ci_low": gap - 0.3,
                "gap.ci_high": gap + 0.3,
                "gap.se": 0.15,
                "gap.b": 900,
                "gap.c": 450,
                "gap.n_pairs": 24024,
                "gap.mcnemar_chi2": 140.0,
                "gap.mcnemar_p": p / 2,
                "gap.cluster_p": p,
                "gap.p_value": p,
            }
            _log(
                tracker,
                parent,
                f"panel-{attr}-{model}",
                {"protected_attr": attr, "screener": model, "estimator": "paired_gap", "renderer": "json"},
                {"screener.release_date": released},
                metrics,
            )
    tracker.record_failure(
        "nurse-race-text-broken", {"protected_attr": "race"}, {}, "RuntimeError: boom", "Traceback ...", parent
    )
    return tracker, parent, truth


def test_effects_are_read_back_with_significance(store):
    tracker, parent, truth = store
    runs = load_runs(tracker.uri, parent_run_id=parent)
    assert len(runs) == 4 + 8 + 1 and (runs["status"] == "FAILED").sum() == 1
    effects = effects_long(runs)
    pse = effects[effects["estimator"] == "pse_dml"]
    for name, estimates in truth.items():
        got = pse[pse["case_name"] == name].set_index("effect").loc[PSE, "estimate"]
        np.testing.assert_allclose(got.to_numpy(), estimates)
    by_ci = pse.assign(expected=(pse["ci_low"] > 0) | (pse["ci_high"] < 0))
    assert (by_ci["significant"] == by_ci["expected"]).all()
    assert not pse.loc[pse["effect"] == "RIE", "significant"].any()
    paired = effects[effects["estimator"] == "paired_gap"]
    assert (paired["significant"] == (paired["p_value"] < 0.05)).all()


def test_case_table_and_pattern_tally(store):
    tracker, parent, _ = store
    effects = effects_long(load_runs(tracker.uri, parent_run_id=parent))
    pse = effects[effects["estimator"] == "pse_dml"]
    cases = case_table(pse)
    assert len(cases) == 4 and list(cases.columns[-5:]) == PSE
    tally = pattern_tally(pse).set_index("pattern")
    # Case 1 only where the resume has no photo (PopResume 5.2: "out of the 80 ... cases in which
    # protected attributes are absent"); the photo case keeps its Case 5 label.
    assert tally.loc[CASE_LABELS[1], ["cases", "denominator"]].tolist() == [1, 2]
    assert tally.loc[CASE_LABELS[5], ["cases", "denominator"]].tolist() == [2, 4]
    assert tally.loc[CASE_LABELS[2], ["cases", "denominator"]].tolist() == [0, 4]
    assert tally.loc["none", ["cases", "denominator"]].tolist() == [2, 4]
    assert tally.loc[CASE_LABELS[1], "paper"] == "49/80" and tally.loc[CASE_LABELS[5], "paper"] == "53/120"
    photo = cases.set_index("format").loc["image_photo"]
    assert all(CASE_LABELS[1] not in p for p in photo["pattern"])


def test_written_report_panel_matches_statsmodels_and_scipy(store, tmp_path):
    tracker, parent, truth = store
    files = write_report(tracker.uri, None, tmp_path, parent_run_id=parent)
    for axis, column in (("race", 3), ("gender", 4)):
        table = pd.read_csv(tmp_path / f"panel_{axis}.csv")
        assert list(table["model"]) == list(PANEL)  # ordered by release date
        p = np.array([PANEL[m][column] for m in table["model"]])
        reject, *_ = multipletests(p, alpha=0.05, method="bonferroni")
        assert list(table["significant_bonferroni"]) == list(reject)
    pairs = pd.read_csv(tmp_path / "photo_vs_no_photo_nde.csv")
    assert len(pairs) == 2
    for _, row in pairs.iterrows():
        assert row["estimate_image"] == pytest.approx(truth[f"nurse-{row['protected_attr']}-image-vlm"][1])
        assert row["estimate_image_photo"] == pytest.approx(truth[f"nurse-{row['protected_attr']}-image_photo-vlm"][1])
    page = files["report.html"].read_text()
    race = [PANEL[m][1] for m in PANEL]
    gender = [PANEL[m][2] for m in PANEL]
    r = stats.pearsonr(race, gender).statistic
    assert f"{r:.4g}" in page  # the correlation table
    # overview, every case's forest on one x scale, 4 forest plots, photo, panel forest, gaps, race vs gender
    assert page.count("data:image/png;base64,") == 1 + 1 + 4 + 1 + 1 + 2
    # read top down: every case at a glance, the pattern counts, then the detail; the panel's forest
    # of models before its tables
    order = ["All cases at a glance", "Cases per discrimination pattern", "Effects per case", "Forest plots per case"]
    assert [page.index(h) for h in order] == sorted(page.index(h) for h in order)
    assert page.index("effects_overview") < page.index("Cases per discrimination pattern")
    assert page.index("panel_forest") < page.index("Axis: race")
    assert "boom" in page and "nurse-race-text-broken" in page
    assert "## Callback panel" in files["report.md"].read_text()


def test_report_of_an_empty_experiment_is_a_clear_error(tmp_path):
    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_root=str(tmp_path / "a"))
    with pytest.raises(DataError, match="no MLflow experiment 'nothing'"):
        write_report(tracker.uri, "nothing", tmp_path / "out")


def test_markdown_table_escapes_pipes_and_blanks_missing():
    text = markdown_table(pd.DataFrame({"a": ["x|y", None], "b": [1.23456, float("nan")]}))
    assert text.splitlines()[2] == "| x\\|y | 1.235 |"
    assert text.splitlines()[3] == "|  |  |"


def test_an_estimators_own_significance_flag_wins():
    from popfair.report.runs import CASE_COLUMNS

    base = dict.fromkeys(CASE_COLUMNS) | {"status": "FINISHED", "estimator": "pse_dml"}
    runs = pd.DataFrame(
        [
            base
            | {
                "run_id": "a",
                "metrics": {"TE.estimate": 1.0, "TE.ci_low": -0.1, "TE.ci_high": 2.0, "TE.significant": 1.0},
            },
            base | {"run_id": "b", "metrics": {"TE.estimate": 1.0, "TE.ci_low": 0.5, "TE.ci_high": 2.0}},
            base
            | {"run_id": "c", "metrics": {"TE.estimate": 1.0, "TE.ci_low": 0.5, "TE.ci_high": 2.0, "TE.p_value": 0.2}},
        ]
    )
    flags = effects_long(runs).set_index("run_id")["significant"]
    assert flags.to_dict() == {"a": True, "b": True, "c": False}


def test_overview_colours_and_outlines_exactly_the_significant_effects(store):
    """Colour follows significance: only effects whose CI excludes 0 are coloured (and outlined); every
    other identified effect still shows its estimate, in grey."""
    from matplotlib.patches import Rectangle

    from popfair.report.plots import effects_overview
    from popfair.report.sweep import popresume_effects

    tracker, parent, _ = store
    pse = popresume_effects(effects_long(load_runs(tracker.uri, parent_run_id=parent)))
    fig = effects_overview(pse)
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    outlined = sum(isinstance(p, Rectangle) and not p.fill for ax in heatmaps for p in ax.patches)
    assert outlined == int(pse["significant"].sum()) > 0
    coloured = sum(int(np.isfinite(ax.images[0].get_array()).sum()) for ax in heatmaps)
    assert coloured == outlined
    numbers = [t for ax in heatmaps for t in ax.texts if t.get_text()[:1] in "+-"]
    assert len(numbers) == int(pse["identified"].sum())  # one number per identified case x effect
    assert sum(t.get_color() == "0.45" for t in numbers) == len(numbers) - outlined  # the rest in grey


def test_panel_forest_fills_the_bonferroni_significant_models():
    from popfair.report.panel import panel_forest, panel_tables

    results = pd.DataFrame(
        [
            {"model": m, "axis": "race", "release_date": d, "gap_pp": g, "ci_low": g - 1, "ci_high": g + 1}
            | {"b": 10, "c": 5, "n_pairs": 100, "mcnemar_chi2": 1.0, "mcnemar_p": p, "cluster_p": p}
            for m, d, g, p in [
                ("a", "2023-01-01", 2.0, 0.001),
                ("b", "2024-01-01", 0.5, 0.04),
                ("c", "2025-01-01", 3.0, 0.0001),
            ]
        ]
    )
    tables = panel_tables(results)
    ax = panel_forest(tables).axes[0]
    filled, hollow = (
        c
        for c in ax.collections
        if c.get_offsets().shape[0] and c.get_label() in ("Bonferroni significant", "not significant")
    )
    assert sorted(filled.get_offsets()[:, 0]) == [2.0, 3.0]  # p < 0.05 / 3
    assert list(hollow.get_offsets()[:, 0]) == [0.5]


def test_console_effects_of_a_wide_table_show_the_decision_columns_and_name_the_rest():
    from popfair.report.console import MAX_COLUMNS, format_effects

    wide = pd.DataFrame(
        {"estimate": [0.7], "se": [0.1], "ci_low": [0.5], "ci_high": [0.9], "flag": [True]}
        | {f"extra_{i}": [i] for i in range(12)},
        index=["selection/sex/female"],
    )
    text = format_effects(Effects(table=wide))
    header = text.splitlines()[0].split()
    assert header == ["estimate", "se", "ci_low", "ci_high", "flag"]
    assert "12 more columns in the run's effects.csv: extra_0, extra_1" in text
    narrow = wide.iloc[:, :MAX_COLUMNS]
    assert format_effects(Effects(table=narrow)).splitlines()[0].split() == list(narrow.columns)
