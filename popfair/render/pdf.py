"""PDF resumes (renderer `pdf`): the image renderer's page layout typeset as a real PDF with a text
layer, for applicant-tracking systems and vendor tools that accept PDF uploads only.

Positions, fonts (DejaVu Sans by default), wrapping and the font shrinking come from
`ImageRenderer.fit`, so the PDF page and the PNG page of a resume match line for line. The PDF is
written by reportlab with `invariant=1` (no creation date or random id), so the same profile gives
the same bytes, and the same cache key and document id, on every run. The headshot slot stays
blank: there is no PDF-with-photo format. `Document.text` is the plain resume text (what the PDF's
text layer says), which text-only screeners read."""

from __future__ import annotations

import io
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from popfair.core.errors import ConfigError
from popfair.core.types import Document, Job
from popfair.render.image import RULE, ImageRenderer
from popfair.render.text import Resume

POINTS_PER_PIXEL = 72 / 100  # the layout is in pixels at 100 dpi (850 x 1100 = US Letter)


@lru_cache(maxsize=8)
def _register_font(path: Path) -> str:
    """Register a TrueType font with reportlab once per process; returns its name."""
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFError, TTFont

    name = f"popfair-{path.stem}"
    try:
        pdfmetrics.registerFont(TTFont(name, str(path)))
    except TTFError as exc:
        raise ConfigError(f"renderer.font_path: reportlab cannot embed {path}: {exc}") from None
    return name


class PdfRenderer(ImageRenderer):
    """One-page PDF resume with a text layer (kind "pdf")."""

    kind = "pdf"
    shows: frozenset[str] | None = frozenset()  # no photo, no demographic field
    with_photo = False
    rows_per_process = 64  # render_all forks workers for 128 pages or more (about 0.3 s of work each)

    def __init__(self, **settings: Any) -> None:
        settings.pop("photos_dir", None)  # a PDF has no photo (image_photo settings may be inherited)
        settings.pop("age_bands", None)
        super().__init__(**settings)
        self._faces = {str(self.regular): _register_font(self.regular), str(self.bold): _register_font(self.bold)}

    def store_identity(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {**super().store_identity(), "reportlab": version("reportlab")}

    def render(self, profile: Mapping[str, Any], job: Job) -> Document:
        resume = self.builder.build(profile)
        return Document(
            applicant_id=str(profile["applicant_id"]),
            job_id=job.job_id,
            kind="pdf",
            text=resume.to_text(),
            pdf=self.typeset(resume),
            profile=profile,
        )

    def typeset(self, resume: Resume) -> bytes:
        """The laid-out page as PDF bytes: every text run placed at its layout position (baseline =
        top + the font's ascent), rules as lines, all in pixel units scaled to points."""
        from reportlab.pdfgen import canvas

        _, ops, rules = self.fit(resume)
        buffer = io.BytesIO()
        page = canvas.Canvas(
            buffer,
            pagesize=(self.width * POINTS_PER_PIXEL, self.height * POINTS_PER_PIXEL),
            invariant=1,
            pageCompression=1,
        )
        page.setTitle(resume.name)
        page.scale(POINTS_PER_PIXEL, POINTS_PER_PIXEL)
        for op in ops:
            ascent = op.font.getmetrics()[0]
            page.setFont(self._faces[str(op.font.path)], op.font.size)
            page.setFillGray(op.fill / 255)
            page.drawString(op.x, self.height - (op.y + ascent), op.text)
        page.setLineWidth(1)
        page.setStrokeGray(RULE / 255)
        for x0, y, x1 in rules:
            page.line(x0, self.height - y, x1, self.height - y)
        page.showPage()
        page.save()
        return buffer.getvalue()
