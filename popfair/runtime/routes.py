"""Which route a hosted-model screener calls: `screener.route: auto` (the default) follows the keys the
user has: the default route (`default_route`, the paper's where it names one) when its credentials
are in the environment, else the
first route in `routes` whose key is; a route name pins it. The choice is made while the config is
resolved (the `popfair_route` resolver fills `screener.chosen_route`), so the logged config, the
dry-run plan and the built screener all name the same provider, model and endpoint."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AUTO = "auto"
RESOLVER = "popfair_route"

# Environment variables from which boto3 finds AWS credentials without a network call.
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)


def _aws_files() -> bool:
    """A shared credentials or config file that boto3 would read."""
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
        os.environ.get("AWS_CONFIG_FILE", "~/.aws/config"),
    )
    return any(Path(name).expanduser().is_file() for name in files)


def credential_variable(route: Mapping[str, Any]) -> str | None:
    """What holds the route's credentials, for messages: its key variable, the AWS chain for Bedrock,
    None for a route that needs none (a local server)."""
    if route.get("api_key_env"):
        return str(route["api_key_env"])
    if route.get("provider") == "bedrock":
        return "AWS_ACCESS_KEY_ID/AWS_PROFILE/AWS_BEARER_TOKEN_BEDROCK"
    return None


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
    if route.get("provider") == "bedrock":
        return any(os.environ.get(name) for name in AWS_VARIABLES) or _aws_files()
    return True


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


def register_resolver() -> None:
    """Make `${popfair_route:${.route},${.default_route},${.routes}}` available to every config this
    process resolves (called when popfair is imported). Not cached: the choice follows the
    environment at the time of resolution."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _resolve)
