"""Rule-based text resumes: golden text, determinism, seed scope, instantiation rules, and no
demographic words over real PopResume profiles of all five occupations."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from popfair.case.compose import build
from popfair.core.errors import ConfigError, DataError
from popfair.core.types import Job
from popfair.render.base import render_all, sample_artifacts
from popfair.render.content import DEMOGRAPHIC_WORDS, cities_by_state, demographic_words_in
from popfair.render.text import COMPLETION_AGE, TextRenderer, education_years, number_of_roles, role_periods
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[1]
OCCUPATIONS = ("nurse", "teacher", "software_developer", "accountant", "construction_laborer")
JOB = Job("nurse", "Registered Nurse", "A registered nurse job description.")


def pools(occupation: str = "nurse") -> dict:
    return yaml.safe_load((ROOT / "conf" / "occupation" / f"{occupation}.yaml").read_text())["pools"]


PROFILE = {
    "applicant_id": "nurse-000042",
    "job_id": "nurse",
    "gender": "female",
    "race": "black",
    "age": 34,
    "birth_year": 1990,
    "state": "OH",
    "region": "Midwest",
    "edu_level": "master",
    "exp_year": 12,
    "first_name": "Keisha",
    "surname": "Washington",
    "weight": 57,
}

GOLDEN = """\
Keisha Washington
Cincinnati, OH | (513) 555-0103 | keisha.washington@example.com

SKILLS
- Rapid response escalation
- Interdisciplinary care coordination
- Blood product administration
- Fall risk reduction
- Pain management
- Infection prevention
- Patient and family education
- Discharge planning

WORK HISTORY
Nurse Team Lead, Eastview Urgent Care | Cincinnati, OH | 2021 - Present
- Mentored charge nurses on staffing decisions, escalation and conflict resolution.
- Represented nursing staff on the hospital-wide patient experience council.
- Partnered with quality leadership to prepare the unit for accreditation surveys.

Senior Staff Nurse, Northfield General Hospital | Cincinnati, OH | 2018 - 2021
- Developed and delivered in-service training on new infusion pumps and documentation workflows.
- Chaired the falls prevention committee, lowering the unit fall rate over two consecutive quarters.
- Streamlined the discharge process with case management, shortening time from order to departure.

Charge Nurse, Pinecrest Health Partners | Cincinnati, OH | 2016 - 2018
- Precepted newly licensed nurses and nursing students through unit orientation.
- Served as charge nurse on rotating shifts, balancing assignments and bed flow for a medical-surgical unit.
- Managed blood transfusions and monitored for reactions according to hospital policy.

Clinical Nurse I, Mercy Ridge Hospital | Cincinnati, OH | 2012 - 2016
- Collected laboratory specimens and reported critical values within the required time frame.
- Administered oral, IV and subcutaneous medications following the five rights and barcode scanning.
- Monitored post-operative patients and escalated changes in condition to the charge nurse and physician.

EDUCATION
Master of Science in Nursing Administration, Westfield Polytechnic University | 2014
Bachelor of Science in Nursing, Bellmont College | 2012
"""


def test_golden_text_of_a_fixed_profile():
    doc = TextRenderer(pools=pools(), seed=0).render(PROFILE, JOB)
    assert doc.kind == "text" and doc.applicant_id == "nurse-000042" and doc.job_id == "nurse"
    assert doc.profile is PROFILE
    assert doc.text == GOLDEN


def test_same_profile_renders_byte_identically_with_fresh_renderers():
    first = TextRenderer(pools=pools(), seed=3).render(dict(PROFILE), JOB).text
    other = TextRenderer(pools=pools(), seed=3)
    other.render({**PROFILE, "applicant_id": "someone-else"}, JOB)  # no shared state between applicants
    assert other.render(dict(PROFILE), JOB).text.encode() == first.encode()


def test_a_different_seed_changes_only_seeded_content():
    a, b = (TextRenderer(pools=pools(), seed=s).builder for s in (0, 1))
    changed = 0
    for i, (edu, exp) in enumerate(
        [("hs_ged", 1), ("associate", 5), ("bachelor", 9), ("master", 12), ("professional", 15), ("doctorate", 20)] * 4
    ):
        profile = {**PROFILE, "applicant_id": f"nurse-{i:06d}", "edu_level": edu, "exp_year": exp}
        ra, rb = a.build(profile), b.build(profile)
        # fixed by the profile: name, state, role count, seniority slots, periods, degree years
        assert ra.name == rb.name and ra.location.endswith(", OH") and rb.location.endswith(", OH")
        assert [r.period for r in ra.roles] == [r.period for r in rb.roles]
        assert [e.year for e in ra.education] == [e.year for e in rb.education]
        assert len(ra.skills) == len(rb.skills) == 8
        assert ra.email.endswith("@example.com") and rb.email.endswith("@example.com")
        changed += (ra.skills != rb.skills) + ([r.employer for r in ra.roles] != [r.employer for r in rb.roles])
    assert changed >= 40  # 24 profiles x 2 pool draws: a new seed redraws nearly all of them


def test_counterfactual_copies_share_their_draws():
    """Same applicant_id and seed: changing B (education) keeps city, phone, skills, employers,
    titles and bullets (only the role years may move, to follow the new graduation year)."""
    builder = TextRenderer(pools=pools(), seed=0).builder
    factual = builder.build(PROFILE)
    other = builder.build({**PROFILE, "edu_level": "bachelor", "exp_year": 12})
    assert (factual.location, factual.phone, factual.email, factual.skills) == (
        other.location,
        other.phone,
        other.email,
        other.skills,
    )
    same_draws = [(r.title, r.employer, r.bullets) for r in factual.roles]
    assert same_draws == [(r.title, r.employer, r.bullets) for r in other.roles]
    assert [e.credential for e in other.education] == ["Bachelor of Science in Nursing"]


@pytest.mark.parametrize("exp, roles", [(0, 1), (2, 1), (3, 2), (6, 2), (7, 3), (10, 3), (11, 4), (26, 4)])
def test_number_of_roles_follows_the_piecewise_rule(exp, roles):
    assert number_of_roles(exp) == roles
    periods = role_periods(exp, survey_year=2024)
    assert len(periods) == roles
    assert periods[-1][1] is None and periods[0][0] == 2024 - exp
    ends = [end for _, end in periods[:-1]]
    assert ends == [start for start, _ in periods[1:]]  # contiguous, oldest first


@pytest.mark.parametrize(
    "exp, education_end, expected",
    [
        (12, 2014, [(2012, 2016), (2016, 2018), (2018, 2021), (2021, None)]),  # pre-degree years: first role
        (12, 2010, [(2012, 2015), (2015, 2018), (2018, 2021), (2021, None)]),  # degree first: even split
        (8, 2023, [(2016, 2022), (2022, 2023), (2023, None)]),  # short span: a year per later role
        (1, 2024, [(2023, None)]),
    ],
)
def test_roles_after_the_first_start_once_education_ends(exp, education_end, expected):
    assert role_periods(exp, survey_year=2024, education_end=education_end) == expected


@pytest.mark.parametrize("level", list(COMPLETION_AGE))
def test_education_entries_and_years(level):
    entries = education_years(level, birth_year=1990, age=34)
    assert len(entries) == (2 if level in ("master", "professional", "doctorate") else 1)
    assert entries[-1] == (level, 1990 + COMPLETION_AGE[level])
    if len(entries) == 2:
        assert entries[0][0] == "bachelor" and entries[0][1] < entries[1][1]
    young = education_years(level, birth_year=2000, age=24)
    assert all(year <= 2024 for _, year in young)  # never after the survey year


@pytest.fixture(scope="module")
def real_documents():
    """~3,000 real PopResume profiles (600 per occupation) rendered as text."""
    out = []
    for occupation in OCCUPATIONS:
        cfg = compose_config([f"occupation={occupation}", "population.n=600"])
        occ, population = build(cfg.occupation, "occupation"), build(cfg.population, "population")
        profiles = population.sample(occ, build(cfg.protected_attr, "protected_attr"), 0)
        renderer = build(cfg.renderer, "renderer")
        out.append((profiles.table, render_all(renderer, profiles.table, profiles.jobs, progress=False)))
    return out


def test_no_gender_race_or_age_words_in_real_resumes(real_documents):
    checked = 0
    for table, documents in real_documents:
        for row, doc in zip(table.itertuples(index=False), documents):
            # skip the applicant's own name (line 1) and the email built from it: a name may be
            # e.g. "White" or "Young"; everything else must be free of demographic words
            lines = doc.text.splitlines()
            assert lines[0] == f"{row.first_name} {row.surname}"
            body = "\n".join([re.sub(r"\S+@\S+", " ", lines[1]), *lines[2:]])
            assert demographic_words_in(body) == [], doc.text
            assert not re.search(rf"\b{row.age}\b", body), f"age {row.age} appears in {doc.text}"
            assert not re.search(rf"\b{row.birth_year}\b", body.split("EDUCATION")[0]), doc.text
            checked += 1
    assert checked == 3000


def test_real_resumes_are_consistent_with_their_profile(real_documents):
    for table, documents in real_documents:
        for row, doc in zip(table.itertuples(index=False), documents):
            lines = doc.text.splitlines()
            assert lines[0] == f"{row.first_name} {row.surname}"
            assert lines[1].split(" | ")[0].endswith(f", {row.state}")
            headings = [line for line in lines if line.count(" | ") == 2 and line != lines[1]]
            assert len(headings) == number_of_roles(row.exp_year)
            starts = [int(h.rsplit(" | ", 1)[1].split(" - ")[0]) for h in headings][::-1]  # oldest first
            survey_year = row.birth_year + row.age
            assert starts[0] == survey_year - row.exp_year  # the history shows exactly exp_year years
            education = lines[lines.index("EDUCATION") + 1 :]
            assert len(education) == (2 if row.edu_level in ("master", "professional", "doctorate") else 1)
            graduation = int(education[0].rsplit(" | ", 1)[1])
            assert graduation <= survey_year
            # later roles start after the last degree whenever there is a year per role for them
            assert all(s >= min(graduation, survey_year - len(starts) + 1) for s in starts[1:])


def test_demographic_word_check_catches_words():
    assert demographic_words_in("She led a team of young nurses") == ["she", "young"]
    assert demographic_words_in("Reference: Ms. Lee, Jackson, MS") == ["ms."]
    assert demographic_words_in("Whiteboard lessons; Manchester office; Senior Accountant") == []
    assert "white" in DEMOGRAPHIC_WORDS and "senior" not in DEMOGRAPHIC_WORDS


def test_pools_with_demographic_words_are_rejected_at_construction():
    bad = pools()
    bad["bullets"]["mid"] = bad["bullets"]["mid"] + ["Supported new mothers on the unit."]
    with pytest.raises(ConfigError, match=r"renderer.pools.bullets.mid: .*mothers"):
        TextRenderer(pools=bad, seed=0)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda p: p.pop("employers"), r"missing \['employers'\]"),
        (lambda p: p["titles"].pop("senior"), r"titles: missing keys \['senior'\]"),
        (lambda p: p.update(skills=["Python"]), r"skills: needs at least 8"),
        (lambda p: p["bullets"].update(junior=["One bullet", "Two"]), r"bullets.junior: needs at least 6"),
        (lambda p: p["credentials"].update(postdoc=["X"]), r"credentials: unknown keys \['postdoc'\]"),
    ],
)
def test_malformed_pools_name_the_key(mutate, message):
    broken = pools()
    mutate(broken)
    with pytest.raises(ConfigError, match=message):
        TextRenderer(pools=broken, seed=0)


def test_occupation_without_pools_is_a_clear_config_error():
    with pytest.raises(ConfigError, match=r"renderer.pools: .*occupation.pools"):
        TextRenderer(pools=None, seed=0)


@pytest.mark.parametrize(
    "override, key",
    [
        ("renderer.n_skills=-1", "renderer.n_skills"),
        ("renderer.email_domain=nodot", "renderer.email_domain"),
        ("renderer.bullets_per_role=9", "renderer.bullets_per_role"),
    ],
)
def test_bad_renderer_options_fail_at_composition(override, key):
    with pytest.raises(ConfigError, match=key):
        build(compose_config([override]).renderer, "renderer")


def test_profile_with_unknown_state_or_level_is_a_data_error():
    renderer = TextRenderer(pools=pools(), seed=0)
    with pytest.raises(DataError, match="state 'ZZ'"):
        renderer.render({**PROFILE, "state": "ZZ"}, JOB)
    with pytest.raises(DataError, match="edu_level 'phd'"):
        renderer.render({**PROFILE, "edu_level": "phd"}, JOB)
    with pytest.raises(DataError, match="missing column 'surname'"):
        renderer.render({k: v for k, v in PROFILE.items() if k != "surname"}, JOB)


def test_every_state_has_cities_and_metro_cities_are_real_principal_cities():
    states = pd.read_csv(ROOT / "popfair" / "data" / "audit" / "us_states.csv")
    metros = pd.read_csv(ROOT / "popfair" / "data" / "audit" / "metros.csv")
    cities = cities_by_state()
    assert set(states["usps"]) <= set(cities)
    for usps in set(metros["first_title_state"]):
        titles = metros.loc[metros["title_states"].str.split("-").map(lambda s, u=usps: u in s), "cbsa_title"]
        for city, area_code in cities[usps]:
            assert titles.str.contains(city, regex=False).any(), (usps, city)
            assert re.fullmatch(r"[2-9]\d\d", area_code)


def test_sample_artifacts_pick_spread_documents(real_documents):
    _, documents = real_documents[0]
    artifacts = sample_artifacts(documents, k=3)
    assert list(artifacts) == [f"samples/{documents[i].applicant_id}.txt" for i in (0, 300, 599)]
    assert artifacts["samples/nurse-000000.txt"] == documents[0].text


def test_forked_rendering_equals_serial(real_documents):
    """render_all's worker processes give the same documents, in order, with the same profile rows."""
    table, serial = real_documents[0]
    renderer = TextRenderer(pools=pools(), seed=0)
    renderer.rows_per_process = 100  # force several forked spans on this small table
    jobs = {job_id: JOB for job_id in table["job_id"].unique()}
    forked = render_all(renderer, table, jobs, progress=False, processes=2)
    again = render_all(renderer, table, jobs, progress=False, processes=1)
    assert forked == again and [d.profile for d in forked] == [d.profile for d in again]
    assert [d.applicant_id for d in forked] == [d.applicant_id for d in serial]


@pytest.mark.parametrize("occupation", OCCUPATIONS)
def test_text_straight_from_the_draws_equals_the_built_resume(occupation):
    """`ResumeBuilder.text` (what TextRenderer renders) is `build(profile).to_text()` (what the image
    and PDF renderers lay out), letter for letter: every level, history length, age, state, the
    stream's id (resume_id, absent or NaN), names with accents or no letters, other settings."""
    states = sorted(cities_by_state())
    names = [("Keisha", "Washington"), ("José", "Núñez-Ávila"), ("Zoë", "O'Brien"), ("李", "王"), ("Ann", "Lee")]
    for settings in ({}, {"seed": 7, "n_skills": 3, "bullets_per_role": 1, "email_domain": "mail.example.org"}):
        builder = TextRenderer(pools=pools(occupation), **settings).builder
        for i in range(600):
            first, last = names[i % len(names)]
            profile = {
                **PROFILE,
                "applicant_id": f"{occupation}-{i:06d}",
                "first_name": first,
                "surname": last,
                "state": states[i % len(states)],
                "edu_level": list(COMPLETION_AGE)[i % len(COMPLETION_AGE)],
                "age": 16 + (i * 7) % 60,
                "exp_year": (i * 5) % 40,
            }
            if i % 3 == 0:
                profile["resume_id"] = f"trial-{i // 6}"
            elif i % 3 == 1:
                profile["resume_id"] = float("nan")
            if i % 4 == 0:
                del profile["birth_year"]
            assert builder.text(profile) == builder.build(profile).to_text()
    renderer = TextRenderer(pools=pools(occupation))
    assert renderer.render(PROFILE, JOB).text == renderer.builder.build(PROFILE).to_text()
