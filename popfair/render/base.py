"""Render stage interface: turn one applicant profile into the document a screener sees."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from popfair.core.types import Document, Job
from popfair.render.store import DocumentStore, same_document
from popfair.runtime.parallel import cpu_count, forked_spans
from popfair.store.shared_work import claimed_rounds

log = logging.getLogger("popfair")
N_SAMPLE_DOCUMENTS = 3  # sample resumes logged with every run


class Renderer(Protocol):
    """What the render stage needs of a renderer. `shows` declares the protected attributes (profile
    columns) its documents display explicitly: a gender field, pronouns, a photo. A name is not one:
    it is a proxy (R). The declaration tells a case when the direct path X -> Y is structurally
    absent (`popfair.estimate.pse.estimand`); None (the default) means "not declared", and then nothing
    is claimed. Read it with `displayed_attributes`, which gives renderers without it the default."""

    kind: str  # the renderer's name (text, json, image, image_photo), used in case names and tags
    shows: frozenset[str] | None = None  # protected attributes the documents display; None: not declared

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        """One document for one profile row (deterministic given the row)."""
        ...


# --- optional abilities: declared by defining them, found with isinstance ---------------------------


@runtime_checkable
class ShowsAttributes(Protocol):
    """A renderer that declares the protected attributes its documents display (`Renderer.shows`)."""

    shows: frozenset[str] | None


@runtime_checkable
class ChecksProfiles(Protocol):
    """A renderer that rejects a profile table before any document is rendered (an image renderer
    whose photos lack a cell)."""

    def check_profiles(self, table: pd.DataFrame) -> None: ...


@runtime_checkable
class RendersTables(Protocol):
    """A renderer that renders a whole table at once: the documents `render` makes, at a fraction of
    the cost (`rows`: each row's profile, None to leave them out)."""

    def render_table(
        self, table: pd.DataFrame, jobs: Mapping[str, Job], rows: list[dict[str, Any]] | None
    ) -> list[Document]: ...


@runtime_checkable
class RendersInProcesses(Protocol):
    """A renderer worth forking workers for: `rows_per_process` rows are about a quarter second of
    its work (5,000 text resumes, 32 PNG pages). Without it a table renders in this process."""

    rows_per_process: int


def displayed_attributes(renderer: object) -> frozenset[str] | None:
    """The protected attributes a renderer's documents display explicitly (`Renderer.shows`), or None
    where the renderer does not declare them (the Protocol's default, for renderers that do not subclass it)."""
    shows = renderer.shows if isinstance(renderer, ShowsAttributes) else None
    return None if shows is None else frozenset(str(s) for s in shows)


def render_all(
    renderer: Renderer,
    table: pd.DataFrame,
    jobs: Mapping[str, Job],
    progress: bool = True,
    processes: int | None = None,
    store: DocumentStore | None = None,
    profile_rows: bool = True,
) -> list[Document]:
    """Render every row of a profile table, in order, with a progress bar. A renderer may define
    `check_profiles(table)` to reject the table before any document is rendered.

    A large table is split across `processes` forked worker processes (default: the CPUs this
    process may use). "Large" is the renderer's `rows_per_process` (class attribute: about a
    quarter second of work: 5,000 text resumes, 32 PNG pages); renderers without it, small
    tables and platforms without fork render in this process. Workers return the documents
    without their profile rows, which stay here: the result is identical to rendering serially.

    With a `store` (popfair.render.store), documents already stored are read in one batched lookup
    instead of rendered, rows with the same key are rendered once, and what is rendered is stored
    batch by batch as the workers return it (a killed run keeps every finished batch).

    A renderer is deterministic given the row, so rows identical in every column are rendered
    once; only an applicant's rows can be identical (its counterfactual worlds that do not change
    B or R, its own world and its factual row), so tables of distinct applicant_ids skip the check.

    A renderer may render a whole table at once (`render_table(table, jobs, rows)`, the documents
    `render` makes, at a fraction of the cost); without a store it does. There, `profile_rows=False`
    (a plan's documents) leaves out each document's profile row, which only structural screeners
    read when they screen: building the rows costs more than rendering them."""
    if isinstance(renderer, ChecksProfiles):
        renderer.check_profiles(table)
    if "applicant_id" in table.columns and table["applicant_id"].duplicated().any():
        group = table.groupby(list(table.columns), sort=False, dropna=False).ngroup().to_numpy()
        first = np.unique(group, return_index=True)[1]  # groups are numbered in order of first appearance
        distinct = _render_table(renderer, table.iloc[first], jobs, progress, processes, store, profile_rows)
        return [distinct[g] for g in group]
    return _render_table(renderer, table, jobs, progress, processes, store, profile_rows)


def _render_table(
    renderer: Renderer,
    table: pd.DataFrame,
    jobs: Mapping[str, Job],
    progress: bool,
    processes: int | None,
    store: DocumentStore | None,
    profile_rows: bool = True,
) -> list[Document]:
    if store is None and isinstance(renderer, RendersTables):
        return renderer.render_table(table, jobs, profile_records(table) if profile_rows else None)
    rows = profile_records(table)
    if store is None:
        with tqdm(total=len(rows), desc="render", unit="doc", disable=not progress, leave=False) as bar:
            documents: list[Document] = []
            for batch in _rendered(renderer, rows, jobs, processes):
                documents += batch
                bar.update(len(batch))
            return documents
    keys = store.keys(rows)
    stored = store.lookup(keys, rows, jobs)
    first: dict[str, int] = {}  # key -> the row that renders it
    for i, key in enumerate(keys):
        if i not in stored:
            first.setdefault(key, i)
    log.info("render: %d of %d documents from the document store (%s)", len(stored), len(rows), store.location)
    with tqdm(
        total=len(rows), initial=len(stored), desc="render", unit="doc", disable=not progress, leave=False
    ) as bar:
        made = _render_claimed(renderer, rows, keys, list(first.values()), jobs, processes, store, bar)
    return [
        stored[i]
        if i in stored
        else made[i]
        if first[key] == i
        else same_document(made[first[key]], row, jobs[row["job_id"]])
        for i, (key, row) in enumerate(zip(keys, rows))
    ]


ROUND_DOCUMENTS = 1_000  # documents claimed at a time at least (1,000 pages: a few seconds on two cores)


def _render_claimed(
    renderer: Renderer,
    rows: Sequence[dict[str, Any]],
    keys: Sequence[str],
    todo: Sequence[int],
    jobs: Mapping[str, Job],
    processes: int | None,
    store: DocumentStore,
    bar: tqdm,
) -> dict[int, Document]:
    """The documents of rows `todo` (row index -> document), shared with any process rendering the
    same keys at once (`popfair.store.shared_work`): a round's worth at a time (at least ROUND_DOCUMENTS,
    and two spans per worker), read from the store when another process has stored them
    meanwhile, else rendered and saved batch by batch."""
    chunk = renderer.rows_per_process if isinstance(renderer, RendersInProcesses) else 0
    per_round = max(ROUND_DOCUMENTS, 2 * chunk * (processes or cpu_count()))
    made: dict[int, Document] = {}
    for positions in claimed_rounds(store.blobs, store.scope, [keys[i] for i in todo], per_round):
        wanted = [todo[p] for p in positions]
        found = store.lookup([keys[i] for i in wanted], [rows[i] for i in wanted], jobs)
        made.update((wanted[j], document) for j, document in found.items())
        bar.update(len(found))
        missing = [i for j, i in enumerate(wanted) if j not in found]
        done = 0
        for batch in _rendered(renderer, [rows[i] for i in missing], jobs, processes):
            store.save([(keys[missing[done + j]], document) for j, document in enumerate(batch)])
            made.update(zip(missing[done : done + len(batch)], batch))
            done += len(batch)
            bar.update(len(batch))
    return made


SERIAL_BATCH = 256  # documents per batch where a renderer renders in this process


def _rendered(
    renderer: Renderer, rows: Sequence[dict[str, Any]], jobs: Mapping[str, Job], processes: int | None
) -> Iterator[list[Document]]:
    """The documents of `rows`, in order, in consecutive batches: forked workers' spans (see
    render_all), or batches of SERIAL_BATCH for renderers without `rows_per_process`."""
    if not isinstance(renderer, RendersInProcesses):
        for start in range(0, len(rows), SERIAL_BATCH):
            yield [renderer.render(row, jobs[row["job_id"]]) for row in rows[start : start + SERIAL_BATCH]]
        return

    def render_span(start: int, stop: int) -> list[tuple[Any, ...]]:
        # a worker sends each document back as its fields without the profile row (this process
        # holds the same rows): a quarter of the pickling, and no copy of each Document
        return [_SENT_FIELDS(renderer.render(row, jobs[row["job_id"]])) for row in rows[start:stop]]

    for start, done in forked_spans(render_span, len(rows), renderer.rows_per_process, processes):
        yield [_received(sent, row) for sent, row in zip(done, rows[start:])]


_DOCUMENT_FIELDS = [f.name for f in fields(Document)]
_PROFILE_AT = _DOCUMENT_FIELDS.index("profile")
_SENT_FIELDS = attrgetter(*[name for name in _DOCUMENT_FIELDS if name != "profile"])


_new_document = cast(Callable[..., Document], Document)  # built from its fields in declaration order


def _received(sent: tuple[Any, ...], row: dict[str, Any]) -> Document:
    """A document from its fields as a worker sent them, with its profile row."""
    return _new_document(*sent[:_PROFILE_AT], row, *sent[_PROFILE_AT:])


def profile_records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of `table` as dicts of Python scalars, like `table.to_dict("records")` but column
    by column (`tolist`), which is several times faster on Arrow-backed string columns."""
    columns = list(table.columns)
    values = [table[c].tolist() for c in table.columns]
    return [dict(zip(columns, row)) for row in zip(*values)]


def sample_artifacts(documents: Sequence[Document], k: int = N_SAMPLE_DOCUMENTS) -> dict[str, str | bytes]:
    """k documents spread evenly over the run, as MLflow artifacts under samples/: the text
    (.txt, or .json for JSON documents) and, for image and PDF documents, the PNG or PDF."""
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
        if doc.pdf is not None:
            artifacts[stem + ".pdf"] = doc.pdf
    return artifacts
