"""Tracking: every case is one MLflow run.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "MlflowTracker": "popfair.track.mlflow_tracker",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
