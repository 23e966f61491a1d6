"""Occupations: the job a population audit screens applicants for (config group `occupation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popfair.core.errors import require
from popfair.core.types import Job


@dataclass
class Occupation:
    """A PopResume occupation: ACS OCCP code, SOC code, the job description the screener sees,
    and content pools renderers draw resume text from. `description_file`: a text file whose contents
    replace `description` (a job text of the user's, e.g. the one a replication screened against)."""

    key: str
    title: str
    occp: int
    soc: str
    description: str
    pools: Mapping[str, Any] = field(default_factory=dict)
    description_file: str | None = None

    def __post_init__(self) -> None:
        require(bool(self.key), "occupation.key", "must be a non-empty name")
        if self.description_file is not None:
            path = Path(self.description_file).expanduser()
            require(path.is_file(), "occupation.description_file", f"{path} is not a file")
            self.description = path.read_text(encoding="utf-8")
        require(
            isinstance(self.occp, int) and 0 < self.occp < 10000,
            "occupation.occp",
            f"must be a 4-digit ACS OCCP code, got {self.occp!r}",
        )
        require(
            len(self.description.strip()) > 40,
            "occupation.description",
            "must be a real job description (more than 40 characters)",
        )

    @property
    def job(self) -> Job:
        return Job(
            job_id=self.key,
            title=self.title,
            description=self.description.strip(),
            attributes={"occp": self.occp, "soc": self.soc},
        )


def occupation_from_pums(
    occp: int,
    key: str | None = None,
    title: str | None = None,
    description: str | None = None,
    soc: str = "",
    pools: Mapping[str, Any] | None = None,
    description_file: str | None = None,
) -> Occupation:
    """Any of the 20 occupations in the bundled PUMS extract, by OCCP code (config `occupation=pums_occp`).

    Title defaults to the PUMS label; description defaults to a short generic posting built from it
    (set occupation.description to screen against a real posting). `pools` are the resume content
    pools (conf/occupation/pums_occp.yaml ships occupation-neutral ones)."""
    from popfair.population.pums import known_occupations_text, occupation_labels  # noqa: PLC0415

    labels = occupation_labels()
    require(
        isinstance(occp, int) and occp in labels.index,
        "occupation.occp",
        f"{occp!r} is not one of the 20 OCCP codes of the bundled extract: {known_occupations_text()}",
    )
    label = labels[occp].split("-", 1)[-1].strip()
    title = title or label
    description = description or (
        f"{title}. We are hiring for a {title.lower()} position (ACS occupation {occp}: {label}). "
        "Responsibilities follow the usual duties of the occupation. Requirements: education and work "
        "experience relevant to the role, reliability, and strong communication and teamwork skills."
    )
    return Occupation(
        key=key or f"occp{occp}",
        title=title,
        occp=occp,
        soc=soc,
        description=description,
        pools=dict(pools or {}),
        description_file=description_file,
    )
