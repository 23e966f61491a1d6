"""Render stage interface: turn one applicant profile into the document a screener sees."""
from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from popfair.types import Document, Job

N_SAMPLE_DOCUMENTS = 3  # sample resumes logged with every run


class Renderer(Protocol):
    kind: str  # the renderer's name (text, json, image, image_photo), used in case names and tags

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        """One document for one profile row (deterministic given the row)."""
        ...


def render_all(renderer: Renderer, table: pd.DataFrame, jobs: Mapping[str, Job],
               progress: bool = True) -> list[Document]:
    """Render every row of a profile table, in order, with a progress bar. A renderer is
    deterministic given the row, so rows identical in every column (an applicant's counterfactual
    worlds that do not change B or R, its own world and its factual row) are rendered once.
    A renderer may define `check_profiles(table)` to reject the table before any work."""
    check = getattr(renderer, "check_profiles", None)
    if check is not None:
        check(table)
    if table.empty:
        return []
    group = table.groupby(list(table.columns), sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]  # groups are numbered in order of first appearance
    rows: Sequence[dict[str, Any]] = table.iloc[first].to_dict("records")
    rendered = [renderer.render(row, jobs[row["job_id"]])
                for row in tqdm(rows, desc="render", unit="doc", disable=not progress, leave=False)]
    return [rendered[g] for g in group]


def sample_artifacts(documents: Sequence[Document], k: int = N_SAMPLE_DOCUMENTS) -> dict[str, str | bytes]:
    """k documents spread evenly over the run, as MLflow artifacts under samples/: the text
    (.txt, or .json for JSON documents) and, for image documents, the PNG."""
    if not documents or k <= 0:
        return {}
    picks = sorted(set(np.linspace(0, len(documents) - 1, num=min(k, len(documents))).round().astype(int)))
    artifacts: dict[str, str | bytes] = {}
    for i in picks:
        doc = documents[i]
        stem = "samples/" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in doc.applicant_id)
        artifacts[stem + (".json" if doc.kind == "json" else ".txt")] = doc.text
        if doc.image_png is not None:
            artifacts[stem + ".png"] = doc.image_png
    return artifacts
