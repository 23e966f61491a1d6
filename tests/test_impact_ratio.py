"""LL144 / four-fifths impact ratios: hand-computed tables, scipy tests, bootstrap behaviour, the
estimator and the hook that logs the table for every case."""

from __future__ import annotations

import math

import mlflow
import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from popfair.case.compose import build
from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, DataError, EstimationError
from popfair.core.types import Roles
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.impact_ratio.ratios import ImpactRatio, ImpactRatioSettings, impact_ratios
from popfair.track.figures import draw
from popfair.track.headline import logged_metrics
from tests.conftest import compose_config

FAST = dict(n_bootstrap=400)
ROLES = Roles(x="gender", x0="female", x1="male", z=(), b=(), r=())


def cells(spec: list[tuple]) -> pd.DataFrame:
    """Rows from (gender, race, n rows, n selected) groups."""
    rows = []
    for gender, race, n, selected in spec:
        rows += [{"gender": gender, "race": race, "y": int(i < selected)} for i in range(n)]
    return pd.DataFrame(rows)


# 53 applicants: one Hispanic applicant (1/53 < 2%), one of unknown sex, one of unknown race
CALLBACKS = cells(
    [
        ("female", "black", 10, 2),
        ("female", "white", 10, 5),
        ("male", "black", 10, 4),
        ("male", "white", 20, 12),
        ("male", "hispanic", 1, 1),
        (None, "white", 1, 1),
        ("male", "unknown", 1, 0),
    ]
)


def row(result, metric: str, dimension: str, category: str) -> pd.Series:
    t = result.table
    found = t[(t["metric"] == metric) & (t["dimension"] == dimension) & (t["category"] == category)]
    assert len(found) == 1, (metric, dimension, category)
    return found.iloc[0]


@pytest.fixture(scope="module")
def callback_result():
    return impact_ratios(CALLBACKS, settings=ImpactRatioSettings(**FAST))


def test_selection_rates_and_ratios_match_hand_computation(callback_result):
    r = callback_result
    assert r.outcome == "callback" and r.n == 53
    female, male = row(r, "selection", "sex", "female"), row(r, "selection", "sex", "male")
    assert (female["n_applicants"], female["n_selected"]) == (20, 7)
    assert (male["n_applicants"], male["n_selected"]) == (32, 17)
    assert female["rate"] == pytest.approx(0.35) and male["rate"] == pytest.approx(17 / 32)
    assert female["impact_ratio"] == pytest.approx(0.35 / (17 / 32)) and female["flag"]
    assert male["is_reference"] and male["impact_ratio"] == 1.0 and not male["flag"]
    black = row(r, "selection", "race", "black")
    white = row(r, "selection", "race", "white")
    assert (white["n_applicants"], white["n_selected"]) == (31, 18)
    assert black["impact_ratio"] == pytest.approx(0.3 / (18 / 31))
    expected = {"female-black": 0.2 / 0.6, "female-white": 0.5 / 0.6, "male-black": 0.4 / 0.6, "male-white": 1.0}
    for category, ratio in expected.items():
        assert row(r, "selection", "sex_race", category)["impact_ratio"] == pytest.approx(ratio)
    assert row(r, "selection", "sex_race", "male-white")["share"] == pytest.approx(20 / 53)


def test_small_categories_are_reported_but_excluded_from_ratios(callback_result):
    hispanic = row(callback_result, "selection", "race", "hispanic")
    assert hispanic["share"] == pytest.approx(1 / 53) and hispanic["small"]
    assert hispanic["status"] == "excluded" and math.isnan(hispanic["impact_ratio"])
    assert hispanic["rate"] == 1.0 and hispanic["n_applicants"] == 1  # still reported
    assert row(callback_result, "selection", "race", "white")["is_reference"]  # not the 100% category
    kept = impact_ratios(CALLBACKS, settings=ImpactRatioSettings(exclude_small=False, **FAST))
    hispanic = row(kept, "selection", "race", "hispanic")
    assert hispanic["status"] == "included" and hispanic["is_reference"] and hispanic["small"]
    assert row(kept, "selection", "race", "black")["impact_ratio"] == pytest.approx(0.3)
    summary = callback_result.summary()
    note = summary.loc[
        (summary["dimension"] == "Race/Ethnicity") & (summary["category"] == "Hispanic or Latino"), "note"
    ].item()
    assert note.startswith("excluded: 1.89% of sample")


def test_unknown_categories_are_counted_not_rated(callback_result):
    assert callback_result.n_unknown() == {"sex": 1, "race": 1, "sex_race": 2}
    unknown = row(callback_result, "selection", "sex_race", "unknown")
    assert unknown["status"] == "unknown" and math.isnan(unknown["impact_ratio"])
    assert unknown["n_selected"] == 1
    metrics = callback_result.metrics()
    assert metrics["ll144.sex_race.n_unknown"] == 2
    assert "Applicants with unknown sex category: 1" in callback_result.markdown()
    # NaN and custom labels are unknown too; category names are compared trimmed
    data = CALLBACKS.assign(race=CALLBACKS["race"].replace({"unknown": "declined "}))
    custom = impact_ratios(data, settings=ImpactRatioSettings(unknown_labels=("Declined",), **FAST))
    assert custom.n_unknown() == {"sex": 1, "race": 1, "sex_race": 2}


def test_scoring_rate_uses_strictly_above_the_overall_median():
    data = pd.DataFrame(
        {"gender": ["female"] * 4 + ["male"] * 4, "race": "white", "y": [10.0, 20, 30, 40, 30, 50, 60, 70]}
    )
    result = impact_ratios(data, settings=ImpactRatioSettings(top_share=None, **FAST))
    assert result.outcome == "score" and result.thresholds == {"scoring_median": 35.0}
    assert row(result, "scoring_median", "sex", "female")["rate"] == 0.25
    assert row(result, "scoring_median", "sex", "male")["rate"] == 0.75
    assert row(result, "scoring_median", "sex", "female")["impact_ratio"] == pytest.approx(1 / 3)
    # odd n: the median is an observed score, and scoring exactly the median is not "above" it
    tied = pd.concat([data, pd.DataFrame({"gender": ["male"], "race": ["white"], "y": [40.0]})])
    result = impact_ratios(tied, settings=ImpactRatioSettings(top_share=None, **FAST))
    assert result.thresholds["scoring_median"] == 40.0
    assert row(result, "scoring_median", "sex", "female")["n_selected"] == 0
    assert row(result, "scoring_median", "sex", "male")["rate"] == pytest.approx(3 / 5)
    assert row(result, "scoring_median", "sex", "female")["impact_ratio"] == 0.0


def test_top_share_and_min_score_thresholds():
    data = pd.DataFrame(
        {"gender": ["female"] * 4 + ["male"] * 4, "race": "white", "y": [10.0, 20, 30, 60, 30, 50, 60, 70]}
    )
    result = impact_ratios(data, settings=ImpactRatioSettings(top_share=0.25, min_score=50, **FAST))
    assert list(result.thresholds) == ["scoring_median", "top_25pct", "score_ge_50"]
    assert result.thresholds["top_25pct"] == 60.0  # 2nd best of 8; the tie at 60 is in
    assert row(result, "top_25pct", "sex", "female")["n_selected"] == 1
    assert row(result, "top_25pct", "sex", "male")["n_selected"] == 2
    assert row(result, "top_25pct", "sex", "female")["impact_ratio"] == pytest.approx(0.5)
    assert row(result, "score_ge_50", "sex", "female")["rate"] == 0.25
    assert row(result, "score_ge_50", "sex", "male")["rate"] == 0.75


def test_each_table_carries_the_reference_aware_test(callback_result):
    """The sex table's test is `impact_ratio_inference` on the sex counts (unknown sex left out)."""
    from popfair.estimate.impact_ratio.inference import impact_ratio_inference

    counts = pd.DataFrame({"category": ["female", "male"], "n": [20, 32], "selected": [7, 17]})
    alone = impact_ratio_inference(counts, cluster=None, n_bootstrap=FAST["n_bootstrap"], seed=0)
    test = callback_result.tests.set_index(["metric", "dimension"]).loc[("selection", "sex")]
    assert test["p_value"] == pytest.approx(alone.p_value, abs=0.05)  # own permutation stream
    assert test["min_ratio"] == pytest.approx(0.35 / (17 / 32))
    female = row(callback_result, "selection", "sex", "female")
    assert female["flag"] and female["p_adjusted"] == pytest.approx(test["p_value"])
    assert female["flag_survives"] == (female["p_adjusted"] <= 0.05)
    assert set(callback_result.tests["dimension"]) == {"sex", "race", "sex_race"}
    assert "four-fifths rule would flag" in test["explanation"]
    assert "four-fifths rule would flag" in callback_result.markdown()
    assert callback_result.metrics()["ll144.selection.sex.p_value"] == pytest.approx(test["p_value"])


def simulated_scores(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    data = pd.DataFrame(
        {
            "gender": rng.choice(["female", "male"], n),
            "race": rng.choice(["black", "white", "hispanic", "api"], n, p=[0.2, 0.5, 0.2, 0.1]),
        }
    )
    data["y"] = np.round(
        np.clip(60 + 4 * (data["gender"] == "male") + 3 * (data["race"] == "white") + rng.normal(0, 12, n), 0, 100)
    )
    return data


def test_bootstrap_cis_contain_the_estimates_and_match_binomial_se():
    data = simulated_scores(3000, seed=1)
    result = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=1000, seed=3))
    inc = result.included()
    assert len(inc) == 2 * (2 + 4 + 8)
    assert (inc["rate_ci_low"] <= inc["rate"]).all() and (inc["rate"] <= inc["rate_ci_high"]).all()
    assert (inc["ci_low"] <= inc["impact_ratio"]).all() and (inc["impact_ratio"] <= inc["ci_high"]).all()
    assert (inc["ci_high"] <= 1).all()
    # a fixed-threshold rate under the iid bootstrap: SE close to the binomial sqrt(p(1-p)/n)
    fixed = impact_ratios(data, settings=ImpactRatioSettings(top_share=None, min_score=65, n_bootstrap=2000, seed=3))
    female = row(fixed, "score_ge_65", "sex", "female")
    binomial = math.sqrt(female["rate"] * (1 - female["rate"]) / female["n_applicants"])
    width = female["rate_ci_high"] - female["rate_ci_low"]
    assert width == pytest.approx(2 * 1.96 * binomial, rel=0.12)
    again = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=1000, seed=3))
    pd.testing.assert_frame_equal(result.table, again.table)  # same seed, same CIs


def clustered_callbacks(
    n_postings: int, per_posting: int, spread: float, seed: int, paired: bool = True
) -> pd.DataFrame:
    """Callbacks with a posting effect shared by the posting's rows. Paired: every posting sees both
    races (the correspondence design); otherwise each posting sees one race only."""
    rng = np.random.default_rng(seed)
    posting = np.repeat(np.arange(n_postings), per_posting)
    race = np.tile(["black", "white"], len(posting) // 2) if paired else np.where(posting % 2 == 0, "black", "white")
    gender = np.tile(np.repeat(["female", "male"], 2), len(posting) // 4)
    logit = -1.0 + rng.normal(0, spread, n_postings)[posting] + 0.3 * (race == "white")
    y = (rng.random(len(posting)) < 1 / (1 + np.exp(-logit))).astype(int)
    return pd.DataFrame(
        {"posting_id": [f"p{p:04d}" for p in posting], "pair_id": posting % 4, "gender": gender, "race": race, "y": y}
    )


def ci_width(result, dimension: str, category: str, ratio: bool = False) -> float:
    found = row(result, "selection", dimension, category)
    return found["ci_high"] - found["ci_low"] if ratio else found["rate_ci_high"] - found["rate_ci_low"]


def test_clustered_bootstrap_is_wider_than_iid_when_postings_are_correlated():
    data = clustered_callbacks(300, 16, spread=1.5, seed=2)
    clustered = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=1000, seed=1))
    iid = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=1000, seed=1, cluster="none"))
    assert clustered.cluster == "posting_id" and clustered.n_clusters == 300 and iid.cluster is None
    for dim, category in [("race", "black"), ("race", "white"), ("sex", "female")]:
        assert row(clustered, "selection", dim, category)["rate"] == row(iid, "selection", dim, category)["rate"]
        assert ci_width(clustered, dim, category) > 1.3 * ci_width(iid, dim, category)
    # pairing: both races share each posting's effect, so their ratio is *more* precise than iid says
    assert ci_width(clustered, "race", "black", ratio=True) < 0.95 * ci_width(iid, "race", "black", ratio=True)
    # postings nested in race: the posting effect no longer cancels and the ratio CI widens too
    nested = clustered_callbacks(300, 16, spread=1.5, seed=2, paired=False)
    widths = [
        ci_width(
            impact_ratios(nested, settings=ImpactRatioSettings(n_bootstrap=1000, seed=1, cluster=cl)),
            "race",
            "black",
            ratio=True,
        )
        for cl in ("posting_id", "none")
    ]
    assert widths[0] > 1.3 * widths[1]
    # the clustered SE of a rate agrees with the linearised cluster-robust (ratio-estimator) SE
    black = data[data["race"] == "black"].groupby("posting_id")["y"].agg(["sum", "size"])
    rate = black["sum"].sum() / black["size"].sum()
    g = len(black)
    robust = math.sqrt(g / (g - 1) * ((black["sum"] - rate * black["size"]) ** 2).sum()) / black["size"].sum()
    assert ci_width(clustered, "race", "black") == pytest.approx(2 * 1.96 * robust, rel=0.15)
    # without posting effects the two agree
    flat = clustered_callbacks(300, 16, spread=0.0, seed=2)
    widths = [
        ci_width(
            impact_ratios(flat, settings=ImpactRatioSettings(n_bootstrap=1000, seed=1, cluster=cl)), "race", "black"
        )
        for cl in ("posting_id", "none")
    ]
    assert widths[0] == pytest.approx(widths[1], rel=0.2)


def test_bad_inputs_fail_with_clear_messages():
    with pytest.raises(DataError, match=r"lacks columns \['race'\]"):
        impact_ratios(CALLBACKS.drop(columns="race"))
    with pytest.raises(EstimationError, match="1 of 53 rows have no finite numeric outcome"):
        impact_ratios(CALLBACKS.assign(y=CALLBACKS["y"].where(CALLBACKS.index != 3)))
    with pytest.raises(EstimationError, match="outcome=callback needs 0/1 values"):
        impact_ratios(CALLBACKS.assign(y=CALLBACKS["y"] * 2.5), settings=ImpactRatioSettings(outcome="callback"))
    with pytest.raises(DataError, match="cluster column 'posting'"):
        impact_ratios(CALLBACKS, settings=ImpactRatioSettings(cluster="posting"))
    with pytest.raises(DataError, match="rows have no posting_id"):
        impact_ratios(CALLBACKS.assign(posting_id=[None] + ["p"] * 52), settings=ImpactRatioSettings(**FAST))
    with pytest.raises(EstimationError, match="no rows"):
        impact_ratios(CALLBACKS.iloc[:0])


@pytest.mark.parametrize(
    "key,value",
    [
        ("outcome", "ranking"),
        ("top_share", 1.5),
        ("min_score", "high"),
        ("min_category_share", 0.6),
        ("flag_below", 0),
        ("n_bootstrap", 10),
        ("alpha", 0.7),
        ("exclude_small", "yes"),
        ("cluster", ""),
        ("unknown_labels", "unknown"),
    ],
)
def test_bad_settings_name_the_config_key(key, value):
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        ImpactRatio(**{key: value})
    node = OmegaConf.create({"_target_": "popfair.estimate.impact_ratio.ratios.ImpactRatio", key: value})
    for group in ("estimator", "outcome_audit"):  # the builder names the config path
        with pytest.raises(ConfigError, match=rf"^{group}\.{key}: "):
            build(node, group)


def test_no_selection_gives_undefined_ratios_with_a_note():
    result = impact_ratios(CALLBACKS.assign(y=0), settings=ImpactRatioSettings(**FAST))
    assert result.included()["impact_ratio"].isna().all()
    assert any("impact ratios undefined" in note for note in result.notes)


def test_estimator_returns_effects_rows_summary_and_chart():
    data = clustered_callbacks(100, 8, spread=1.0, seed=5)
    effects = ImpactRatio(n_bootstrap=200).estimate(data, ROLES, "y")
    assert list(effects.table.columns[:4]) == EFFECT_COLUMNS
    assert "selection/race/black" in effects.table.index and "selection/sex_race/male-white" in effects.table.index
    black = effects.table.loc["selection/race/black"]
    assert black["estimate"] == pytest.approx(black["rate"] / effects.table.loc["selection/race/white", "rate"])
    assert set(effects.artifacts) == {
        "impact_ratios/summary.csv",
        "impact_ratios/summary.md",
        "impact_ratios/table.csv",
        "impact_ratios/tests.csv",
        "impact_ratios/impact_ratios.png",
    }
    summary = effects.artifacts["impact_ratios/summary.csv"].reset_index()
    assert list(summary.columns) == [
        "metric",
        "dimension",
        "category",
        "n_applicants",
        "n_selected",
        "rate",
        "impact_ratio",
        "ci_95",
        "flag_below_0.8",
        "adjusted_p",
        "flag_survives_test",
        "fisher_p",
        "z",
        "z_p",
        "note",
    ]
    assert hasattr(draw(effects.artifacts["impact_ratios/impact_ratios.png"]), "savefig")
    assert effects.metrics["ll144.selection.race.black.ratio"] == pytest.approx(black["estimate"])
    flagged = effects.table[effects.table["flag"]]
    assert bool(effects.labels) == (len(flagged) > 0)


def test_every_case_logs_the_impact_ratio_table(tmp_path):
    cfg = compose_config(
        ["population.n=300", "estimator.n_bootstrap=200", "outcome_audit.n_bootstrap=200"], tmp_path=tmp_path
    )
    experiment = PopulationCase.from_config(cfg)
    assert isinstance(experiment.outcome_audit, ImpactRatio)
    result = experiment.run()
    assert result.effects.table.index.tolist() == ["TE", "NDE", "NIE", "BIE", "RIE"]  # default pse_dml, untouched
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    run = mlflow.get_run(result.run_id)
    ratio = result.audit.table.loc["scoring_median/sex/female", "estimate"]
    logged = logged_metrics(mlflow.MlflowClient(), run)  # an outcome audit's ratios: cells of metrics/ll144.json
    assert logged["ll144.scoring_median.sex.female.ratio"] == pytest.approx(ratio)
    assert logged["ll144.sex.n_unknown"] == 0
    names = {a.path for a in mlflow.MlflowClient().list_artifacts(result.run_id, "impact_ratios")}
    assert names == {
        "impact_ratios/summary.csv",
        "impact_ratios/summary.md",
        "impact_ratios/table.csv",
        "impact_ratios/tests.csv",
        "impact_ratios/impact_ratios.png",
    }
    assert PopulationCase.from_config(compose_config(["outcome_audit=null"], tmp_path=tmp_path)).outcome_audit is None
    with pytest.raises(ConfigError, match="outcome_audit.flag_below"):
        PopulationCase.from_config(compose_config(["outcome_audit.flag_below=2"], tmp_path=tmp_path))


def test_ll144_race_scheme_reports_nhpi_and_two_or_more_separately():
    """race_scheme=ll144 recodes from the raw ACS RAC1P code: NHPI (7) and two or more races (9) are
    their own categories, Hispanic (from `race`) comes first; `five` keeps the merged API/other."""
    spec = [
        ("hispanic", 6, 40),
        ("white", 1, 400),
        ("black", 2, 200),
        ("api", 6, 120),
        ("api", 7, 60),
        ("other", 9, 80),
        ("other", 3, 50),
        ("other", 8, 50),
    ]
    rng = np.random.default_rng(3)
    data = pd.DataFrame(
        [
            {"race": race, "rac1p": code, "gender": g, "y": float(rng.random() < 0.4)}
            for race, code, n in spec
            for g in ("female", "male")
            for _ in range(n // 2)
        ]
    )
    five = ImpactRatio(n_bootstrap=100).compute(data)
    ll144 = ImpactRatio(n_bootstrap=100, race_scheme="ll144").compute(data)
    cats = lambda result: set(result.table.loc[result.table["dimension"] == "race", "category"]) - {"unknown"}  # noqa: E731
    assert cats(five) == {"hispanic", "white", "black", "api", "other"}
    assert cats(ll144) == {"hispanic", "white", "black", "asian", "nhpi", "aian", "some_other", "two_or_more"}
    nhpi = row(ll144, "selection", "race", "nhpi")
    assert nhpi["n_applicants"] == 60
    assert row(ll144, "selection", "race", "hispanic")["n_applicants"] == 40  # RAC1P 6 but Hispanic
    with pytest.raises(DataError, match="rac1p"):
        ImpactRatio(n_bootstrap=100, race_scheme="ll144").compute(data.drop(columns="rac1p"))
    with pytest.raises(ConfigError, match=r"^race_scheme: must be one of \['five', 'll144'\]"):
        ImpactRatio(race_scheme="census")
