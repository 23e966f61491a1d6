"""Which route a hosted-model screener calls: `screener.route: auto` (the default) follows the keys the
user has: the default route (`default_route`, the paper's where it names one) when its credentials
are in the environment, else the
first route in `routes` whose key is; a route name pins it. The choice is made while the config is
resolved (the `popfair_route` resolver fills `screener.chosen_route`), so the logged config, the
dry-run plan and the built screener all name the same provider, model and endpoint."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTO = "auto"
RESOLVER = "popfair_route"


@dataclass(frozen=True)
class CredentialChain:
    """Where a provider's SDK finds credentials when a route names no key variable (AWS's chain of
    variables and files). The provider adapter declares it (`Provider.credentials`); this module
    only reads it, without any network call."""

    what: str  # what the credentials are, for messages ("AWS credentials")
    shown: str  # the variables a user would set, for messages
    variables: tuple[str, ...]  # any of them set: credentials are there
    files: tuple[tuple[str, str], ...] = ()  # (variable that moves a file, its default path) the SDK reads

    def present(self) -> bool:
        """Whether the environment holds credentials of this chain (checked without any network call)."""
        if any(os.environ.get(name) for name in self.variables):
            return True
        return any(Path(os.environ.get(variable, default)).expanduser().is_file() for variable, default in self.files)


# provider kind -> its credential chain, filled as the adapters register (popfair.screen.providers,
# a layer above: the entry point hands `register_resolver` the function that imports them)
CREDENTIAL_CHAINS: dict[str, CredentialChain] = {}
_load_providers: list[Callable[[], object]] = []  # at most one, called on the first lookup


def register_credential_chain(kind: str, chain: CredentialChain) -> None:
    """Called by `@register_provider` for an adapter that declares a credential chain."""
    CREDENTIAL_CHAINS[kind] = chain


def credential_chain(kind: Any) -> CredentialChain | None:
    """The credential chain provider `kind` declares, or None (its routes need a key variable, or none)."""
    while _load_providers:
        _load_providers.pop()()
    return CREDENTIAL_CHAINS.get(kind) if isinstance(kind, str) else None


def credential_variable(route: Mapping[str, Any]) -> str | None:
    """What holds the route's credentials, for messages: its key variable, its provider's credential
    chain (an SDK's own, such as AWS's), None for a route that needs none (a local server)."""
    if route.get("api_key_env"):
        return str(route["api_key_env"])
    chain = credential_chain(route.get("provider"))
    return chain.shown if chain is not None else None


def is_self_hosted(route: Mapping[str, Any]) -> bool:
    """A route to a server the user runs (vLLM, SGLang, ...), whose run records what the server
    serves (popfair.screen.served): `self_hosted: true` on the route, or, unset, an
    OpenAI-compatible route without a key variable (the `local` routes of conf/screener/)."""
    flag = route.get("self_hosted")
    if flag is not None:
        return bool(flag)
    return route.get("provider") == "openai_compatible" and not route.get("api_key_env")


def has_credentials(route: Mapping[str, Any]) -> bool:
    """Whether the environment holds this route's credentials (checked without any network call).
    A keyless route (a local server) counts as ready."""
    variable = route.get("api_key_env")
    if variable:
        return bool(os.environ.get(str(variable), "").strip())
    chain = credential_chain(route.get("provider"))
    return chain.present() if chain is not None else True


@dataclass(frozen=True)
class RouteChoice:
    """The route a screener calls and, in words, why (printed, and logged as the `route_reason` tag)."""

    name: str
    reason: str
    ready: bool  # its credentials are in the environment


def choose_route(route: str, default_route: str | None, routes: Mapping[str, Mapping[str, Any]]) -> RouteChoice:
    """`route` itself when pinned; for `auto` the default route when its credentials are set, else the
    first route in `routes` whose key is set (a keyless local route is only taken when it is the
    default: it needs a server the user runs), else the default route, not ready."""
    if route != AUTO:
        ready = route in routes and has_credentials(routes[route])
        return RouteChoice(route, f"pinned (screener.route={route})", ready)
    default = default_route if default_route is not None and default_route in routes else next(iter(routes), "")
    if default and has_credentials(routes[default]):
        return RouteChoice(default, "auto: the default route, its credentials are set", True)
    for name, settings in routes.items():
        if name != default and credential_variable(settings) is not None and has_credentials(settings):
            missing = credential_variable(routes[default]) if default else None
            reason = f"auto: {credential_variable(settings)} is set; {missing}, for the default route {default}, is not"
            return RouteChoice(name, reason, True)
    return RouteChoice(default, "auto: no route's credentials are set", False)


def no_credentials_message(screener: str, routes: Mapping[str, Mapping[str, Any]]) -> str:
    """One line: every route with the variable that enables it and the override that picks it."""
    options = "; ".join(
        f"{name}: export {credential_variable(settings) or '(no key: a local server)'} (screener.route={name})"
        for name, settings in routes.items()
    )
    return (
        f"screener.route: no credentials are set for any route of {screener} (route: auto). "
        f"Routes: {options}. popfair reads keys only from the environment."
    )


def _resolve(route: Any, default_route: Any, routes: Any) -> str:
    from omegaconf import DictConfig, OmegaConf

    plain = OmegaConf.to_container(routes, resolve=True) if isinstance(routes, DictConfig) else dict(routes or {})
    return choose_route(str(route), None if default_route is None else str(default_route), plain).name  # type: ignore[arg-type]


def register_resolver(load_providers: Callable[[], object] | None = None) -> None:
    """Make `${popfair_route:${.route},${.default_route},${.routes}}` available to every config this
    process resolves (called when popfair is imported). Not cached: the choice follows the
    environment at the time of resolution. `load_providers` imports the provider adapters, whose
    credential chains a route may need; it runs on the first lookup, not here (importing popfair
    stays light)."""
    from omegaconf import OmegaConf

    if load_providers is not None and not CREDENTIAL_CHAINS:
        _load_providers[:] = [load_providers]

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve)
