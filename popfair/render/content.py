"""Resume content: occupation pools (validated), shared school and city tables, the demographic
word list no rendered text may contain, and the per-applicant random stream.

Pools come from the occupation config (`occupation.pools`, wired into renderers as
`renderer.pools: ${oc.select:occupation.pools,null}`). Schema, all lists of non-empty strings:

    skills:      [...]                       at least `n_skills` entries
    employers:   [...]                       at least 4 (one distinct employer per role)
    titles:      {junior: [...], mid: [...], senior: [...]}
    bullets:     {junior: [...], mid: [...], senior: [...]}   at least 2 x bullets_per_role each
    credentials: {some_college, associate, bachelor, master, professional, doctorate: [...]}
                 (hs_ged optional; defaults to "High School Diploma")
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd
import yaml

from popfair.core.errors import ConfigError, DataError
from popfair.data import data_file

SENIORITY = ("junior", "mid", "senior")
EDU_LEVELS = ("hs_ged", "some_college", "associate", "bachelor", "master", "professional", "doctorate")
MAX_ROLES = 4
DEFAULT_HS_CREDENTIALS = ("High School Diploma",)

# Words that would state an applicant's gender, race or age outright. Rendered text (outside the
# applicant's own name and the email built from it) must contain none of them; pools are checked
# against this list when a renderer is built. "Senior" is a job-seniority word, not an age word.
DEMOGRAPHIC_WORDS = (
    # gender
    "male",
    "female",
    "man",
    "men",
    "woman",
    "women",
    "he",
    "she",
    "him",
    "his",
    "her",
    "hers",
    "himself",
    "herself",
    "boy",
    "girl",
    "gentleman",
    "lady",
    "ladies",
    "mother",
    "father",
    "maternal",
    "paternal",
    "maternity",
    "wife",
    "husband",
    "gender",
    "sex",
    "fraternity",
    "sorority",
    # race / ethnicity
    "black",
    "white",
    "african",
    "caucasian",
    "hispanic",
    "latino",
    "latina",
    "latinx",
    "asian",
    "pacific",
    "islander",
    "native",
    "indigenous",
    "race",
    "racial",
    "ethnic",
    "ethnicity",
    # age
    "age",
    "aged",
    "ages",
    "old",
    "older",
    "elderly",
    "young",
    "younger",
    "youth",
    "youthful",
    "born",
    "birth",
    "birthday",
    "retired",
    "retiree",
    "millennial",
    "boomer",
    "year-old",
    "years-old",
)
# Plurals and possessives count too (mothers, girl's). Honorifics count only with their period ("Ms. Lee"): bare "MS" is Mississippi's USPS code.
HONORIFICS = ("mr", "mrs", "ms", "miss")
DEMOGRAPHIC_PATTERN = re.compile(
    r"\b(?:(?:"
    + "|".join(re.escape(w) for w in DEMOGRAPHIC_WORDS)
    + r"|years old)(?:'?s)?\b|(?:"
    + "|".join(HONORIFICS)
    + r")\.)",
    re.IGNORECASE,
)


def demographic_words_in(text: str) -> list[str]:
    """The demographic words (see DEMOGRAPHIC_WORDS) that occur in `text`, lower-cased."""
    return sorted({m.group(0).lower() for m in DEMOGRAPHIC_PATTERN.finditer(text)})


def applicant_stream(applicant_id: str, seed: int) -> random.Random:
    """The random stream for one applicant: a hash of (seed, applicant_id), no global state, so a
    resume is the same whatever else is rendered, and counterfactual copies of an applicant
    (same applicant_id) draw the same numbers (common random numbers)."""
    return random.Random(stream_seed(applicant_id, seed))


def stream_seed(applicant_id: str, seed: int) -> int:
    """The seed of an applicant's stream (`applicant_stream`): one `random.Random` seeded with it
    again draws the same numbers as a new stream."""
    return int.from_bytes(hashlib.blake2b(f"{seed}\x1f{applicant_id}".encode(), digest_size=8).digest(), "little")


def _string_list(value: Any, key: str, minimum: int = 1) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{key}: must be a list of non-empty strings, got {value!r:.120}")
    if len(value) < minimum:
        raise ConfigError(f"{key}: needs at least {minimum} entries, has {len(value)}")
    found = demographic_words_in(" ".join(value))
    if found:
        raise ConfigError(f"{key}: entries must not state gender, race or age; found {found}")
    return tuple(v.strip() for v in value)


def _by_level(
    value: Any,
    key: str,
    levels: tuple[str, ...],
    minimum: int = 1,
    optional: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be a mapping with keys {list(levels)}, got {type(value).__name__}")
    optional = dict(optional or {})
    unknown = set(value) - set(levels) - set(optional)
    if unknown:
        raise ConfigError(f"{key}: unknown keys {sorted(unknown)}; allowed {list(optional) + list(levels)}")
    missing = [level for level in levels if level not in value]
    if missing:
        raise ConfigError(f"{key}: missing keys {missing}")
    out = {level: _string_list(value[level], f"{key}.{level}", minimum) for level in levels}
    for level, default in optional.items():
        out[level] = _string_list(value[level], f"{key}.{level}") if level in value else default
    return out


@dataclass(frozen=True)
class ResumePools:
    """An occupation's validated content pools (see the module docstring for the schema)."""

    skills: tuple[str, ...]
    employers: tuple[str, ...]
    titles: Mapping[str, tuple[str, ...]]
    bullets: Mapping[str, tuple[str, ...]]
    credentials: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_config(
        cls, pools: Mapping[str, Any] | None, *, n_skills: int, bullets_per_role: int, key: str = "renderer.pools"
    ) -> ResumePools:
        if not pools:
            raise ConfigError(
                f"{key}: resume renderers (text, image, image_photo) need content pools and "
                "the chosen occupation has none (occupation.pools). Use occupation=nurse|teacher|"
                "software_developer|accountant|construction_laborer, add a `pools:` block to "
                "your occupation, or use renderer=json (e.g. with entry_level_postings)."
            )
        if not isinstance(pools, Mapping):
            raise ConfigError(f"{key}: must be a mapping, got {type(pools).__name__}")
        expected = {"skills", "employers", "titles", "bullets", "credentials"}
        if set(pools) != expected:
            raise ConfigError(
                f"{key}: keys must be {sorted(expected)}; missing "
                f"{sorted(expected - set(pools))}, unknown {sorted(set(pools) - expected)}"
            )
        return cls(
            skills=_string_list(pools["skills"], f"{key}.skills", n_skills),
            employers=_string_list(pools["employers"], f"{key}.employers", MAX_ROLES),
            titles=_by_level(pools["titles"], f"{key}.titles", SENIORITY),
            # the two senior roles of a four-role history must not repeat a bullet
            bullets=_by_level(pools["bullets"], f"{key}.bullets", SENIORITY, 2 * bullets_per_role),
            credentials=_by_level(
                pools["credentials"], f"{key}.credentials", EDU_LEVELS[1:], optional={"hs_ged": DEFAULT_HS_CREDENTIALS}
            ),
        )


@lru_cache(maxsize=1)
def cities_by_state() -> dict[str, tuple[tuple[str, str], ...]]:
    """USPS code -> ((city, area code), ...) from the bundled data/resume/cities.csv."""
    path = data_file("resume", "cities.csv")
    table = pd.read_csv(path, dtype=str)
    missing = {"usps", "city", "area_code"} - set(table.columns)
    if missing:
        raise DataError(f"{path}: missing columns {sorted(missing)}")
    return {state: tuple(zip(group["city"], group["area_code"])) for state, group in table.groupby("usps", sort=True)}


@lru_cache(maxsize=1)
def school_pools() -> dict[str, tuple[str, ...]]:
    """Fictional schools per level (high_school, community_college, university, graduate)."""
    path = data_file("resume", "schools.yaml")
    raw = yaml.safe_load(path.read_text())
    levels = ("high_school", "community_college", "university", "graduate")
    try:
        return _by_level(raw, f"{path}", levels)
    except ConfigError as exc:  # a broken bundled file is a data problem, not a config one
        raise DataError(str(exc)) from None
