"""Anthropic Messages API through the official `anthropic` SDK (its own retries off)."""
from __future__ import annotations

from typing import Any

from popfair.screen.prompts import ChatPrompt
from popfair.screen.providers.base import Completion, Provider, TransientError
from popfair.screen.providers.openai_chat import MALFORMED, aiohttp_client, sdk_error


class AnthropicMessages(Provider):
    kind = "anthropic"

    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        gen = self.generation
        content: list[dict[str, Any]] = []
        if image is not None:
            content.append({"type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": image}})
        content.append({"type": "text", "text": prompt.user})
        body: dict[str, Any] = {"model": self.model, "max_tokens": gen.max_tokens, "system": prompt.system,
                                "messages": [{"role": "user", "content": content}]}
        if gen.temperature is not None:
            body["temperature"] = gen.temperature
        body.update(gen.extra)
        return body

    async def start(self) -> None:
        import anthropic

        self._client = anthropic.AsyncAnthropic(api_key=self.api_key, base_url=self.base_url,
                                                max_retries=0, timeout=self.timeout_s,
                                                http_client=aiohttp_client(anthropic, self.timeout_s))

    async def send(self, body: dict[str, Any]) -> Completion:
        import anthropic

        try:
            # Low-level post (as for OpenAI): the body is already the exact Messages API JSON.
            return completion_from_message(await self._client.post("/v1/messages", body=body, cast_to=object))
        except (anthropic.AnthropicError, *MALFORMED) as exc:
            raise sdk_error(exc, anthropic) from None


def completion_from_message(message: Any) -> Completion:
    """Text and usage of a Messages API reply (JSON body, or the SDK's Message in batch results)."""
    if hasattr(message, "model_dump"):
        message = message.model_dump()
    blocks = message.get("content") if isinstance(message, dict) else None
    if not isinstance(blocks, list):
        raise TransientError("malformed response: message without a content list")
    text = "".join(block.get("text", "") for block in blocks
                   if isinstance(block, dict) and block.get("type") == "text")
    usage = message.get("usage") or {}
    return Completion(text=text, input_tokens=int(usage.get("input_tokens") or 0),
                      output_tokens=int(usage.get("output_tokens") or 0))
