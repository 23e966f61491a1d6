"""Paired audit design: postings, exact pair counts, identical pair members, name draws, JSON documents."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hydra.utils import instantiate
from scipy import stats

from popfair.case.compose import build
from popfair.core.errors import ConfigError, DataError
from popfair.design.paired.population import NAME_FIELDS, PairedAuditPopulation, load_name_pools
from popfair.population.occupation import Occupation
from popfair.population.postings import ENTRY_LEVEL_TITLES, EntryLevelPostings
from popfair.population.protected import ProtectedAttribute
from popfair.render.json_profile import JsonRenderer
from tests.conftest import compose_config

RACE = ProtectedAttribute("race", "black", "white")
GENDER = ProtectedAttribute("gender", "female", "male")


@pytest.fixture(scope="module")
def postings() -> EntryLevelPostings:
    return EntryLevelPostings()  # the paper's 6,006


@pytest.fixture(scope="module")
def race_sample(postings):
    return PairedAuditPopulation(axis="race").sample(postings, RACE, seed=3)


@pytest.fixture(scope="module")
def gender_sample(postings):
    return PairedAuditPopulation(axis="gender").sample(postings, GENDER, seed=3)


def test_generated_postings_cover_krw_firms_and_large_metros(postings):
    table = postings.postings
    assert postings.key == "entry_level_postings" and len(table) == 6006 and postings.n_excluded == 0
    assert table["posting_id"].is_unique and set(postings.jobs) == set(table["posting_id"])
    firms = pd.read_csv("popfair/data/audit/firms.csv")
    metros = pd.read_csv("popfair/data/audit/metros.csv")
    assert set(table["firm"]) <= set(firms["firm_name"]) and table["firm"].nunique() > 80
    assert set(table["metro"]) <= set(metros["cbsa_title"]) and table["metro"].nunique() > 80
    keywords = ("analyst", "associate", "coordinator", "assistant", "representative", "specialist", "trainee")
    assert table["title"].str.lower().map(lambda t: any(k in t for k in keywords)).all()
    for industry, titles in table.groupby("industry")["title"]:
        assert set(titles) <= set(ENTRY_LEVEL_TITLES[industry])
    dates = pd.to_datetime(table["post_date"])
    assert dates.min() >= pd.Timestamp("2024-01-01") and dates.max() <= pd.Timestamp("2025-12-31")
    job = postings.jobs[table["posting_id"].iloc[7]]
    row = table.iloc[7]
    assert row["title"] in job.description and row["firm"] in job.description and row["state"] in job.description


def test_design_counts_match_the_paper(race_sample, gender_sample):
    race, gender = race_sample.table, gender_sample.table
    assert len(race) == 48_048 and race["pair_key"].nunique() == 24_024
    assert len(gender) == 96_096 and gender["pair_key"].nunique() == 48_048
    assert race.groupby("posting_id")["pair_id"].nunique().eq(4).all()
    for table, x in ((race, "race"), (gender, "gender")):
        sides = table.groupby("pair_key")[x].agg(lambda s: tuple(sorted(s)))
        assert sides.nunique() == 1 and len(sides.iloc[0]) == 2
    # gender axis: four conditions per posting x pair_id, two gender pairs (one per race)
    conditions = gender.groupby(["posting_id", "pair_id"])[["race", "gender"]].apply(
        lambda g: len(set(zip(g["race"], g["gender"])))
    )
    assert conditions.eq(4).all()
    assert race_sample.outcome == gender_sample.outcome == "callback"
    assert race_sample.roles.x == "race" and gender_sample.roles.x == "gender"


@pytest.mark.parametrize("sample_name, x", [("race_sample", "race"), ("gender_sample", "gender")])
def test_pair_members_differ_only_in_names(request, sample_name, x):
    table = request.getfixturevalue(sample_name).table
    differ_allowed = {"applicant_id", x, *NAME_FIELDS}
    shared = [col for col in table.columns if col not in differ_allowed]
    assert {"school", "gpa", "emp1_employer", "emp2_start", "age", "posting_id"} <= set(shared)
    distinct = table.groupby("pair_key")[shared].nunique(dropna=False)
    assert distinct.eq(1).all().all(), distinct.columns[~distinct.eq(1).all()].tolist()
    assert table.groupby("pair_key")["first_name"].nunique().eq(2).all()  # the signal does differ


def test_gender_conditions_share_one_profile_per_posting_pair(gender_sample):
    table = gender_sample.table
    shared = [c for c in table.columns if c not in {"applicant_id", "pair_key", "race", "gender", *NAME_FIELDS}]
    assert table.groupby(["posting_id", "pair_id"])[shared].nunique(dropna=False).eq(1).all().all()


def test_names_come_uniformly_from_their_race_gender_cell(gender_sample):
    table = gender_sample.table
    first_pools, last_pools = load_name_pools(["bertrand_mullainathan_2004", "kline_rose_walters_2022"])
    assert {k: len(v) for k, v in first_pools.items()} == {
        f"{r}|{g}": 19 for r in ("black", "white") for g in ("female", "male")
    }
    cell = table["race"] + "|" + table["gender"]
    for key, pool in first_pools.items():
        names = table.loc[cell == key, "first_name"]
        assert set(names) == set(pool)
        assert stats.chisquare(names.value_counts().to_numpy()).pvalue > 1e-4
    for race, pool in last_pools.items():
        surnames = table.loc[table["race"] == race, "surname"]
        assert set(surnames) == set(pool) and len(pool) == 26
        assert stats.chisquare(surnames.value_counts().to_numpy()).pvalue > 1e-4


def test_bertrand_mullainathan_only_restricts_first_names(postings):
    small = EntryLevelPostings(n_postings=50)
    sample = PairedAuditPopulation(axis="race", name_lists=["bertrand_mullainathan_2004"]).sample(small, RACE, 0)
    bm = pd.read_csv("popfair/data/audit/names_bertrand_mullainathan_2004.csv")
    assert set(sample.table["first_name"]) <= set(bm["first_name"])


def test_profiles_are_plausible_for_posting(race_sample, postings):
    table = race_sample.table.merge(
        postings.postings[["posting_id", "state", "firm", "industry", "post_date"]],
        on="posting_id",
        suffixes=("", "_posting"),
    )
    assert (table["state"] == table["state_posting"]).all()
    assert (table["emp1_employer"] != table["firm"]).all()  # never the employer one applies to
    firms = pd.read_csv("popfair/data/audit/firms.csv")
    peer = table["emp1_employer"].map(dict(zip(firms["firm_name"], firms["industry_name"])))
    assert (peer == table["industry"]).all()
    from popfair.population.profile_bank import NATIONAL_ONLINE_UNIVERSITIES

    los_angeles = table[table["metro"].str.startswith("Los Angeles") & (table["edu_level"] == "bachelor")]
    assert set(los_angeles["school"]) == {"California State University, Los Angeles", *NATIONAL_ONLINE_UNIVERSITIES}
    associate = table[table["edu_level"] == "associate"]
    assert (associate["school"] == associate["metro"].str.split("[-,]", regex=True).str[0] + " Community College").all()
    assert table["gpa"].between(3.0, 3.9).all() and table["age"].between(20, 27).all()
    assert (table["emp2_end"] <= table["emp1_start"]).all() and (
        table["emp1_start"] <= table["post_date"].str[:7]
    ).all()
    assert (table["graduation_year"] <= pd.to_datetime(table["post_date"]).dt.year).all()


def test_same_seed_same_sample_and_seed_changes_draws():
    postings = EntryLevelPostings(n_postings=40)
    population = PairedAuditPopulation(axis="gender")
    a, b = population.sample(postings, GENDER, 1).table, population.sample(postings, GENDER, 1).table
    pd.testing.assert_frame_equal(a, b)
    assert not population.sample(postings, GENDER, 2).table["first_name"].equals(a["first_name"])


def test_a_sample_is_kept_on_disk_and_read_back_exactly(postings, tmp_path, monkeypatch):
    """The candidates are drawn once per machine (popfair.population.cache.disk_cached_frame, Parquet):
    a later population of the same settings, with the in-process memo empty, reads the very same
    table; other settings (seed, pairs per posting, name lists), or the disk cache switched off,
    draw again."""
    from popfair.design.paired import population as paired

    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "cache"))
    drawn = PairedAuditPopulation(axis="race").sample(postings, RACE, seed=5).table
    kept = sorted((tmp_path / "cache").glob("paired_race-*.parquet"))
    assert len(kept) == 1 and kept[0].stat().st_size < 5e6  # 48,048 rows; pickled they take 24 MB

    paired._PAIR_PROFILES.clear()

    def no_drawing(*args, **kwargs):
        raise AssertionError("drawn again")

    monkeypatch.setattr(paired, "pair_profiles", no_drawing)
    read = PairedAuditPopulation(axis="race").sample(postings, RACE, seed=5).table
    pd.testing.assert_frame_equal(read, drawn, check_exact=True)
    monkeypatch.undo()
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "cache"))
    PairedAuditPopulation(axis="race", pairs_per_posting=2).sample(postings, RACE, seed=5)
    PairedAuditPopulation(axis="race", name_lists=["kline_rose_walters_2022"]).sample(postings, RACE, seed=5)
    other_seed = PairedAuditPopulation(axis="race").sample(postings, RACE, seed=6).table
    assert len(list((tmp_path / "cache").glob("paired_race-*.parquet"))) == 4
    assert not other_seed["first_name"].equals(drawn["first_name"])
    kept[0].write_bytes(b"not parquet")  # a damaged entry is drawn again and replaced
    pd.testing.assert_frame_equal(PairedAuditPopulation(axis="race").sample(postings, RACE, seed=5).table, drawn)
    assert kept[0].read_bytes()[:4] == b"PAR1"
    monkeypatch.setenv("POPFAIR_CACHE_DIR", "off")
    pd.testing.assert_frame_equal(PairedAuditPopulation(axis="race").sample(postings, RACE, seed=5).table, drawn)


def test_postings_csv_drops_and_counts_incomplete_rows(tmp_path):
    path = tmp_path / "postings.csv"
    pd.DataFrame(
        {
            "firm": ["Kroger", "Acme Corp", "Avis-Budget", None],
            "title": ["Sales Associate", "Data Analyst", "", "Coordinator"],
            "metro": [
                "Dallas-Fort Worth-Arlington, TX",
                "Chicago-Naperville-Elgin, IL-IN",
                "Miami-Fort Lauderdale-West Palm Beach, FL",
                "Austin-Round Rock-San Marcos, TX",
            ],
            "state": ["TX", "IL", "FL", "TX"],
            "post_date": ["2025-02-03", "2025-03-04", "2025-04-05", "2025-05-06"],
        }
    ).to_csv(path, index=False)
    postings = EntryLevelPostings(postings_csv=str(path))
    assert len(postings.postings) == 2 and postings.n_excluded == 2
    assert "excluded 2 of 4" in postings.notes[0]
    assert postings.postings["industry"].tolist()[1] == "Other"
    sample = PairedAuditPopulation(axis="race").sample(postings, RACE, 0)
    assert len(sample.table) == 2 * 4 * 2 and sample.notes == postings.notes


def test_postings_csv_missing_columns_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"firm": ["Kroger"], "title": ["Sales Associate"], "city": ["Dallas"]}).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"bad.csv.*lacks columns \['metro', 'state', 'post_date'\]"):
        _ = EntryLevelPostings(postings_csv=str(path)).postings
    with pytest.raises(ConfigError, match="occupation.postings_csv: file not found"):
        EntryLevelPostings(postings_csv=str(tmp_path / "nope.csv"))
    with pytest.raises(ConfigError, match="occupation.n_postings"):
        EntryLevelPostings(n_postings=0)


def test_bad_population_config_and_mismatched_groups():
    with pytest.raises(ConfigError, match="^axis: "):
        PairedAuditPopulation(axis="age")
    with pytest.raises(ConfigError, match="^name_lists: "):
        PairedAuditPopulation(name_lists=["census"])
    with pytest.raises(ConfigError, match="^population.axis: "):  # the builder names the config path
        build(compose_config(["population=paired", "population.axis=age"]).population, "population")
    population = PairedAuditPopulation(axis="race")
    with pytest.raises(ConfigError, match="set protected_attr=race"):
        population.sample(EntryLevelPostings(n_postings=5), GENDER, 0)
    nurse = instantiate(compose_config(["occupation=nurse"]).occupation)
    assert isinstance(nurse, Occupation)
    with pytest.raises(ConfigError, match="occupation=entry_level_postings"):
        population.sample(nurse, RACE, 0)


def test_paired_presets_set_the_whole_design():
    race = compose_config(["experiment=paired_race"])
    gender = compose_config(["experiment=paired_gender", "occupation.n_postings=10"])
    for cfg in (race, gender):
        assert cfg.occupation.key == "entry_level_postings" and cfg.estimator._target_.endswith("PairedGap")
        assert cfg.renderer._target_.endswith("JsonRenderer") and cfg.population.name_lists
    assert (race.protected_attr.name, race.population.axis) == ("race", "race")
    assert (gender.protected_attr.name, gender.population.axis) == ("gender", "gender")
    assert gender.occupation.n_postings == 10
    # command-line choices win over the preset's
    assert compose_config(["experiment=paired_race", "occupation=nurse"]).occupation.key == "nurse"
    # population=paired follows protected_attr; paired_race fixes its axis and sets nothing else
    assert compose_config(["population=paired", "protected_attr=race"]).population.axis == "race"
    alone = compose_config(["population=paired_race"])
    assert (alone.population.axis, alone.occupation.key, alone.protected_attr.name) == ("race", "nurse", "gender")


def test_json_documents_of_a_pair_differ_only_in_the_name(race_sample):
    table = race_sample.table.head(40)
    renderer = JsonRenderer()
    docs = [renderer.render(row, race_sample.jobs[row["job_id"]]) for row in table.to_dict("records")]
    parsed = [json.loads(d.text) for d in docs]
    assert set(parsed[0]) == {"name", "age", "location", "education", "employment_history"}
    assert len(parsed[0]["employment_history"]) == 2
    for (a, _), (pa, pb) in zip(zip(docs[::2], docs[1::2]), zip(parsed[::2], parsed[1::2])):
        assert a.kind == "json" and pa["name"] != pb["name"]
        assert {**pa, "name": ""} == {**pb, "name": ""}
    # no group words outside firm names (a real KRW firm is "Stanley Black & Decker")
    words = " ".join(
        json.dumps({**p, "employment_history": [h["title"] for h in p["employment_history"]]}).lower() for p in parsed
    )
    assert not any(w in words.replace('"', " ").split() for w in ("black", "white", "male", "female"))
    with pytest.raises(DataError, match="renderer=json: profile lacks fields"):
        renderer.render({"applicant_id": "a", "first_name": "x"}, race_sample.jobs[table["job_id"].iloc[0]])


def test_json_text_is_what_json_dumps_writes_for_the_profile(race_sample):
    """The renderer assembles its text from encoded values; it must equal json.dumps of the documented
    schema, for real profiles and for awkward values (quotes, non-ASCII, no employer, a missing title)."""

    def reference(row: dict) -> str:
        metro = row.get("metro")
        city = str(metro).split(",")[0].split("-")[0].strip() if isinstance(metro, str) and metro else None
        history = [
            {k: row[f"{slot}_{k}"] for k in ("employer", "title", "start", "end")}
            for slot in ("emp1", "emp2")
            if isinstance(row.get(f"{slot}_employer"), str) and row[f"{slot}_employer"]
        ]
        education = {k: row[k] for k in ("school", "degree", "major")}
        education |= {"gpa": round(float(row["gpa"]), 2), "graduation_year": int(row["graduation_year"])}
        document = {
            "name": f"{row['first_name']} {row['surname']}",
            "age": int(row["age"]),
            "location": f"{city}, {row['state']}" if city else str(row["state"]),
            "education": education,
            "employment_history": history,
        }
        return json.dumps(document, ensure_ascii=False)

    rows = race_sample.table.head(300).to_dict("records")
    odd = {**rows[0], "first_name": 'Zoë "Jo"', "surname": "Nguyễn\\", "metro": None, "emp2_employer": ""}
    rows += [odd, {**rows[1], "emp1_title": None, "school": "Université de Montréal\t", "gpa": 3.0}]
    renderer = JsonRenderer()
    for row in rows:
        assert renderer.render(row, race_sample.jobs[row["job_id"]]).text == reference(row)


def test_json_render_table_makes_what_render_makes_row_by_row(race_sample):
    """render_all's batch path (column by column, each distinct value encoded once) against `render`
    of every row: real profiles, and columns whose equal values could encode differently (-0.0 and
    0.0, missing employers, None, non-ASCII), which must not share an encoding."""
    from popfair.render.base import profile_records, render_all

    table = race_sample.table.reset_index(drop=True)
    renderer, jobs = JsonRenderer(), race_sample.jobs
    odd = table.head(6).copy()
    odd["applicant_id"] = [f"odd{i}" for i in range(6)]
    odd["gpa"] = [0.0, -0.0, 3.456, 3.0, 0.0, 2.5]
    odd["first_name"] = ['Zoë "Jo"', "A", "B", "C", "D", "E"]
    odd["emp1_employer"] = ["", None, "Acme", "Acme", "Ünïcode\\", "x"]
    odd["metro"] = [None, "Austin-Round Rock, TX", "", "Boston", "Austin-Round Rock, TX", None]
    for case in (table, odd, odd.astype({"school": object, "emp1_title": object})):
        rows = profile_records(case)
        expected = [renderer.render(row, jobs[row["job_id"]]) for row in rows]
        assert renderer.render_table(case, jobs, rows) == expected
        assert [d.profile for d in renderer.render_table(case, jobs, rows)] == rows
        assert all(d.profile is None for d in renderer.render_table(case, jobs, None))
        assert render_all(renderer, case, jobs, progress=False, profile_rows=False) == expected
    for profile_rows in (True, False):  # a table the column-wise path cannot take: render's own error
        with pytest.raises(DataError, match="renderer=json: profile lacks fields"):
            render_all(renderer, table.drop(columns=["gpa"]), jobs, progress=False, profile_rows=profile_rows)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["population=paired_race"], "occupation=entry_level_postings.*experiment=paired_race"),
        (["experiment=paired_race", "occupation=nurse"], "occupation=entry_level_postings"),
        (
            ["experiment=paired_race", "population=paired_race", "protected_attr=gender"],
            "set protected_attr=race.*experiment=paired_race",
        ),
        (["experiment=paired_gender", "occupation.n_postings=-1"], "occupation.n_postings"),
    ],
)
def test_bad_paired_case_fails_when_the_experiment_is_built(overrides, message, tmp_path):
    from popfair.case.population import PopulationCase

    with pytest.raises(ConfigError, match=message):
        PopulationCase.from_config(compose_config(overrides, tmp_path=tmp_path))
