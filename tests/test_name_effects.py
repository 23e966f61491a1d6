"""Name-level effects: each name's shrunk effect, checked against a simulation's known truth and an
independent Paule-Mandel computation; leave one name out checked against recomputing the gap by
hand; and a paired case whose screener favours one name finds that name and says the gap depends on it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.design.paired.population import PairedAuditPopulation, keep_names
from popfair.estimate.controls.names import name_effects
from tests.conftest import compose_config

CELLS = {("white", "male"): "W", ("white", "female"): "V", ("black", "male"): "B", ("black", "female"): "C"}


def rows(bias: dict[str, float], names_per_cell: int = 15, n: int = 12_000, seed: int = 0) -> pd.DataFrame:
    """Applicants with a name drawn uniformly within their cell; P(y=1) = 0.4 + the name's bias."""
    rng = np.random.default_rng(seed)
    cells = list(CELLS)
    cell = rng.integers(0, 4, n)
    slot = rng.integers(0, names_per_cell, n)
    names = np.array([f"{CELLS[cells[c]]}{s}" for c, s in zip(cell, slot)], dtype=object)
    p = 0.4 + pd.Series(names).map(bias).fillna(0).to_numpy()
    return pd.DataFrame(
        {
            "first_name": names,
            "race": [cells[c][0] for c in cell],
            "gender": [cells[c][1] for c in cell],
            "y": (rng.random(n) < p).astype(float),
        }
    )


def paule_mandel(means: np.ndarray, variances: np.ndarray) -> float:
    """tau^2 solving the generalised Q statistic = k - 1 (0 when Q(0) < k - 1)."""

    def q(tau2: float) -> float:
        w = 1 / (variances + tau2)
        mu = (w * means).sum() / w.sum()
        return float((w * (means - mu) ** 2).sum()) - (len(means) - 1)

    return 0.0 if q(0.0) <= 0 else brentq(q, 0.0, 10.0, xtol=1e-14)


def test_one_biased_name_is_found_and_the_others_are_shrunk_to_their_cell():
    data = rows({"W3": 0.25})
    result = name_effects(data, x="race", x0="black", x1="white")
    table = result.table
    assert table["effect"].abs().idxmax() == "W3" and bool(table.loc["W3", "significant"])
    others = table.drop(index="W3")
    assert others["significant"].mean() <= 0.1  # 59 names without bias: few false flags
    assert (others["effect"].abs() <= others["raw_effect"].abs() + 1e-12).all()  # pulled towards 0
    truth = 0.25 * 14 / 15  # W3's mean minus the mean of the white-male cell, whose mean it raises
    low, high = table.loc["W3", ["ci_low", "ci_high"]]
    assert low < truth < high
    assert result.most_influential == "W3"


def test_the_shrinkage_is_empirical_bayes_with_the_paule_mandel_spread():
    data = rows({"W3": 0.25, "B1": -0.1})
    table = name_effects(data, x="race", x0="black", x1="white").table
    by_name = data.groupby("first_name")["y"]
    within = ((by_name.count() - 1) * by_name.var()).sum() / (by_name.count() - 1).sum()
    for cell, names in table.groupby("cell"):
        v = within / names["n"].to_numpy(float)
        tau2 = paule_mandel(names["mean"].to_numpy(float), v)
        w = 1 / (v + tau2)
        mu = (w * names["mean"]).sum() / w.sum()
        shrink = tau2 / (tau2 + v)
        assert names["cell_mean"].to_numpy() == pytest.approx(np.full(len(names), mu), abs=1e-6), cell
        assert names["effect"].to_numpy() == pytest.approx(shrink * (names["mean"] - mu), abs=1e-6), cell
        assert names["se"].to_numpy() == pytest.approx(np.sqrt(shrink * v), abs=1e-6), cell


def test_leave_one_out_is_the_gap_recomputed_without_the_name():
    data = rows({"W3": 0.25}).assign(race=lambda d: d["race"])
    result = name_effects(data, x="race", x0="black", x1="white")
    for name in ("W3", "B2", "V0"):
        rest = data[data["first_name"] != name]
        one, zero = rest[rest["race"] == "white"]["y"], rest[rest["race"] == "black"]["y"]
        se = np.sqrt(one.var() / len(one) + zero.var() / len(zero))
        row = result.leave_one_out.loc[name]
        assert row["gap"] == pytest.approx(one.mean() - zero.mean(), abs=1e-12)
        assert row["se"] == pytest.approx(se, rel=1e-9)


def test_paired_leave_one_out_drops_the_pairs_carrying_the_name():
    rng = np.random.default_rng(1)
    k = 3000
    white, black = rng.choice(["W0", "W1", "W2"], k), rng.choice(["B0", "B1"], k)
    y1 = (rng.random(k) < np.where(white == "W1", 0.9, 0.5)).astype(float)
    y0 = (rng.random(k) < 0.5).astype(float)
    data = pd.concat(
        [
            pd.DataFrame({"pair_key": np.arange(k), "first_name": white, "race": "white", "gender": "male", "y": y1}),
            pd.DataFrame({"pair_key": np.arange(k), "first_name": black, "race": "black", "gender": "male", "y": y0}),
        ]
    )
    result = name_effects(data, x="race", x0="black", x1="white")
    d = pd.Series(y1 - y0)
    assert result.gap["se"] == pytest.approx(d.std() / np.sqrt(k))
    for name in ("W1", "B0"):
        keep = (white != name) & (black != name)
        row = result.leave_one_out.loc[name]
        assert row["gap"] == pytest.approx(d[keep].mean()) and row["pairs_left_out"] == (~keep).sum()
        assert row["se"] == pytest.approx(d[keep].std() / np.sqrt(keep.sum()))
    assert result.most_influential == "W1" and result.depends


def test_a_paired_case_whose_screener_favours_one_name_finds_it_and_the_gap_depends_on_it(tmp_path):
    overrides = [
        "experiment=paired_race",
        "screener=simulated_paired",
        "occupation.n_postings=1500",
        "screener.coefficients.race.white=0",
        "screener.coefficients.gender.male=0",
        "+screener.coefficients.first_name.Greg=10",
        "outcome_audit=null",
        "tracking=none",
    ]
    result = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp_path)).run()
    effects = result.effects
    table = effects.artifacts["names/effects.csv"].set_index("first_name")
    assert table["effect"].idxmax() == "Greg" and table.loc["Greg", "significant"]
    assert effects.metrics["names.gap_depends_on_one_name"] == 1.0
    assert effects.table.loc["gap", "ci_low"] > 0  # the paired estimator's gap: carried by Greg
    notes = "\n".join(effects.notes)
    assert "without Greg, its most influential name: the gap depends on it" in notes
    assert effects.artifacts["names/effects.png"].kind == "forest"


def test_names_per_cell_keeps_a_nested_choice_and_refuses_more_than_the_lists_hold():
    pool = PairedAuditPopulation().first_pools["white|male"]
    five, ten = keep_names(pool, 5, "white|male"), keep_names(pool, 10, "white|male")
    assert len(five) == 5 and set(five) <= set(ten) <= set(pool)
    small = PairedAuditPopulation(names_per_cell=5)
    assert all(len(p) == 5 for p in small.first_pools.values())
    with pytest.raises(ConfigError, match=r"population\.names_per_cell: .* 19 first names in cell black female"):
        PairedAuditPopulation(names_per_cell=100)


def test_a_ranking_case_reports_every_shown_name_and_its_leave_one_out_gap(tmp_path):
    overrides = ["experiment=ranking_race_gender", "population.n_trials=120", "population.names_per_group=5"]
    result = PopulationCase.from_config(compose_config([*overrides, "tracking=none"], tmp_path=tmp_path)).run()
    table = result.effects.artifacts["names/effects.csv"]
    scored = result.scored[result.scored["error"].isna()]
    assert table["n"].sum() == len(scored) and set(table["first_name"]) == set(scored["first_name"])
    assert len(table) <= 8 * 5  # population.names_per_group: 5 names per group
    loo = result.effects.artifacts["names/leave_one_out.csv"].set_index("first_name")
    name = loo.index[0]
    rest = scored[scored["first_name"] != name]
    by_gender = rest.groupby("gender")["y"].mean()
    assert loo.loc[name, "gap"] == pytest.approx(by_gender["male"] - by_gender["female"])
