"""Reports and figures: the model-panel tables, the sweep report, the figures of one case.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "panel_report": "popfair.report.panel",
    "forest_plot": "popfair.track.figures",
    "draw": "popfair.track.figures",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
