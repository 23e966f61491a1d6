"""Anthropic Messages API through the official `anthropic` SDK (its own retries off)."""
from __future__ import annotations

import base64
from typing import Any

from popfair.screen.prompts import ChatPrompt
from popfair.screen.providers.base import Completion, Provider, TransientError
from popfair.screen.providers.openai_chat import MALFORMED, sdk_error, sdk_kwargs


class AnthropicMessages(Provider):
    kind = "anthropic"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client: Any = None

    def encode_image(self, png: bytes) -> str:
        return base64.b64encode(png).decode("ascii")

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
                                                max_retries=0, timeout=self.timeout_s)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def client(self) -> Any:
        return self._client

    async def send(self, body: dict[str, Any]) -> Completion:
        import anthropic

        try:
            create = self._client.messages.create
            return completion_from_message(await create(**sdk_kwargs(create, body)))
        except (anthropic.AnthropicError, *MALFORMED) as exc:
            raise sdk_error(exc, anthropic) from None


def completion_from_message(message: Any) -> Completion:
    """Text and usage of a Messages API reply (object or dict)."""
    if isinstance(message, dict):
        from anthropic.types import Message
        message = Message.model_validate(message)
    blocks = getattr(message, "content", None)
    if blocks is None:
        raise TransientError("malformed response: message without content")
    text = "".join(block.text for block in blocks if getattr(block, "type", None) == "text")
    usage = message.usage
    return Completion(text=text, input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "output_tokens", 0) or 0))
