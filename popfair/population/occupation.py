"""Occupations: the job a population audit screens applicants for (config group `occupation`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from popfair.errors import require
from popfair.types import Job


@dataclass
class Occupation:
    """A PopResume occupation: ACS OCCP code, SOC code, the job description the screener sees,
    and content pools renderers draw resume text from."""

    key: str
    title: str
    occp: int
    soc: str
    description: str
    pools: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(bool(self.key), "occupation.key", "must be a non-empty name")
        require(isinstance(self.occp, int) and 0 < self.occp < 10000,
                "occupation.occp", f"must be a 4-digit ACS OCCP code, got {self.occp!r}")
        require(len(self.description.strip()) > 40, "occupation.description",
                "must be a real job description (more than 40 characters)")

    @property
    def job(self) -> Job:
        return Job(job_id=self.key, title=self.title, description=self.description.strip(),
                   attributes={"occp": self.occp, "soc": self.soc})
