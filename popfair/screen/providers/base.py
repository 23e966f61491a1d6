"""What every provider adapter shares: generation settings, results, error classes, cache keys, and
the registry of adapters.

An adapter is one class that declares every fact the rest of popfair needs about its provider, so
that adding one is its own file plus its `@register_provider` line (and a screener YAML naming it):
its key variables and credential chain (read by `popfair.runtime.secrets` and `.routes`), the route
settings it cannot do without (`check_settings`), its pricing unit (`popfair.screen.pricing`), its
pre-flight probe (`probe`, run by `popfair.screen.preflight`) and its error hints (`hints`)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import email.utils
import hashlib
import json
import os
import socket
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from popfair.core.errors import require
from popfair.runtime.routes import CredentialChain, register_credential_chain
from popfair.runtime.secrets import register_secret_variables
from popfair.screen.failures import FailureHints
from popfair.screen.pricing import TOKENS_TILED_IMAGES, PricingUnit

if TYPE_CHECKING:  # annotations only: prompts pulls in the designs, and choosing a route loads the adapters
    from popfair.screen.prompts import ChatPrompt

P = TypeVar("P", bound="type[Provider]")
# kind -> adapter class, filled by @register_provider as the adapter modules are imported (they
# import their SDK only when a client is opened, so registering costs nothing)
PROVIDERS: dict[str, type[Provider]] = {}


def register_provider(kind: str) -> Callable[[P], P]:
    """Class decorator: make an adapter available as `screener.provider=<kind>`, and hand its declared
    secret variables and credential chain to the runtime (log redaction, route choice)."""

    def register(cls: P) -> P:
        if kind in PROVIDERS and PROVIDERS[kind] is not cls:
            raise ValueError(f"provider kind {kind!r} is registered twice ({PROVIDERS[kind].__name__}, {cls.__name__})")
        cls.kind = kind
        PROVIDERS[kind] = cls
        register_secret_variables(*cls.key_variables)
        if cls.credentials is not None:
            register_credential_chain(kind, cls.credentials)
        return cls

    return register


class BatchApi(Protocol):
    """A provider's asynchronous batch endpoint (submit -> poll -> collect), about half the list price."""

    def __init__(self, provider: Provider) -> None: ...

    async def submit(self, lines: list[tuple[str, dict[str, Any]]], window: str) -> str:
        """Submit (cache key, request body) lines; the batch id."""
        ...

    async def status(self, batch_id: str) -> tuple[str, bool]:
        """The batch's status and whether it is finished."""
        ...

    def results(self, batch_id: str) -> AsyncIterator[tuple[str, Completion | str]]:
        """(cache key, completion or failure text) per request of a finished batch."""
        ...


@dataclass(frozen=True)
class Generation:
    """Decoding settings sent with every request (all of them enter the cache key).

    temperature: null omits it. max_tokens: output cap (sent as max_completion_tokens to OpenAI
    reasoning-class models). reasoning_effort: e.g. "none"/"minimal" for reasoning models, null omits.
    top_p, seed: sent to OpenAI-style endpoints when set (null omits). extra: further
    provider-specific body fields, merged verbatim."""

    temperature: float | None = 0.0
    max_tokens: int = 200
    reasoning_effort: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    top_p: float | None = None
    seed: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Generation:
        """The settings of `screener.generation`, each checked (errors name the key)."""
        values = dict(config or {})
        unknown = set(values) - set(cls.__dataclass_fields__)
        require(
            not unknown,
            "screener.generation",
            f"unknown keys {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}",
        )
        gen = cls(**values)
        require(
            isinstance(gen.max_tokens, int) and gen.max_tokens >= 1,
            "screener.generation.max_tokens",
            f"must be an integer >= 1, got {gen.max_tokens!r}",
        )
        require(
            gen.temperature is None or 0 <= float(gen.temperature) <= 2,
            "screener.generation.temperature",
            f"must be in [0, 2] or null, got {gen.temperature!r}",
        )
        require(
            gen.top_p is None or 0 < float(gen.top_p) <= 1,
            "screener.generation.top_p",
            f"must be in (0, 1] or null, got {gen.top_p!r}",
        )
        require(
            gen.seed is None or (isinstance(gen.seed, int) and not isinstance(gen.seed, bool)),
            "screener.generation.seed",
            f"must be an integer or null, got {gen.seed!r}",
        )
        require(isinstance(gen.extra, Mapping), "screener.generation.extra", "must be a mapping of body fields")
        return cls(**{**values, "extra": dict(gen.extra)})


@dataclass(frozen=True)
class Completion:
    """One response: the first choice's text and the usage of the whole request. `more`: the texts of
    further choices (a request with `n` > 1); `top_logprobs`: per choice, the (token, log-probability)
    alternatives at the answer's first token, where the request asked for them."""

    text: str
    input_tokens: int
    output_tokens: int
    more: tuple[str, ...] = ()
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] = ()

    @property
    def texts(self) -> tuple[str, ...]:
        """Every choice's text, in order."""
        return (self.text, *self.more)


# Failure causes that mean the endpoint itself cannot be reached (the circuit breaker counts them).
TRANSPORT_CAUSES = frozenset(
    {
        "connection refused",
        "DNS lookup failed",
        "TLS error",
        "proxy error",
        "connection error",
        "timeout",
        "HTTP 502",
        "HTTP 503",
        "HTTP 504",
    }
)


class TransientError(Exception):
    """Worth retrying: 429, 408/409, 5xx, timeouts, connection errors, malformed bodies. `cause` is a
    short label ("connection refused", "timeout", "HTTP 503", ...) for the fail-fast rules and the
    failure counts."""

    def __init__(
        self, message: str, retry_after: float | None = None, rate_limited: bool = False, cause: str = "other"
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.rate_limited = rate_limited
        self.cause = cause

    @property
    def transport(self) -> bool:
        """The endpoint could not be reached (as opposed to answering with an error)."""
        return self.cause in TRANSPORT_CAUSES


class PermanentError(Exception):
    """Retrying cannot help (bad request, content refused). `auth` marks a rejected key: the run
    stops sending, since every further request would fail the same way. `cause`: "HTTP 400" ..."""

    def __init__(self, message: str, auth: bool = False, cause: str = "other") -> None:
        super().__init__(message)
        self.auth = auth
        self.cause = cause


def network_error(exc: BaseException) -> TransientError:
    """A TransientError for a failure below HTTP (connection refused, DNS, TLS, proxy, reset,
    timeout), found by walking the exception chain: SDKs wrap the socket error in their own classes
    (the openai SDK's aiohttp transport even reports a refused connection as a timeout). The message
    is the cause and the words of the error that shows it."""
    cause, shown = "connection error", exc
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        name = type(error).__name__
        found = None
        if "Proxy" in name:
            found = "proxy error"
        elif isinstance(error, ssl.SSLError) or "SSL" in name or "Certificate" in name:
            found = "TLS error"
        elif isinstance(error, socket.gaierror) or "DNS" in name or "NameResolution" in name:
            found = "DNS lookup failed"
        elif isinstance(error, ConnectionRefusedError):
            found = "connection refused"
        elif isinstance(error, ConnectionError) or "Disconnect" in name:  # reset, closed without an answer
            found = "connection error"
        elif isinstance(error, (TimeoutError, asyncio.TimeoutError)) or "Timeout" in name:
            cause, shown = "timeout", error  # unless something deeper says why
        if found is not None:
            cause, shown = found, error
            break
        error = error.__cause__ or error.__context__
    return TransientError(f"{cause}: {str(shown) or type(shown).__name__}"[:300], cause=cause)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from retry-after-ms / retry-after (seconds or HTTP date); None when absent."""
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def classify_status(status: int, headers: Mapping[str, str] | None, message: str) -> Exception:
    """Map an HTTP error status to TransientError / PermanentError."""
    text = f"HTTP {status}: {message}"[:500]
    cause = f"HTTP {status}"
    if status == 429:
        return TransientError(text, parse_retry_after(headers), rate_limited=True, cause=cause)
    if status in (408, 409) or status >= 500:
        return TransientError(text, parse_retry_after(headers), cause=cause)
    return PermanentError(text, auth=status in (401, 403), cause=cause)


def _keyed(digest: Any, part: bytes) -> Any:
    """Hash one length-prefixed part (no part can run into the next)."""
    digest.update(len(part).to_bytes(8, "big"))
    digest.update(part)
    return digest


def require_key_variable(kind: str, api_key_env: str | None) -> None:
    """`check_settings` of a provider whose SDK has no credential chain of its own: the route must
    name the variable holding the key."""
    require(
        api_key_env is not None,
        "screener.api_key_env",
        f"provider {kind} needs the name of the environment variable holding the API key",
    )


class Provider(ABC):
    """One model behind one endpoint. `body` is the exact request the SDK sends; `cache_key`
    identifies it (model, parameters, messages, images) for the response cache."""

    kind: str
    # The batch endpoint this provider offers (a capability; None: online requests only).
    batch_api: ClassVar[type[BatchApi] | None] = None
    # The variable the SDK reads its endpoint from when base_url is null (OPENAI_BASE_URL ...).
    base_url_env: ClassVar[str | None] = None
    default_url: ClassVar[str] = ""  # the SDK's endpoint when neither is set (for messages)
    # The SDK's module, imported when a client opens (a sweep's fork server imports it once for all
    # cases; pre-flight checks that it is installed).
    sdk: ClassVar[str] = ""
    # Variables holding this provider's secrets: their values are redacted from logs even when
    # popfair did not read them (the variable a route names is redacted once read, in any case).
    key_variables: ClassVar[tuple[str, ...]] = ()
    # Where the SDK finds credentials when a route names no key variable (AWS's chain); None: such a
    # route needs no key (a local server). Route choice and pre-flight read it.
    credentials: ClassVar[CredentialChain | None] = None
    # What a request is billed by (tokens, an image counted by the provider's rule; or calls).
    pricing: ClassVar[PricingUnit] = TOKENS_TILED_IMAGES
    # Error hints: the settings named in the fix of a stop message or a failed pre-flight check (the
    # key hint and timeout are the screener's: `failure_hints`).
    hints: ClassVar[FailureHints] = FailureHints()
    # The generation settings this provider's requests can carry beyond temperature and max tokens.
    sampling_settings: ClassVar[frozenset[str]] = frozenset()
    # One request can ask for several answers (an OpenAI-style `n`): screener.samples sends one request
    # per prompt at temperature > 0 instead of one per answer.
    asks_n: ClassVar[bool] = False
    # Its responses carry the top log-probabilities of each answer token (screener.score_from=logprobs).
    gives_logprobs: ClassVar[bool] = False

    def __init__(
        self,
        model: str,
        generation: Generation,
        reasoning: bool = False,
        api_key: str | None = None,
        base_url: str | None = None,
        region: str | None = None,
        timeout_s: float = 60.0,
        concurrency: int = 8,
    ) -> None:
        self.model, self.generation, self.reasoning = model, generation, reasoning
        self.api_key, self.base_url, self.region = api_key, base_url, region
        self.timeout_s, self.concurrency = timeout_s, concurrency
        self._key_prefixes: dict[tuple[bool, str], Any] = {}  # (image?, system text) -> sha256 state
        self._client: Any = None  # the SDK client, opened by start()
        self.served: Mapping[str, Any] | None = None  # what a self-hosted server serves (serve_as)

    def serve_as(self, identity: Mapping[str, Any]) -> None:
        """Key answers by what a self-hosted server reports it serves (model id, revision, engine and
        version, the kernels asked for) instead of its URL: the same model served the same way on
        several servers shares one cache, and an engine upgrade asks again."""
        self.served = dict(identity)
        self._key_prefixes.clear()

    @classmethod  # noqa: B027 - an optional declaration: most providers need no particular setting
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        """Raise ConfigError naming a route setting this provider cannot do without (none by default)."""

    @classmethod  # noqa: B027 - an optional declaration: most providers read a named key variable
    def check_credentials(cls, region: str | None) -> None:
        """With no key variable named: raise MissingSecretError when the SDK's own chain holds no
        credentials (called when the screener is built for a real run)."""

    def failure_hints(self, key_variable: str | None, timeout_s: float) -> FailureHints:
        """`hints` for one screener: the variable its key comes from, and its request timeout."""
        key_hint = f"check {key_variable}" if key_variable else "check the credentials"
        return dataclasses.replace(self.hints, key_hint=key_hint, timeout_s=timeout_s)

    @abstractmethod
    def probe(self, timeout_s: float) -> bool | None:
        """Pre-flight: one request that generates nothing (a model listing or lookup). True/False:
        the model id is known / not listed; None: the endpoint cannot say. Raises TransientError or
        PermanentError, as `send` does, when the endpoint is unreachable or refuses the key."""

    @property
    def endpoint(self) -> str:
        """Where requests go (part of the cache key: the same model id elsewhere is another model)."""
        return self.base_url or (self.base_url_env and os.environ.get(self.base_url_env)) or "default"

    @property
    def display_url(self) -> str:
        """Where requests go, for messages (the caller hides any secret in it: popfair.runtime.secrets.safe_url)."""
        endpoint = self.endpoint
        return self.default_url or endpoint if endpoint == "default" else endpoint

    @abstractmethod
    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        """The request body; `image` is the provider's encoding of the PNG (or a digest for keys)."""

    def encode_image(self, png: bytes) -> Any:
        """The PNG as this provider's API wants it: base64 text (boto3 overrides: raw bytes)."""
        return base64.b64encode(png).decode("ascii")

    def request_body(self, prompt: ChatPrompt, n: int = 1) -> dict[str, Any]:
        """The request of one prompt; `n` > 1 asks for that many answers (providers with `asks_n`)."""
        image = self.encode_image(prompt.image_png) if prompt.image_png is not None else None
        body = self.body(prompt, image)
        if n > 1:
            body["n"] = n
        return body

    def cache_key(self, prompt: ChatPrompt) -> str:
        """The response-cache key of one prompt (see cache_keys)."""
        return self.cache_keys(prompt.system, [prompt.user], [prompt.image_png])[0]

    def cache_keys(self, system: str, users: Sequence[str], images: Sequence[bytes | None] | None = None) -> list[str]:
        """Keys of many prompts sharing one system text, in bulk: sha256 over the request body template
        (provider, endpoint, model, every generation parameter, message structure; serialised once per
        provider) followed by the length-prefixed system text, user text and image bytes. Same identity
        as hashing the full body, without re-serialising long prompts: a cached rerun of 60,000 rows
        computes 60,000 keys. The hash state after the template and the system text (the same for every
        document) is computed once and copied, so each key hashes only the user text (and image)."""
        if images is None or not any(image is not None for image in images):  # text documents: a tight loop
            prefix = self._key_prefix(False, system).copy
            return [_keyed(prefix(), user.encode()).hexdigest() for user in users]
        keys = []
        for user, image in zip(users, images, strict=True):
            digest = _keyed(self._key_prefix(image is not None, system).copy(), user.encode())
            if image is not None:
                _keyed(digest, image)
            keys.append(digest.hexdigest())
        return keys

    def _key_prefix(self, has_image: bool, system: str) -> Any:
        prefix = self._key_prefixes.get((has_image, system))
        if prefix is None:
            from popfair.screen.prompts import ChatPrompt

            body = self.body(ChatPrompt(system="<system>", user="<user>"), "<image>" if has_image else None)
            template = json.dumps(
                {"provider": self.kind, "endpoint": self.served or self.endpoint, "body": body},
                sort_keys=True,
                separators=(",", ":"),
                default=str,
            ).encode()
            prefix = _keyed(hashlib.sha256(template), system.encode())
            if len(self._key_prefixes) > 64:  # a few prompt sets per provider; never grows without bound
                self._key_prefixes.clear()
            self._key_prefixes[(has_image, system)] = prefix
        return prefix

    async def start(self) -> None:  # noqa: B027 - an optional hook: most providers open nothing
        """Open clients (called inside the event loop that will use them)."""

    async def stop(self) -> None:
        """Close the SDK client (async SDK clients have an awaitable close())."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def client(self) -> Any:
        """The open SDK client (batch mode uses its batch endpoints)."""
        return self._client

    @abstractmethod
    async def send(self, body: dict[str, Any]) -> Completion:
        """One request; raises TransientError or PermanentError on failure."""
