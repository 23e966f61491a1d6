"""Provider adapters: turn a ChatPrompt into one provider's request body and send it via its SDK."""
from __future__ import annotations

from popfair.screen.providers.base import (
    PROVIDER_KINDS,
    Completion,
    Generation,
    PermanentError,
    Provider,
    TransientError,
)


def make_provider(kind: str, **kwargs) -> Provider:
    """The adapter for `kind` (openai, openai_compatible, anthropic, bedrock)."""
    if kind in ("openai", "openai_compatible"):
        from popfair.screen.providers.openai_chat import OpenAIChat
        return OpenAIChat(kind=kind, **kwargs)
    if kind == "anthropic":
        from popfair.screen.providers.anthropic_messages import AnthropicMessages
        return AnthropicMessages(**kwargs)
    if kind == "bedrock":
        from popfair.screen.providers.bedrock_converse import BedrockConverse
        return BedrockConverse(**kwargs)
    raise ValueError(f"unknown provider kind {kind!r}; allowed: {', '.join(PROVIDER_KINDS)}")


__all__ = ["PROVIDER_KINDS", "Completion", "Generation", "PermanentError", "Provider", "TransientError",
           "make_provider"]
