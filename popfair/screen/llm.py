"""LLMScreener: a chat model behind a provider API (OpenAI, Anthropic, Bedrock, OpenAI-compatible)
screens each document: yes/no callback or a 0-100 score. Answers come from the response cache when
present; only what is missing is asked, online (engine.py) or as a provider batch (batch.py), by the
request loop it shares with HttpScreener (request_loop.py)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np

from popfair.core.constraints import Boolean, Interval, Options, Rules, validate
from popfair.core.errors import ConfigError, DataError, MissingSecretError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.design import for_outcome
from popfair.runtime.routes import AUTO, RouteChoice, choose_route, is_self_hosted, no_credentials_message
from popfair.runtime.secrets import install_log_redaction, read_secret
from popfair.screen.base import Screener
from popfair.screen.calls import Answer, EngineSettings, sample_key
from popfair.screen.parse import SCORE_FROM, SCORE_REPLIES, parse_answer
from popfair.screen.pricing import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, Price
from popfair.screen.prompts import ChatPrompt, PromptSet, PromptTable
from popfair.screen.providers import PROVIDERS, Generation, Provider
from popfair.screen.request_loop import RequestLoop
from popfair.screen.served import ServedModel, batch_invariant_tag, request_tags
from popfair.store.responses import StoredReply, open_cache

log = logging.getLogger("popfair.screen")

MODES = ("online", "batch")

_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def _route_generation(generation: Mapping[str, Any] | None, from_route: Mapping[str, Any] | None) -> dict[str, Any]:
    """The screener's generation settings with the route's own request fields (e.g. how thinking is
    switched off on that provider) filled in where the screener leaves them unset; explicit settings win."""
    merged = dict(generation or {})
    if not from_route:
        return merged
    unknown = set(from_route) - {"reasoning_effort", "extra"}
    require(
        not unknown,
        "screener.routes.<route>.generation",
        f"unknown keys {sorted(unknown)}; a route may set reasoning_effort and extra",
    )
    if merged.get("reasoning_effort") is None and from_route.get("reasoning_effort") is not None:
        merged["reasoning_effort"] = from_route["reasoning_effort"]
    merged["extra"] = {**dict(from_route.get("extra") or {}), **dict(merged.get("extra") or {})}
    return merged


def _chosen_route(
    name: str,
    route: str | None,
    routes: Mapping[str, Mapping[str, Any]],
    default_route: str | None,
    chosen_route: str | None,
    require_key: bool,
) -> RouteChoice | None:
    """The route `route` resolves to (None: the screener has no routes), checked against the one the
    config resolved; MissingSecretError listing every route when `auto` finds no credentials."""
    require(
        not routes or route == AUTO or route in routes,
        "screener.route",
        f"must be auto or one of screener.routes ({', '.join(routes)}), got {route!r}",
    )
    if not (routes and route):
        return None
    choice = choose_route(route, default_route, routes)
    require(
        chosen_route in (None, choice.name),
        "screener.chosen_route",
        f"is computed from screener.route; set screener.route={chosen_route} instead",
    )
    if route == AUTO and not choice.ready and require_key:
        raise MissingSecretError(no_credentials_message(name, routes))
    log.info("screener %s: route %s (%s)", name, choice.name, choice.reason)
    return choice


def _adapter(
    provider: str,
    model: str,
    api_key_env: str | None,
    base_url: str | None,
    region: str | None,
    release_date: str | None,
    mode: str,
    max_cost_usd: float | None,
) -> type[Provider]:
    """The provider's adapter class, once the settings that tie a screener to it are checked (what the
    provider cannot do without, its adapter declares: `Provider.check_settings`)."""
    require(provider in PROVIDERS, "screener.provider", f"must be one of {', '.join(PROVIDERS)}, got {provider!r}")
    adapter = PROVIDERS[provider]
    require(isinstance(model, str) and bool(model.strip()), "screener.model", "must be a model id")
    require(
        base_url is None or str(base_url).startswith(("http://", "https://")),
        "screener.base_url",
        f"must be an http(s) URL or null, got {base_url!r}",
    )
    require(
        release_date is None or bool(_DATE.match(str(release_date))),
        "screener.release_date",
        f"must be YYYY-MM or YYYY-MM-DD, got {release_date!r}",
    )
    batch_capable = [kind for kind, cls in PROVIDERS.items() if cls.batch_api is not None]
    require(
        mode != "batch" or adapter.batch_api is not None,
        "screener.mode",
        f"batch mode needs provider {' or '.join(batch_capable)}, got {provider!r}",
    )
    require(
        max_cost_usd is None or float(max_cost_usd) > 0,
        "max_cost_usd",
        f"must be > 0 dollars or null (no cap), got {max_cost_usd!r}",
    )
    require(
        api_key_env is None or bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(api_key_env))),
        "screener.api_key_env",
        f"must be the NAME of an environment variable, got {api_key_env!r}",
    )
    adapter.check_settings(api_key_env=api_key_env, base_url=base_url, region=region)
    return adapter


def _check_generation(adapter: type[Provider], generation: Mapping[str, Any] | None) -> None:
    """Generation settings the provider's requests cannot carry (its `sampling_settings`) are refused,
    not dropped: an answer would otherwise be recorded with settings it was not asked with."""
    unsupported = sorted(
        ({"seed", "top_p"} - adapter.sampling_settings)
        & {k for k, v in dict(generation or {}).items() if v is not None}
    )
    require(
        not unsupported,
        "screener.generation",
        f"{' and '.join(unsupported)} cannot be sent to provider {adapter.kind} (OpenAI-style endpoints only)",
    )


def _self_hosted(
    name: str,
    route: str | None,
    routes: Mapping[str, Mapping[str, Any]],
    provider: str,
    api_key_env: str | None,
    batch_invariant: bool | None,
) -> bool:
    """Whether the route reaches a server the user runs (whose run records what it serves);
    `batch_invariant` says how such a server was started, so a hosted API refuses it."""
    hosted_by_user = is_self_hosted({**routes.get(route or "", {}), "provider": provider, "api_key_env": api_key_env})
    require(
        batch_invariant is None or hosted_by_user,
        "screener.batch_invariant",
        f"says how a self-hosted server was started (route=local); route {route} of {name} is a hosted API",
    )
    return hosted_by_user


def _logprob_generation(adapter: type[Provider], mode: str, generation: Mapping[str, Any] | None) -> dict[str, Any]:
    """The generation settings of `score_from=logprobs`: the request asks for the top log-probabilities
    of each answer token (`logprobs`, `top_logprobs` 20: part of the cache key, so text answers and
    probability scores are kept apart). Refused, in one line, where the provider returns none."""
    able = sorted(kind for kind, cls in PROVIDERS.items() if cls.gives_logprobs)
    require(
        adapter.gives_logprobs,
        "screener.score_from",
        f"logprobs needs a provider that returns log-probabilities ({', '.join(able)}, or screener=hf_local); "
        f"{adapter.kind} does not: use score_from=text",
    )
    require(mode == "online", "screener.score_from", "logprobs is read from online answers; set screener.mode=online")
    merged = dict(generation or {})
    merged["extra"] = {**dict(merged.get("extra") or {}), "logprobs": True, "top_logprobs": 20}
    return merged


def _quiet_http_logs() -> None:
    """SDK transports log one INFO line per HTTP request: WARNING unless the user set a level."""
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "botocore", "urllib3"):
        if logging.getLogger(noisy).level == logging.NOTSET:
            logging.getLogger(noisy).setLevel(logging.WARNING)


class LLMScreener(Screener):
    """Screens documents with one hosted model. Construction validates every setting and reads the
    API key from the environment (MissingSecretError naming the variable) before any work.
    `require_key=False` (dry runs) builds it without a key that is not set: it can `plan`, and
    `screen` then raises MissingSecretError instead of sending anything.

    Single settings follow `parameter_constraints` (checked by the builder before construction, and
    here); the rules that tie settings together are checked by `_adapter`, and what a provider cannot
    do without (a URL, a region, a key variable) by its adapter (`Provider.check_settings`)."""

    answers_rankings = True  # a chat model can rank the candidates of one prompt (design/ranking)
    parameter_constraints: ClassVar[Rules] = {
        "mode": Options(MODES),
        "expected_output_tokens": Interval(int, 1, None),
        "reasoning": Boolean(),
        "vision": Boolean(),
        "require_key": Boolean(),
        "batch_invariant": [None, Boolean()],
        "score_reply": Options(SCORE_REPLIES),
        "max_new_tokens": [None, Interval(int, 1, None)],
        "samples": Interval(int, 1, None),
        "score_from": Options(SCORE_FROM),
    }

    def __init__(
        self,
        name: str,
        provider: str,
        model: str,
        api_key_env: str | None = None,
        base_url: str | None = None,
        region: str | None = None,
        display_name: str | None = None,
        release_date: str | None = None,
        reasoning: bool = False,
        vision: bool = False,
        generation: Mapping[str, Any] | None = None,
        price: Mapping[str, Any] | None = None,
        prompts: Mapping[str, str] | None = None,
        engine: Mapping[str, Any] | None = None,
        cache_dir: str = ".popfair_cache",
        cache_url: str | None = None,
        max_cost_usd: float | None = None,
        mode: str = "online",
        batch: Mapping[str, Any] | None = None,
        expected_output_tokens: int = 4,
        require_key: bool = True,
        route: str | None = None,
        routes: Mapping[str, Mapping[str, Any]] | None = None,
        default_route: str | None = None,
        chosen_route: str | None = None,
        popfair_choices: Mapping[str, str] | None = None,
        batch_invariant: bool | None = None,
        prompts_dir: str | None = None,
        context: Sequence[str] | None = None,
        score_reply: str = "integer",
        max_new_tokens: int | None = None,
        samples: int = 1,
        score_from: str = "text",
    ) -> None:
        require(bool(name), "screener.name", "must be non-empty")
        routes = dict(routes or {})
        choice = _chosen_route(name, route, routes, default_route, chosen_route, require_key)
        route = choice.name if choice is not None else route
        generation = _route_generation(generation, routes.get(route, {}).get("generation") if route else None)
        validate(
            self.parameter_constraints,
            {
                "mode": mode,
                "expected_output_tokens": expected_output_tokens,
                "reasoning": reasoning,
                "vision": vision,
                "require_key": require_key,
                "batch_invariant": batch_invariant,
                "score_reply": score_reply,
                "max_new_tokens": max_new_tokens,
                "samples": samples,
                "score_from": score_from,
            },
        )
        if max_new_tokens is not None:  # prompts.max_new_tokens: one cap for every screener of a preset
            generation["max_tokens"] = int(max_new_tokens)
        adapter = _adapter(provider, model, api_key_env, base_url, region, release_date, mode, max_cost_usd)
        _check_generation(adapter, generation)
        if score_from == "logprobs":
            generation = _logprob_generation(adapter, mode, generation)
        self.samples, self.score_from = int(samples), score_from
        hosted_by_user = _self_hosted(name, route, routes, provider, api_key_env, batch_invariant)
        self.name, self.display_name = name, display_name or name
        self.route, self.routes = route, routes
        # MLflow tags of every run of this screener: the route called and why it was chosen
        self.run_tags = {"route": route, "route_reason": choice.reason} if choice is not None and route else {}
        self.popfair_choices = {str(k): str(v) for k, v in (popfair_choices or {}).items()}
        self.release_date, self.reasoning, self.vision = release_date, bool(reasoning), bool(vision)
        self.api_key_env, self.mode = api_key_env, mode
        self.max_cost_usd = None if max_cost_usd is None else float(max_cost_usd)
        self.expected_output_tokens = expected_output_tokens
        self.price = Price.from_config(price)
        self.settings = EngineSettings.from_config(engine)
        self.prompts = PromptSet(prompts, prompts_dir, context)
        self.score_reply = score_reply
        from popfair.screen.batch import BatchSettings

        self.batch_settings = BatchSettings.from_config(batch)
        install_log_redaction()
        _quiet_http_logs()
        api_key = self._read_key(adapter, api_key_env, region, require_key)
        self.provider = adapter(
            model=model,
            generation=Generation.from_config(generation),
            reasoning=self.reasoning,
            api_key=api_key,
            base_url=base_url,
            region=region,
            timeout_s=self.settings.timeout_s,
            concurrency=self.settings.concurrency,
        )
        self.cache = open_cache(cache_url or cache_dir)
        self.loop = RequestLoop(
            name,
            self.provider,
            self.cache,
            self.price,
            self.settings,
            self.provider.failure_hints(api_key_env, self.settings.timeout_s),
            parse=self.parse_answer,
            read_cached=self._cached_answers,
            batch=self.batch_settings if mode == "batch" else None,
            samples=self.samples,
            temperature=self.provider.generation.temperature,
            score_from=score_from,
        )
        self.run_tags = {**self.run_tags, **request_tags(self.provider)}  # what every request sends
        if hosted_by_user:
            hints = self.provider.failure_hints(None, self.settings.timeout_s)
            self.served = ServedModel(name, self.provider, batch_invariant, hints)
            self.run_tags["served.batch_invariant_requested"] = batch_invariant_tag(batch_invariant)

    def _read_key(
        self, adapter: type[Provider], api_key_env: str | None, region: str | None, require_key: bool
    ) -> str | None:
        """The API key from the environment (MissingSecretError naming the variable); a dry run
        (`require_key=False`) goes without one that is not set, and records that it did (`missing_key`).
        With no variable named, the provider's own credential chain must hold credentials."""
        keyed = bool(api_key_env) and (require_key or bool(os.environ.get(str(api_key_env))))
        api_key = read_secret(str(api_key_env), "screener.api_key_env") if keyed else None
        self.missing_key = bool(api_key_env) and api_key is None  # built keyless for a dry run
        if api_key_env is None and require_key:
            adapter.check_credentials(region)
        return api_key

    def __repr__(self) -> str:  # never shows the key
        return f"LLMScreener(name={self.name!r}, provider={self.provider.kind!r}, model={self.provider.model!r})"

    # --- shared preparation ---------------------------------------------------------------------
    def _keys(
        self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome
    ) -> tuple[list[str], Callable[[str], Any]]:
        """Cache key per document (built in bulk, no prompt objects), and a function giving the prompt
        of a key: only prompts missing from the cache are built (identical prompts: one call)."""
        require(f"{outcome}_user" in self.prompts.texts, "outcome", f"no prompt asks {outcome!r}")
        self._check_outcome(outcome)
        images = [d.image_png if d.kind == "image" else None for d in documents]
        self._check_vision(any(image is not None for image in images))
        missing_jobs = sorted({d.job_id for d in documents} - set(jobs))
        if missing_jobs:
            raise DataError(f"documents refer to jobs that do not exist: {missing_jobs[:5]}")
        system, users = self.prompts.system(outcome), self.prompts.users(outcome, jobs, documents)
        keys = self.provider.cache_keys(system, users, images)
        first: dict[str, int] = {}

        def prompt(key: str) -> ChatPrompt:
            if not first:
                for i, k in enumerate(keys):
                    first.setdefault(k, i)
            i = first[key]
            return ChatPrompt(system=system, user=users[i], image_png=images[i])

        return keys, prompt

    def _check_outcome(self, outcome: Outcome) -> None:
        """The ranking design reads one ranking per prompt, from its text."""
        require(
            outcome != "rank" or self.score_from == "text",
            "screener.score_from",
            "the ranking design reads rankings from the answer's text; set score_from=text",
        )
        require(
            outcome != "rank" or self.samples == 1,
            "screener.samples",
            "the ranking design reads one ranking per prompt; set samples=1",
        )

    def _check_vision(self, has_images: bool) -> None:
        if has_images and not self.vision:
            raise ConfigError(
                f"screener={self.name}: model {self.provider.model} is text-only "
                "(vision: false) but the renderer produced images; pick a VLM screener "
                "or a text renderer"
            )

    # --- Screener protocol ----------------------------------------------------------------------
    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Calls, tokens and dollars still to pay: distinct prompts not in the cache. Calls nothing.

        The distinct prompts of a document list are found once per process (`PromptTable`): the cases
        of a sweep share one list of documents and differ in the model. Keys are hashed, and looked up,
        only for the distinct prompts and only when the cache holds any answer of this model."""
        require(f"{outcome}_user" in self.prompts.texts, "outcome", f"no prompt asks {outcome!r}")
        self._check_outcome(outcome)
        table = PromptTable.of(self.prompts, outcome, jobs, documents)
        self._check_vision(table.has_images)
        system, k = self.prompts.system(outcome), self.samples
        missing = np.full(len(table.users), k, np.int64)  # answers still to ask, per distinct prompt
        # a self-hosted server that cannot say what it serves: every prompt counted as still to ask
        held = self.cache.holds(self.provider.kind, self.provider.model)
        if held and (self.served is None or self.served.try_identify()):
            keys = self.provider.cache_keys(system, table.users, table.images)
            every = keys if k == 1 else [sample_key(key, j) for key in keys for j in range(k)]
            cached = self.cache.get_replies(every)
            missing = (np.array([key not in cached for key in every], np.int64)).reshape(len(keys), k).sum(axis=1)
        # the pricing unit's input tokens of every distinct prompt, vectorised
        per_prompt = (
            np.ceil((len(system) + table.user_chars) / CHARS_PER_TOKEN).astype(np.int64) + MESSAGE_OVERHEAD_TOKENS
        )
        if table.has_images:
            per_prompt += [0 if png is None else self.provider.pricing.image_tokens(png) for png in table.images]
        # one request per prompt asks all its missing answers where the endpoint takes `n`
        requests = (missing > 0).astype(np.int64) if self.loop.asks_n else missing
        calls = int(requests.sum())
        input_tokens = int((per_prompt * requests).sum())
        per_reply = for_outcome(outcome).reply_tokens(table.users)  # a ranking's reply grows with k
        output_tokens = (
            self.expected_output_tokens * int(missing.sum())
            if per_reply is None
            else int((np.maximum(per_reply, self.expected_output_tokens) * missing).sum())
        )
        return CallPlan(
            calls=calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=self.price.cost(input_tokens, output_tokens, batch=self.mode == "batch"),
            cached=len(missing) * k - int(missing.sum()),
        )

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document, in order: parsed value, or a failure with the reason (and the raw
        text when the model answered something unparseable)."""
        if self.missing_key:
            raise MissingSecretError(
                f"screener.api_key_env: {self.name} was built without its key (dry run); "
                f"set environment variable {self.api_key_env} to screen"
            )
        if self.served is not None:  # answers are keyed by what the server serves: asked first
            self.run_tags = {**self.run_tags, **self.served.identify()}
            self.served.meter.start()  # its prefix-cache counters, read again after the requests
        keys, request = self._keys(jobs, documents, outcome)
        results = self.loop.run(documents, keys, request, outcome, budget_usd=self.max_cost_usd)
        if self.served is not None:
            self.served.meter.stop()
        flips = self.loop.last_stats.get("screen.flip_rate")
        if self.served is not None and flips is not None:  # beside served.batch_invariant_requested
            self.run_tags = {**self.run_tags, "served.flip_rate": f"{flips:.4f}"}
        return results

    served: ServedModel | None = None  # a self-hosted server (route=local): asked what it serves

    def answer_costs(self, plan: CallPlan) -> tuple[float, float] | None:
        """A prompt's first answer (its input tokens and one answer's output) and a further answer
        (output only where one request asks `n`; else a whole request), in dollars."""
        if plan.calls == 0:
            return None
        prompt_tokens = plan.input_tokens / plan.calls  # every request carries its prompt once
        first = self.price.cost(prompt_tokens, self.expected_output_tokens, batch=self.mode == "batch")
        more = self.price.cost(0, self.expected_output_tokens) if self.loop.asks_n else first
        return first, more

    def parse_answer(self, raw: str, outcome: Outcome) -> tuple[float | None, str | None]:
        """The model's reply as y (callback: first word yes/no; score: by `score_reply`)."""
        return parse_answer(raw, outcome, self.score_reply)

    def _cached_answers(self, replies: Mapping[str, StoredReply], outcome: Outcome) -> dict[str, Answer]:
        if outcome != "score" or self.score_from == "logprobs":  # probabilities: read as stored
            return Answer.from_replies(replies)
        answers = {}  # scores are parsed again: a reply cached under the other score_reply keeps no stale value
        for key, reply in replies.items():
            value, problem = self.parse_answer(reply.raw or "", outcome)
            answers[key] = Answer(reply.raw, value, problem, reply.input_tokens, reply.output_tokens, 0.0, True)
        return answers

    def metrics(self) -> dict[str, float]:
        """Figures of the last `screen` call (rows, cache hits, requests, failures, tokens, dollars; a
        self-hosted server's prefix-cache hit rate)."""
        return {**self.loop.metrics(), **(self.served.meter.metrics if self.served is not None else {})}

    def describe(self) -> dict[str, Any]:
        """Model card fields for reports (no secrets)."""
        return {
            "name": self.name,
            "display_name": self.display_name,
            "provider": self.provider.kind,
            "model": self.provider.model,
            "route": self.route,
            "release_date": self.release_date,
            "reasoning": self.reasoning,
            "vision": self.vision,
            "samples": self.samples,
            "score_from": self.score_from,
            "price": asdict(self.price),
        }
