"""Plain-text resume built only from structured attributes (renderer `text`)."""
from __future__ import annotations

from typing import Any, Mapping

from popfair.types import Document, Job

EDU_TITLES = {"less_than_hs": "Coursework, High School", "hs_ged": "High School Diploma",
              "some_college": "College Coursework", "associate": "Associate Degree",
              "bachelor": "Bachelor's Degree", "master": "Master's Degree",
              "professional": "Professional Degree", "doctorate": "Doctoral Degree"}


class TextRenderer:
    """Header (name, state), education and experience sections. No gender, race or age words."""

    kind = "text"

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        years = int(profile["exp_year"])
        experience = (f"{years} year{'s' if years != 1 else ''} of work experience"
                      if years else "No prior paid work experience")
        text = "\n".join([
            f"{profile['first_name']} {profile['surname']}",
            f"Location: {profile['state']}",
            "",
            "EDUCATION",
            EDU_TITLES[profile["edu_level"]],
            "",
            "EXPERIENCE",
            experience,
        ])
        return Document(applicant_id=str(profile["applicant_id"]), job_id=job.job_id, kind="text", text=text,
                        profile=profile)
