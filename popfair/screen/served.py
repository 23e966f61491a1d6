"""What a run sent and what a self-hosted engine served (a model's `route=local`: the user's vLLM,
SGLang or other OpenAI-compatible server).

Every hosted-model run records the request settings it sent (MLflow tags `request.<field>`: model,
temperature, max_tokens, seed, top_p, ...). A self-hosted route also asks the server, before the
first request, what it serves: its `/models` entry for the model id (vLLM adds the weights it was
started from, `root`, and `max_model_len`; `owned_by` names the engine) and the engine version of
`{server}/version`. These are MLflow tags `served.<field>`, together with whether the user asked
for batch-invariant kernels (`screener.batch_invariant`: the engine does not report it), and they
key the response cache in place of the URL: several servers of the same model and engine share
one cache (the grid over many GPUs), and another engine version or kernel mode asks again.

The run also records the engine's prefix-cache hit rate on its requests, where the server exposes
it at /metrics (popfair.screen.served_metrics)."""

from __future__ import annotations

import json
import logging

from popfair.core.errors import ConfigError, ScreeningStopped
from popfair.runtime.secrets import safe_url
from popfair.screen.failures import FailureHints, stop_message
from popfair.screen.providers import PermanentError, Provider, TransientError

log = logging.getLogger("popfair.screen")

# reported fields recorded as tags (those present); the key takes KEY_FIELDS of them
RECORDED = ("id", "root", "parent", "owned_by", "max_model_len", "revision")
KEY_FIELDS = ("id", "revision", "owned_by")


def request_tags(provider: Provider) -> dict[str, str]:
    """`request.<field>` for every field of the request body but the messages: what was sent."""
    from popfair.screen.prompts import ChatPrompt

    body = provider.body(ChatPrompt(system="", user=""), None)
    return {
        f"request.{field}": value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for field, value in body.items()
        if field not in ("messages", "system")
    }


def batch_invariant_tag(requested: bool | None) -> str:
    return "not stated" if requested is None else str(bool(requested)).lower()


class ServedModel:
    """Asks a self-hosted server once what it serves as `provider.model`, keys the provider's
    answers by it (`Provider.serve_as`) and gives the run's tags."""

    def __init__(self, screener: str, provider: Provider, batch_invariant: bool | None, hints: FailureHints) -> None:
        self.screener, self.provider, self.batch_invariant, self.hints = screener, provider, batch_invariant, hints
        self.tags: dict[str, str] | None = None  # set once the server has answered
        from popfair.screen.providers.openai_chat import server_root
        from popfair.screen.served_metrics import PrefixCacheMeter

        self.meter = PrefixCacheMeter(server_root(provider.display_url), provider.model)

    def identify(self, timeout_s: float = 10.0) -> dict[str, str]:
        """The server's report as tags (asked once). ScreeningStopped when it cannot be reached (the
        fix, as a stopped case names it); ConfigError when it does not serve the model id."""
        if self.tags is not None:
            return self.tags
        from popfair.screen.providers.openai_chat import served_model

        url = safe_url(self.provider.display_url)
        try:
            entries, version = served_model(self.provider, timeout_s)
        except (TransientError, PermanentError) as exc:
            raise ScreeningStopped(
                stop_message(self.screener, f"{url}/models", exc.cause, str(exc), self.hints)
            ) from None
        entry = next((e for e in entries if e.get("id") == self.provider.model), None)
        if entry is None:
            served = ", ".join(str(e.get("id")) for e in entries) or "nothing"
            raise ConfigError(
                f"{self.hints.request_keys}: the server at {url} serves {served}, not "
                f"{self.provider.model!r}; set the route's model id to what it serves, or start the server "
                f"with --served-model-name {self.provider.model}"
            )
        reported = {field: entry[field] for field in RECORDED if entry.get(field) is not None}
        identity = {field: reported.get(field) for field in KEY_FIELDS}
        identity.update(engine_version=version, batch_invariant=self.batch_invariant)
        self.provider.serve_as(identity)
        self.tags = {f"served.{field}": str(value) for field, value in reported.items()}
        self.tags["served.engine_version"] = version or "not reported"
        self.tags["served.batch_invariant_requested"] = batch_invariant_tag(self.batch_invariant)
        self.tags["served.endpoint"] = url
        log.info("screener %s: %s serves %s", self.screener, url, json.dumps(identity, default=str))
        return self.tags

    def try_identify(self) -> bool:
        """`identify` for a dry run's plan: False (and a log line) when the server cannot say."""
        try:
            self.identify()
        except (ScreeningStopped, ConfigError) as exc:
            log.warning("screener %s: cannot tell which of its answers are cached: %s", self.screener, exc)
            return False
        return True
