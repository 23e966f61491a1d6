"""Fail fast, say why: against real servers on 127.0.0.1, an endpoint that cannot answer (closed port,
401, 403, 404, 400, TLS on a plain port, a dead proxy, a hang) stops the case within seconds at any
number of rows, with one line naming the endpoint, the cause and the fix; an endpoint that goes down
mid-run trips the circuit breaker and a rerun completes with every earlier answer reused; a case
whose screens mostly failed stops with the failures counted by cause, before the estimator."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mlflow
import pytest

from popfair.case.population import PopulationCase
from popfair.core.errors import ScreeningStopped, TooManyFailures
from popfair.screen.http_endpoint import HttpScreener
from tests.conftest import compose_config
from tests.llm_stub import Faults, StubServer
from tests.screen_helpers import JOBS, documents, make_screener


@pytest.fixture(scope="module", autouse=True)
def _sdks_imported():
    """The SDKs imported before the first test of this module (the timings below are of the screening
    alone), on the xdist worker that runs them, not at every worker's collection (about 3 s each)."""
    for sdk in ("openai", "anthropic", "boto3"):
        pytest.importorskip(sdk)


ROWS = 3000  # far more rows than requests a stopped case may send
# the shipped retry settings (1 s backoff doubling over 6 attempts): fail-fast must not wait them out
SHIPPED = {"backoff_initial_s": 1.0, "backoff_max_s": 60.0, "backoff_jitter_s": 1.0, "max_attempts": 6}
# waiting out those retries takes at least 1+2+4+8+16 = 31 s for one request; a case that fails fast
# stops in about a second quiet, a few under a loaded machine's scheduling (6.6 s seen at load 8)
WITHIN_S = 15
BODIES = {
    400: "max_tokens is too large for this model",
    401: "Incorrect API key provided",
    403: "not allowed to use this model",
    404: "The model `stub-model` does not exist",
}


class StatusServer:
    """Answers every request with one HTTP status (or, with status=None, never answers); counts them."""

    def __init__(self, status: int | None) -> None:
        self.requests = 0
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _reply(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests += 1
                if status is None:
                    server.release.wait(30)
                    return
                body = json.dumps({"error": {"message": BODIES[status], "type": "invalid_request_error"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_POST = do_GET = do_HEAD = _reply

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> StatusServer:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once it is closed


def screen_until_stopped(screener, rows: int = ROWS) -> tuple[str, float]:
    start = time.monotonic()
    with pytest.raises(ScreeningStopped) as stopped:
        screener.screen(JOBS, documents(rows), "score")
    return str(stopped.value), time.monotonic() - start


def one_line(message: str, endpoint: str, cause: str, fix: str) -> None:
    assert "\n" not in message and len(message) < 600, message
    assert endpoint in message and f"{endpoint}: {cause} (" in message, message
    assert f"Fix: {fix}" in message and "rerun to resume" in message, message
    assert "test-key" not in message  # the key never appears


FIX = {
    "HTTP 400": "the endpoint cannot take this request: check screener.model and screener.generation",
    "HTTP 401": "the key was rejected: check OPENAI_API_KEY",
    "HTTP 403": "the key has no access to this model or endpoint: check OPENAI_API_KEY",
    "HTTP 404": "wrong model id or path: check screener.model and screener.generation and screener.base_url",
}


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_llm_endpoint_rejecting_every_request_stops_the_case_within_seconds(status, tmp_path, monkeypatch):
    with StatusServer(status) as server:
        screener = make_screener("openai", server.url, tmp_path, monkeypatch, engine=SHIPPED)
        message, seconds = screen_until_stopped(screener)
    one_line(message, f"{server.url}/v1", f"HTTP {status}", FIX[f"HTTP {status}"])
    assert BODIES[status] in message  # the server's own words
    assert server.requests <= 2 * screener.settings.concurrency and seconds < WITHIN_S


@pytest.mark.parametrize("provider", ["openai", "anthropic", "bedrock"])
def test_closed_port_stops_the_case_within_seconds_for_every_provider(provider, tmp_path, monkeypatch):
    url = closed_port_url()
    screener = make_screener(provider, url, tmp_path, monkeypatch, engine=SHIPPED)
    message, seconds = screen_until_stopped(screener)
    endpoint = f"{url}/v1" if provider == "openai" else url
    one_line(message, endpoint, "connection refused", "nothing listens there: check screener.base_url")
    assert "Connect" in message and seconds < WITHIN_S  # the socket error's own words


def test_tls_to_a_plain_http_port_and_a_dead_proxy_are_named(tmp_path, monkeypatch):
    with StatusServer(404) as server:
        https = server.url.replace("http://", "https://")
        screener = make_screener("openai", https, tmp_path, monkeypatch, engine=SHIPPED)
        message, _ = screen_until_stopped(screener, 50)
        one_line(message, f"{https}/v1", "TLS error", "the TLS handshake failed")
        for variable in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(variable, raising=False)
        monkeypatch.setenv("HTTP_PROXY", closed_port_url())
        screener = make_screener("openai", server.url, tmp_path, monkeypatch, engine=SHIPPED)
        message, _ = screen_until_stopped(screener, 50)
        one_line(message, f"{server.url}/v1", "proxy error", "the proxy failed: check HTTPS_PROXY")
        assert server.requests == 0


@pytest.mark.parametrize("status", [None, 400, 401, 403, 404])
def test_http_scoring_endpoint_failing_every_request_stops_the_case_within_seconds(status, tmp_path):
    if status is None:
        url = closed_port_url() + "/score"
        requests = 0
    else:
        server = StatusServer(status).__enter__()
        url = f"{server.url}/score"
    screener = HttpScreener(url=url, cache_dir=str(tmp_path), engine={**SHIPPED, "progress": False})
    message, seconds = screen_until_stopped(screener)
    if status is not None:
        server.__exit__()
        requests = server.requests
    cause = "connection refused" if status is None else f"HTTP {status}"
    fix = (
        "check screener.url"
        if status in (None, 404)
        else ("check screener.url, screener.method" if status == 400 else "")
    )
    one_line(message, url, cause, FIX.get(cause, "").split(":")[0] or "nothing listens")
    assert fix in message and requests <= 16 and seconds < WITHIN_S


def test_hanging_endpoint_fails_after_one_requests_timeout_and_retries_not_rows_times_timeout(tmp_path, monkeypatch):
    engine = {
        "timeout_s": 0.5,
        "max_attempts": 3,
        "backoff_initial_s": 0.05,
        "backoff_jitter_s": 0.0,
        "breaker_failures": 20,
    }
    with StatusServer(None) as server:
        screener = make_screener("openai", server.url, tmp_path, monkeypatch, engine=engine)
        message, seconds = screen_until_stopped(screener, 500)
        sent = server.requests
    one_line(message, f"{server.url}/v1", "timeout", "no answer within screener.engine.timeout_s=0.5s")
    # the endpoint never answered: the run stopped once breaker_failures requests in a row timed out
    # (plus those in flight then); 500 rows x 0.5 s never came into it
    assert sent <= 20 + screener.settings.concurrency and seconds < 10


def test_breaker_stops_a_case_whose_endpoint_goes_down_and_the_rerun_reuses_every_answer(tmp_path, monkeypatch):
    docs = documents(300)
    engine = {"breaker_failures": 5, "breaker_probe_s": 0.2, "breaker_max_s": 1.0, "concurrency": 4}
    with StubServer(latency_s=0.005, down_after=120) as stub:
        screener = make_screener("openai", stub.url, tmp_path, monkeypatch, engine=engine)
        with pytest.raises(ScreeningStopped) as stopped:
            screener.screen(JOBS, docs, "score")
        message = str(stopped.value)
        answered_before = len(stub.state.answered)  # 120, and the few that were in flight at the outage
        assert "\n" not in message and f"endpoint {stub.url}/v1 unreachable since {time.strftime('%H:')}" in message
        assert f"(connection error); nothing lost ({answered_before} answers of this run are saved)" in message
        assert message.endswith("rerun to resume") and 120 <= answered_before < 140

        stub.state.down_after = None  # the endpoint is back
        rerun = make_screener("openai", stub.url, tmp_path, monkeypatch, engine=engine)
        results = rerun.screen(JOBS, docs, "score")
    assert all(r.error is None for r in results)
    assert rerun.metrics()["screen.rows_from_cache"] == answered_before  # every earlier answer reused
    assert len(stub.state.answered) == 300 and set(stub.state.answered.values()) == {1}  # none asked twice


def test_a_case_whose_screens_mostly_failed_names_the_causes_and_runs_no_estimator(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-mostly-failed-0123456789")
    with StubServer(faults=Faults(always_fail=0.4)) as stub:
        case = [
            "screener=gpt4o_mini",
            "screener.route=openai",
            f"screener.base_url={stub.url}/v1",
            "population.n=80",
            "estimator=outcome_gap",
            "screener.engine.progress=false",
            "screener.engine.max_attempts=2",
            "screener.engine.backoff_initial_s=0.01",
            "screener.engine.backoff_jitter_s=0",
        ]
        with pytest.raises(TooManyFailures) as failed:
            PopulationCase.from_config(compose_config(case, tmp_path=tmp_path)).run()
        message = str(failed.value)
        assert "\n" not in message and "HTTP 500" in message and "max_failure_share=0.2" in message
        assert "the estimator was not run" in message and "max_failure_share=1.0" in message
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        failed_run = mlflow.search_runs(experiment_names=["popfair"])
        assert list(failed_run["status"]) == ["FAILED"] and "metrics.gap.estimate" not in failed_run  # no estimate
        result = PopulationCase.from_config(compose_config([*case, "max_failure_share=1.0"], tmp_path=tmp_path)).run()
    assert 0.2 < result.failure_rate < 0.7 and result.run_id is not None  # estimated on the scored rows


def test_failures_below_http_are_named_from_the_exception_chain_sdks_wrap():
    import socket
    import ssl

    from popfair.screen.providers.base import network_error

    def wrapped(inner: BaseException, outer_name: str) -> BaseException:
        outer = type(outer_name, (Exception,), {})("Request timed out.")  # as the SDK shims report it
        outer.__cause__ = inner
        return outer

    assert network_error(wrapped(socket.gaierror(-2, "Name or service not known"), "ConnectTimeout")).cause == (
        "DNS lookup failed"
    )
    assert network_error(wrapped(ssl.SSLError(1, "wrong version number"), "APITimeoutError")).cause == "TLS error"
    assert network_error(wrapped(ConnectionRefusedError(111, "refused"), "ConnectError")).cause == "connection refused"
    assert network_error(wrapped(ConnectionRefusedError(111, "x"), "ProxyConnectionError")).cause == "proxy error"
    assert network_error(wrapped(ConnectionResetError(104, "reset"), "ReadError")).cause == "connection error"
    assert network_error(type("ReadTimeout", (Exception,), {})("slow")).cause == "timeout"
    message = str(network_error(wrapped(socket.gaierror(-2, "Name or service not known"), "ConnectTimeout")))
    assert message == "DNS lookup failed: [Errno -2] Name or service not known"
