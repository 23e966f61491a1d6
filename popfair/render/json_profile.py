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
from collections.abc import Callable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

import numpy as np
import pandas as pd

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
    # render_all forks workers above this many rows, where it renders row by row (with a document store)
    rows_per_process = 5_000

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        _check_fields(profile)
        city = _city(profile.get("metro"))
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

    def render_table(
        self, table: pd.DataFrame, jobs: Mapping[str, Job], rows: Sequence[Mapping[str, Any]] | None
    ) -> list[Document]:
        """`render` of every row of a profile table, in order (render_all's batch path: a panel's dry
        run renders 144,144 documents), the text assembled column by column with each distinct value
        encoded once. `rows`: the table's rows as `render` takes them, attached as each document's
        profile; None, documents without one (a plan's). A table the column-wise path cannot take
        (a missing field, a value int() refuses) is rendered row by row, which raises `render`'s
        error for the first such row."""
        profiles: Sequence[Mapping[str, Any] | None] = rows if rows is not None else [None] * len(table)
        try:
            texts = _texts(table)
        except (KeyError, TypeError, ValueError):
            from popfair.render.base import profile_records  # the rows as render_all gives them

            records = rows if rows is not None else profile_records(table)
            texts = [self.render(row, _NO_JOB).text for row in records]
        job_ids = {job_id: job.job_id for job_id, job in jobs.items()}
        return [
            Document(str(applicant), job_ids[job], "json", text, None, profile)  # positional: a third faster
            for applicant, job, text, profile in zip(
                table["applicant_id"].tolist(), table["job_id"].tolist(), texts, profiles
            )
        ]


_NO_JOB = Job(job_id="", title="", description="")  # the text does not depend on the job


def _check_fields(profile: Mapping[str, Any]) -> None:
    missing = [f for f in REQUIRED_FIELDS if f not in profile]
    if missing:
        raise DataError(
            f"renderer=json: profile lacks fields {missing}; the JSON profile needs "
            f"{list(REQUIRED_FIELDS)} (use experiment=paired_race or paired_gender)"
        )


def _city(metro: Any) -> str | None:
    """The metro's principal city ("New York-Newark-Jersey City, NY-NJ" -> "New York"), or None."""
    return str(metro).split(",")[0].split("-")[0].strip() if isinstance(metro, str) and metro else None


def _by_value(column: pd.Series, encode: Callable[[Any], Any] = _json) -> list[Any]:
    """`encode` of every value of a column, as `tolist` gives it (a row's value), each distinct value
    encoded once where equal values encode alike: strings, integers, and floats other than zero
    (0.0 == -0.0); a column with missing values, or of any other kind, value by value."""
    dtype = column.dtype
    alike = isinstance(dtype, pd.StringDtype) or dtype.kind in "iu" or (dtype.kind == "f" and not (column == 0).any())
    if not alike or column.isna().any():
        return [encode(value) for value in column.tolist()]
    codes, distinct = pd.factorize(column)
    return np.array([encode(value) for value in distinct.tolist()], dtype=object)[codes].tolist()


def _texts(table: pd.DataFrame) -> list[str]:
    """The text `JsonRenderer.render` writes for each row of `table`, column by column."""
    missing = [f for f in REQUIRED_FIELDS if f not in table.columns]
    if missing:
        raise KeyError(missing[0])
    names = [_json(f"{first} {last}") for first, last in zip(table["first_name"].tolist(), table["surname"].tolist())]
    cities = _by_value(table["metro"], _city) if "metro" in table.columns else [None] * len(table)
    states = table["state"].tolist()
    locations = [_json(f"{city}, {state}" if city else str(state)) for city, state in zip(cities, states)]
    ages, years = (_by_value(table[key], lambda v: repr(int(v))) for key in ("age", "graduation_year"))
    gpas = _by_value(table["gpa"], lambda v: _json(round(float(v), 2)))
    school, degree, major = (_by_value(table[key]) for key in ("school", "degree", "major"))
    histories: list[list[str]] = [[] for _ in range(len(table))]
    for slot in EMPLOYMENT_SLOTS:
        if f"{slot}_employer" not in table.columns:
            continue
        employers = table[f"{slot}_employer"].tolist()
        held = [i for i, employer in enumerate(employers) if isinstance(employer, str) and employer]
        if not held:
            continue
        rows = table.iloc[held]
        parts = [_by_value(rows[f"{slot}_{key}"]) for key in ("employer", "title", "start", "end")]
        for i, employer, title, start, end in zip(held, *parts):
            histories[i].append(f'{{"employer": {employer}, "title": {title}, "start": {start}, "end": {end}}}')
    return [
        f'{{"name": {name}, "age": {age}, "location": {location}, "education": {{"school": {s}, '
        f'"degree": {d}, "major": {m}, "gpa": {gpa}, "graduation_year": {year}}}, '
        f'"employment_history": [{", ".join(history)}]}}'
        for name, age, location, s, d, m, gpa, year, history in zip(
            names, ages, locations, school, degree, major, gpas, years, histories
        )
    ]
