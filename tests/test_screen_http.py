"""screener=http against a vendor stub on 127.0.0.1: faults lose no row, reruns ask nothing twice,
secrets stay in the environment, and the paired audit recovers the stub's known bias."""

from __future__ import annotations

import json

import numpy as np
import pytest

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError, MissingSecretError
from popfair.core.types import Document, Job
from popfair.render.files import document_id
from popfair.screen.http_endpoint import HttpScreener
from tests import vendor_stub
from tests.conftest import compose_config

FAST = dict(
    concurrency=8,
    timeout_s=0.3,
    max_attempts=8,
    backoff_initial_s=0.005,
    backoff_max_s=0.02,
    backoff_jitter_s=0.005,
    retry_after_max_s=0.05,
    progress=False,
)
FAULTS = dict(rate_limit=0.05, server_error=0.05, timeout=0.03, malformed=0.05, hang_s=0.5)  # 18% of attempts
JOBS = {"j": Job("j", "Registered Nurse", "Care for patients.")}
DECISIONS = {"labels": {"advance": 1, "reject": 0}}
SENTINEL = "sentinel-vendor-key-5f1e0c9d"


@pytest.fixture
def vendor():
    server, state, url = vendor_stub.start(vendor_stub.VendorState(**FAULTS))
    yield state, url
    server.shutdown()


def docs(n: int) -> list[Document]:
    surnames = ["Washington", "Jefferson", "Becker", "Bauer"]
    return [Document(f"a{i}", "j", "text", f"Pat {surnames[i % 4]}\nExperience: {i} years") for i in range(n)]


def screener(url: str, cache_dir, **kwargs) -> HttpScreener:
    settings = dict(url=url, response_path="$.result.decision", values=DECISIONS, cache_dir=str(cache_dir), engine=FAST)
    return HttpScreener(**{**settings, **kwargs})


def test_faults_lose_no_row_and_a_rerun_sends_nothing(vendor, tmp_path):
    state, url = vendor
    documents = docs(120)
    first = screener(url, tmp_path).screen(JOBS, documents, "callback")
    assert all(r.error is None for r in first)
    expected = [1.0 if vendor_stub.decide(d.text)["decision"] == "advance" else 0.0 for d in documents]
    assert [r.value for r in first] == expected
    assert set(state.faults) == {"rate_limit", "server_error", "timeout", "malformed"}
    assert sum(state.faults.values()) >= 0.1 * sum(state.attempts.values())
    assert set(state.answered) == {document_id(d) for d in documents}  # every document answered
    attempts = sum(state.attempts.values())
    again = screener(url, tmp_path)
    second = again.screen(JOBS, documents, "callback")
    assert sum(state.attempts.values()) == attempts  # nothing asked twice
    assert [r.value for r in second] == expected and all(r.cached for r in second)
    assert again.metrics()["screen.rows_from_cache"] == 120
    assert again.plan(JOBS, documents, "callback").calls == 0


def test_unparseable_answers_keep_the_raw_body_and_a_new_mapping_asks_nothing(vendor, tmp_path):
    state, url = vendor
    state.rate_limit = state.server_error = state.timeout = state.malformed = 0.0
    documents = docs(8)
    missing = screener(url, tmp_path, response_path="$.result.verdict").screen(JOBS, documents, "callback")
    assert all(r.error.startswith("unparseable answer: nothing at $.result.verdict") for r in missing)
    assert all(json.loads(r.raw)["result"]["decision"] in ("advance", "reject") for r in missing)
    unlabelled = screener(url, tmp_path, values={}).screen(JOBS, documents, "callback")
    assert all("is not a number" in r.error for r in unlabelled)
    scores = screener(url, tmp_path, response_path="$.result.score", values={"callback_threshold": 40})
    results = scores.screen(JOBS, documents, "callback")
    assert [r.value for r in results] == [float(vendor_stub.decide(d.text)["score"] >= 40) for d in documents]
    assert sum(state.answered.values()) == 8  # the cached bodies were re-read, not re-asked


def test_get_requests_carry_the_document_in_the_query_string(vendor, tmp_path):
    state, url = vendor
    state.rate_limit = state.server_error = state.timeout = state.malformed = 0.0
    getter = screener(
        url,
        tmp_path,
        method="GET",
        params={"document_id": "{document_id}", "text": "{document_text}"},
        response_path="$.result.score",
    )
    documents = docs(6)
    assert [r.value for r in getter.screen(JOBS, documents, "score")] == [
        float(vendor_stub.decide(d.text)["score"]) for d in documents
    ]


def test_call_and_dollar_budgets_stop_sending_and_a_rerun_completes(vendor, tmp_path):
    state, url = vendor
    documents = docs(30)
    capped = screener(url, tmp_path, max_calls=10, price_per_call_usd=0.02)
    assert capped.plan(JOBS, documents, "callback").calls == 10
    assert capped.plan(JOBS, documents, "callback").cost_usd == pytest.approx(0.2)
    results = capped.screen(JOBS, documents, "callback")
    assert sum(r.error is None for r in results) == 10
    assert {r.error for r in results if r.error} == {"call budget exhausted: max_calls=10 reached; not sent"}
    assert capped.metrics()["screen.cost_usd"] == pytest.approx(0.2)
    dollars = screener(url, tmp_path, price_per_call_usd=0.02, max_cost_usd=0.1)
    partial = dollars.screen(JOBS, documents, "callback")
    assert sum(r.error is None for r in partial) == 15  # 10 cached + 5 paid
    complete = screener(url, tmp_path).screen(JOBS, documents, "callback")
    assert all(r.error is None for r in complete) and len(state.answered) == 30


def test_secret_headers_come_from_the_environment_only(vendor, tmp_path, monkeypatch):
    state, url = vendor
    state.rate_limit = state.server_error = state.timeout = state.malformed = 0.0
    monkeypatch.delenv("VENDOR_API_KEY", raising=False)
    spec = {"Authorization": {"env": "VENDOR_API_KEY", "prefix": "Bearer "}}
    with pytest.raises(MissingSecretError, match="VENDOR_API_KEY"):
        screener(url, tmp_path, secret_headers=spec)
    planner = screener(url, tmp_path, secret_headers=spec, require_key=False)  # a dry run plans keyless
    assert planner.plan(JOBS, docs(4), "callback").calls == 4
    with pytest.raises(MissingSecretError, match="VENDOR_API_KEY"):
        planner.screen(JOBS, docs(4), "callback")
    monkeypatch.setenv("VENDOR_API_KEY", SENTINEL)
    keyed = screener(url, tmp_path, secret_headers=spec, headers={"X-Client": "popfair"})
    assert all(r.error is None for r in keyed.screen(JOBS, docs(4), "callback"))
    assert state.headers_seen[-1]["Authorization"] == f"Bearer {SENTINEL}"
    assert state.headers_seen[-1]["X-Client"] == "popfair"
    assert SENTINEL not in repr(keyed) + json.dumps(keyed.describe()) + keyed.identity
    assert SENTINEL.encode() not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "settings, key",
    [
        (dict(body={"x": "{applicant_id}"}), "screener.body: unknown placeholders"),
        (dict(response_path="$.result[?"), "screener.response_path"),
        (dict(method="GET", body={"id": "{document_id}"}), "screener.body: must be null for GET"),
        (dict(url="ftp://vendor"), "screener.url"),
        (dict(values={"range": [100, 0]}), "screener.values.range"),
        (dict(secret_headers={"Authorization": "not a name"}), "screener.secret_headers.Authorization"),
        (dict(max_calls=0), "screener.max_calls"),
    ],
)
def test_bad_settings_name_their_key(tmp_path, settings, key):
    with pytest.raises(ConfigError, match=key):
        screener(**{"url": "http://127.0.0.1:9/score", "cache_dir": tmp_path, **settings})


def test_file_placeholders_need_a_file_document(tmp_path):
    binary = screener("http://127.0.0.1:9/score", tmp_path, body={"file": "{document_base64}"})
    with pytest.raises(ConfigError, match="document_base64.*renderer=image"):
        binary.plan(JOBS, docs(1), "score")


def test_the_document_id_reveals_nothing_beyond_the_document():
    a = Document("p1:black:female", "j", "text", "same resume")
    b = Document("p1:white:female", "j", "text", "same resume")
    assert document_id(a) == document_id(b) and "black" not in document_id(a)
    assert document_id(a) != document_id(Document("x", "j", "text", "another resume"))


PAIRED = [
    "experiment=paired_race",
    "screener=http",
    "screener.response_path=$.result.decision",
    "screener.values.labels={advance: 1, reject: 0}",
    "occupation.n_postings=100",
    "tracking.enabled=false",
    "estimator.n_bootstrap=500",
    "outcome_audit.n_bootstrap=200",
    *[f"screener.engine.{k}={v}" for k, v in FAST.items()],
]


def test_paired_audit_of_the_endpoint_recovers_its_known_bias(vendor, tmp_path):
    state, url = vendor
    experiment = PopulationCase.from_config(compose_config([*PAIRED, f"screener.url={url}"], tmp_path=tmp_path))
    result = experiment.run()
    scored = result.scored
    assert scored["error"].isna().all() and len(scored) == 100 * 4 * 2  # faults lost no row
    wide = scored.assign(p=[vendor_stub.callback_probability(t) for t in scored["document"]]).pivot(
        index="pair_key", columns="race", values="p"
    )
    truth = 100 * float(np.mean(wide["white"] - wide["black"]))  # the stub's exact expected gap
    assert truth > 20
    gap = result.effects.table.loc["gap"]
    assert gap["ci_low"] <= truth <= gap["ci_high"] and gap["ci_low"] > 0
    audit = result.audit.table
    assert audit.loc[audit.index.str.contains("black")]["estimate"].lt(1).all()
    report = result.report["report.md"]  # the auditor's deliverable, written for screener=http
    assert "Tool audited" in report and url in report and "$.result.decision" in report
    assert "## Summary of results (NYC Local Law 144)" in report and "### Race/Ethnicity" in report
    assert "Black or African American" in report and "| gap |" in report.replace("  ", " ")
    assert "popfair/data/audit" in report and "**Date of the bias audit:** 20" in report
    assert result.report["report.html"].count("<table") >= 5 and "data:image/png;base64" in result.report["report.html"]
    attempts = sum(state.attempts.values())
    PopulationCase.from_config(compose_config([*PAIRED, f"screener.url={url}"], tmp_path=tmp_path)).run()
    assert sum(state.attempts.values()) == attempts  # the rerun asks nothing


def test_a_dry_run_plans_requests_and_dollars_without_the_secret(tmp_path, monkeypatch):
    from popfair.sweep.plan import plan_case

    monkeypatch.delenv("VENDOR_API_KEY", raising=False)
    cfg = compose_config(
        [
            "population.n=12",
            "renderer=image",
            "screener=http",
            "screener.url=http://127.0.0.1:9/x",
            "screener.body={id: '{document_id}', png: '{document_base64}'}",
            "screener.secret_headers={Authorization: VENDOR_API_KEY}",
            "screener.price_per_call_usd=0.5",
            "tracking=none",
            "estimator=pse_dml",  # the 12 applicants alone (the default would add their worlds)
        ],
        tmp_path=tmp_path,
    )
    plan = plan_case(PopulationCase.from_config(cfg, dry_run=True))  # real PNG pages: keys need their bytes
    assert (plan.calls, plan.cost_usd, plan.image_estimated_from_text) == (12, 6.0, False)
