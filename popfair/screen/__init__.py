"""The screen stage: a screener reads (job, document) and answers a score or a callback.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "Screener": "popfair.screen.base",
    "LLMScreener": "popfair.screen.llm",
    "SimulatedScreener": "popfair.screen.simulated",
    "TfidfScreener": "popfair.screen.tfidf",
    "EmbeddingScreener": "popfair.screen.embedding",
    "HFLocalScreener": "popfair.screen.hf_local",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
