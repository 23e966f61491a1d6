"""Single-candidate profile as JSON (renderer `json`), the document of the paired callback audit.

Schema (keys in this order; no race, gender or age words beyond what the name and age carry):

    {
      "name": "<first_name> <surname>",
      "age": <int>,
      "location": "<metro principal city or state>, <state>",
      "education": {"school": str, "degree": str, "major": str, "gpa": <float>, "graduation_year": <int>},
      "employment_history": [
        {"employer": str, "title": str, "start": "YYYY-MM", "end": "YYYY-MM" | "Present"},
        ...                                  # most recent first; entries with no employer are left out
      ]
    }

The screener's user message is the posting (Job.description) followed by this JSON, so both members of
a pair produce byte-identical documents except for the name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Any

from popfair.core.errors import DataError
from popfair.core.types import Document, Job

REQUIRED_FIELDS = ("first_name", "surname", "age", "state", "school", "degree", "major", "gpa", "graduation_year")
EMPLOYMENT_SLOTS = ("emp1", "emp2")
_ENCODER = json.JSONEncoder(ensure_ascii=False)  # json.dumps(..., ensure_ascii=False) builds one per call


def _json(value: Any) -> str:
    """One value as json.dumps(..., ensure_ascii=False) writes it."""
    return encode_basestring(value) if type(value) is str else _ENCODER.encode(value)


class JsonRenderer:
    """Render a paired-audit profile row (see population.profile_bank) as compact, stable JSON."""

    kind = "json"
    shows: frozenset[str] | None = frozenset(
        {"age"}
    )  # an explicit age field; no gender or race field (the name is a proxy)
    rows_per_process = 5_000  # render_all forks workers above this many rows (96,096 documents per panel case)

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        missing = [f for f in REQUIRED_FIELDS if f not in profile]
        if missing:
            raise DataError(
                f"renderer=json: profile lacks fields {missing}; the JSON profile needs "
                f"{list(REQUIRED_FIELDS)} (use experiment=paired_race or paired_gender)"
            )
        metro = profile.get("metro")
        city = str(metro).split(",")[0].split("-")[0].strip() if isinstance(metro, str) and metro else None
        # The JSON text is assembled from encoded values: what json.dumps(document, ensure_ascii=False)
        # writes for this schema (tests pin it), at a third of the cost (96,096 documents a panel case)
        history = [
            f'{{"employer": {_json(employer)}, "title": {_json(profile[f"{slot}_title"])}, '
            f'"start": {_json(profile[f"{slot}_start"])}, "end": {_json(profile[f"{slot}_end"])}}}'
            for slot in EMPLOYMENT_SLOTS
            if isinstance(employer := profile.get(f"{slot}_employer"), str) and employer
        ]
        location = f"{city}, {profile['state']}" if city else str(profile["state"])
        name = f"{profile['first_name']} {profile['surname']}"
        text = (
            f'{{"name": {_json(name)}, "age": {int(profile["age"])!r}, '
            f'"location": {_json(location)}, "education": {{"school": {_json(profile["school"])}, '
            f'"degree": {_json(profile["degree"])}, "major": {_json(profile["major"])}, '
            f'"gpa": {_json(round(float(profile["gpa"]), 2))}, '
            f'"graduation_year": {int(profile["graduation_year"])!r}}}, "employment_history": [{", ".join(history)}]}}'
        )
        return Document(
            applicant_id=str(profile["applicant_id"]),
            job_id=job.job_id,
            kind="json",
            text=text,
            profile=profile,
        )
