"""A local HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions, Anthropic messages and
Bedrock converse wire formats (plus OpenAI batches/files and Anthropic message batches), answers
deterministically from the prompt, and injects faults: 429 with Retry-After, 500, hangs past the
client timeout, malformed bodies. Tests and benchmarks drive the real SDKs against it.

Run standalone (benchmarks): python -m tests.llm_stub --latency 0.05  -> prints the port."""

from __future__ import annotations

import argparse
import base64
import email.parser
import hashlib
import json
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def prompt_text(system: str, user: str) -> str:
    return f"{system}\n---\n{user}"


def unit(*parts: object) -> float:
    """Deterministic number in [0, 1) from the parts."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:12], 16) / 16**12


def expected_answer(system: str, user: str, garbage_rate: float = 0.0, yes_share=None) -> str:
    """What the stub model answers for this prompt (tests compare parsed values against it).
    `yes_share(user)`: the callback "yes" probability of a prompt (default 0.5): a biased model."""
    text = prompt_text(system, user)
    if unit("garbage", text) < garbage_rate:
        return "I cannot decide."
    if "callback" in system:
        return "yes" if unit("answer", text) < (0.5 if yes_share is None else yes_share(user)) else "no"
    if "Rank all candidates" in system:
        return ranking_answer(text, stub_ranking(user))
    return str(int(unit("answer", text) * 101))


def yes_probability(system: str, user: str, yes_share=None) -> float:
    """The stub model's P(yes) for a callback prompt: what its log-probabilities say and what its
    answers at temperature > 0 are drawn from. With `yes_share` that function of the prompt; else a
    number of the prompt in [0.1, 0.9]."""
    if yes_share is not None:
        return float(yes_share(user))
    return 0.1 + 0.8 * unit("p_yes", prompt_text(system, user))


def drawn_answer(system: str, user: str, rng, yes_share=None, score_sd: float = 10.0) -> str:
    """A fresh answer (temperature > 0, or an unstable prompt at temperature 0): yes with the prompt's
    P(yes); a score drawn around the prompt's own score."""
    if "callback" in system:
        return "yes" if rng.random() < yes_probability(system, user, yes_share) else "no"
    centre = int(unit("answer", prompt_text(system, user)) * 101)
    return str(min(100, max(0, round(rng.gauss(centre, score_sd)))))


YES_TOKENS = (("yes", "no"), (" Yes", " No"), ("Yes", "No"), (" yes", " no"))


def first_token_logprobs(system: str, user: str, answer: str, yes_share=None) -> dict:
    """The `logprobs` of a choice: its first token, with 20 alternatives. Callback: yes/no spellings
    (the prompt picks one, e.g. " Yes") carry 0.9 of the mass in the ratio P(yes) : P(no), other
    words the rest; score: the prompt's score and its neighbours +-10 (probabilities .25/.5/.25) and
    a word, so the expected score is the prompt's own."""
    text = prompt_text(system, user)
    if "callback" in system:
        p = yes_probability(system, user, yes_share)
        yes, no = YES_TOKENS[int(unit("spelling", text) * len(YES_TOKENS))]
        top = [(yes, 0.9 * p), (no, 0.9 * (1 - p)), ("I", 0.06), ("The", 0.04)]
    else:
        centre = int(unit("answer", text) * 101)
        top = [(str(centre), 0.45), (str(centre - 10), 0.225), (str(centre + 10), 0.225), ("Score", 0.1)]
        if not 10 <= centre <= 90:  # near the ends of the scale: the prompt's score alone
            top = [(str(centre), 0.9), ("Score", 0.1)]
    top += [(f"tok{i}", 1e-9) for i in range(20 - len(top))]
    import math

    alternatives = [{"token": t, "logprob": math.log(max(q, 1e-300)), "bytes": None} for t, q in top]
    # the token the answer starts with, as one of the alternatives (the prompt's spelling of yes or no)
    chosen = alternatives[1] if "callback" in system and answer.strip().lower().startswith("no") else alternatives[0]
    return {"content": [{**chosen, "top_logprobs": alternatives}]}


def stub_ranking(user: str) -> list[str]:
    """The candidates of a ranking prompt (the name heading each resume), in the stub's order: a
    deterministic shuffle of the prompt."""
    names = re.findall(r"=== Candidate \d+ ===\n(.+)", user)
    return sorted(names, key=lambda name: unit("rank", user, name))


RANKING_STYLES = (
    lambda names: "\n".join(f"{i}. {n}" for i, n in enumerate(names, 1)),
    lambda names: "Here is my ranking:\n" + "\n".join(f"{i}) {n.upper()} - solid fit" for i, n in enumerate(names, 1)),
    lambda names: json.dumps({"ranking": names}),
    lambda names: "\n".join(f"- **{n}**: relevant experience" for n in names),
)


def ranking_answer(text: str, names: list[str]) -> str:
    """The stub's reply to a ranking prompt, in one of several formats (decided by the prompt)."""
    return RANKING_STYLES[int(unit("style", text) * len(RANKING_STYLES))](names)


@dataclass
class Faults:
    """Per-attempt fault probabilities (decided deterministically from prompt and attempt number)."""

    rate_limit: float = 0.0
    server_error: float = 0.0
    timeout: float = 0.0
    malformed: float = 0.0
    always_fail: float = 0.0  # share of prompts that get HTTP 500 on every attempt
    retry_after: str = "0.01"
    hang_s: float = 1.0

    @property
    def total(self) -> float:
        return self.rate_limit + self.server_error + self.timeout + self.malformed


@dataclass
class StubState:
    latency_s: float = 0.0
    faults: Faults = field(default_factory=Faults)
    garbage_rate: float = 0.0
    hold_after: int | None = None  # after this many answers, hold requests until release()
    answer_held: bool = False  # released held requests get their answer (else a 503)
    batch_polls: int = 1  # status checks a batch reports "in progress" before it is done
    answered: Counter = field(default_factory=Counter)  # prompt -> successful answers sent
    attempts: Counter = field(default_factory=Counter)  # prompt -> requests received
    fault_counts: Counter = field(default_factory=Counter)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)
    files: dict = field(default_factory=dict)
    batches: dict = field(default_factory=dict)
    held: int = 0
    granted: int = 0  # requests let through (for hold_after)
    reject_auth: bool = False  # answer 401 to everything (a revoked key)
    batch_faults: list = field(default_factory=list)  # HTTP statuses for the next batch API requests, in order
    models: tuple = ("stub-model",)  # what GET /v1/models lists
    model_fields: dict = field(default_factory=dict)  # further fields of each listed model (vLLM: root, owned_by ...)
    version: str | None = None  # what GET /version reports (vLLM's engine version); None: no such endpoint
    model_requests: int = 0  # GET /v1/models and /version requests received
    down_after: int | None = None  # after this many answers, drop every connection unanswered (an outage)
    images: list = field(default_factory=list)  # (format, png bytes) of every image part received
    yes_share: object = None  # callable user -> P(callback "yes"), e.g. higher for some names (a biased model)
    metrics: object = None  # callable state -> Prometheus text served at GET /metrics (None: no such endpoint)
    prompts: list = field(default_factory=list)  # every chat prompt received, in order (system, user)
    unstable_share: float = 0.0  # share of prompts answered afresh each time even at temperature 0
    score_sd: float = 10.0  # sd of a drawn 0-100 score around the prompt's own
    choices: Counter = field(default_factory=Counter)  # prompt -> answers generated (n per request counted)
    n_requested: list = field(default_factory=list)  # the `n` of every chat request (1 when absent)
    rng: object = None  # random.Random of the fresh draws (seeded per server)
    ignore_n: bool = False  # answer one choice whatever `n` asks (as some OpenAI-compatible gateways do)


def _user_text(content) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def extract_images(path: str, body: dict) -> list[tuple[str, bytes]]:
    """Image parts of a request in each provider's format, decoded back to PNG bytes."""
    found = []
    for part in body.get("messages", [])[-1].get("content", []) if body.get("messages") else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "image_url":
            url = part["image_url"]["url"]
            found.append(("openai", base64.b64decode(url.split("base64,", 1)[1])))
        elif part.get("type") == "image" and part.get("source", {}).get("type") == "base64":
            found.append(("anthropic", base64.b64decode(part["source"]["data"])))
        elif "image" in part and isinstance(part["image"], dict):
            found.append(("bedrock:" + part["image"]["format"], base64.b64decode(part["image"]["source"]["bytes"])))
    return found


def extract_prompt(path: str, body: dict) -> tuple[str, str]:
    """(system, user text) from any of the three request formats."""
    if path.endswith("/converse"):
        system = "".join(s.get("text", "") for s in body.get("system", []))
        return system, "".join(c.get("text", "") for c in body["messages"][-1]["content"])
    if "system" in body and "messages" in body and not path.endswith("chat/completions"):
        system = body["system"] if isinstance(body["system"], str) else _user_text(body["system"])
        return system, _user_text(body["messages"][-1]["content"])
    messages = body["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    return system, _user_text(messages[-1]["content"])


def openai_reply(text: str, model: str, tokens_in: int, more: tuple = (), logprobs: list | None = None) -> dict:
    """A chat completion with one choice per text (`text`, then `more`: a request's `n`), each with
    its `logprobs` where given; one output token per choice."""
    texts = (text, *more)
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": i,
                "finish_reason": "stop",
                "logprobs": logprobs[i] if logprobs else None,
                "message": {"role": "assistant", "content": t, "refusal": None},
            }
            for i, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": tokens_in, "completion_tokens": len(texts), "total_tokens": tokens_in + len(texts)},
    }


def anthropic_reply(text: str, model: str, tokens_in: int) -> dict:
    return {
        "id": "msg_stub",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens_in, "output_tokens": 1},
    }


def bedrock_reply(text: str, tokens_in: int) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": tokens_in, "outputTokens": 1, "totalTokens": tokens_in + 1},
        "metrics": {"latencyMs": 1},
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without TCP_NODELAY, Nagle + the client's delayed ACK
    # add ~40 ms to every answer (halving measured throughput at 50 ms latency).
    disable_nagle_algorithm = True
    state: StubState

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(
        self,
        status: int,
        payload: bytes | dict | str,
        headers: dict | None = None,
        content_type: str = "application/json",
    ) -> None:
        data = (
            payload
            if isinstance(payload, bytes)
            else (payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        )
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    # --- routing --------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if self.state.reject_auth and "/models" in path:  # a revoked key is refused its model listing too
            return self._send(
                401, {"error": {"type": "authentication_error", "message": "invalid key"}, "message": "invalid key"}
            )
        if path in ("/v1/models", "/models", "/version"):
            with self.state.lock:
                self.state.model_requests += 1
        if path in ("/v1/models", "/models"):  # the model listing (pre-flight probes, served-model records)
            listed = [{"id": m, "object": "model", **self.state.model_fields} for m in self.state.models]
            return self._send(200, {"object": "list", "data": listed})
        if path == "/version" and self.state.version is not None:  # vLLM's engine version
            return self._send(200, {"version": self.state.version})
        if path == "/metrics" and callable(self.state.metrics):  # an engine's Prometheus metrics
            with self.state.lock:
                text = self.state.metrics(self.state)
            return self._send(200, text, content_type="text/plain; version=0.0.4; charset=utf-8")
        if m := re.fullmatch(r"/v1/models/([\w.:-]+)", path):
            if m.group(1) in self.state.models:
                return self._send(200, {"type": "model", "id": m.group(1), "display_name": m.group(1)})
            return self._send(
                404, {"type": "error", "error": {"type": "not_found_error", "message": "model not found"}}
            )
        if path.startswith(("/v1/files", "/v1/batches", "/v1/messages/batches")) and self._batch_fault():
            return None
        if m := re.fullmatch(r"/v1/files/([\w-]+)/content", path):
            return self._send(200, self.state.files[m.group(1)], content_type="application/octet-stream")
        if m := re.fullmatch(r"/v1/batches/([\w-]+)", path):
            return self._send(200, self._openai_batch_status(m.group(1)))
        if m := re.fullmatch(r"/v1/messages/batches/([\w-]+)/results", path):
            return self._send(200, self.state.files[m.group(1)], content_type="application/binary")
        if m := re.fullmatch(r"/v1/messages/batches/([\w-]+)", path):
            return self._send(200, self._anthropic_batch_status(m.group(1)))
        self._send(404, {"error": {"message": f"no route {path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        raw = self._body()
        if path in ("/v1/files", "/v1/batches", "/v1/messages/batches") and self._batch_fault():
            return None
        if path == "/v1/files":
            return self._openai_file(raw)
        if path == "/v1/batches":
            return self._openai_batch_create(json.loads(raw))
        if path == "/v1/messages/batches":
            return self._anthropic_batch_create(json.loads(raw))
        if path.endswith(("/chat/completions", "/messages", "/converse")):
            return self._chat(path, raw)
        self._send(404, {"error": {"message": f"no route {path}"}})

    def _batch_fault(self) -> bool:
        """Answer a batch API request with the next injected status (or 401 for a revoked key)."""
        st = self.state
        with st.lock:
            status = st.batch_faults.pop(0) if st.batch_faults else (401 if st.reject_auth else None)
        if status is None:
            return False
        message = "invalid key" if status == 401 else f"injected HTTP {status}"
        self._send(status, {"type": "error", "error": {"type": "api_error", "message": message}, "message": message})
        return True

    # --- online chat ----------------------------------------------------------------------------
    def _chat(self, path: str, raw: bytes) -> None:
        st = self.state
        body = json.loads(raw)
        system, user = extract_prompt(path, body)
        prompt = prompt_text(system, user)
        if st.down_after is not None and sum(st.answered.values()) >= st.down_after:
            self.close_connection = True  # the client sees the server disconnect: a transport failure
            return
        with st.lock:
            st.requests += 1
            st.attempts[prompt] += 1
            st.prompts.append((system, user))
            st.images.extend(extract_images(path, body))
            attempt = st.attempts[prompt]
            # grant answers at arrival, so that exactly hold_after requests are ever answered
            hold = st.hold_after is not None and st.granted >= st.hold_after
            if hold:
                st.held += 1
            else:
                st.granted += 1
        if hold:
            st.released.wait()
            if not st.answer_held:
                return self._send(503, {"error": {"message": "held then released"}})
        if st.reject_auth:
            return self._send(
                401, {"error": {"type": "authentication_error", "message": "invalid key"}, "message": "invalid key"}
            )
        if st.latency_s:
            time.sleep(st.latency_s)
        f = st.faults
        draw = unit("fault", prompt, attempt)
        kind = None
        if unit("poison", prompt) < f.always_fail:
            kind = "server_error"
        elif draw < f.rate_limit:
            kind = "rate_limit"
        elif draw < f.rate_limit + f.server_error:
            kind = "server_error"
        elif draw < f.rate_limit + f.server_error + f.timeout:
            kind = "timeout"
        elif draw < f.total:
            kind = "malformed"
        if kind is not None:
            with st.lock:
                st.fault_counts[kind] += 1
        bedrock = path.endswith("/converse")
        if kind == "rate_limit":
            headers = {"Retry-After": f.retry_after}
            if bedrock:
                headers["x-amzn-ErrorType"] = "ThrottlingException"
            return self._send(
                429, {"error": {"type": "rate_limit_error", "message": "slow down"}, "message": "slow down"}, headers
            )
        if kind == "server_error":
            headers = {"x-amzn-ErrorType": "InternalServerException"} if bedrock else {}
            return self._send(500, {"error": {"type": "api_error", "message": "boom"}, "message": "boom"}, headers)
        if kind == "timeout":
            time.sleep(f.hang_s)
            return self._send(504, {"error": {"message": "too late"}, "message": "too late"})
        if kind == "malformed":
            return self._send(200, '{"id": "x", "choices": [{"message": {"con')
        openai_style = not bedrock and not path.endswith("/messages")
        n = int(body.get("n") or 1) if openai_style and not st.ignore_n else 1
        # a temperature above 0 draws afresh (absent: the stub answers as at 0, as the tests have always had it)
        temperature = body.get("temperature", (body.get("inferenceConfig") or {}).get("temperature"))
        fresh = float(temperature or 0) > 0 or unit("unstable", prompt) < st.unstable_share
        with st.lock:
            answers = [
                drawn_answer(system, user, st.rng, st.yes_share, st.score_sd)
                if fresh and unit("garbage", prompt) >= st.garbage_rate and "Rank all candidates" not in system
                else expected_answer(system, user, st.garbage_rate, st.yes_share)
                for _ in range(n)
            ]
        answer = answers[0]
        tokens_in = max(1, len(prompt) // 4)
        model = body.get("model", "stub")
        if bedrock:
            reply = bedrock_reply(answer, tokens_in)
        elif path.endswith("/messages"):
            reply = anthropic_reply(answer, model, tokens_in)
        else:
            logprobs = (
                [first_token_logprobs(system, user, a, st.yes_share) for a in answers] if body.get("logprobs") else None
            )
            reply = openai_reply(answer, model, tokens_in, tuple(answers[1:]), logprobs)
        with st.lock:
            st.answered[prompt] += 1
            st.choices[prompt] += n
            st.n_requested.append(n)
        self._send(200, reply)

    # --- OpenAI batches -------------------------------------------------------------------------
    def _openai_file(self, raw: bytes) -> None:
        message = email.parser.BytesParser().parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + raw
        )
        content = next(
            part.get_payload(decode=True)
            for part in message.get_payload()
            if part.get_param("name", header="content-disposition") == "file"
        )
        with self.state.lock:
            file_id = f"file-{len(self.state.files)}"
            self.state.files[file_id] = content
        self._send(
            200,
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "created_at": 0,
                "filename": "batch.jsonl",
                "purpose": "batch",
                "status": "processed",
            },
        )

    def _answer_line(self, system: str, user: str, model: str) -> tuple[str, dict | None]:
        prompt = prompt_text(system, user)
        st = self.state
        with st.lock:
            st.requests += 1
            st.attempts[prompt] += 1
            if unit("poison", prompt) < st.faults.always_fail:
                return prompt, None
            st.answered[prompt] += 1
        return prompt, {
            "text": expected_answer(system, user, st.garbage_rate, st.yes_share),
            "tokens_in": max(1, len(prompt) // 4),
            "model": model,
        }

    def _openai_batch_create(self, request: dict) -> None:
        st = self.state
        out, errors = [], []
        for line in st.files[request["input_file_id"]].decode().splitlines():
            entry = json.loads(line)
            system, user = extract_prompt("/chat/completions", entry["body"])
            _, answer = self._answer_line(system, user, entry["body"]["model"])
            if answer is None:
                errors.append(
                    {
                        "id": "r",
                        "custom_id": entry["custom_id"],
                        "response": None,
                        "error": {"code": "server_error", "message": "boom"},
                    }
                )
            else:
                out.append(
                    {
                        "id": "r",
                        "custom_id": entry["custom_id"],
                        "error": None,
                        "response": {
                            "status_code": 200,
                            "request_id": "q",
                            "body": openai_reply(answer["text"], answer["model"], answer["tokens_in"]),
                        },
                    }
                )
        with st.lock:
            batch_id = f"batch-{len(st.batches)}"
            out_id, err_id = f"file-out-{batch_id}", f"file-err-{batch_id}"
            st.files[out_id] = "\n".join(map(json.dumps, out)).encode()
            st.files[err_id] = "\n".join(map(json.dumps, errors)).encode()
            st.batches[batch_id] = {
                "polls": 0,
                "output": out_id,
                "errors": err_id if errors else None,
                "input": request["input_file_id"],
                "n": len(out) + len(errors),
            }
        self._send(200, self._openai_batch_status(batch_id, poll=False))

    def _openai_batch_status(self, batch_id: str, poll: bool = True) -> dict:
        batch = self.state.batches[batch_id]
        if poll:
            batch["polls"] += 1
        done = batch["polls"] > self.state.batch_polls
        return {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "input_file_id": batch["input"],
            "completion_window": "24h",
            "created_at": 0,
            "status": "completed" if done else "in_progress",
            "output_file_id": batch["output"] if done else None,
            "error_file_id": batch["errors"] if done else None,
            "request_counts": {"total": batch["n"], "completed": batch["n"] if done else 0, "failed": 0},
        }

    # --- Anthropic message batches --------------------------------------------------------------
    def _anthropic_batch_create(self, request: dict) -> None:
        st = self.state
        lines = []
        for item in request["requests"]:
            params = item["params"]
            system, user = extract_prompt("/messages", params)
            _, answer = self._answer_line(system, user, params["model"])
            if answer is None:
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": {"type": "api_error", "message": "boom"}},
                }
            else:
                result = {
                    "type": "succeeded",
                    "message": anthropic_reply(answer["text"], answer["model"], answer["tokens_in"]),
                }
            lines.append({"custom_id": item["custom_id"], "result": result})
        with st.lock:
            batch_id = f"msgbatch_{len(st.batches)}"
            st.files[batch_id] = "\n".join(map(json.dumps, lines)).encode()
            st.batches[batch_id] = {"polls": 0, "n": len(lines)}
        self._send(200, self._anthropic_batch_status(batch_id, poll=False))

    def _anthropic_batch_status(self, batch_id: str, poll: bool = True) -> dict:
        batch = self.state.batches[batch_id]
        if poll:
            batch["polls"] += 1
        done = batch["polls"] > self.state.batch_polls
        host = f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if done else "in_progress",
            "request_counts": {
                "processing": 0 if done else batch["n"],
                "succeeded": batch["n"] if done else 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z",
            "ended_at": "2026-01-01T01:00:00Z" if done else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{host}/v1/messages/batches/{batch_id}/results" if done else None,
        }


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:  # clients hanging up is expected here
        pass


class StubServer:
    """Start/stop the stub in a background thread: `with StubServer(...) as stub: stub.url`."""

    def __init__(self, **state) -> None:
        import random

        state.setdefault("rng", random.Random(state.pop("draw_seed", 0)))
        self.state = StubState(**state)
        handler = type("BoundHandler", (Handler,), {"state": self.state})
        self.httpd = QuietServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address
        return f"http://{host}:{port}"

    def __enter__(self) -> StubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.state.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    with StubServer(latency_s=args.latency) as stub:
        print(stub.httpd.server_address[1], flush=True)
        try:
            sys.stdin.read()  # run until the parent closes our stdin
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
