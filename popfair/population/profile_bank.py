"""Candidate profiles for the paired audit, following the KRW (2022, Appendix B) resume-building
procedure: education (school, degree, GPA), employment history (prior employers, job titles,
tenure), age; schools plausible for the posting's area and employers for its industry.

Pools and where they come from:
- Bachelor's schools: a public university in or near the posting metro's principal city (for states
  with several large metros), else one of the posting state's public universities (both lists written
  for this project from general knowledge; each is a real institution), or in 20% of profiles one of
  three large national online universities (real institutions that enrol students from every state).
- Associate schools: "<principal city of the posting's metro> Community College", a constructed
  name; many exist under exactly that pattern, but the name is not checked against a register.
- Prior employers: other KRW firms (``data/audit/firms.csv``) in the posting firm's industry for the
  most recent job (a peer employer), any KRW firm for the earlier job; job titles from the
  entry-level title pools of the employer's industry (``postings.ENTRY_LEVEL_TITLES``).
- Majors: a short list of common majors, written for this project.
Every draw is vectorised over all profiles.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from popfair.population.postings import ENTRY_LEVEL_TITLES, audit_data_path

FIRMS, STATES = "firms.csv", "us_states.csv"
DATA_FILES = (FIRMS, STATES)  # what `build_profiles` reads (a cache of its output keys on them)

FLAGSHIP_UNIVERSITY = {
    "AL": "University of Alabama",
    "AK": "University of Alaska Anchorage",
    "AZ": "Arizona State University",
    "AR": "University of Arkansas",
    "CA": "University of California, Davis",
    "CO": "University of Colorado Boulder",
    "CT": "University of Connecticut",
    "DE": "University of Delaware",
    "DC": "University of the District of Columbia",
    "FL": "University of Central Florida",
    "GA": "Georgia State University",
    "HI": "University of Hawaii at Manoa",
    "ID": "Boise State University",
    "IL": "University of Illinois Chicago",
    "IN": "Indiana University",
    "IA": "University of Iowa",
    "KS": "University of Kansas",
    "KY": "University of Kentucky",
    "LA": "Louisiana State University",
    "ME": "University of Maine",
    "MD": "University of Maryland",
    "MA": "University of Massachusetts Boston",
    "MI": "Wayne State University",
    "MN": "University of Minnesota",
    "MS": "University of Mississippi",
    "MO": "University of Missouri",
    "MT": "University of Montana",
    "NE": "University of Nebraska Omaha",
    "NV": "University of Nevada, Las Vegas",
    "NH": "University of New Hampshire",
    "NJ": "Rutgers University",
    "NM": "University of New Mexico",
    "NY": "City University of New York",
    "NC": "University of North Carolina at Charlotte",
    "ND": "University of North Dakota",
    "OH": "Ohio State University",
    "OK": "University of Oklahoma",
    "OR": "Portland State University",
    "PA": "Temple University",
    "RI": "University of Rhode Island",
    "SC": "University of South Carolina",
    "SD": "University of South Dakota",
    "TN": "University of Tennessee",
    "TX": "University of Texas at Austin",
    "UT": "University of Utah",
    "VT": "University of Vermont",
    "VA": "Virginia Commonwealth University",
    "WA": "University of Washington",
    "WV": "West Virginia University",
    "WI": "University of Wisconsin-Milwaukee",
    "WY": "University of Wyoming",
}
# Public university in or near the principal city, for states with several of the 100 largest metros.
METRO_UNIVERSITY = {
    "Little Rock": "University of Arkansas at Little Rock",
    "Fayetteville": "University of Arkansas",
    "Phoenix": "Arizona State University",
    "Tucson": "University of Arizona",
    "Los Angeles": "California State University, Los Angeles",
    "Riverside": "University of California, Riverside",
    "San Francisco": "San Francisco State University",
    "San Diego": "San Diego State University",
    "Sacramento": "California State University, Sacramento",
    "San Jose": "San Jose State University",
    "Fresno": "California State University, Fresno",
    "Bakersfield": "California State University, Bakersfield",
    "Oxnard": "California State University Channel Islands",
    "Stockton": "California State University, Stanislaus",
    "Denver": "Metropolitan State University of Denver",
    "Colorado Springs": "University of Colorado Colorado Springs",
    "Hartford": "Central Connecticut State University",
    "Bridgeport": "Southern Connecticut State University",
    "Miami": "Florida International University",
    "Tampa": "University of South Florida",
    "Orlando": "University of Central Florida",
    "Jacksonville": "University of North Florida",
    "North Port": "University of South Florida Sarasota-Manatee",
    "Cape Coral": "Florida Gulf Coast University",
    "Lakeland": "Florida Polytechnic University",
    "Deltona": "University of Central Florida",
    "Palm Bay": "University of Central Florida",
    "Atlanta": "Georgia State University",
    "Augusta": "Augusta University",
    "New Orleans": "University of New Orleans",
    "Baton Rouge": "Louisiana State University",
    "Boston": "University of Massachusetts Boston",
    "Worcester": "Worcester State University",
    "Detroit": "Wayne State University",
    "Grand Rapids": "Grand Valley State University",
    "St. Louis": "University of Missouri-St. Louis",
    "Kansas City": "University of Missouri-Kansas City",
    "Charlotte": "University of North Carolina at Charlotte",
    "Raleigh": "North Carolina State University",
    "Greensboro": "University of North Carolina at Greensboro",
    "Winston": "Winston-Salem State University",
    "Durham": "North Carolina Central University",
    "New York": "City University of New York",
    "Buffalo": "University at Buffalo",
    "Rochester": "SUNY Brockport",
    "Albany": "University at Albany",
    "Kiryas Joel": "SUNY New Paltz",
    "Syracuse": "SUNY Oswego",
    "Cincinnati": "University of Cincinnati",
    "Columbus": "Ohio State University",
    "Cleveland": "Cleveland State University",
    "Dayton": "Wright State University",
    "Akron": "University of Akron",
    "Toledo": "University of Toledo",
    "Oklahoma City": "University of Central Oklahoma",
    "Tulsa": "Oklahoma State University-Tulsa",
    "Philadelphia": "Temple University",
    "Pittsburgh": "University of Pittsburgh",
    "Allentown": "Kutztown University",
    "Harrisburg": "Penn State Harrisburg",
    "Scranton": "Penn State Scranton",
    "Greenville": "Clemson University",
    "Columbia": "University of South Carolina",
    "Charleston": "College of Charleston",
    "Nashville": "Tennessee State University",
    "Memphis": "University of Memphis",
    "Knoxville": "University of Tennessee",
    "Chattanooga": "University of Tennessee at Chattanooga",
    "Dallas": "University of Texas at Dallas",
    "Houston": "University of Houston",
    "San Antonio": "University of Texas at San Antonio",
    "Austin": "Texas State University",
    "McAllen": "University of Texas Rio Grande Valley",
    "El Paso": "University of Texas at El Paso",
    "Salt Lake City": "University of Utah",
    "Provo": "Utah Valley University",
    "Ogden": "Weber State University",
    "Virginia Beach": "Old Dominion University",
    "Richmond": "Virginia Commonwealth University",
    "Seattle": "University of Washington",
    "Spokane": "Eastern Washington University",
    "Milwaukee": "University of Wisconsin-Milwaukee",
    "Madison": "University of Wisconsin-Madison",
}
NATIONAL_ONLINE_UNIVERSITIES = (
    "Western Governors University",
    "Southern New Hampshire University",
    "Arizona State University Online",
)
MAJORS = (
    ("Business Administration", "Bachelor of Business Administration"),
    ("Finance", "Bachelor of Science"),
    ("Marketing", "Bachelor of Science"),
    ("Communications", "Bachelor of Arts"),
    ("Economics", "Bachelor of Arts"),
    ("Psychology", "Bachelor of Arts"),
    ("Information Technology", "Bachelor of Science"),
    ("Accounting", "Bachelor of Science"),
    ("Sociology", "Bachelor of Arts"),
    ("Supply Chain Management", "Bachelor of Science"),
)
ASSOCIATE_MAJORS = (
    "Business Administration",
    "General Studies",
    "Accounting",
    "Information Technology",
    "Marketing",
    "Office Administration",
)
PROFILE_FIELDS = (
    "age",
    "birth_year",
    "metro",
    "state",
    "region",
    "edu_level",
    "school",
    "degree",
    "major",
    "gpa",
    "graduation_year",
    "emp1_employer",
    "emp1_title",
    "emp1_start",
    "emp1_end",
    "emp2_employer",
    "emp2_title",
    "emp2_start",
    "emp2_end",
    "exp_year",
)


def pick(pool: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Uniform draw from `pool` for each uniform number in `u`."""
    return pool[np.minimum((u * len(pool)).astype(int), len(pool) - 1)]


def pick_by_group(groups: np.ndarray, pools: dict[str, np.ndarray], u: np.ndarray) -> np.ndarray:
    """Uniform draw from pools[group] for each row (one vectorised draw per distinct group)."""
    out = np.empty(len(groups), dtype=object)
    for group in pd.unique(groups):
        mask = groups == group
        out[mask] = pick(pools[group], u[mask])
    return out


def _month(index: np.ndarray) -> np.ndarray:
    """Month index (year * 12 + month - 1) -> 'YYYY-MM'."""
    years, months = np.divmod(index, 12)
    return pd.Series(years).astype(str).str.cat(pd.Series(months + 1).astype(str).str.zfill(2), sep="-").to_numpy()


N_PROFILE_STREAMS = 16  # uniforms per profile (rows of `build_profiles`' u)


def build_profiles(slots: pd.DataFrame, u: np.ndarray) -> pd.DataFrame:
    """One profile per row of `slots` (columns firm, industry, metro, metro_city, state, post_date).

    The profile is what both members of a pair share: everything but the name. `u`: an
    (N_PROFILE_STREAMS, len(slots)) array of Uniform(0, 1), one column per slot (key it by the slot,
    e.g. `popfair.population.scm.keyed_streams`, and a slot's profile never depends on the others)."""
    n = len(slots)
    states = pd.read_csv(audit_data_path(STATES), dtype={"fips": str})
    if u.shape != (N_PROFILE_STREAMS, n):
        raise ValueError(f"build_profiles: u must have shape ({N_PROFILE_STREAMS}, {n}), got {u.shape}")
    state = slots["state"].to_numpy(dtype=object)
    post = pd.to_datetime(slots["post_date"])

    post_month = (post.dt.year * 12 + post.dt.month - 1).to_numpy()
    region = pd.Series(state).map(dict(zip(states["usps"], states["census_region"])))
    education = _education(slots, state, post, u)
    return pd.DataFrame(
        {
            "age": education.pop("age"),
            "birth_year": education.pop("birth_year"),
            "metro": slots["metro"].to_numpy(dtype=object),
            "state": state,
            "region": region.fillna("Unknown").to_numpy(dtype=object),
            **education,
            **_employment(slots, post_month, u),
        }
    )


def _education(slots: pd.DataFrame, state: np.ndarray, post: pd.Series, u: np.ndarray) -> dict[str, Any]:
    """Age and education columns of each profile (streams u[0..6])."""
    # bachelor's (65%) at the state's flagship or a national online university, else an
    # associate degree at the metro's community college.
    bachelor = u[0] < 0.65
    online = u[1] < 0.2
    flagship = (
        slots["metro_city"].map(METRO_UNIVERSITY).fillna(pd.Series(state, index=slots.index).map(FLAGSHIP_UNIVERSITY))
    )
    online_school = pick(np.array(NATIONAL_ONLINE_UNIVERSITIES, dtype=object), u[2])
    school_bachelor = np.where(
        online | flagship.isna().to_numpy(), online_school, flagship.fillna("").to_numpy(dtype=object)
    )
    school_associate = (slots["metro_city"].astype(str) + " Community College").to_numpy(dtype=object)
    major_index = np.minimum((u[3] * len(MAJORS)).astype(int), len(MAJORS) - 1)
    bachelor_major = np.array([m for m, _ in MAJORS], dtype=object)[major_index]
    bachelor_degree = np.array([d for _, d in MAJORS], dtype=object)[major_index]
    associate_major = pick(np.array(ASSOCIATE_MAJORS, dtype=object), u[3])
    years_since = (u[4] * 4).astype(int)  # graduated 0-3 years before the post date
    graduation_year = post.dt.year.to_numpy() - years_since
    grad_age = np.where(bachelor, 22, 20)
    age = grad_age + years_since + (u[5] < 0.5)
    gpa = np.round(3.0 + u[6] * 0.9, 2)

    return {
        "age": age.astype(int),
        "birth_year": (post.dt.year.to_numpy() - age).astype(int),
        "edu_level": np.where(bachelor, "bachelor", "associate"),
        "school": np.where(bachelor, school_bachelor, school_associate),
        "degree": np.where(bachelor, bachelor_degree, "Associate of Applied Science"),
        "major": np.where(bachelor, bachelor_major, associate_major),
        "gpa": gpa,
        "graduation_year": graduation_year.astype(int),
    }


def _employment(slots: pd.DataFrame, post_month: np.ndarray, u: np.ndarray) -> dict[str, Any]:
    """The two jobs of each profile and its years of experience (streams u[7..14])."""
    firms = pd.read_csv(audit_data_path(FIRMS))
    # most recent job at a peer firm in the posting's industry (current, tenure 6-36
    # months); before it a 6-24 month job at any KRW firm, ending 0-3 months before the next started.
    industry = slots["industry"].to_numpy(dtype=object)
    by_industry = {name: group["firm_name"].to_numpy(dtype=object) for name, group in firms.groupby("industry_name")}
    all_firms = firms["firm_name"].to_numpy(dtype=object)
    peer_pools = {k: by_industry.get(k, all_firms) for k in pd.unique(industry)}
    emp1 = pick_by_group(industry, peer_pools, u[7])
    same = emp1 == slots["firm"].to_numpy(dtype=object)  # never the posting firm itself
    if same.any():
        emp1[same] = _other_firm(
            slots["firm"].to_numpy(dtype=object)[same], peer_pools, industry[same], all_firms, u[8][same]
        )
    firm_industry = dict(zip(firms["firm_name"], firms["industry_name"]))
    title_pools = {k: np.array(v, dtype=object) for k, v in ENTRY_LEVEL_TITLES.items()}
    title_pools["Other"] = np.array(sorted({t for v in ENTRY_LEVEL_TITLES.values() for t in v}), dtype=object)
    emp1_ind = pd.Series(emp1).map(firm_industry).fillna("Other").to_numpy(dtype=object)
    emp1_title = pick_by_group(emp1_ind, title_pools, u[9])
    tenure1 = 6 + (u[10] * 31).astype(int)
    emp2 = pick(all_firms, u[11])
    emp2_ind = pd.Series(emp2).map(firm_industry).fillna("Other").to_numpy(dtype=object)
    emp2_title = pick_by_group(emp2_ind, title_pools, u[14])
    tenure2 = 6 + (u[12] * 19).astype(int)
    gap = (u[13] * 4).astype(int)
    emp1_start = post_month - tenure1
    emp2_end = emp1_start - gap
    emp2_start = emp2_end - tenure2

    return {
        "emp1_employer": emp1,
        "emp1_title": emp1_title,
        "emp1_start": _month(emp1_start),
        "emp1_end": "Present",
        "emp2_employer": emp2,
        "emp2_title": emp2_title,
        "emp2_start": _month(emp2_start),
        "emp2_end": _month(emp2_end),
        "exp_year": ((post_month - emp2_start) // 12).astype(int),
    }


def _other_firm(
    posting_firm: np.ndarray,
    peer_pools: dict[str, np.ndarray],
    industry: np.ndarray,
    all_firms: np.ndarray,
    u: np.ndarray,
) -> np.ndarray:
    """Draw employers from the industry's firms other than the posting firm."""
    out = np.empty(len(posting_firm), dtype=object)
    for group in pd.unique(industry):
        mask = industry == group
        firm = posting_firm[mask]
        pool = peer_pools[group]
        for name in pd.unique(firm):  # at most the few firms of one industry
            rows = np.flatnonzero(mask)[firm == name]
            others = pool[pool != name]
            others = others if len(others) else all_firms[all_firms != name]
            out[rows] = pick(others, u[rows])
    return out
