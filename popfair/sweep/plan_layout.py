"""The text layout a dry run prices an image page by (popfair.sweep.plan): the same resume as the
image, as text, marked with the protected attributes a page with a headshot shows."""

from __future__ import annotations

import inspect
from typing import Any

import pandas as pd

from popfair.core.types import Document
from popfair.render.text import TextRenderer

__all__ = ["TEXT_PARAMETERS", "text_layout_renderer", "with_shown"]

TEXT_PARAMETERS = set(inspect.signature(TextRenderer).parameters)  # what of a renderer config makes its text


def text_layout_renderer(renderer_config: dict[str, Any]) -> TextRenderer:
    """The text renderer with the image renderer's content settings (pools, seed, ...): the same
    resume as the image, as text."""
    return TextRenderer(**{k: v for k, v in renderer_config.items() if k in TEXT_PARAMETERS})


def with_shown(
    documents: list[Document], rows: pd.DataFrame, shown: list[str], marked: dict[str, Document] | None = None
) -> list[Document]:
    """Text layouts marked with the protected attributes the page shows (`Renderer.shows`: the
    headshot's gender and race), so that the plan counts the pages that differ only in them apart.
    `marked`: the documents marked before, by their marked text (`Planner.marked`): the gender and race
    sets of an occupation show the same factual applicants, whose marked documents are made once."""
    marks = [" ".join(values) for values in zip(*(rows[column].astype(str).tolist() for column in shown))]
    marked = {} if marked is None else marked
    out = []
    for d, mark in zip(documents, marks):
        text = f"{d.text}\n[photo: {mark}]"
        first = marked.get(text)
        if first is None:  # not dataclasses.replace: it inspects the fields of each of a set's 20,000 documents
            first = marked[text] = Document(d.applicant_id, d.job_id, d.kind, text, d.image_png, d.profile, d.pdf)
        elif not _same_but_text(first, d):  # the same marked text for another applicant or job
            first = Document(d.applicant_id, d.job_id, d.kind, first.text, d.image_png, d.profile, d.pdf)
        out.append(first)
    return out


def _same_but_text(a: Document, b: Document) -> bool:
    """Whether two documents are one applicant's, for one job, of one kind and page (their texts aside)."""
    if a.applicant_id != b.applicant_id or a.job_id != b.job_id or a.kind != b.kind:
        return False
    return a.image_png == b.image_png and a.pdf == b.pdf and a.profile is b.profile
