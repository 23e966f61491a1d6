"""Documents rendered once: a content-addressed store of rendered documents, shared by every case,
sweep and rerun that renders the same resume with the same renderer settings.

A document's key is a sha256 of the renderer's identity (its class and resolved settings, the source
of the render package and its resume data, and whatever else the renderer declares in
`store_identity()`: library versions, font and photo file digests) and the values of the profile
fields the renderer reads (`store_fields`). Nothing about the case enters: not the protected
attribute, the screener, the estimator, nor any row outside those fields, so the gender and race
cases of an occupation, and the text and image screeners of one format, share one page set. The
applicant id is among the fields only as what the text renderer reads it for: the seed of the
applicant's random draws (employer, bullets, city), which makes two applicants' resumes differ.

A stored document is its kind, text and file bytes (PNG page or PDF) exactly as rendered; the
applicant id, job id and profile row are put back from the row being rendered, so a document from
the store equals a fresh render field for field (tests). Renderers that declare no `store_fields`
(json: rendering it is as fast as looking it up) are rendered every time.

The store lives beside the response cache: `<cache_dir>/documents.sqlite`, or table `documents` of
the server cache (`cache_url`) for sweeps over machines. Every batch of rendered documents is
committed as it arrives, so a killed sweep resumes without rendering again what it rendered.
Processes rendering the same documents at the same time split them through claims on buckets of
keys instead of each rendering all of them (`popfair.store.shared_work`)."""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from popfair.core.errors import ConfigError
from popfair.core.types import Document, Job
from popfair.store.blobs import DOCUMENTS, STORE_ERRORS, BlobStore, open_blob_store

log = logging.getLogger("popfair")
STORE_NAME = DOCUMENTS  # popfair.store.blobs.BLOB_STORES
LOOKUP_CHUNK = 2_000  # keys read, then unpacked, at a time (about 100 MB of PNG pages)
_RENDER_PACKAGE = Path(__file__).resolve().parent
_RESUME_DATA = _RENDER_PACKAGE.parent / "data" / "resume"
# stored value: kind (ASCII, padded), byte lengths of text (UTF-8), PNG and PDF (-1: absent), then those bytes
_HEADER = struct.Struct("<8sqqq")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 of the render package's source and the resume data it reads: editing the layout code
    or a pool file gives new keys, never a stale page."""
    digest = hashlib.sha256()
    files = sorted(_RENDER_PACKAGE.glob("*.py")) + sorted(p for p in _RESUME_DATA.rglob("*") if p.is_file())
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(_RENDER_PACKAGE.parent)}\x1f{len(data)}\x1f".encode())
        digest.update(data)
    return digest.hexdigest()


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (fonts, photos: a renderer's `store_identity`)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@runtime_checkable
class Storable(Protocol):
    """A renderer whose documents can be kept: it declares the profile fields they depend on."""

    store_fields: tuple[str, ...]


@runtime_checkable
class IdentifiesStore(Protocol):
    """A storable renderer whose documents depend on files beside its settings (fonts, photos): their
    digests join its identity in the store."""

    def store_identity(self) -> dict[str, Any]: ...


def storable(renderer: object) -> bool:
    """Whether the renderer declares the profile fields its documents depend on (`Storable`)."""
    return isinstance(renderer, Storable) and renderer.store_fields is not None


def pack(document: Document) -> bytes:
    """What the store keeps of a document (see _HEADER)."""
    text = document.text.encode("utf-8")
    png, pdf = document.image_png, document.pdf
    header = _HEADER.pack(
        document.kind.encode("ascii"), len(text), -1 if png is None else len(png), -1 if pdf is None else len(pdf)
    )
    return b"".join([header, text, png or b"", pdf or b""])


def unpack(value: bytes, applicant_id: str, job_id: str, profile: Mapping[str, Any]) -> Document:
    """The stored document, with the row's applicant id, job id and profile put back."""
    kind, n_text, n_png, n_pdf = _HEADER.unpack_from(value)
    start = _HEADER.size
    text = value[start : start + n_text].decode("utf-8")
    start += n_text
    png = None if n_png < 0 else value[start : start + n_png]
    start += max(n_png, 0)
    pdf = None if n_pdf < 0 else value[start : start + n_pdf]
    return Document(
        applicant_id=applicant_id,
        job_id=job_id,
        kind=kind.rstrip(b"\0").decode("ascii"),
        text=text,
        image_png=png,
        profile=profile,
        pdf=pdf,
    )


class DocumentStore:
    """The stored documents of one renderer (its identity is part of every key).

    Parameters
    ----------
    blobs : BlobStore
        Where documents are kept (`open_blob_store(cache_dir or cache_url, "documents")`).
    renderer : Renderer
        A renderer that declares `store_fields` (see `storable`).
    settings : Mapping
        The renderer's resolved settings (its config node, `_target_` included).

    Examples
    --------
    >>> store = DocumentStore.open(".popfair_cache", renderer, cfg_renderer)  # doctest: +SKIP
    >>> documents = render_all(renderer, table, jobs, store=store)  # doctest: +SKIP
    """

    def __init__(self, blobs: BlobStore, renderer: Any, settings: Mapping[str, Any]) -> None:
        if not storable(renderer):
            raise ValueError(f"renderer {type(renderer).__name__} declares no store_fields")
        self.blobs = blobs
        self._failed = False  # a write failed: later batches are not offered to the store
        self.fields: tuple[str, ...] = tuple(renderer.store_fields)
        identity: dict[str, Any] = renderer.store_identity() if isinstance(renderer, IdentifiesStore) else {}
        prefix = json.dumps(
            {
                "renderer": f"{type(renderer).__module__}.{type(renderer).__qualname__}",
                "settings": settings,
                "code": code_digest(),
                "fields": self.fields,
                **identity,
            },
            sort_keys=True,
            default=repr,
        )
        self._prefix = hashlib.sha256(prefix.encode()).digest()
        self.scope = self._prefix.hex()[:32]  # names this renderer's work in the store's claims

    @classmethod
    def open(cls, location: str | Path, renderer: Any, settings: Mapping[str, Any]) -> DocumentStore:
        """The store at a cache folder or database URL (see popfair.store.blobs.open_blob_store)."""
        return cls(open_blob_store(location, STORE_NAME), renderer, settings)

    @classmethod
    def for_case(cls, location: str, renderer: Any, settings: Mapping[str, Any]) -> DocumentStore | None:
        """The store a case renders through at `location` (config `cache_url`, else `cache_dir`, when
        `document_store` is on: popfair.case.compose); None when the renderer declares no
        `store_fields` or the store cannot be opened (the case then renders every document)."""
        if not storable(renderer):
            return None
        try:
            return cls.open(location, renderer, settings)
        except ConfigError as exc:  # the store only saves time: the case renders without it
            log.warning("document store off, every document is rendered: %s", exc)
            return None

    @property
    def location(self) -> str:
        return self.blobs.location

    def keys(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """One key per row: the renderer's identity and the row's values of the fields it reads
        (repr of the Python scalars, so 3 and "3" differ; a field a row lacks counts as None)."""
        fields, prefix, sha256 = self.fields, self._prefix, hashlib.sha256
        return [sha256(prefix + "\x1f".join([repr(row.get(f)) for f in fields]).encode()).hexdigest() for row in rows]

    def lookup(
        self, keys: Sequence[str], rows: Sequence[Mapping[str, Any]], jobs: Mapping[str, Job]
    ) -> dict[int, Document]:
        """The stored documents of `rows` by row position: batched reads of LOOKUP_CHUNK keys, each
        unpacked before the next is read (a page set is ~1 GB: never held twice)."""
        documents: dict[int, Document] = {}
        for start in range(0, len(keys), LOOKUP_CHUNK):
            try:
                found = self.blobs.get_many(keys[start : start + LOOKUP_CHUNK])
            except STORE_ERRORS as exc:  # rendered instead
                log.warning("document store %s: cannot read (%s); rendering instead", self.location, exc)
                return {}
            for i in range(start, min(start + LOOKUP_CHUNK, len(keys))):
                value = found.get(keys[i])
                if value is not None:
                    row = rows[i]
                    documents[i] = unpack(value, str(row["applicant_id"]), jobs[row["job_id"]].job_id, row)
        return documents

    def save(self, items: Sequence[tuple[str, Document]]) -> None:
        """Store (key, document) pairs in one commit. A store that fails (disk full, database gone)
        is reported once and left alone: the case keeps its documents, only their reuse is lost."""
        if self._failed:
            return
        try:
            self.blobs.put_many([(key, pack(document)) for key, document in items])
        except STORE_ERRORS as exc:
            self._failed = True
            log.warning("document store %s: cannot store documents (%s); they are not reused", self.location, exc)

    def close(self) -> None:
        self.blobs.close()


def same_document(document: Document, row: Mapping[str, Any], job: Job) -> Document:
    """`document` as rendered for another row with the same key (another applicant's copy, or a
    counterfactual world that changed only fields the renderer does not read)."""
    return replace(document, applicant_id=str(row["applicant_id"]), job_id=job.job_id, profile=row)
