"""OpenAI chat completions, and every OpenAI-compatible endpoint by base_url (Together, OpenRouter,
Google's OpenAI-compatible Gemini endpoint, xAI, local vLLM or Ollama servers)."""
from __future__ import annotations

import base64
import functools
import inspect
from typing import Any, Callable

from popfair.screen.prompts import ChatPrompt
from popfair.screen.providers.base import (Completion, PermanentError, Provider, TransientError,
                                           classify_status)

MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def chat_messages(prompt: ChatPrompt, image_b64: str | None) -> list[dict[str, Any]]:
    """System + user message; the image (if any) as a base64 PNG data URL part."""
    if image_b64 is None:
        user: Any = prompt.user
    else:
        user = [{"type": "text", "text": prompt.user},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}}]
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


@functools.lru_cache(maxsize=None)
def _declared(method: Callable[..., Any]) -> frozenset[str]:
    return frozenset(inspect.signature(method).parameters)


def sdk_kwargs(method: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
    """`body` as keyword arguments for an SDK method: fields the installed SDK does not declare
    (provider extensions, parameters newer SDKs dropped) travel in `extra_body`, unchanged on the wire."""
    declared = _declared(getattr(method, "__func__", method))
    kwargs = {k: v for k, v in body.items() if k in declared}
    extra = {k: v for k, v in body.items() if k not in declared}
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def sdk_error(exc: Exception, sdk: Any) -> Exception:
    """Translate an openai/anthropic SDK exception (both SDKs share these class names)."""
    if isinstance(exc, sdk.APIStatusError):
        return classify_status(exc.status_code, exc.response.headers, str(exc.message))
    if isinstance(exc, sdk.APITimeoutError):
        return TransientError("request timed out")
    if isinstance(exc, sdk.APIConnectionError):
        return TransientError(f"connection error: {exc}")
    if isinstance(exc, (sdk.APIResponseValidationError, *MALFORMED)):
        return TransientError(f"malformed response: {type(exc).__name__}: {exc}"[:300])
    if isinstance(exc, sdk.APIError):
        return TransientError(f"{type(exc).__name__}: {exc}"[:300])
    return exc


class OpenAIChat(Provider):
    """POST {base_url}/chat/completions through the official `openai` SDK (its own retries off)."""

    def __init__(self, kind: str = "openai", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        self._client: Any = None

    def encode_image(self, png: bytes) -> str:
        return base64.b64encode(png).decode("ascii")

    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        gen = self.generation
        body: dict[str, Any] = {"model": self.model, "messages": chat_messages(prompt, image)}
        if gen.temperature is not None:
            body["temperature"] = gen.temperature
        # OpenAI's reasoning-class models take max_completion_tokens; compatible servers take max_tokens.
        cap = "max_completion_tokens" if (self.kind == "openai" and self.reasoning) else "max_tokens"
        body[cap] = gen.max_tokens
        if gen.reasoning_effort is not None:
            body["reasoning_effort"] = gen.reasoning_effort
        body.update(gen.extra)
        return body

    async def start(self) -> None:
        import openai

        self._client = openai.AsyncOpenAI(api_key=self.api_key or "not-needed", base_url=self.base_url,
                                          max_retries=0, timeout=self.timeout_s)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def client(self) -> Any:
        return self._client

    async def send(self, body: dict[str, Any]) -> Completion:
        import openai

        try:
            create = self._client.chat.completions.create
            response = await create(**sdk_kwargs(create, body))
            return completion_from_chat(response)
        except (openai.OpenAIError, *MALFORMED) as exc:
            raise sdk_error(exc, openai) from None


def completion_from_chat(response: Any) -> Completion:
    """Text and usage of a chat completion (object or dict); malformed bodies raise TransientError."""
    if isinstance(response, dict):
        from openai.types.chat import ChatCompletion
        response = ChatCompletion.model_validate(response)
    if not getattr(response, "choices", None):
        raise TransientError("malformed response: no choices")
    message = response.choices[0].message
    if message is None:
        raise TransientError("malformed response: choice without a message")
    usage = response.usage
    return Completion(text=message.content or "",
                      input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                      output_tokens=int(getattr(usage, "completion_tokens", 0) or 0))


__all__ = ["OpenAIChat", "chat_messages", "completion_from_chat", "sdk_error", "sdk_kwargs", "PermanentError"]
