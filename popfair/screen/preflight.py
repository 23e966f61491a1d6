"""The screening side of the pre-flight checks (`popfair doctor`, the sweep's checks before case 1):
what one built screener needs before it sends anything, and one cheap probe of its endpoint.

`screener_checks` is offline and takes milliseconds: the route `route: auto` chose, its key (or AWS
credentials) in the environment, the provider SDK importable. `probe_endpoint` sends one request that
generates nothing (a model listing or lookup), so a refused connection, a DNS/TLS/proxy failure, a
rejected key or an unknown model id shows before a case starts, named as the engine names it when it
stops a case. Both take a screener built as dry runs build it (`require_key=False`) and never raise."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

from popfair.core.types import Check
from popfair.runtime.routes import credential_variable, has_credentials
from popfair.runtime.secrets import safe_url
from popfair.screen.base import Screener
from popfair.screen.failures import FailureHints
from popfair.screen.providers import PermanentError, TransientError

SDKS = {
    "openai": "openai",
    "openai_compatible": "openai",
    "anthropic": "anthropic",
    "bedrock": "boto3",
    "http": "aiohttp",
}


def _subject(screener: Screener) -> str:
    route = screener.route
    return f"screener {screener.name}" + (f" (route {route})" if route else "")


def _hints(screener: Screener) -> FailureHints:
    keys = screener.config_keys
    variable = screener.api_key_env
    return FailureHints(
        keys.get("url_key", "screener.base_url"),
        keys.get("request_keys", "screener.model"),
        f"check {variable}" if variable else "check the credentials",
        getattr(getattr(screener, "settings", None), "timeout_s", 60.0),
    )


def screener_checks(screener: Screener) -> list[Check]:
    """The offline checks of one built screener: route, key, SDK. [] for screeners that call nothing."""
    provider: Any = screener.provider
    kind = getattr(provider, "kind", None)
    if kind not in SDKS:
        return []
    subject = _subject(screener)
    checks = []
    reason = screener.run_tags.get("route_reason")
    if reason:
        checks.append(Check("route", True, f"{subject}: {reason}"))
    routes: dict[str, Any] = dict(screener.routes)
    variable = screener.api_key_env
    if screener.missing_key:
        others = [
            f"screener.route={name}"
            for name, route in routes.items()
            if name != screener.route and credential_variable(route) and has_credentials(route)
        ]
        if others:  # another route's key is set: pinning it is enough
            fix = f"export {str(variable).split(', ')[0]}=..., or {' / '.join(others)}"
        else:  # no key at all: every route's key would do
            fix = (
                " or ".join(
                    f"export {credential_variable(route)}=... (screener.route={name})"
                    for name, route in routes.items()
                    if credential_variable(route)
                )
                or f"export {str(variable).split(', ')[0]}=..."
            )
        checks.append(Check("key", False, f"{subject}: {variable} is not set", fix))
    elif kind == "bedrock" and not has_credentials({"provider": "bedrock"}):
        checks.append(
            Check(
                "key", False, f"{subject}: no AWS credentials", f"export {credential_variable({'provider': 'bedrock'})}"
            )
        )
    else:
        found = (
            "AWS credentials found"
            if kind == "bedrock"
            else f"{variable} is set"
            if variable
            else "no key needed (a local server)"
        )
        checks.append(Check("key", True, f"{subject}: {found}"))
    module = SDKS[kind]
    if importlib.util.find_spec(module) is None:
        checks.append(Check("extra", False, f"{subject}: the {module} package is missing", f"pip install {module}"))
    return checks


def probe_endpoint(screener: Any, timeout_s: float = 10.0) -> list[Check]:
    """One request that generates nothing: the endpoint reachable, the key accepted, the model id
    known (where the endpoint lists or looks up models). [] for screeners that call nothing or
    whose key is missing (screener_checks reports that)."""
    provider: Any = screener.provider
    kind = getattr(provider, "kind", None)
    if kind not in SDKS or screener.missing_key:
        return []
    subject, url = _subject(screener), safe_url(provider.display_url)
    try:
        found = _PROBES[kind](provider, timeout_s)
    except (TransientError, PermanentError) as exc:
        hints = _hints(screener)
        detail = " ".join(str(exc).removeprefix(f"{exc.cause}: ").split())[:200]
        name = "key" if exc.cause in ("HTTP 401", "HTTP 403") else "model id" if exc.cause == "HTTP 404" else "endpoint"
        what = f" for model {provider.model}" if name == "model id" else ""
        return [Check(name, False, f"{subject}: {url}: {exc.cause}{what} ({detail})", hints.fix(exc.cause))]
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never raises
        return [Check("endpoint", False, f"{subject}: {url}: {type(exc).__name__}: {exc}"[:300], None)]
    checks = [Check("endpoint", True, f"{subject}: {url} answers and accepts the key")]
    if found is False:
        checks.append(
            Check(
                "model id",
                False,
                f"{subject}: {url} does not list model {provider.model}",
                f"check {_hints(screener).request_keys} (the route's model id)",
            )
        )
    elif found is True:
        checks.append(Check("model id", True, f"{subject}: {provider.model} is known to {url}"))
    return checks


def _run(coroutine_factory: Any) -> Any:
    from popfair.screen.limits import run_coroutine

    return run_coroutine(coroutine_factory)


def _openai_models(provider: Any, timeout_s: float) -> bool | None:
    """GET {base}/models through the SDK: True/False whether the model id is listed."""
    import openai

    from popfair.screen.providers.openai_chat import sdk_error

    async def listing() -> Any:
        client = openai.AsyncOpenAI(
            api_key=provider.api_key or "not-needed", base_url=provider.base_url, max_retries=0, timeout=timeout_s
        )
        try:
            return await client.get("/models", cast_to=object)
        except openai.OpenAIError as exc:
            raise sdk_error(exc, openai) from None
        finally:
            await client.close()

    data = _run(listing)
    ids = {str(m.get("id", "")) for m in (data or {}).get("data", []) if isinstance(m, dict)}
    if not ids:
        return None
    return any(i == provider.model or i.endswith("/" + provider.model) for i in ids)


def _anthropic_model(provider: Any, timeout_s: float) -> bool:
    """GET /v1/models/{model}: a 404 says the id is unknown."""
    import anthropic

    from popfair.screen.providers.openai_chat import sdk_error

    async def lookup() -> Any:
        client = anthropic.AsyncAnthropic(
            api_key=provider.api_key, base_url=provider.base_url, max_retries=0, timeout=timeout_s
        )
        try:
            return await client.get(f"/v1/models/{provider.model}", cast_to=object)
        except anthropic.AnthropicError as exc:
            raise sdk_error(exc, anthropic) from None
        finally:
            await client.close()

    _run(lookup)
    return True


def _bedrock_model(provider: Any, timeout_s: float) -> bool:
    """The control plane's GetFoundationModel (or GetInferenceProfile for a cross-region profile id)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    from popfair.screen.providers.base import classify_status, network_error

    config = Config(retries={"total_max_attempts": 1}, read_timeout=timeout_s, connect_timeout=timeout_s)
    client = boto3.client("bedrock", region_name=provider.region, endpoint_url=provider.base_url, config=config)
    try:
        if provider.model.split(".", 1)[0] in ("us", "eu", "apac", "global", "jp", "au", "ca"):
            client.get_inference_profile(inferenceProfileIdentifier=provider.model)
        else:
            client.get_foundation_model(modelIdentifier=provider.model)
    except ClientError as exc:
        meta = exc.response.get("ResponseMetadata", {})
        error = exc.response.get("Error", {})
        raise classify_status(
            int(meta.get("HTTPStatusCode") or 400), None, f"{error.get('Code')}: {error.get('Message')}"
        ) from None
    except BotoCoreError as exc:
        raise network_error(exc) from None
    return True


def _http_reachable(provider: Any, timeout_s: float) -> None:
    """HEAD on the scoring URL with its headers: any answer but 401/403/404 shows it is there (a
    POST-only endpoint may answer 405); nothing is scored."""
    import aiohttp

    from popfair.screen.providers.base import classify_status, network_error

    async def head() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            try:
                async with session.head(provider.url, headers=provider.headers) as response:
                    status = response.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise network_error(exc) from None
        if status in (401, 403, 404):
            raise classify_status(status, None, f"{status} to HEAD")

    _run(head)


_PROBES = {
    "openai": _openai_models,
    "openai_compatible": _openai_models,
    "anthropic": _anthropic_model,
    "bedrock": _bedrock_model,
    "http": _http_reachable,
}
