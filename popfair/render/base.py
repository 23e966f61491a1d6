"""Render stage interface: turn one applicant profile into the document a screener sees."""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import pandas as pd
from tqdm.auto import tqdm

from popfair.types import Document, Job


class Renderer(Protocol):
    kind: str

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        """One document for one profile row (deterministic given the row)."""
        ...


def render_all(renderer: Renderer, table: pd.DataFrame, jobs: Mapping[str, Job],
               progress: bool = True) -> list[Document]:
    """Render every row of a profile table, in order, with a progress bar."""
    rows: Sequence[dict[str, Any]] = table.to_dict("records")
    return [renderer.render(row, jobs[row["job_id"]])
            for row in tqdm(rows, desc="render", unit="doc", disable=not progress, leave=False)]
