"""The screening side of the pre-flight checks (`popfair doctor`, the sweep's checks before case 1):
what one built screener needs before it sends anything, and one cheap probe of its endpoint.

`screener_checks` is offline and takes milliseconds: the route `route: auto` chose, its key (or the
credentials of the provider's own chain, such as AWS's) in the environment, the provider SDK
importable. `probe_endpoint` runs the provider's probe, one request that generates nothing (a model
listing or lookup), so a refused connection, a DNS/TLS/proxy failure, a rejected key or an unknown
model id shows before a case starts, named as the engine names it when it stops a case. Both read
what the provider adapter declares (`popfair.screen.providers.base.Provider`), take a screener built
as dry runs build it (`require_key=False`) and never raise."""

from __future__ import annotations

import importlib.util
from typing import Any

from popfair.core.types import Check
from popfair.runtime.routes import credential_variable, has_credentials
from popfair.runtime.secrets import safe_url
from popfair.screen.base import Screener
from popfair.screen.failures import FailureHints
from popfair.screen.providers import PermanentError, Provider, TransientError


def _subject(screener: Screener) -> str:
    route = screener.route
    return f"screener {screener.name}" + (f" (route {route})" if route else "")


def _hints(screener: Screener) -> FailureHints:
    timeout_s = getattr(getattr(screener, "settings", None), "timeout_s", 60.0)
    return screener.provider.failure_hints(screener.api_key_env, timeout_s)


def _key_fix(screener: Screener) -> str:
    """What to export when the screener's key is missing: its own variable, or the route whose key is set."""
    routes: dict[str, Any] = dict(screener.routes)
    variable = screener.api_key_env
    others = [
        f"screener.route={name}"
        for name, route in routes.items()
        if name != screener.route and credential_variable(route) and has_credentials(route)
    ]
    if others:  # another route's key is set: pinning it is enough
        return f"export {str(variable).split(', ')[0]}=..., or {' / '.join(others)}"
    # no key at all: every route's key would do
    return (
        " or ".join(
            f"export {credential_variable(route)}=... (screener.route={name})"
            for name, route in routes.items()
            if credential_variable(route)
        )
        or f"export {str(variable).split(', ')[0]}=..."
    )


def screener_checks(screener: Screener) -> list[Check]:
    """The offline checks of one built screener: route, key, SDK. [] for screeners that call nothing."""
    provider = screener.provider
    if not isinstance(provider, Provider):
        return []
    subject = _subject(screener)
    checks = []
    reason = screener.run_tags.get("route_reason")
    if reason:  # `auto` found no route whose credentials are set: the route is not ready
        unready = screener.missing_key and reason.startswith("auto:")
        checks.append(Check("route", not unready, f"{subject}: {reason}", _key_fix(screener) if unready else None))
    # the provider's own chain (AWS's) holds the credentials of a route that names no key variable
    variable, chain = screener.api_key_env, None if screener.api_key_env else provider.credentials
    if screener.missing_key:
        checks.append(Check("key", False, f"{subject}: {variable} is not set", _key_fix(screener)))
    elif chain is not None and not chain.present():
        checks.append(Check("key", False, f"{subject}: no {chain.what}", f"export {chain.shown}"))
    else:
        found = (
            f"{chain.what} found"
            if chain is not None
            else f"{variable} is set"
            if variable
            else "no key needed (a local server)"
        )
        checks.append(Check("key", True, f"{subject}: {found}"))
    module = provider.sdk
    if module and importlib.util.find_spec(module) is None:
        checks.append(Check("extra", False, f"{subject}: the {module} package is missing", f"pip install {module}"))
    return checks


def probe_endpoint(screener: Any, timeout_s: float = 10.0) -> list[Check]:
    """The provider's probe, one request that generates nothing: the endpoint reachable, the key
    accepted, the model id known (where the endpoint lists or looks up models). [] for screeners
    that call nothing or whose key is missing (screener_checks reports that)."""
    provider = screener.provider
    if not isinstance(provider, Provider) or screener.missing_key:
        return []
    subject, url = _subject(screener), safe_url(provider.display_url)
    try:
        found = provider.probe(timeout_s)
    except (TransientError, PermanentError) as exc:
        detail = " ".join(str(exc).removeprefix(f"{exc.cause}: ").split())[:200]
        name = "key" if exc.cause in ("HTTP 401", "HTTP 403") else "model id" if exc.cause == "HTTP 404" else "endpoint"
        what = f" for model {provider.model}" if name == "model id" else ""
        return [Check(name, False, f"{subject}: {url}: {exc.cause}{what} ({detail})", _hints(screener).fix(exc.cause))]
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
