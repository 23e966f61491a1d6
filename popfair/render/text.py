"""Rule-based plain-text resumes built only from the structured profile (renderer `text`).

PopResume section 4.2 / appendix B.1: header (name, city and USPS state, synthetic phone and an
email built from the name), skills, work history, education. Education entries follow edu_level
with graduation years from age and degree; work history spans exp_year years up to the survey
year, its later roles after education ends; employers, titles, bullets, skills, schools and
majors come from pools.

What a seed may change: city within the state, phone digits, email pattern, which skills,
employers, titles, bullets, schools and credentials are drawn. What it may not: the name, the
state, the number of roles and education entries, their seniority, years and degree levels.
"""

from __future__ import annotations

import _random
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from popfair.core.constraints import Constraint, Interval, validate
from popfair.core.errors import DataError
from popfair.core.types import Document, Job
from popfair.render.content import (
    EDU_LEVELS,
    MAX_ROLES,
    ResumePools,
    applicant_stream,
    cities_by_state,
    school_pools,
    stream_seed,
)

# Survey year when a profile has no birth_year; otherwise survey year = birth_year + age (the
# population dates birth years from its PUMS file's survey year).
DEFAULT_SURVEY_YEAR = 2024
# Age at which each level is typically completed (some_college: last year attended).
COMPLETION_AGE = {
    "hs_ged": 18,
    "some_college": 20,
    "associate": 20,
    "bachelor": 22,
    "master": 24,
    "professional": 25,
    "doctorate": 27,
}
GRADUATE_LEVELS = ("master", "professional", "doctorate")
BACHELOR_MIN_AGE = 20  # a bachelor's before a graduate degree is never dated before this age
SCHOOL_KINDS = ("high_school", "community_college", "university", "graduate")  # one school draw each, in this order
SCHOOL_LEVEL = {
    "hs_ged": "high_school",
    "some_college": "community_college",
    "associate": "community_college",
    "bachelor": "university",
    "master": "graduate",
    "professional": "graduate",
    "doctorate": "graduate",
}
SENIORITY_BY_ROLES = {
    1: ("junior",),
    2: ("junior", "mid"),
    3: ("junior", "mid", "senior"),
    4: ("junior", "mid", "senior", "senior"),
}
EMAIL_PATTERNS = ("{first}.{last}", "{first}{last}", "{f}{last}", "{first}_{last}")
SECTION_TITLES = ("SKILLS", "WORK HISTORY", "EDUCATION")
# Every profile field a resume's content depends on (resume_id, else applicant_id: the seed of its
# random draws); the document store keys documents by these (popfair/render/store.py).
RESUME_FIELDS: tuple[str, ...] = (
    "applicant_id",
    "resume_id",
    "first_name",
    "surname",
    "state",
    "edu_level",
    "age",
    "exp_year",
    "birth_year",
)


def number_of_roles(exp_year: int) -> int:
    """Piecewise rule (paper B.1): under 3 years one role, 3-6 two, 7-10 three, over 10 four."""
    if exp_year < 3:
        return 1
    if exp_year <= 6:
        return 2
    if exp_year <= 10:
        return 3
    return 4


def role_periods(
    exp_year: int, survey_year: int = DEFAULT_SURVEY_YEAR, education_end: int | None = None
) -> list[tuple[int, int | None]]:
    """(start, end) years of each role, oldest first; the last role is current (end None) and the
    first starts exp_year years before the survey year, so the history shows exactly exp_year years.

    Roles are laid out after education ends: the span from `education_end` (the last graduation
    year) to the survey year is split as evenly as possible (extra years to the most recent roles),
    and any years worked before graduation (the experience model counts them) lengthen the first,
    junior role, so a later role never starts before the degree unless the span is shorter than
    one year per role. A worker with under a year of experience started in the survey year."""
    n = number_of_roles(exp_year)
    first_start = survey_year - max(exp_year, 0)
    anchor = first_start
    if education_end is not None and education_end > first_start:
        anchor = min(education_end, survey_year - (n - 1))
    base, extra = divmod(survey_year - anchor, n)
    ends = []
    year = anchor
    for i in range(n - 1):
        year += base + (1 if i >= n - extra else 0)
        ends.append(year)
    starts = [first_start, *ends]
    return list(zip(starts, [*ends, None]))


def education_years(edu_level: str, birth_year: int, age: int) -> list[tuple[str, int]]:
    """[(level, year)] of the education entries, oldest first: one entry, or a bachelor's then the
    graduate degree. Years follow typical completion ages, capped by the applicant's age."""
    final_age = min(COMPLETION_AGE[edu_level], age)
    final_year = birth_year + final_age
    if edu_level not in GRADUATE_LEVELS:
        return [(edu_level, final_year)]
    gap = COMPLETION_AGE[edu_level] - COMPLETION_AGE["bachelor"]
    bachelor_year = min(final_year, max(birth_year + BACHELOR_MIN_AGE, final_year - gap))
    return [("bachelor", bachelor_year), (edu_level, final_year)]


def _draw(uniform: Callable[[], float], pool: tuple[str, ...], k: int) -> list[str]:
    """The first k items of a random permutation of `pool` (partial Fisher-Yates, k draws of
    `uniform()`, a stream's `random.Random.random`): a fixed number of draws, and item i does not
    depend on k."""
    items = list(pool)
    n = len(items)
    for i in range(k):
        j = i + int(uniform() * (n - i))
        items[i], items[j] = items[j], items[i]
    del items[k:]
    return items


@lru_cache(maxsize=65536)  # names repeat across applicants: normalise each once
def _ascii_letters(name: str) -> str:
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return "".join(ch for ch in plain.lower() if ch.isalpha())


@dataclass(frozen=True)
class Role:
    title: str
    employer: str
    start: int
    end: int | None  # None = current role

    bullets: tuple[str, ...] = ()

    @property
    def period(self) -> str:
        return f"{self.start} - {'Present' if self.end is None else self.end}"


@dataclass(frozen=True)
class EducationEntry:
    credential: str
    school: str
    year: int


@dataclass(frozen=True)
class Resume:
    """A resume's content, independent of layout (text and image renderers share it)."""

    name: str
    location: str
    phone: str
    email: str
    skills: tuple[str, ...]
    roles: tuple[Role, ...]  # most recent first
    education: tuple[EducationEntry, ...]  # most recent first

    @property
    def contact_line(self) -> str:
        return f"{self.location} | {self.phone} | {self.email}"

    def role_heading(self, role: Role) -> str:
        return f"{role.title}, {role.employer} | {self.location} | {role.period}"

    @staticmethod
    def education_line(entry: EducationEntry) -> str:
        return f"{entry.credential}, {entry.school} | {entry.year}"

    def to_text(self) -> str:
        lines = [self.name, self.contact_line]
        if self.skills:  # n_skills = 0: no skills section (the PopResume authors' scored resumes)
            lines += ["", SECTION_TITLES[0], *(f"- {skill}" for skill in self.skills)]
        lines += ["", SECTION_TITLES[1]]
        for i, role in enumerate(self.roles):
            if i:
                lines.append("")
            lines.append(self.role_heading(role))
            lines += [f"- {bullet}" for bullet in role.bullets]
        lines += ["", SECTION_TITLES[2]]
        lines += [self.education_line(entry) for entry in self.education]
        return "\n".join(lines) + "\n"


class ResumeBuilder:
    """Turns a profile row into Resume content. One random stream per (resume_id, seed), where a
    row without `resume_id` uses its applicant_id; every draw is made in a fixed order whatever the
    profile, so two profiles of the same applicant that differ in, say, education share their
    employers and bullets (common random numbers), and rows that share a resume_id (the candidates
    of a ranking trial) share everything but their names and the email made from them."""

    def __init__(self, pools: ResumePools, seed: int, n_skills: int, bullets_per_role: int, email_domain: str) -> None:
        self.pools, self.seed = pools, seed
        self.n_skills, self.bullets_per_role, self.email_domain = n_skills, bullets_per_role, email_domain
        self.cities = cities_by_state()
        self.schools = school_pools()
        # each pool's draw count, in the draw order, worked out once (not per resume)
        self._title_draws = [(level, pool, min(2, len(pool))) for level, pool in pools.titles.items()]
        self._bullet_draws = [(level, pool, 2 * bullets_per_role) for level, pool in pools.bullets.items()]
        self._title_levels = [level for level, _, _ in self._title_draws]
        self._bullet_levels = [level for level, _, _ in self._bullet_draws]
        self._draws = [
            (pools.skills, n_skills),
            (pools.employers, MAX_ROLES),
            *[(pool, k) for _, pool, k in self._title_draws],
            *[(pool, k) for _, pool, k in self._bullet_draws],
        ]  # every pool `build` draws from, in its order, and how many

    def _fields(self, profile: Mapping[str, Any]) -> tuple[str, str, str, Any, Any, int, int, int, str]:
        """(applicant_id, first name, surname, state, edu_level, age, exp_year, birth_year, the
        stream's id), checked."""
        try:
            applicant_id = str(profile["applicant_id"])
            first, last = str(profile["first_name"]), str(profile["surname"])
            state, edu_level = profile["state"], profile["edu_level"]
            age, exp_year = int(profile["age"]), int(profile["exp_year"])
            birth_year = int(profile.get("birth_year", DEFAULT_SURVEY_YEAR - age))
        except KeyError as exc:
            raise DataError(
                f"profile row is missing column {exc.args[0]!r}; the text renderer needs "
                "applicant_id, first_name, surname, state, age, edu_level, exp_year"
            ) from None
        if edu_level not in COMPLETION_AGE:
            raise DataError(f"profile {applicant_id}: edu_level {edu_level!r} is not one of {list(EDU_LEVELS)}")
        if state not in self.cities:
            raise DataError(
                f"profile {applicant_id}: state {state!r} is not a USPS code in "
                f"data/resume/cities.csv ({sorted(self.cities)})"
            )
        resume_id = profile.get("resume_id")
        if resume_id is None or resume_id != resume_id:  # absent, or NaN in a mixed table
            resume_id = applicant_id
        return applicant_id, first, last, state, edu_level, age, exp_year, birth_year, str(resume_id)

    def _contact(self, uniform: Callable[[], float], first: str, last: str, state: str) -> tuple[str, str, str]:
        """Location, phone and e-mail: the stream's first three draws, whatever the profile."""
        cities = self.cities[state]
        city, area_code = cities[int(uniform() * len(cities))]
        phone = f"({area_code}) 555-01{int(uniform() * 100):02d}"
        pattern = EMAIL_PATTERNS[int(uniform() * len(EMAIL_PATTERNS))]
        first_key, last_key = _ascii_letters(first) or "applicant", _ascii_letters(last) or "resume"
        email = pattern.format(first=first_key, last=last_key, f=first_key[0]) + "@" + self.email_domain
        return f"{city}, {state}", phone, email

    def build(self, profile: Mapping[str, Any]) -> Resume:
        _, first, last, state, edu_level, age, exp_year, birth_year, resume_id = self._fields(profile)
        uniform = applicant_stream(resume_id, self.seed).random
        pools, per_role = self.pools, self.bullets_per_role

        location, phone, email = self._contact(uniform, first, last, state)

        # draws from every pool, in a fixed order and number whatever the profile
        skills = _draw(uniform, pools.skills, self.n_skills)
        employers = _draw(uniform, pools.employers, MAX_ROLES)
        titles = {level: _draw(uniform, pool, k) for level, pool, k in self._title_draws}
        bullets = {level: _draw(uniform, pool, k) for level, pool, k in self._bullet_draws}
        school_draw = {level: uniform() for level in SCHOOL_KINDS}
        credential_draw = {level: uniform() for level in EDU_LEVELS}

        schooling = education_years(edu_level, birth_year, age)
        periods = role_periods(exp_year, survey_year=birth_year + age, education_end=schooling[-1][1])
        seniorities = SENIORITY_BY_ROLES[len(periods)]
        roles = []
        for i, ((start, end), level) in enumerate(zip(periods, seniorities)):
            k = i - seniorities.index(level)  # earlier roles at this level (levels are contiguous)
            level_titles = titles[level]
            roles.append(
                Role(
                    title=level_titles[k % len(level_titles)],
                    employer=employers[i],
                    start=start,
                    end=end,
                    bullets=tuple(bullets[level][k * per_role : (k + 1) * per_role]),
                )
            )

        education = []
        for level, year in schooling:
            school_pool = self.schools[SCHOOL_LEVEL[level]]
            credential_pool = pools.credentials[level]
            education.append(
                EducationEntry(
                    credential=credential_pool[int(credential_draw[level] * len(credential_pool))],
                    school=school_pool[int(school_draw[SCHOOL_LEVEL[level]] * len(school_pool))],
                    year=year,
                )
            )
        return Resume(
            name=f"{first} {last}",
            location=location,
            phone=phone,
            email=email,
            skills=tuple(skills),
            roles=tuple(reversed(roles)),
            education=tuple(reversed(education)),
        )

    def text(self, profile: Mapping[str, Any]) -> str:
        """`build(profile).to_text()`, the same draws in the same order, assembled straight into the
        text (no Resume, Role or EducationEntry objects): a text resume at about half the cost."""
        _, first, last, state, edu_level, age, exp_year, birth_year, resume_id = self._fields(profile)
        # random.Random(n) is the C generator seeded with n (an int: random.Random.seed calls the C
        # seed): the same stream as applicant_stream's, without the Python-level seeding
        uniform = _random.Random(stream_seed(resume_id, self.seed)).random
        pools, per_role = self.pools, self.bullets_per_role
        location, phone, email = self._contact(uniform, first, last, state)
        lines = [f"{first} {last}", f"{location} | {phone} | {email}"]
        drawn = []
        for pool, k in self._draws:  # _draw of each pool in build's order, inlined
            items = list(pool)
            n = len(items)
            for i in range(k):
                j = i + int(uniform() * (n - i))
                items[i], items[j] = items[j], items[i]
            drawn.append(items[:k])
        if drawn[0]:  # n_skills = 0: no skills section
            lines += ["", SECTION_TITLES[0], *("- " + skill for skill in drawn[0])]
        employers = drawn[1]
        titles = dict(zip(self._title_levels, drawn[2 : 2 + len(self._title_levels)]))
        bullets = dict(zip(self._bullet_levels, drawn[2 + len(self._title_levels) :]))
        school_draw = {level: uniform() for level in SCHOOL_KINDS}
        credential_draw = {level: uniform() for level in EDU_LEVELS}
        schooling = education_years(edu_level, birth_year, age)
        periods = role_periods(exp_year, survey_year=birth_year + age, education_end=schooling[-1][1])
        seniorities = SENIORITY_BY_ROLES[len(periods)]
        roles: list[list[str]] = []
        for i, ((start, end), level) in enumerate(zip(periods, seniorities)):
            k = i - seniorities.index(level)  # earlier roles at this level (levels are contiguous)
            level_titles = titles[level]
            period = f"{start} - {'Present' if end is None else end}"
            roles.append(
                [f"{level_titles[k % len(level_titles)]}, {employers[i]} | {location} | {period}"]
                + ["- " + bullet for bullet in bullets[level][k * per_role : (k + 1) * per_role]]
            )
        lines += ["", SECTION_TITLES[1]]
        for i, role in enumerate(reversed(roles)):
            if i:
                lines.append("")
            lines += role
        lines += ["", SECTION_TITLES[2]]
        for level, year in reversed(schooling):
            school_pool = self.schools[SCHOOL_LEVEL[level]]
            credential_pool = pools.credentials[level]
            credential = credential_pool[int(credential_draw[level] * len(credential_pool))]
            school = school_pool[int(school_draw[SCHOOL_LEVEL[level]] * len(school_pool))]
            lines.append(f"{credential}, {school} | {year}")
        return "\n".join(lines) + "\n"


class EmailDomain(Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, str) and "." in value and "@" not in value and " " not in value

    def __str__(self) -> str:
        return "a domain such as example.com"


# The layout settings shared by the text and image renderers.
LAYOUT_CONSTRAINTS = {
    "seed": Interval(int, None, None),
    "n_skills": Interval(int, 0, 20),  # 0: no skills section
    "bullets_per_role": Interval(int, 1, 6),
    "email_domain": EmailDomain(),
}


def validate_layout_options(n_skills: Any, bullets_per_role: Any, email_domain: Any, seed: Any) -> None:
    """Construction-time checks shared by the text and image renderers (ParameterError naming the key)."""
    validate(
        LAYOUT_CONSTRAINTS,
        {"seed": seed, "n_skills": n_skills, "bullets_per_role": bullets_per_role, "email_domain": email_domain},
    )


class TextRenderer:
    """Plain-text resume (kind "text"). No gender, race or age words; deterministic for a given
    profile and seed."""

    kind = "text"
    shows: frozenset[str] | None = frozenset()  # no gender, race or age field, no pronouns, no photo
    parameter_constraints = LAYOUT_CONSTRAINTS
    rows_per_process = 5_000  # render_all forks workers for tables of twice this (about 0.25 s of work each)
    store_fields = RESUME_FIELDS  # what a document depends on besides the settings (render/store.py)

    def __init__(
        self,
        pools: Mapping[str, Any] | None = None,
        seed: int = 0,
        n_skills: int = 8,
        bullets_per_role: int = 3,
        email_domain: str = "example.com",
    ) -> None:
        validate_layout_options(n_skills, bullets_per_role, email_domain, seed)
        self.builder = ResumeBuilder(
            ResumePools.from_config(pools, n_skills=n_skills, bullets_per_role=bullets_per_role),
            seed=seed,
            n_skills=n_skills,
            bullets_per_role=bullets_per_role,
            email_domain=email_domain,
        )

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        return Document(
            applicant_id=str(profile["applicant_id"]),
            job_id=job.job_id,
            kind="text",
            text=self.builder.text(profile),
            profile=profile,
        )
