"""OpenAI chat completions, and every OpenAI-compatible endpoint by base_url (Together, OpenRouter,
Google's OpenAI-compatible Gemini endpoint, xAI, local vLLM or Ollama servers)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar

from popfair.core.errors import require
from popfair.screen.limits import run_coroutine
from popfair.screen.providers.base import (
    BatchApi,
    Completion,
    PermanentError,
    Provider,
    TransientError,
    classify_status,
    network_error,
    register_provider,
    require_key_variable,
)

if TYPE_CHECKING:  # annotations only: prompts pulls in the designs, and choosing a route loads the adapters
    from popfair.screen.prompts import ChatPrompt

MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def chat_messages(prompt: ChatPrompt, image_b64: str | None) -> list[dict[str, Any]]:
    """System + user message; the image (if any) as a base64 PNG data URL part."""
    if image_b64 is None:
        user: Any = prompt.user
    else:
        user = [
            {"type": "text", "text": prompt.user},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}},
        ]
    return [{"role": "system", "content": prompt.system}, {"role": "user", "content": user}]


def aiohttp_client(sdk: Any, timeout_s: float) -> Any:
    """The SDK's aiohttp transport (about a quarter less client CPU per request than its default
    httpx transport, which matters at hundreds of requests per second); None (the SDK default)
    when aiohttp is not installed."""
    try:
        return sdk.DefaultAioHttpClient(timeout=timeout_s)
    except (RuntimeError, AttributeError):
        return None


def sdk_error(exc: Exception, sdk: Any) -> Exception:
    """Translate an openai/anthropic SDK exception (both SDKs share these class names)."""
    if isinstance(exc, sdk.APIStatusError):
        return classify_status(exc.status_code, exc.response.headers, str(exc.message))
    if isinstance(exc, sdk.APIConnectionError):  # APITimeoutError included: the chain says why
        return network_error(exc)
    if isinstance(exc, (sdk.APIResponseValidationError, *MALFORMED)):
        return TransientError(f"malformed response: {type(exc).__name__}: {exc}"[:300], cause="malformed response")
    if isinstance(exc, sdk.APIError):
        return TransientError(f"{type(exc).__name__}: {exc}"[:300])
    return exc


@contextlib.asynccontextmanager
async def sdk_errors(sdk: Any) -> AsyncIterator[None]:
    """SDK exceptions raised inside as popfair's TransientError / PermanentError (`sdk_error`)."""
    try:
        yield
    except (sdk.APIError, *MALFORMED) as exc:
        raise sdk_error(exc, sdk) from None


class OpenAIBatches:
    """Files upload (purpose=batch) + /v1/batches over /v1/chat/completions; SDK errors come out as
    TransientError / PermanentError (`sdk_errors`), as in online mode."""

    TERMINAL = {"completed", "failed", "expired", "cancelled"}

    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    async def submit(self, lines: list[tuple[str, dict[str, Any]]], window: str) -> str:
        payload = "\n".join(
            json.dumps({"custom_id": key, "method": "POST", "url": "/v1/chat/completions", "body": body})
            for key, body in lines
        ).encode()
        import openai

        client = self.provider.client
        async with sdk_errors(openai):
            upload = await client.files.create(file=("popfair-batch.jsonl", payload), purpose="batch")
            batch = await client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window=window
            )
        return batch.id

    async def status(self, batch_id: str) -> tuple[str, bool]:
        import openai

        async with sdk_errors(openai):
            batch = await self.provider.client.batches.retrieve(batch_id)
        self._files = getattr(self, "_files", {})
        self._files[batch_id] = (batch.output_file_id, batch.error_file_id)
        return batch.status, batch.status in self.TERMINAL

    async def results(self, batch_id: str):
        import openai

        client = self.provider.client
        for file_id in self._files.get(batch_id, (None, None)):
            if not file_id:
                continue
            async with sdk_errors(openai):
                content = await client.files.content(file_id)
            for line in content.text.splitlines():
                if not line.strip():
                    continue
                entry = json.loads(line)
                response, error = entry.get("response") or {}, entry.get("error")
                if error or response.get("status_code") != 200:
                    yield (
                        entry["custom_id"],
                        str(error or f"HTTP {response.get('status_code')}: {response.get('body')}")[:300],
                    )
                    continue
                try:
                    yield entry["custom_id"], completion_from_chat(response["body"])
                except Exception as exc:  # one malformed entry is one failure
                    yield entry["custom_id"], f"malformed entry: {exc}"[:300]


@register_provider("openai")
class OpenAIChat(Provider):
    """POST {base_url}/chat/completions through the official `openai` SDK (its own retries off);
    the Batch API for batch mode."""

    batch_api: ClassVar[type[BatchApi] | None] = OpenAIBatches
    sdk = "openai"
    base_url_env = "OPENAI_BASE_URL"
    default_url = "https://api.openai.com/v1"
    key_variables: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    sampling_settings: ClassVar[frozenset[str]] = frozenset({"seed", "top_p"})
    asks_n = True  # `n` answers in one request (vLLM and SGLang take it too)
    gives_logprobs = True  # logprobs + top_logprobs (vLLM and SGLang too)

    @classmethod
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        require_key_variable(cls.kind, api_key_env)

    def probe(self, timeout_s: float) -> bool | None:
        """GET {base}/models through the SDK: True/False whether the model id is listed (None: the
        server lists no model)."""
        import openai

        async def listing() -> Any:
            client = openai.AsyncOpenAI(
                api_key=self.api_key or "not-needed", base_url=self.base_url, max_retries=0, timeout=timeout_s
            )
            try:
                return await client.get("/models", cast_to=object)
            except openai.OpenAIError as exc:
                raise sdk_error(exc, openai) from None
            finally:
                await client.close()

        data = run_coroutine(listing)
        ids = {str(m.get("id", "")) for m in (data or {}).get("data", []) if isinstance(m, dict)}
        if not ids:
            return None
        return any(i == self.model or i.endswith("/" + self.model) for i in ids)

    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        gen = self.generation
        body: dict[str, Any] = {"model": self.model, "messages": chat_messages(prompt, image)}
        if gen.temperature is not None:
            body["temperature"] = gen.temperature
        if gen.top_p is not None:
            body["top_p"] = gen.top_p
        if gen.seed is not None:
            body["seed"] = gen.seed
        # OpenAI's reasoning-class models take max_completion_tokens; compatible servers take max_tokens.
        cap = "max_completion_tokens" if (self.kind == "openai" and self.reasoning) else "max_tokens"
        body[cap] = gen.max_tokens
        if gen.reasoning_effort is not None:
            body["reasoning_effort"] = gen.reasoning_effort
        body.update(gen.extra)
        return body

    async def start(self) -> None:
        import openai

        self._client = openai.AsyncOpenAI(
            api_key=self.api_key or "not-needed",
            base_url=self.base_url,
            max_retries=0,
            timeout=self.timeout_s,
            http_client=aiohttp_client(openai, self.timeout_s),
        )

    async def send(self, body: dict[str, Any]) -> Completion:
        import openai

        try:
            # The SDK's low-level post: same auth, transport and error mapping as
            # chat.completions.create, without re-validating our plain-JSON body or building models
            # (about a third of the client's CPU per request at hundreds of requests per second).
            data = await self._client.post("/chat/completions", body=body, cast_to=object)
            return completion_from_chat(data)
        except (openai.OpenAIError, *MALFORMED) as exc:
            raise sdk_error(exc, openai) from None


def server_root(base_url: str) -> str:
    """The server's own root from its OpenAI-style base URL (http://host:8000/v1 -> http://host:8000)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def served_model(provider: Provider, timeout_s: float = 10.0) -> tuple[list[dict[str, Any]], str | None]:
    """What an OpenAI-compatible server says it serves: the entries of GET {base}/models (vLLM adds
    root, parent, max_model_len and owned_by "vllm" to the id) and the engine version of GET
    {root}/version where the server has one (vLLM does; None elsewhere). Through the official SDK;
    failures come out as TransientError / PermanentError."""
    import openai

    client = openai.OpenAI(
        api_key=provider.api_key or "not-needed", base_url=provider.base_url, max_retries=0, timeout=timeout_s
    )
    try:
        listing = client.get("/models", cast_to=object)
        try:
            about = client.get(f"{server_root(str(client.base_url))}/version", cast_to=object)
        except openai.APIStatusError:  # no version endpoint (not vLLM): nothing to record
            about = None
    except (openai.OpenAIError, *MALFORMED) as exc:
        raise sdk_error(exc, openai) from None
    finally:
        client.close()
    entries = [m for m in (listing or {}).get("data", []) if isinstance(m, dict)] if isinstance(listing, dict) else []
    version = about.get("version") if isinstance(about, dict) else None
    return entries, None if version is None else str(version)


def completion_from_chat(data: Any) -> Completion:
    """Text and usage of a chat-completion JSON body (every choice's text, and the top log-probabilities
    at each choice's first token where they were asked for); malformed bodies raise TransientError."""
    if not isinstance(data, dict):
        raise TransientError(
            f"malformed response: expected a JSON object, got {type(data).__name__}", cause="malformed response"
        )
    choices = data.get("choices")
    if isinstance(choices, list):  # the order the request's `n` answers come in
        choices = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
    found = [c.get("message") if isinstance(c, dict) else None for c in choices or []]
    if not found or not all(isinstance(m, dict) for m in found):
        raise TransientError("malformed response: no choices[0].message", cause="malformed response")
    messages: list[dict[str, Any]] = found  # type: ignore[assignment]  # every one a dict, checked above
    usage = data.get("usage") or {}
    texts = [m.get("content") or "" for m in messages]
    return Completion(
        text=texts[0],
        input_tokens=int(usage.get("prompt_tokens") or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        more=tuple(texts[1:]),
        top_logprobs=tuple(first_token_logprobs(c) for c in choices or []),
    )


def first_token_logprobs(choice: dict[str, Any]) -> tuple[tuple[str, float], ...]:
    """(token, log-probability) of the alternatives at a choice's first token (its `logprobs.content[0]
    .top_logprobs`, the token chosen included); empty when the response carries none."""
    content = (choice.get("logprobs") or {}).get("content") or []
    if not content:
        return ()
    first = content[0]
    top = [(str(t["token"]), float(t["logprob"])) for t in first.get("top_logprobs") or []]
    if "token" in first and all(token != first["token"] for token, _ in top):
        top.append((str(first["token"]), float(first["logprob"])))
    return tuple(top)


__all__ = ["OpenAIChat", "chat_messages", "completion_from_chat", "sdk_error", "served_model", "PermanentError"]


@register_provider("openai_compatible")
class OpenAICompatibleChat(OpenAIChat):
    """An OpenAI-compatible server (vLLM, llama.cpp, LM Studio, ...): the same chat endpoint, no
    batch endpoint."""

    batch_api = None
    # the keys of the hosted OpenAI-compatible endpoints the shipped screener configs route to
    key_variables = (
        "TOGETHER_API_KEY",
        "OPENROUTER_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "XAI_API_KEY",
        "DEEPSEEK_API_KEY",
    )

    @classmethod
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        # a local server needs no key; every server needs its address
        require(
            base_url is not None, "screener.base_url", f"is required for provider {cls.kind} (the server's .../v1 URL)"
        )
