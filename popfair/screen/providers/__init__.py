"""Provider adapters: turn a ChatPrompt into one provider's request body and send it via its SDK.

Adapters register themselves with `@register_provider("<kind>")`; importing them costs nothing
because each imports its SDK only when it opens a client. Batch support is a capability of the
adapter class (`batch_api`)."""

from __future__ import annotations

from typing import Any

# importing the adapter modules registers them
from popfair.screen.providers import anthropic_messages, bedrock_converse, openai_chat  # noqa: F401
from popfair.screen.providers.base import (
    PROVIDERS,
    BatchApi,
    Completion,
    Generation,
    PermanentError,
    Provider,
    TransientError,
    register_provider,
)


def make_provider(kind: str, **kwargs: Any) -> Provider:
    """The registered adapter for `kind` (openai, openai_compatible, anthropic, bedrock, ...)."""
    if kind not in PROVIDERS:
        raise ValueError(f"unknown provider kind {kind!r}; allowed: {', '.join(PROVIDERS)}")
    return PROVIDERS[kind](**kwargs)


__all__ = [
    "PROVIDERS",
    "BatchApi",
    "Completion",
    "Generation",
    "PermanentError",
    "Provider",
    "TransientError",
    "make_provider",
    "register_provider",
]
