"""Placebo edits (config `renderer.placebo`): changes to a document that no screener should react to.

A discrimination finding means little until one knows how far an irrelevant edit moves the same
screener (Seshadri & Goldfarb-Tarrant, arXiv 2501.04316: retrieval and LLM screeners move as much
for non-demographic edits as for names). Each edit is fixed and deterministic; it keeps every fact
of the document and changes only its presentation:

- `reorder`: the sections in reverse order (text: SKILLS, WORK HISTORY, EDUCATION become EDUCATION,
  WORK HISTORY, SKILLS; JSON: the fields after the name in reverse order). The words are the same:
  a bag-of-words screener (TF-IDF) cannot move.
- `rephrase`: fixed synonym swaps in the boilerplate (section titles; JSON field names).
- `format`: bullets, separators and spacing (text: "- " bullets become "* ", " | " becomes " / ",
  a blank line more between sections; JSON: indented over several lines).
- `pad`: one neutral sentence added at the end ("References available upon request.").
- `within_group` (the population design): not an edit of the text but a within-group world: the
  applicant keeps its group X and confounders Z and takes the proxies R (name, state) and
  qualifications B of another applicant with the same job, X and Z (a keyed donor), rendered anew.
  It separates "reads the group" (RIE, TE) from "reacts to any new name and resume".

A keyed sample of applicants (`renderer.placebo_n`, the same applicants for every edit and every run
of the same seed) is screened again with each edited document (popfair.case.placebo), through the
case's screener, cache and plan."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError, require

TEXT_EDITS = ("reorder", "rephrase", "format", "pad")
# not an edit of the text: the applicant in its own group with another applicant's R and B (popfair.case.placebo)
WITHIN_GROUP = "within_group"
EDITS = (*TEXT_EDITS, WITHIN_GROUP)
KEYS = ("placebo", "placebo_n")  # the renderer config's placebo settings (not the renderer's own)
EDITABLE_KINDS = ("text", "json")  # documents the edits apply to (a page would be re-rendered: not yet)
PAD_SENTENCE = "References available upon request."
# text resumes (popfair.render.text.SECTION_TITLES) and JSON field names: boilerplate synonyms
TEXT_SYNONYMS = {
    "SKILLS": "KEY COMPETENCIES",
    "WORK HISTORY": "PROFESSIONAL EXPERIENCE",
    "EDUCATION": "ACADEMIC BACKGROUND",
}
JSON_SYNONYMS = {
    "employment_history": "work_experience",
    "education": "academic_background",
    "graduation_year": "year_of_graduation",
    "location": "city_and_state",
}
DEFAULT_N = 200  # applicants (ranking: trials) screened again per edit


@dataclass(frozen=True)
class PlaceboSettings:
    """Which edits, and how many applicants (ranking: trials) are screened again with each."""

    edits: tuple[str, ...]
    n: int | None = DEFAULT_N  # None: every applicant

    @classmethod
    def from_config(cls, renderer: Mapping[str, Any] | None) -> PlaceboSettings | None:
        """The settings in a renderer config (`placebo`: one edit, a list of them, or null/[] for none;
        `placebo_n`: a positive integer or null for all); None where no edit is asked for."""
        renderer = renderer or {}
        value = renderer.get("placebo")
        edits = [] if value is None else [value] if isinstance(value, str) else list(value)
        edits = [str(e).strip() for e in edits if str(e).strip()]
        unknown = [e for e in edits if e not in EDITS]
        require(not unknown, "renderer.placebo", f"unknown edit(s) {unknown}; choose from {', '.join(EDITS)}")
        n = renderer.get("placebo_n", DEFAULT_N)
        require(
            n is None or (isinstance(n, int) and not isinstance(n, bool) and n > 0),
            "renderer.placebo_n",
            f"must be a positive integer or null (every applicant), got {n!r}",
        )
        return cls(tuple(dict.fromkeys(edits)), n) if edits else None

    def describe(self) -> str:
        who = "every applicant" if self.n is None else f"a keyed sample of {self.n:,}"
        return f"placebo edits {', '.join(self.edits)} on {who}"


def without_placebo(values: Mapping[str, Any]) -> dict[str, Any]:
    """A renderer config's values without the placebo settings (what the renderer itself is built from)."""
    return {k: v for k, v in values.items() if k not in KEYS}


def edit_document_text(text: str, kind: str, edit: str) -> str:
    """`text` (a document of `kind` text or json) with one placebo edit applied."""
    if kind not in EDITABLE_KINDS:
        raise ConfigError(
            f"renderer.placebo: edits apply to text and JSON documents, not {kind!r}; use renderer=text or "
            "renderer=json for placebo edits"
        )
    require(edit in TEXT_EDITS, "renderer.placebo", f"{edit!r} is not a text edit ({', '.join(TEXT_EDITS)})")
    return _edit_json(text, edit) if kind == "json" else _edit_text(text, edit)


def _sections(text: str) -> tuple[list[str], list[list[str]]]:
    """A text resume's header lines (name, contact) and its sections (title line and body, trailing
    blank lines dropped); a text without the known section titles is one header."""
    header: list[str] = []
    sections: list[list[str]] = []
    for line in text.rstrip("\n").split("\n"):
        if line.strip() in TEXT_SYNONYMS:
            sections.append([line])
        elif sections:
            sections[-1].append(line)
        else:
            header.append(line)
    trim = _trim_blank
    return trim(header), [trim(s) for s in sections]


def _trim_blank(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _edit_text(text: str, edit: str) -> str:
    if edit == "pad":
        return text.rstrip("\n") + "\n\n" + PAD_SENTENCE + "\n"
    if edit == "rephrase":
        lines = text.split("\n")
        return "\n".join(TEXT_SYNONYMS.get(line.strip(), line) for line in lines)
    header, sections = _sections(text)
    if edit == "reorder":
        if len(sections) < 2:
            return text  # nothing to reorder
        blocks = ["\n".join(header), *("\n".join(s) for s in reversed(sections))]
        return "\n\n".join(blocks) + "\n"

    # format: other bullets and separators, a blank line more between sections
    def formatted(line: str) -> str:
        line = "* " + line[2:] if line.startswith("- ") else line
        return line.replace(" | ", " / ")

    blocks = ["\n".join(map(formatted, header)), *("\n".join(map(formatted, s)) for s in sections)]
    return "\n\n\n".join(blocks) + "\n"


def _edit_json(text: str, edit: str) -> str:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"renderer.placebo: a JSON document does not parse ({exc}); edits need valid JSON") from None
    if not isinstance(document, dict):
        raise ConfigError("renderer.placebo: a JSON document is not an object; edits need a JSON object")
    if edit == "pad":
        return json.dumps({**document, "references": PAD_SENTENCE}, ensure_ascii=False)
    if edit == "format":
        return json.dumps(document, ensure_ascii=False, indent=2)
    if edit == "rephrase":
        return json.dumps(_renamed(document), ensure_ascii=False)
    keys = list(document)  # reorder: the name first, the other fields reversed
    head = keys[:1] if keys and keys[0] == "name" else []
    order = head + [k for k in reversed(keys) if k not in head]
    return json.dumps({k: document[k] for k in order}, ensure_ascii=False)


def _renamed(value: Any) -> Any:
    if isinstance(value, dict):
        return {JSON_SYNONYMS.get(k, k): _renamed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v) for v in value]
    return value


def keyed_sample(keys: Sequence[Any] | pd.Series, n: int | None, seed: int) -> np.ndarray:
    """Positions of the units (their keys: applicant ids, trial ids) chosen for the placebo edits, in
    order: those with the n smallest hashes of (key, seed). A larger n keeps every unit a smaller one
    chose (a rerun with more re-screens pays only for the new ones); n None or at least the count: all."""
    keys = pd.Series(keys, dtype=object).astype(str)
    if n is None or n >= len(keys):
        return np.arange(len(keys))
    hashed = pd.util.hash_pandas_object(keys + f"\x1fplacebo\x1f{seed}", index=False).to_numpy()
    return np.sort(np.argsort(hashed, kind="stable")[:n])


def pick_in_unit(keys: Sequence[Any] | pd.Series, sizes: np.ndarray, seed: int) -> np.ndarray:
    """For each unit of `sizes` members (a ranking trial's candidates), the member whose document is
    edited: a keyed choice, so that every position is edited about equally often."""
    keys = pd.Series(keys, dtype=object).astype(str)
    hashed = pd.util.hash_pandas_object(keys + f"\x1fplacebo-member\x1f{seed}", index=False).to_numpy()
    return (hashed % np.maximum(sizes, 1).astype(np.uint64)).astype(np.int64)
