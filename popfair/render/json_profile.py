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
from typing import Any

from popfair.errors import DataError
from popfair.types import Document, Job

REQUIRED_FIELDS = ("first_name", "surname", "age", "state", "school", "degree", "major", "gpa", "graduation_year")
EMPLOYMENT_SLOTS = ("emp1", "emp2")
_ENCODER = json.JSONEncoder(ensure_ascii=False)  # json.dumps(..., ensure_ascii=False) builds one per call


class JsonRenderer:
    """Render a paired-audit profile row (see population.profile_bank) as compact, stable JSON."""

    kind = "json"
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
        history = []
        for slot in EMPLOYMENT_SLOTS:
            employer = profile.get(f"{slot}_employer")
            if isinstance(employer, str) and employer:
                history.append(
                    {
                        "employer": employer,
                        "title": profile[f"{slot}_title"],
                        "start": profile[f"{slot}_start"],
                        "end": profile[f"{slot}_end"],
                    }
                )
        document = {
            "name": f"{profile['first_name']} {profile['surname']}",
            "age": int(profile["age"]),
            "location": f"{city}, {profile['state']}" if city else str(profile["state"]),
            "education": {
                "school": profile["school"],
                "degree": profile["degree"],
                "major": profile["major"],
                "gpa": round(float(profile["gpa"]), 2),
                "graduation_year": int(profile["graduation_year"]),
            },
            "employment_history": history,
        }
        return Document(
            applicant_id=str(profile["applicant_id"]),
            job_id=job.job_id,
            kind="json",
            text=_ENCODER.encode(document),
            profile=profile,
        )
