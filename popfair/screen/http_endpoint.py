"""HttpScreener (`screener=http`): audit any scoring service behind an HTTP endpoint, such as a
vendor's automated employment decision tool, one request per document.

The request (URL query, JSON body) is built from a template with placeholders; the answer is read
from the JSON response by a JSONPath expression (or the whole body) and mapped to y by
`ValueMapping` (labels such as advance/reject, the tool's score range, a callback threshold).
Requests go through the same request loop as the LLM screeners (`RequestLoop`: the engine's
concurrency, rate limits, retries on 429/5xx/timeouts/malformed bodies honouring Retry-After, the
dollar budget, the progress bar) and the same response cache, keyed by method, URL, the templates, the literal headers and the filled
request. Cached raw bodies are re-read with the current mapping, so changing labels or the range
never asks the vendor again. Header values that are secrets come only from environment variables.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popfair.core.errors import ConfigError, DataError, MissingSecretError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.render.files import MEDIA_TYPES, document_binary, document_id
from popfair.runtime.secrets import install_log_redaction, read_secret
from popfair.screen.base import Screener
from popfair.screen.calls import Answer, EngineSettings, sample_key
from popfair.screen.failures import FailureHints
from popfair.screen.limits import run_coroutine
from popfair.screen.pricing import PER_CALL, Price
from popfair.screen.providers import (
    Completion,
    Generation,
    Provider,
    TransientError,
)
from popfair.screen.providers.base import classify_status, network_error
from popfair.screen.request_loop import RequestLoop
from popfair.screen.values import ValueMapping
from popfair.store.responses import StoredReply, open_cache

METHODS = ("GET", "POST", "PUT")
PLACEHOLDER_HELP = {
    "document_id": "opaque id derived from the document's content (never the applicant id)",
    "job_id": "the job's id",
    "job_title": "the job title",
    "job_description": "the job description",
    "document_text": "resume text (JSON documents: the JSON string; PDF: its text layer)",
    "document_json": "the JSON profile as an object (renderer=json; the whole string must be the placeholder)",
    "document_base64": "the PNG or PDF file, base64 (renderer=image, image_photo or pdf)",
    "document_media_type": "text/plain, application/json, image/png or application/pdf",
    "outcome": "score or callback (what the case asks)",
}
DEFAULT_BODY = {
    "document_id": "{document_id}",
    "job": {"id": "{job_id}", "title": "{job_title}", "description": "{job_description}"},
    "resume": {"text": "{document_text}", "media_type": "{document_media_type}"},
}
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _strings(template: Any):
    if isinstance(template, str):
        yield template
    elif isinstance(template, Mapping):
        for key, value in template.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(template, (list, tuple)):
        for value in template:
            yield from _strings(value)


def _fill(template: Any, values: Mapping[str, Any]) -> Any:
    """The template with placeholders replaced: a string that is exactly one placeholder becomes the
    typed value (an object for {document_json}); otherwise each placeholder is replaced literally."""
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole:
            return values[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
    if isinstance(template, Mapping):
        return {key: _fill(value, values) for key, value in template.items()}
    if isinstance(template, (list, tuple)):
        return [_fill(value, values) for value in template]
    return template


@dataclass(frozen=True)
class CallPrice(Price):
    """What one request costs the auditor (vendors bill per call, not per token)."""

    per_call_usd: float = 0.0

    def cost(self, input_tokens: float = 0, output_tokens: float = 0, batch: bool = False) -> float:
        return self.per_call_usd


class HttpEndpoint(Provider):
    """The engine's provider for one endpoint: `body` is the filled request, `send` posts it with aiohttp
    and returns the raw body. 429/5xx/connection errors and non-JSON bodies (when a path is read)
    are TransientError (retried); other 4xx are PermanentError (401/403 stop the run)."""

    kind = "http"
    sdk = "aiohttp"
    pricing = PER_CALL  # vendors bill per call (`CallPrice`), not per token
    hints = FailureHints("screener.url", "screener.url, screener.method, screener.body and screener.params")

    def __init__(
        self, url: str, headers: Mapping[str, str], expects_json: bool, timeout_s: float, concurrency: int
    ) -> None:
        super().__init__(
            model=url,
            generation=Generation(temperature=None, max_tokens=1),
            timeout_s=timeout_s,
            concurrency=concurrency,
        )
        self.url, self.headers, self.expects_json = url, dict(headers), expects_json

    @property
    def endpoint(self) -> str:
        return self.url

    def body(self, prompt: Any, image: Any) -> dict[str, Any]:
        return prompt

    def request_body(self, prompt: Any, n: int = 1) -> dict[str, Any]:
        return prompt  # HttpScreener already filled the template (no `n`: one answer per request)

    def probe(self, timeout_s: float) -> None:
        """HEAD on the scoring URL with its headers: any answer but 401/403/404 shows it is there (a
        POST-only endpoint may answer 405); nothing is scored."""
        import aiohttp

        async def head() -> None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
                try:
                    async with session.head(self.url, headers=self.headers) as response:
                        status = response.status
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    raise network_error(exc) from None
            if status in (401, 403, 404):
                raise classify_status(status, None, f"{status} to HEAD")

        run_coroutine(head)

    async def start(self) -> None:
        import aiohttp

        self._client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.concurrency), timeout=aiohttp.ClientTimeout(total=None)
        )  # the engine enforces screener.engine.timeout_s

    async def send(self, body: dict[str, Any]) -> Completion:
        import aiohttp

        try:
            async with self._client.request(
                body["method"], self.url, params=body.get("params") or None, json=body.get("json"), headers=self.headers
            ) as response:
                text = await response.text(errors="replace")
                status, headers = response.status, response.headers
        except aiohttp.ClientError as exc:
            raise network_error(exc) from None
        if status >= 300:
            raise classify_status(status, headers, text[:300])
        if self.expects_json:
            try:
                json.loads(text)
            except ValueError:
                raise TransientError(
                    f"malformed JSON body (HTTP {status}): {text[:300]!r}", cause="malformed response"
                ) from None
        return Completion(text=text, input_tokens=0, output_tokens=0)


def _request_template(url: Any, method: str, params: Any, body: Any) -> tuple[str, Any]:
    """The method (upper case) and body template, once URL, method, params and body are checked and
    every placeholder in them is known; a body-taking method without a body gets DEFAULT_BODY."""
    require(
        isinstance(url, str) and url.startswith(("http://", "https://")),
        "screener.url",
        f"must be an http(s) URL, got {url!r}",
    )
    method = str(method).upper()
    require(method in METHODS, "screener.method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    require(method != "GET" or body is None, "screener.body", "must be null for GET (use screener.params)")
    if body is None and method != "GET":
        body = DEFAULT_BODY
    require(params is None or isinstance(params, Mapping), "screener.params", "must be a mapping or null")
    for key, template in (("url", url), ("params", params), ("body", body)):
        for text in _strings(template):
            unknown = sorted(set(_PLACEHOLDER.findall(text)) - set(PLACEHOLDER_HELP))
            require(
                not unknown,
                f"screener.{key}",
                f"unknown placeholders {unknown} in {text!r}; "
                f"allowed: {', '.join('{' + p + '}' for p in PLACEHOLDER_HELP)}",
            )
    return method, body


def _response_expr(response_path: str | None) -> Any:
    """The compiled JSONPath of the answer in a response; None: the whole body is the answer."""
    if response_path is None:
        return None
    from jsonpath_ng.ext import parse as parse_path

    try:
        return parse_path(str(response_path))
    except Exception as exc:  # noqa: BLE001 - jsonpath-ng raises several types for bad syntax
        raise ConfigError(
            f"screener.response_path: {response_path!r} is not a JSONPath expression ({exc}); e.g. $.result.score"
        ) from None


def _with_secrets(
    literal: Mapping[str, str], secret_headers: Mapping[str, Any] | None, require_key: bool
) -> tuple[dict[str, str], list[str], bool]:
    """The headers sent (the literal ones plus each secret header read from its variable), the
    variables named, and whether a dry run (`require_key=False`) went without one that is not set."""
    resolved, variables, missing = dict(literal), [], False
    for header, spec in (secret_headers or {}).items():
        spec = {"env": spec} if isinstance(spec, str) else dict(spec or {})
        variable, prefix = spec.get("env"), str(spec.get("prefix", ""))
        require(
            set(spec) <= {"env", "prefix"} and isinstance(variable, str) and bool(_ENV_NAME.fullmatch(variable)),
            f"screener.secret_headers.{header}",
            f"must be the NAME of an environment variable, or {{env: NAME, prefix: 'Bearer '}}; got {spec!r}",
        )
        assert isinstance(variable, str)
        variables.append(variable)
        if require_key or os.environ.get(variable):
            resolved[str(header)] = prefix + read_secret(variable, f"screener.secret_headers.{header}")
        else:
            missing = True
    for header in resolved:
        require(bool(_HEADER_NAME.fullmatch(header)), "screener.headers", f"{header!r} is not a header name")
    return resolved, variables, missing


class HttpScreener(Screener):
    """Screens each document with one request to `url`. Its request loop (cache lookup, engine run,
    one result per document, metrics) is the one LLMScreener uses (`RequestLoop`); what is its own is
    how a request is built, keyed and priced, and how its answer is read."""

    audits_a_tool = True  # the run writes the auditor's report (popfair/report/audit.py)
    plans_real_documents = True  # dry runs plan the PNG pages themselves (keys and files need them)
    answers_rankings = False  # a vendor endpoint scores one document; it cannot rank a list (design/ranking)

    def __init__(
        self,
        url: str,
        name: str = "http",
        display_name: str | None = None,
        method: str = "POST",
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        secret_headers: Mapping[str, Any] | None = None,
        response_path: str | None = "$.score",
        values: Mapping[str, Any] | None = None,
        price_per_call_usd: float = 0.0,
        max_calls: int | None = None,
        engine: Mapping[str, Any] | None = None,
        cache_dir: str = ".popfair_cache",
        cache_url: str | None = None,
        max_cost_usd: float | None = None,
        require_key: bool = True,
        samples: int = 1,
    ) -> None:
        require(bool(name), "screener.name", "must be non-empty")
        require(
            isinstance(samples, int) and not isinstance(samples, bool) and samples >= 1,
            "screener.samples",
            f"must be an integer >= 1 (answers per document), got {samples!r}",
        )
        method, body = _request_template(url, method, params, body)
        self.samples = samples
        require(
            price_per_call_usd is not None and float(price_per_call_usd) >= 0,
            "screener.price_per_call_usd",
            f"must be >= 0, got {price_per_call_usd!r}",
        )
        require(
            max_calls is None or (isinstance(max_calls, int) and max_calls >= 1),
            "screener.max_calls",
            f"must be an integer >= 1 or null (no cap), got {max_calls!r}",
        )
        require(
            max_cost_usd is None or float(max_cost_usd) > 0,
            "max_cost_usd",
            f"must be > 0 dollars or null (no cap), got {max_cost_usd!r}",
        )
        self.response_expr = _response_expr(response_path)
        self.name, self.display_name = name, display_name or name
        self.url, self.method, self.response_path = url, method, response_path
        self.params_template = dict(params or {})
        self.body_template = body
        self.placeholders = {p for key in (url, params, body) for t in _strings(key) for p in _PLACEHOLDER.findall(t)}
        self.values = ValueMapping.from_config(values, "screener.values")
        self.max_calls, self.mode = max_calls, "online"
        self.max_cost_usd = None if max_cost_usd is None else float(max_cost_usd)
        self.call_price = CallPrice(per_call_usd=float(price_per_call_usd))
        self.price = self.call_price
        self.settings = EngineSettings.from_config(engine)
        install_log_redaction()
        literal = {str(k): str(v) for k, v in (headers or {}).items()}
        resolved, self.secret_variables, self.missing_key = _with_secrets(literal, secret_headers, require_key)
        self.api_key_env = ", ".join(self.secret_variables) or None
        # what identifies the endpoint's answers: secret values are left out (they must not enter a
        # key that is stored), their header names are in
        self.identity = json.dumps(
            {
                "kind": "http",
                "method": method,
                "url": url,
                "params": self.params_template,
                "body": body,
                "headers": literal,
                "secret_headers": sorted(secret_headers or {}),
            },
            sort_keys=True,
            separators=(",", ":"),
            default=str,
        )
        self.provider = HttpEndpoint(
            url,
            resolved,
            expects_json=self.response_expr is not None,
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
            self.provider.failure_hints(self.api_key_env, self.settings.timeout_s),
            parse=self.parse_answer,
            read_cached=self._cached_answers,
            samples=samples,
        )

    def __repr__(self) -> str:  # never shows header values
        return f"HttpScreener(name={self.name!r}, method={self.method!r}, url={self.url!r})"

    # --- requests and keys ----------------------------------------------------------------------
    def _values(self, job: Job, document: Document, identifier: str, outcome: Outcome) -> dict[str, Any]:
        values: dict[str, Any] = {
            "document_id": identifier,
            "job_id": job.job_id,
            "job_title": job.title,
            "job_description": job.description,
            "document_text": document.text,
            "document_media_type": MEDIA_TYPES[document.kind][1],
            "outcome": outcome,
        }
        if "document_base64" in self.placeholders:
            binary = document_binary(document)
            if binary is None:
                raise ConfigError(
                    f"screener.body: {{document_base64}} needs a file document (renderer=image, "
                    f"image_photo or pdf); renderer gave {document.kind} documents"
                )
            values["document_base64"] = base64.b64encode(binary).decode("ascii")
        if "document_json" in self.placeholders:
            if document.kind != "json":
                raise ConfigError(
                    f"screener.body: {{document_json}} needs renderer=json; renderer gave {document.kind} documents"
                )
            values["document_json"] = json.loads(document.text)
        return values

    def _keys(
        self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome
    ) -> tuple[list[str], Callable[[str], Any]]:
        """Cache key per document and the filled request of each distinct key."""
        require(outcome in ("score", "callback"), "outcome", f"must be score or callback, got {outcome!r}")
        missing_jobs = sorted({d.job_id for d in documents} - set(jobs))
        if missing_jobs:
            raise DataError(f"documents refer to jobs that do not exist: {missing_jobs[:5]}")
        keys: list[str] = []
        requests: dict[str, Any] = {}
        identity = self.identity.encode()
        key_of: dict[str, str] = {}  # document id -> key: identical documents make identical requests
        for document in documents:
            identifier = document_id(document)
            known = key_of.get(identifier)
            if known is not None:
                keys.append(known)
                continue
            values = self._values(jobs[document.job_id], document, identifier, outcome)
            request = {
                "method": self.method,
                "params": _fill(self.params_template, values),
                "json": _fill(self.body_template, values),
            }
            filled = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str).encode()
            digest = hashlib.sha256(identity)
            for part in (identifier.encode(), filled):  # the document itself, and the request
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
            key = key_of[identifier] = digest.hexdigest()
            keys.append(key)
            requests.setdefault(key, request)
        return keys, requests.__getitem__

    # --- answers --------------------------------------------------------------------------------
    def parse_answer(self, raw: str, outcome: Outcome) -> tuple[float | None, str | None]:
        """The value at `response_path` (or the whole body), through the value mapping."""
        if self.response_expr is None:
            answer: Any = raw
        else:
            try:
                parsed = json.loads(raw)
            except ValueError:
                return None, f"unparseable answer: the response is not JSON: {raw[:200]!r}"
            matches = [m.value for m in self.response_expr.find(parsed)]
            if len(matches) != 1:
                found = "nothing" if not matches else f"{len(matches)} values"
                return None, f"unparseable answer: {found} at {self.response_path} in {raw[:200]!r}"
            answer = matches[0]
        value, problem = self.values.parse(answer, outcome)
        return (value, None) if problem is None else (None, f"unparseable answer: {problem}")

    def _cached_answers(self, replies: Mapping[str, StoredReply], outcome: Outcome) -> dict[str, Answer]:
        answers = {}
        for key, reply in replies.items():
            value, problem = self.parse_answer(reply.raw, outcome)  # the mapping may have changed
            answers[key] = Answer(raw=reply.raw, value=value, error=problem, cached=True)
        return answers

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        """Requests still to send (distinct requests not in the cache, capped by max_calls) and dollars."""
        keys, request = self._keys(jobs, documents, outcome)
        k = self.loop.samples
        every = keys if k == 1 else [sample_key(key, j) for key in dict.fromkeys(keys) for j in range(k)]
        replies = self.cache.get_replies(every)
        todo = self.loop.todo(keys, request, replies) if k == 1 else self.loop.sample_todo(keys, request, replies)
        calls = len(todo) if self.max_calls is None else min(len(todo), self.max_calls)
        return CallPlan(calls=calls, cost_usd=calls * self.call_price.per_call_usd, cached=len(set(replies)))

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """One result per document, in order: the mapped value, or a failure with the reason (and the
        raw body when the endpoint answered something the mapping cannot read)."""
        if self.missing_key:
            raise MissingSecretError(
                f"screener.secret_headers: {self.name} was built without its secrets (dry "
                f"run); set environment variable(s) {self.api_key_env} to screen"
            )
        keys, request = self._keys(jobs, documents, outcome)
        return self.loop.run(documents, keys, request, outcome, self.max_cost_usd, self.max_calls)

    def answer_costs(self, plan: CallPlan) -> tuple[float, float] | None:
        """Every answer is its own request: a further answer costs what a new prompt does."""
        return (self.call_price.per_call_usd, self.call_price.per_call_usd)

    def metrics(self) -> dict[str, float]:
        """Figures of the last `screen` call (rows, cache hits, requests, failures, dollars)."""
        return self.loop.metrics()

    def describe(self) -> dict[str, Any]:
        """What the report names as the audited tool (no header values)."""
        return {
            "name": self.name,
            "display_name": self.display_name,
            "kind": "http endpoint",
            "method": self.method,
            "url": self.url,
            "response_path": self.response_path,
            "labels": dict(self.values.labels),
            "range": list(self.values.range),
            "callback_threshold": self.values.callback_threshold,
            "price_per_call_usd": self.call_price.per_call_usd,
        }
