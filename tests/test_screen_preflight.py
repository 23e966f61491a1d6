"""The screening side of the pre-flight checks: offline checks of a built screener (route, key, SDK)
and one probe of its endpoint that generates nothing, against real servers on 127.0.0.1, naming a
refused connection, a rejected key and an unknown model id as the engine does."""

from __future__ import annotations

from popfair.case.compose import build_for_plan
from popfair.screen.http_endpoint import HttpScreener
from popfair.screen.preflight import probe_endpoint, screener_checks
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import make_screener
from tests.test_screen_failfast import StatusServer, closed_port_url


def by_name(checks) -> dict:
    return {check.name: check for check in checks}


def test_a_good_setup_passes_every_check_and_generates_nothing(tmp_path, monkeypatch):
    with StubServer() as stub:
        for kind in ("openai", "anthropic"):
            screener = make_screener(kind, stub.url, tmp_path, monkeypatch)
            checks = screener_checks(screener) + probe_endpoint(screener)
            assert all(check.ok for check in checks), checks
            assert {"key", "endpoint", "model id"} <= set(by_name(checks))
        assert stub.state.requests == 0  # no generation was asked


def test_each_broken_piece_is_named_with_its_fix(tmp_path, monkeypatch):
    with StubServer(models=("another-model",)) as stub:
        for kind in ("openai", "anthropic"):
            wrong_model = by_name(probe_endpoint(make_screener(kind, stub.url, tmp_path, monkeypatch)))["model id"]
            assert not wrong_model.ok and "stub-model" in wrong_model.detail and "screener.model" in wrong_model.fix
    refused = probe_endpoint(make_screener("openai", closed_port_url(), tmp_path, monkeypatch))
    assert [c.name for c in refused] == ["endpoint"] and "connection refused" in refused[0].detail
    assert "check screener.base_url" in refused[0].fix
    with StatusServer(401) as server:
        rejected = probe_endpoint(make_screener("openai", server.url, tmp_path, monkeypatch))
    assert rejected[0].name == "key" and "HTTP 401" in rejected[0].detail and "OPENAI_API_KEY" in rejected[0].fix
    with StatusServer(403) as server:
        vendor = HttpScreener(url=f"{server.url}/score", cache_dir=str(tmp_path), engine={"progress": False})
        assert by_name(probe_endpoint(vendor))["key"].detail.endswith("(403 to HEAD)")


def test_a_missing_key_names_the_variable_and_the_route_whose_key_is_set(tmp_path, monkeypatch):
    for variable in ("OPENROUTER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_config(["screener=gpt4o_mini", "screener.route=openrouter"], tmp_path=tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-preflight-0123456789")
    screener = build_for_plan(cfg.screener, "screener", dry_run=True)
    key = by_name(screener_checks(screener))["key"]
    assert not key.ok and "OPENROUTER_API_KEY is not set" in key.detail
    assert key.fix == "export OPENROUTER_API_KEY=..., or screener.route=openai"
    assert probe_endpoint(screener) == []  # nothing to probe without the key
