"""Entry-level job postings for the paired correspondence audit (config `occupation=entry_level_postings`).

Either generated from the bundled audit reference data (``popfair/data/audit``: the 97 named KRW firms
with their industries, the 100 largest U.S. metros) or read from a user CSV with the columns
firm, title, metro, state, post_date. Each posting becomes one `Job` keyed by ``posting_id`` whose
description is the posting text the screener reads.

Generator (the paper drew real Revelio Labs postings; those are not redistributable, see
``data/audit/SOURCES.md`` section 6): firms are drawn with probability proportional to the number of
distinct jobs KRW applied to at each firm (the KRW sampling frame), metros proportional to their 2023
population, titles uniformly from the entry-level titles written below for the firm's industry (every
title carries one of the paper's entry-level keywords: analyst, associate, coordinator, assistant,
representative, specialist, trainee), post dates uniformly between ``date_start`` and ``date_end``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from popfair.core.errors import DataError, require
from popfair.core.types import Job
from popfair.population.scm import keyed_choice, keyed_streams

POSTING_COLUMNS = ("firm", "title", "metro", "state", "post_date")

# Entry-level titles by KRW industry (AER 2024 Table F3 groups), written for this project.
ENTRY_LEVEL_TITLES: dict[str, tuple[str, ...]] = {
    "Food products": (
        "Production Associate",
        "Quality Assurance Assistant",
        "Supply Chain Analyst",
        "Sales Representative",
        "Logistics Coordinator",
    ),
    "Manufacturing": (
        "Production Associate",
        "Quality Control Assistant",
        "Procurement Analyst",
        "Manufacturing Associate",
        "Materials Coordinator",
    ),
    "Freight / transport": (
        "Logistics Coordinator",
        "Operations Associate",
        "Dispatch Assistant",
        "Customer Service Representative",
        "Freight Analyst",
    ),
    "Communications": (
        "Customer Service Representative",
        "Retail Sales Associate",
        "Technical Support Specialist",
        "Marketing Coordinator",
        "Business Analyst",
    ),
    "Electric / gas": (
        "Customer Service Representative",
        "Field Operations Assistant",
        "Billing Analyst",
        "Administrative Assistant",
        "Engineering Associate",
    ),
    "Wholesale trade": (
        "Inside Sales Representative",
        "Warehouse Associate",
        "Purchasing Assistant",
        "Account Coordinator",
        "Inventory Analyst",
    ),
    "Building materials": (
        "Sales Associate",
        "Customer Service Associate",
        "Merchandising Assistant",
        "Inventory Coordinator",
        "Pro Desk Associate",
    ),
    "General merchandise": (
        "Sales Associate",
        "Cashier Associate",
        "Merchandising Associate",
        "Management Trainee",
        "Store Operations Coordinator",
    ),
    "Food stores": (
        "Customer Service Associate",
        "Pharmacy Assistant",
        "Grocery Associate",
        "Management Trainee",
        "Store Operations Coordinator",
    ),
    "Auto dealers / services / parts": (
        "Sales Associate",
        "Service Advisor Assistant",
        "Parts Associate",
        "Finance Coordinator",
        "Customer Service Representative",
    ),
    "Apparel stores": (
        "Sales Associate",
        "Visual Merchandising Assistant",
        "Stock Associate",
        "Assistant Store Manager Trainee",
        "Customer Experience Associate",
    ),
    "Home furnishing stores": (
        "Sales Associate",
        "Design Consultant Assistant",
        "Customer Service Representative",
        "Warehouse Associate",
        "Delivery Coordinator",
    ),
    "Eating / drinking": (
        "Crew Associate",
        "Shift Coordinator",
        "Management Trainee",
        "Guest Services Associate",
        "Restaurant Operations Analyst",
    ),
    "Other retail": (
        "Sales Associate",
        "Pharmacy Technician Trainee",
        "Customer Service Associate",
        "Inventory Specialist",
        "Store Operations Coordinator",
    ),
    "Banks / securities": (
        "Client Service Associate",
        "Financial Analyst",
        "Operations Analyst",
        "Branch Banking Associate",
        "Compliance Assistant",
    ),
    "Accommodation / real estate": (
        "Guest Services Associate",
        "Leasing Associate",
        "Front Desk Representative",
        "Property Management Assistant",
        "Reservations Coordinator",
    ),
    "Personal / business services": (
        "Customer Service Representative",
        "Rental Associate",
        "Account Coordinator",
        "Operations Analyst",
        "Administrative Assistant",
    ),
    "Repair services": (
        "Service Associate",
        "Customer Service Representative",
        "Rental Associate",
        "Branch Operations Assistant",
        "Scheduling Coordinator",
    ),
    "Health and engineering services": (
        "Patient Services Representative",
        "Medical Office Assistant",
        "Research Assistant",
        "Project Coordinator",
        "Data Analyst",
    ),
}


def audit_data_path(name: str) -> Path:
    """Path of a bundled audit reference file (popfair/data/audit/<name>)."""
    return Path(str(resources.files("popfair") / "data" / "audit" / name))


def principal_city(cbsa_title: pd.Series) -> pd.Series:
    """'Atlanta-Sandy Springs-Roswell, GA' -> 'Atlanta' (the first named city of the metro)."""
    return cbsa_title.str.split(",", n=1).str[0].str.split("-", n=1).str[0].str.strip()


@dataclass
class EntryLevelPostings:
    """A set of entry-level postings; `.postings` is the table, `.jobs` the screener's Jobs.

    n_postings: how many postings to generate (ignored with postings_csv).
    postings_csv: a CSV with columns firm, title, metro, state, post_date (extra columns kept;
    an optional `industry` column feeds the profile bank's employer pools); rows with a missing
    field are excluded and counted in `.n_excluded`.
    """

    key: str = "entry_level_postings"
    n_postings: int = 6006
    postings_csv: str | None = None
    date_start: str = "2024-01-01"
    date_end: str = "2025-12-31"
    seed: int = 0
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        require(bool(self.key), "occupation.key", "must be a non-empty name")
        require(
            isinstance(self.n_postings, int) and self.n_postings >= 1,
            "occupation.n_postings",
            f"must be a positive integer, got {self.n_postings!r}",
        )
        try:
            start, end = pd.Timestamp(self.date_start), pd.Timestamp(self.date_end)
        except ValueError as exc:
            raise DataError(f"occupation.date_start/date_end: not dates ({exc})") from None
        require(start <= end, "occupation.date_start", f"{self.date_start} is after date_end {self.date_end}")
        if self.postings_csv is not None:
            require(
                Path(self.postings_csv).is_file(), "occupation.postings_csv", f"file not found: {self.postings_csv}"
            )

    @cached_property
    def postings(self) -> pd.DataFrame:
        """One row per posting: posting_id, firm, industry, title, metro, metro_city, state, post_date."""
        table = self._read_csv() if self.postings_csv is not None else self._generate()
        table.insert(0, "posting_id", posting_ids(len(table)))
        return table.reset_index(drop=True)

    @property
    def n_excluded(self) -> int:
        """Rows of the user CSV dropped for a missing field (0 for generated postings)."""
        self.postings  # noqa: B018 - reading the table sets the count
        return self._n_excluded

    @cached_property
    def jobs(self) -> dict[str, Job]:
        """posting_id -> Job whose description is the posting text the screener reads."""
        table = self.postings
        # Only the five fields "Can LLMs Hire Fairly?" says a posting record holds (firm name, job
        # title, metropolitan area, state, post date); the line layout is popfair's (docs/replication.md).
        text = (
            "Company: "
            + table["firm"]
            + "\nJob title: "
            + table["title"]
            + "\nMetropolitan area: "
            + table["metro"]
            + "\nState: "
            + table["state"]
            + "\nPost date: "
            + table["post_date"]
        )
        attrs = table.drop(columns=["posting_id"]).to_dict("records")
        return {
            pid: Job(job_id=pid, title=title, description=desc, attributes=attr)
            for pid, title, desc, attr in zip(table["posting_id"], table["title"], text, attrs)
        }

    def _generate(self) -> pd.DataFrame:
        self._n_excluded = 0
        # every field of posting i is keyed by (its id, seed): n postings are the first n of any
        # larger n_postings (nested samples: growing the audit re-pays for no posting it has)
        n = self.n_postings
        u = keyed_streams(posting_ids(n), self.seed, "posting", 4)
        firms = pd.read_csv(audit_data_path("firms.csv"))
        metros = pd.read_csv(audit_data_path("metros.csv"))
        firm_idx = keyed_choice(u[0], firms["n_jobs"].to_numpy(dtype=float))
        metro_idx = keyed_choice(u[1], metros["population_2023"].to_numpy(dtype=float))
        industry = firms["industry_name"].to_numpy()[firm_idx]
        # Title: uniform within the industry's pool.
        pools = {k: np.array(v, dtype=object) for k, v in ENTRY_LEVEL_TITLES.items()}
        unknown = sorted(set(industry) - set(pools))
        if unknown:
            raise DataError(f"firms.csv: industries without entry-level titles: {unknown}")
        title = np.empty(n, dtype=object)
        for name, pool in pools.items():
            mask = industry == name
            title[mask] = pool[np.minimum((u[2][mask] * len(pool)).astype(int), len(pool) - 1)]
        start, end = pd.Timestamp(self.date_start), pd.Timestamp(self.date_end)
        n_days = (end - start).days + 1
        days = np.minimum((u[3] * n_days).astype(int), n_days - 1)
        post_date = (start + pd.to_timedelta(days, unit="D")).strftime("%Y-%m-%d")
        chosen = metros.iloc[metro_idx]
        return pd.DataFrame(
            {
                "firm": firms["firm_name"].to_numpy()[firm_idx],
                "industry": industry,
                "title": title,
                "metro": chosen["cbsa_title"].to_numpy(),
                "metro_city": principal_city(chosen["cbsa_title"]).to_numpy(),
                "state": chosen["first_title_state"].to_numpy(),
                "post_date": np.asarray(post_date),
            }
        )

    def _read_csv(self) -> pd.DataFrame:
        path = self.postings_csv
        try:
            table = pd.read_csv(path, dtype=str, keep_default_na=True)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise DataError(f"{path}: cannot read postings CSV ({exc})") from None
        missing = [c for c in POSTING_COLUMNS if c not in table.columns]
        if missing:
            raise DataError(
                f"{path}: postings CSV lacks columns {missing}; required columns are {list(POSTING_COLUMNS)}"
            )
        core = table[list(POSTING_COLUMNS)].apply(lambda col: col.str.strip())
        complete = core.notna().all(axis=1) & (core != "").all(axis=1)
        self._n_excluded = int((~complete).sum())
        if self._n_excluded:
            self.notes.append(
                f"{path}: excluded {self._n_excluded} of {len(table)} postings "
                f"with a missing field among {list(POSTING_COLUMNS)}"
            )
        table = table.loc[complete].copy()
        table[list(POSTING_COLUMNS)] = core.loc[complete]
        if table.empty:
            raise DataError(f"{path}: no posting has all of {list(POSTING_COLUMNS)}")
        dates = pd.to_datetime(table["post_date"], errors="coerce")
        if dates.isna().any():
            bad = table.loc[dates.isna(), "post_date"].head(3).tolist()
            raise DataError(f"{path}: post_date must be a date (YYYY-MM-DD), got e.g. {bad}")
        table["post_date"] = dates.dt.strftime("%Y-%m-%d")
        if "industry" not in table.columns:
            table["industry"] = _industry_of(table["firm"])
        table["metro_city"] = principal_city(table["metro"])
        ordered = ["firm", "industry", "title", "metro", "metro_city", "state", "post_date"]
        return table[ordered + [c for c in table.columns if c not in ordered]]


def posting_ids(n: int) -> list[str]:
    """The ids of the first n postings (p00000, p00001, ...)."""
    return [f"p{i:05d}" for i in range(n)]


def _industry_of(firm: pd.Series) -> pd.Series:
    """KRW industry for firms named in firms.csv; other firms get 'Other' (generic employer pools)."""
    firms = pd.read_csv(audit_data_path("firms.csv"))
    lookup = dict(zip(firms["firm_name"].str.lower(), firms["industry_name"]))
    return firm.str.lower().map(lookup).fillna("Other")
