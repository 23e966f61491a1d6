"""Anthropic Messages API through the official `anthropic` SDK (its own retries off)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popfair.screen.limits import run_coroutine
from popfair.screen.pricing import TOKENS_AREA_IMAGES
from popfair.screen.providers.base import Completion, Provider, TransientError, register_provider, require_key_variable
from popfair.screen.providers.openai_chat import MALFORMED, aiohttp_client, sdk_error, sdk_errors

if TYPE_CHECKING:  # annotations only: prompts pulls in the designs, and choosing a route loads the adapters
    from popfair.screen.prompts import ChatPrompt


class AnthropicBatches:
    """/v1/messages/batches: create, retrieve until processing_status == ended, results."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    async def submit(self, lines: list[tuple[str, dict[str, Any]]], window: str) -> str:
        import anthropic

        async with sdk_errors(anthropic):
            batch = await self.provider.client.messages.batches.create(
                requests=[{"custom_id": key, "params": body} for key, body in lines]
            )
        return batch.id

    async def status(self, batch_id: str) -> tuple[str, bool]:
        import anthropic

        async with sdk_errors(anthropic):
            batch = await self.provider.client.messages.batches.retrieve(batch_id)
        return batch.processing_status, batch.processing_status == "ended"

    async def results(self, batch_id: str):
        import anthropic

        async with sdk_errors(anthropic):
            entries = await self.provider.client.messages.batches.results(batch_id)
        async for entry in entries:
            result = entry.result
            if result.type == "succeeded":
                try:
                    yield entry.custom_id, completion_from_message(result.message)
                except Exception as exc:
                    yield entry.custom_id, f"malformed entry: {exc}"[:300]
            else:
                yield entry.custom_id, f"{result.type}: {getattr(result, 'error', '')}"[:300]


@register_provider("anthropic")
class AnthropicMessages(Provider):
    """POST /v1/messages through the official `anthropic` SDK; Message Batches for batch mode."""

    batch_api = AnthropicBatches
    sdk = "anthropic"
    base_url_env = "ANTHROPIC_BASE_URL"
    default_url = "https://api.anthropic.com"
    key_variables = ("ANTHROPIC_API_KEY",)
    pricing = TOKENS_AREA_IMAGES

    @classmethod
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        require_key_variable(cls.kind, api_key_env)

    def probe(self, timeout_s: float) -> bool:
        """GET /v1/models/{model}: a 404 says the id is unknown."""
        import anthropic

        async def lookup() -> Any:
            client = anthropic.AsyncAnthropic(
                api_key=self.api_key, base_url=self.base_url, max_retries=0, timeout=timeout_s
            )
            try:
                return await client.get(f"/v1/models/{self.model}", cast_to=object)
            except anthropic.AnthropicError as exc:
                raise sdk_error(exc, anthropic) from None
            finally:
                await client.close()

        run_coroutine(lookup)
        return True

    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        gen = self.generation
        content: list[dict[str, Any]] = []
        if image is not None:
            content.append({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}})
        content.append({"type": "text", "text": prompt.user})
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": gen.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": content}],
        }
        if gen.temperature is not None:
            body["temperature"] = gen.temperature
        body.update(gen.extra)
        return body

    async def start(self) -> None:
        import anthropic

        self._client = anthropic.AsyncAnthropic(
            api_key=self.api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            http_client=aiohttp_client(anthropic, self.timeout_s),
        )

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
        raise TransientError("malformed response: message without a content list", cause="malformed response")
    text = "".join(block.get("text", "") for block in blocks if isinstance(block, dict) and block.get("type") == "text")
    usage = message.get("usage") or {}
    return Completion(
        text=text, input_tokens=int(usage.get("input_tokens") or 0), output_tokens=int(usage.get("output_tokens") or 0)
    )
