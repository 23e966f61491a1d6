"""LLMScreener: a chat model behind a provider API (OpenAI, Anthropic, Bedrock, OpenAI-compatible)
screens each document: yes/no callback or a 0-100 score. Answers come from the response cache when
present; only what is missing is asked, online (engine.py) or as a provider batch (batch.py)."""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from popfair.core.constraints import Boolean, Interval, Options, validate
from popfair.core.errors import ConfigError, DataError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.design import for_outcome
from popfair.runtime.routes import AUTO, choose_route, no_credentials_message
from popfair.runtime.secrets import install_log_redaction, read_secret
from popfair.screen import collector
from popfair.screen.base import Screener
from popfair.screen.calls import Answer, Call, EngineSettings, EngineStats
from popfair.screen.engine import Engine
from popfair.screen.failures import FailureHints
from popfair.screen.parse import SCORE_REPLIES, parse_answer
from popfair.screen.pricing import CHARS_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS, Price, estimate_input_tokens, image_tokens
from popfair.screen.prompts import ChatPrompt, PromptSet, PromptTable
from popfair.screen.providers import PROVIDERS, Generation, make_provider
from popfair.store.responses import StoredReply, open_cache

log = logging.getLogger("popfair.screen")

MODES = ("online", "batch")

_DATE = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")


def _generation(config: Mapping[str, Any] | None) -> Generation:
    values = dict(config or {})
    allowed = {"temperature", "max_tokens", "reasoning_effort", "extra"}
    unknown = set(values) - allowed
    require(not unknown, "screener.generation", f"unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    gen = Generation(**values)
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
    require(isinstance(gen.extra, Mapping), "screener.generation.extra", "must be a mapping of body fields")
    return Generation(
        temperature=gen.temperature,
        max_tokens=gen.max_tokens,
        reasoning_effort=gen.reasoning_effort,
        extra=dict(gen.extra),
    )


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


def _check_aws_credentials(region: str | None) -> None:
    """Fail at construction when boto3 finds no AWS credentials (names the variables to set)."""
    import boto3

    if boto3.Session(region_name=region).get_credentials() is None:
        from popfair.core.errors import MissingSecretError

        raise MissingSecretError(
            "screener.api_key_env: no AWS credentials found for Bedrock. Set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK)."
        )


class LLMScreener(Screener):
    """Screens documents with one hosted model. Construction validates every setting and reads the
    API key from the environment (MissingSecretError naming the variable) before any work.
    `require_key=False` (dry runs) builds it without a key that is not set: it can `plan`, and
    `screen` then raises MissingSecretError instead of sending anything.

    Single settings follow `parameter_constraints` (checked by the builder before construction, and
    here); the rules that tie settings together (a provider's URL, region or key) are checked below."""

    answers_rankings = True  # a chat model can rank the candidates of one prompt (design/ranking)
    parameter_constraints = {
        "mode": Options(MODES),
        "expected_output_tokens": Interval(int, 1, None),
        "reasoning": Boolean(),
        "vision": Boolean(),
        "require_key": Boolean(),
        "score_reply": Options(SCORE_REPLIES),
        "max_new_tokens": [None, Interval(int, 1, None)],
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
        prompts_dir: str | None = None,
        score_reply: str = "integer",
        max_new_tokens: int | None = None,
    ) -> None:
        require(bool(name), "screener.name", "must be non-empty")
        routes = dict(routes or {})
        require(
            not routes or route == AUTO or route in routes,
            "screener.route",
            f"must be auto or one of screener.routes ({', '.join(routes)}), got {route!r}",
        )
        choice = choose_route(route, default_route, routes) if routes and route else None
        if choice is not None:
            require(
                chosen_route in (None, choice.name),
                "screener.chosen_route",
                f"is computed from screener.route; set screener.route={chosen_route} instead",
            )
            if route == AUTO and not choice.ready and require_key:
                from popfair.core.errors import MissingSecretError

                raise MissingSecretError(no_credentials_message(name, routes))
            route = choice.name
            log.info("screener %s: route %s (%s)", name, route, choice.reason)
        generation = _route_generation(generation, routes.get(route, {}).get("generation") if route else None)
        if max_new_tokens is not None:  # prompts.max_new_tokens: one cap for every screener of a preset
            generation["max_tokens"] = int(max_new_tokens)
        require(provider in PROVIDERS, "screener.provider", f"must be one of {', '.join(PROVIDERS)}, got {provider!r}")
        require(isinstance(model, str) and bool(model.strip()), "screener.model", "must be a model id")
        require(
            base_url is None or str(base_url).startswith(("http://", "https://")),
            "screener.base_url",
            f"must be an http(s) URL or null, got {base_url!r}",
        )
        require(
            provider != "openai_compatible" or base_url is not None,
            "screener.base_url",
            "is required for provider openai_compatible (the server's .../v1 URL)",
        )
        require(
            provider != "bedrock" or bool(region or base_url),
            "screener.region",
            "is required for provider bedrock (e.g. us-east-1)",
        )
        require(
            release_date is None or bool(_DATE.match(str(release_date))),
            "screener.release_date",
            f"must be YYYY-MM or YYYY-MM-DD, got {release_date!r}",
        )
        validate(
            self.parameter_constraints,
            {
                "mode": mode,
                "expected_output_tokens": expected_output_tokens,
                "reasoning": reasoning,
                "vision": vision,
                "require_key": require_key,
                "score_reply": score_reply,
                "max_new_tokens": max_new_tokens,
            },
        )
        batch_capable = [kind for kind, cls in PROVIDERS.items() if cls.batch_api is not None]
        require(
            mode != "batch" or provider in batch_capable,
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
        require(
            provider not in ("openai", "anthropic") or api_key_env is not None,
            "screener.api_key_env",
            f"provider {provider} needs the name of the environment variable holding the API key",
        )
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
        self.prompts = PromptSet(prompts, prompts_dir)
        self.score_reply = score_reply
        from popfair.screen.batch import BatchSettings

        self.batch_settings = BatchSettings.from_config(batch)
        install_log_redaction()
        for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "botocore", "urllib3"):
            if logging.getLogger(noisy).level == logging.NOTSET:  # one INFO line per HTTP request otherwise
                logging.getLogger(noisy).setLevel(logging.WARNING)
        keyed = bool(api_key_env) and (require_key or bool(os.environ.get(str(api_key_env))))
        api_key = read_secret(str(api_key_env), "screener.api_key_env") if keyed else None
        self.missing_key = bool(api_key_env) and api_key is None  # built keyless for a dry run
        if provider == "bedrock" and api_key_env is None and require_key:
            _check_aws_credentials(region)
        self.provider = make_provider(
            provider,
            model=model,
            generation=_generation(generation),
            reasoning=self.reasoning,
            api_key=api_key,
            base_url=base_url,
            region=region,
            timeout_s=self.settings.timeout_s,
            concurrency=self.settings.concurrency,
        )
        self.cache = open_cache(cache_url or cache_dir)
        self.last_stats: dict[str, float] = {}

    def __repr__(self) -> str:  # never shows the key
        return f"LLMScreener(name={self.name!r}, provider={self.provider.kind!r}, model={self.provider.model!r})"

    # --- shared preparation ---------------------------------------------------------------------
    def _keys(
        self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome
    ) -> tuple[list[str], Callable[[str], Any]]:
        """Cache key per document (built in bulk, no prompt objects), and a function giving the prompt
        of a key: only prompts missing from the cache are built (identical prompts: one call)."""
        require(f"{outcome}_user" in self.prompts.texts, "outcome", f"no prompt asks {outcome!r}")
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

    def _check_vision(self, has_images: bool) -> None:
        if has_images and not self.vision:
            raise ConfigError(
                f"screener={self.name}: model {self.provider.model} is text-only "
                "(vision: false) but the renderer produced images; pick a VLM screener "
                "or a text renderer"
            )

    def _todo(self, keys: list[str], request: Callable[[str], Any], cached: Mapping[str, Any]) -> list[Call]:
        """One Call per distinct request missing from the cache, with the number of rows sharing it."""
        return [
            Call(key, prompt := request(key), self._input_tokens(prompt), rows)
            for key, rows in Counter(keys).items()
            if key not in cached
        ]

    def _input_tokens(self, prompt: ChatPrompt) -> int:
        return estimate_input_tokens(prompt.system, prompt.user, prompt.image_png, self.provider.kind)

    # --- Screener protocol ----------------------------------------------------------------------
    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Calls, tokens and dollars still to pay: distinct prompts not in the cache. Calls nothing.

        The distinct prompts of a document list are found once per process (`PromptTable`): the cases
        of a sweep share one list of documents and differ in the model. Keys are hashed, and looked up,
        only for the distinct prompts and only when the cache holds any answer of this model."""
        require(f"{outcome}_user" in self.prompts.texts, "outcome", f"no prompt asks {outcome!r}")
        table = PromptTable.of(self.prompts, outcome, jobs, documents)
        self._check_vision(table.has_images)
        system = self.prompts.system(outcome)
        todo = np.ones(len(table.users), bool)
        if self.cache.holds(self.provider.kind, self.provider.model):
            keys = self.provider.cache_keys(system, table.users, table.images)
            cached = self.cache.get_replies(keys)
            todo = np.array([key not in cached for key in keys], bool)
        # estimate_input_tokens of every distinct prompt, vectorised
        per_prompt = (
            np.ceil((len(system) + table.user_chars) / CHARS_PER_TOKEN).astype(np.int64) + MESSAGE_OVERHEAD_TOKENS
        )
        if table.has_images:
            per_prompt += [0 if png is None else image_tokens(png, self.provider.kind) for png in table.images]
        calls = int(todo.sum())
        input_tokens = int(per_prompt[todo].sum())
        per_reply = for_outcome(outcome).reply_tokens(table.users)  # a ranking's reply grows with k
        output_tokens = (
            self.expected_output_tokens * calls
            if per_reply is None
            else int(np.maximum(per_reply, self.expected_output_tokens)[todo].sum())
        )
        return CallPlan(
            calls=calls,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost_usd=self.price.cost(input_tokens, output_tokens, batch=self.mode == "batch"),
            cached=len(todo) - calls,
        )

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document, in order: parsed value, or a failure with the reason (and the raw
        text when the model answered something unparseable)."""
        if self.missing_key:
            from popfair.core.errors import MissingSecretError

            raise MissingSecretError(
                f"screener.api_key_env: {self.name} was built without its key (dry run); "
                f"set environment variable {self.api_key_env} to screen"
            )
        keys, request = self._keys(jobs, documents, outcome)
        with collector.paused():  # tens of thousands of small tuples, no cycles: collections would only cost time
            answers = self._cached_answers(self.cache.get_replies(keys), outcome)
        stats = EngineStats()
        todo: list[Call] = []
        if len(answers) < len(keys):  # else fully cached: no claims, no engine
            todo = self._todo(keys, request, answers)
        if todo:
            cached_rows = len(documents) - sum(c.rows for c in todo)
            desc = f"screen {self.name}"
            key_hint = f"check {self.api_key_env}" if self.api_key_env else "check the credentials"
            if self.mode == "batch":
                from popfair.screen.batch import BatchRunner

                runner = BatchRunner(
                    self.batch_settings,
                    self.provider,
                    self.cache,
                    self.price,
                    outcome,
                    stats,
                    budget_usd=self.max_cost_usd,
                    engine=self.settings,
                    name=self.name,
                    hints=FailureHints(
                        self.config_keys["url_key"], self.config_keys["request_keys"], key_hint, self.settings.timeout_s
                    ),
                    score_reply=self.score_reply,
                )
                answers.update(runner.run(todo))
            else:
                engine = Engine(
                    self.settings,
                    self.provider,
                    self.cache,
                    self.price,
                    outcome,
                    budget_usd=self.max_cost_usd,
                    stats=stats,
                    key_hint=key_hint,
                    name=self.name,
                    **self.config_keys,
                    max_calls=self.max_calls,
                    parse=self.parse_answer,
                )
                answers.update(engine.run(todo, len(documents), cached_rows, desc))
        with collector.paused():
            results = _results(documents, keys, answers)
        self._summarise(results, stats, len(todo))
        return results

    # --- hooks a screener of another kind of endpoint replaces (screen/http_endpoint.py) --------
    max_calls: int | None = None  # requests one case may send; null = no cap
    # the settings that place and shape requests, named in the fix of a stop message
    config_keys = {"url_key": "screener.base_url", "request_keys": "screener.model and screener.generation"}

    def parse_answer(self, raw: str, outcome: Outcome) -> tuple[float | None, str | None]:
        """The model's reply as y (callback: first word yes/no; score: by `score_reply`)."""
        return parse_answer(raw, outcome, self.score_reply)

    def _cached_answers(self, replies: Mapping[str, StoredReply], outcome: Outcome) -> dict[str, Answer]:
        if outcome != "score":
            return Answer.from_replies(replies)
        answers = {}  # scores are parsed again: a reply cached under the other score_reply keeps no stale value
        for key, reply in replies.items():
            value, problem = self.parse_answer(reply.raw or "", outcome)
            answers[key] = Answer(reply.raw, value, problem, reply.input_tokens, reply.output_tokens, 0.0, True)
        return answers

    def _summarise(self, results: list[ScreenResult], stats: EngineStats, asked: int) -> None:
        n = len(results)
        failed = sum(r.error is not None for r in results)
        unparseable = sum(r.error is not None and r.raw is not None for r in results)
        from_cache = sum(r.cached for r in results)
        self.last_stats = {
            "screen.rows": n,
            "screen.rows_from_cache": from_cache,
            "screen.calls_needed": asked,
            "screen.failed_rows": failed,
            "screen.unparseable_rows": unparseable,
            "screen.failure_rate": failed / n if n else 0.0,
            **stats.as_metrics(),
        }
        log.info(
            "screen %s: %d rows, %d from cache, %d distinct prompts asked, %d requests, %d failed "
            "(%.2f%%; %d unparseable), %d tokens, $%.4f",
            self.name,
            n,
            from_cache,
            asked,
            stats.requests,
            failed,
            100 * failed / max(n, 1),
            unparseable,
            stats.input_tokens + stats.output_tokens,
            stats.cost_usd,
        )

    def metrics(self) -> dict[str, float]:
        """Figures of the last `screen` call (rows, cache hits, requests, failures, tokens, dollars)."""
        return dict(self.last_stats)

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
            "price": asdict(self.price),
        }


def _results(documents: Sequence[Document], keys: list[str], answers: Mapping[str, Answer]) -> list[ScreenResult]:
    """One result per document; documents with the same prompt share one answer, whose tokens and
    dollars are counted on the first of them only."""
    new = tuple.__new__  # ScreenResult is a named tuple: skip its Python-level constructor (60,000 rows)
    results: list[ScreenResult] = []
    append, charged = results.append, set()
    for document, key in zip(documents, keys):
        a = answers[key]
        if key in charged:  # a duplicate prompt: cached, nothing charged
            append(new(ScreenResult, (document.applicant_id, a.raw, a.value, a.error, 0, 0, 0.0, True)))
        else:
            charged.add(key)
            append(
                new(
                    ScreenResult,
                    (
                        document.applicant_id,
                        a.raw,
                        a.value,
                        a.error,
                        a.input_tokens,
                        a.output_tokens,
                        a.cost_usd,
                        a.cached,
                    ),
                )
            )
    return results
