"""A document as an external tool receives it: an opaque id, a file (bytes, suffix, media type).

The id is derived from what the tool sees (job id, kind, text, file bytes) and nothing else, so it
reveals nothing the document does not: applicant ids carry race and gender in the paired design
(`<pair>:black:female`) and must never reach a vendor. The same document always gets the same id,
so an export, the tool's results file and a later import agree without a key file; two identical
documents share one id (and one answer, as they share one cached call)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from popfair.core.types import Document

MEDIA_TYPES = {
    "text": ("txt", "text/plain"),
    "json": ("json", "application/json"),
    "image": ("png", "image/png"),
    "pdf": ("pdf", "application/pdf"),
}


@dataclass(frozen=True)
class DocumentFile:
    document_id: str
    data: bytes
    suffix: str
    media_type: str

    @property
    def file_name(self) -> str:
        return f"{self.document_id}.{self.suffix}"


def document_binary(document: Document) -> bytes | None:
    """The document's own file bytes (PNG page or PDF), None for text and JSON documents."""
    if document.kind == "image":
        return document.image_png
    if document.kind == "pdf":
        return document.pdf
    return None


def document_id(document: Document) -> str:
    """'d' + 20 hex digits of sha256 over job id, kind, text and file bytes (length-prefixed)."""
    digest = hashlib.sha256()
    binary = document_binary(document) or b""
    for part in (document.job_id.encode(), document.kind.encode(), document.text.encode(), binary):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return "d" + digest.hexdigest()[:20]


def document_file(document: Document, identifier: str | None = None) -> DocumentFile:
    """The file a tool would be given: the PNG or PDF, else the text (UTF-8) as .txt or .json."""
    suffix, media_type = MEDIA_TYPES[document.kind]
    binary = document_binary(document)
    data = binary if binary is not None else document.text.encode("utf-8")
    return DocumentFile(identifier or document_id(document), data, suffix, media_type)
