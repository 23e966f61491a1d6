"""The render stage: one applicant profile -> the document a screener sees.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "Renderer": "popfair.render.base",
    "render_all": "popfair.render.base",
    "TextRenderer": "popfair.render.text",
    "JsonRenderer": "popfair.render.json_profile",
    "ImageRenderer": "popfair.render.image",
    "ImagePhotoRenderer": "popfair.render.image",
    "DocumentStore": "popfair.render.store",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
