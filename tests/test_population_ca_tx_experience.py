"""California and Texas transport (OEWS shares, composition moved the right way, checked against an
independent density-ratio computation) and experience by race fitted on NLSY97 microdata."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from popfair.data import data_file
from popfair.population.diagnostics import nlsy_reference_cells, race_gap
from popfair.population.occupation import Occupation
from popfair.population.popresume import PopResumePopulation
from popfair.population.protected import ProtectedAttribute
from popfair.population.transport import CELLS_FILE, OEWS_FILE, donor_states
from tests import population_reference as reference

RACE = ProtectedAttribute("race", "black", "white")
FIVE = {"nurse": 3255, "teacher": 2310, "software_developer": 1021, "accountant": 800, "construction_laborer": 6260}
# OEWS May 2025 employment read by hand from file 4 (state, SOC): the shares the transport must hit.
SOC = {
    3255: ["29-1141"],
    2310: ["25-2021", "25-2022", "25-2023"],
    1021: ["15-1252"],
    800: ["13-2011"],
    6260: ["47-2061"],
}


def occupation(key: str) -> Occupation:
    return Occupation(key=key, title=key, occp=FIVE[key], soc="", description="A long enough job description " * 3)


@pytest.fixture(scope="module")
def population() -> PopResumePopulation:
    return PopResumePopulation(diagnostics=False)


def oews_shares(occp: int) -> dict[str, float]:
    table = pd.read_csv(data_file(*OEWS_FILE), dtype=str)
    table["employment"] = pd.to_numeric(table["employment"], errors="coerce")
    national = table[
        (table["state_fips"] == "00") & (table["soc_code"] == ("25-2020" if occp == 2310 else SOC[occp][0]))
    ]["employment"].iloc[0]
    return {
        usps: table[(table["state_fips"] == fips) & table["soc_code"].isin(SOC[occp])]["employment"].sum() / national
        for usps, fips in (("CA", "06"), ("TX", "48"))
    }


@pytest.mark.parametrize("key", list(FIVE))
def test_ca_tx_shares_match_oews_within_1_5_points(population, key):
    records = population.model(FIVE[key]).records
    for usps, share in oews_shares(FIVE[key]).items():
        rows = records["state"] == usps
        assert rows.sum() > 0 and records.loc[rows, "transported"].all()
        assert abs(rows.mean() - share) < 0.015, (usps, rows.mean(), share)
        weight_share = records.loc[rows, "weight"].sum() / records["weight"].sum()
        assert abs(weight_share - share) < 0.015, (usps, weight_share, share)


def test_default_nurse_case_has_ca_tx_applicants_moved_toward_their_demographics(population):
    profiles = population.sample(occupation("nurse"), RACE, seed=0)
    table = profiles.table
    moved = table[table["transported"]]
    assert set(moved["state"]) == {"CA", "TX"} and set(moved["region"]) == {"West", "South"}
    assert (moved["donor_state"] != "").all() and (table.loc[~table["transported"], "donor_state"] == "").all()
    assert table["rac1p"].between(1, 9).all()  # the raw race code travels with every row
    for usps in ("CA", "TX"):
        rows = moved[moved["state"] == usps]
        donors = table[~table["transported"] & table["state"].isin(donor_states(usps, "all", set(table["state"])))]
        hispanic = lambda frame: np.average(frame["race"] == "hispanic", weights=frame["weight"])
        assert hispanic(rows) > hispanic(donors) + 0.05, usps
    assert "transport" in profiles.tags["population.source"]
    assert profiles.tags["population.table3"].startswith("does not match")
    assert any(note.startswith("CA transported (approximation") for note in profiles.notes)


def test_transported_composition_equals_an_independent_density_ratio_reweighting(population):
    """Race x education shares of the CA nurses vs donor records reweighted here by p_CA(d)/p_donors(d),
    computed from the raw cells file without popfair's decoders or shrinkage."""
    records = population.model(3255).records
    cells = pd.read_csv(data_file(*CELLS_FILE))
    cells = cells[cells["SCHL"] >= 16]
    race = reference.race(cells["HISPANIC"] == 1, cells["RAC1P"])
    edu = reference.edu_level(cells["SCHL"])
    band = pd.cut(cells["AGEP"], [17, 24, 29, 34, 39, 44], labels=["18-24", "25-29", "30-34", "35-39", "40-44"])
    frame = pd.DataFrame(
        {
            "ST": cells["ST"],
            "gender": np.where(cells["SEX"] == 1, "male", "female"),
            "age_group": band.astype(str),
            "race": race,
            "edu_level": edu,
            "w": cells["weight"],
        }
    )
    states = pd.read_csv(data_file("audit", "us_states.csv"))
    donors_usps = dict(zip(states["fips"], states["usps"]))
    donors_usps = {fips: usps for fips, usps in donors_usps.items() if usps not in ("CA", "TX")}
    key = ["gender", "age_group", "race", "edu_level"]
    p_ca = frame[frame["ST"] == 6].groupby(key)["w"].sum()
    p_donor = frame[frame["ST"].isin(donors_usps)].groupby(key)["w"].sum()
    ratio = (p_ca / p_ca.sum()).reindex(p_donor.index).fillna(0) / (p_donor / p_donor.sum())
    donors = records[~records["transported"] & records["state"].isin(donors_usps.values())]
    w = donors["weight"] * ratio.reindex(pd.MultiIndex.from_frame(donors[key])).fillna(0).to_numpy()
    ca = records[records["state"] == "CA"]
    for column in ("race", "edu_level"):
        expected = w.groupby(donors[column]).sum() / w.sum()
        observed = ca[column].value_counts(normalize=True).reindex(expected.index, fill_value=0)
        assert (observed - expected).abs().max() < 0.02, (column, observed - expected)


def test_ca_tx_omit_and_national_file_do_not_transport():
    model = PopResumePopulation(ca_tx="omit", diagnostics=False).model(800)
    assert not model.records["transported"].any() and model.transport is None
    assert not {"CA", "TX"} & set(model.records["state"])


def test_nlsy_reference_cells_reproduce_the_files_own_cell_table():
    """Cells computed here from the person-years equal nlsy97_experience_cells.csv (made by the data's script)."""
    published = pd.read_csv(data_file("population", "nlsy97", "nlsy97_experience_cells.csv"))
    published = published.rename(
        columns={
            "RACE": "race_nlsy",
            "SEX": "sex",
            "AGE_BAND": "age_group",
            "EDUC": "educ",
            "n_persons": "published_persons",
        }
    )
    published = published.set_index(["race_nlsy", "sex", "age_group", "educ"])
    fte = nlsy_reference_cells("EXP_FTE")
    joined = fte.join(published, how="inner")
    assert len(joined) == len(published)
    assert np.allclose(joined["mean"], joined["exp_fte_mean"], atol=1e-3)
    assert (joined["n_persons"] == joined["published_persons"]).all()
    years = nlsy_reference_cells("EXP_YEARS").join(published, how="inner")
    assert np.allclose(years["mean"], years["ft_years_mean"] + years["pt_years_mean"], atol=2e-3)


def test_black_white_experience_gap_by_sex_agrees_with_nlsy97(population):
    """Generated applicants' Black - White gap within sex x age band x education: same sign as the NLSY97
    cells and within 3 NLSY97 standard errors of it (the model smooths over single-year ages)."""
    table = population.sample(occupation("nurse"), RACE, seed=0).table
    gap, _ = race_gap(table)
    print(gap.to_string())
    assert set(gap["sex"]) == {"female", "male"}
    for row in gap.to_dict("records"):
        assert abs(row["gap_nlsy97"]) > 2 * row["se_nlsy97"]  # NLSY97 itself says there is a gap
        assert np.sign(row["gap_generated"]) == np.sign(row["gap_nlsy97"])
        assert abs(row["gap_generated"] - row["gap_nlsy97"]) < 3 * row["se_nlsy97"]


def test_psid_cells_source_has_no_race_dependence_and_nlsy_does():
    gender, age, edu = np.array(["female"] * 2), np.array([35, 35]), np.array(["bachelor"] * 2)
    race = np.array(["black", "white"])
    psid = PopResumePopulation(experience_source="psid_cells", diagnostics=False).model(3255).experience
    nlsy = PopResumePopulation(diagnostics=False).model(3255).experience
    assert psid.source == "psid_cells" and nlsy.source == "nlsy97"
    assert psid.mean(gender, race, age, edu)[0] == psid.mean(gender, race, age, edu)[1]
    assert abs(np.diff(nlsy.mean(gender, race, age, edu))[0]) > 0.1


def test_cdf_table_lookup_equals_the_direct_computation(population):
    model = population.model(3255).experience
    rng = np.random.default_rng(0)
    gender = rng.choice(["female", "male"], 300)
    race = rng.choice(["black", "white", "hispanic", "api", "other"], 300)
    age = rng.integers(18, 45, 300)
    edu = rng.choice(["hs_ged", "some_college", "associate", "bachelor", "master", "professional", "doctorate"], 300)
    assert np.allclose(model.cdf(gender, race, age, edu), model._cell_cdfs(gender, race, age, edu))


def test_a_pickled_experience_model_draws_without_xgboost(population):
    """The disk cache's pickle of an experience model names nothing of XGBoost (a case reading it
    never imports XGBoost and scikit-learn for it), and the model read back has the same table and,
    once its booster is loaded from the raw bytes, the same means."""
    import pickle
    import pickletools

    model = population.model(3255).experience
    gender, race = np.array(["female", "male"]), np.array(["black", "white"])
    age, edu = np.array([35, 27]), np.array(["bachelor", "hs_ged"])
    means = model.mean(gender, race, age, edu)  # loads the booster into the live model
    data = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
    names = [str(arg) for op, arg, _ in pickletools.genops(data) if op.name in ("GLOBAL", "SHORT_BINUNICODE")]
    assert not [name for name in names if "xgboost" in name.lower()], names
    back = pickle.loads(data)
    assert "booster" not in back.__dict__ and back.booster_raw == model.booster_raw
    assert np.array_equal(back.cdf_table, model.cdf_table)
    assert np.array_equal(back.mean(gender, race, age, edu), means)
