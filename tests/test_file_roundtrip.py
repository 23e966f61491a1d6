"""The file round trip: popfair-export -> an external tool scores the files -> screener=file reads its
sheet back, against the same tool called in-process over HTTP; and every malformed sheet named by row."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from popfair.case.export import export_case
from popfair.case.population import PopulationCase
from popfair.core.errors import DataError
from popfair.render.base import render_all
from popfair.render.files import document_id
from popfair.report.__main__ import main as report_main
from tests import vendor_stub
from tests.conftest import compose_config

ROOT = Path(__file__).resolve().parents[1]
PAIRED = [
    "experiment=paired_race",
    "occupation.n_postings=40",
    "estimator.n_bootstrap=300",
    "outcome_audit.n_bootstrap=200",
    "tracking.enabled=false",
]
DECISION = ["screener.values.labels={advance: 1, reject: 0}"]
FILE_TOOL = ["screener=file", "screener.columns.id=Candidate ID", "screener.columns.value=Recommendation", *DECISION]
PROTECTED = ("black", "white", "female", "male", "hispanic")


@pytest.fixture
def vendor():
    server, state, url = vendor_stub.start()
    yield state, url
    server.shutdown()


def http_case(url: str, tmp_path: Path, extra: list[str]) -> PopulationCase:
    return PopulationCase.from_config(
        compose_config(
            [
                *extra,
                "screener=http",
                f"screener.url={url}",
                "screener.response_path=$.result.decision",
                *DECISION,
                "screener.engine.progress=false",
            ],
            tmp_path=tmp_path,
        )
    )


def test_export_score_import_reproduces_the_in_process_effects(vendor, tmp_path):
    _, url = vendor
    folder = tmp_path / "exchange"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "popfair.case.export",
            *PAIRED,
            *FILE_TOOL,
            f"screener.dir={folder}",
            f"cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/hydra",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exported 320 documents" in done.stdout
    manifest = pd.read_csv(folder / "manifest.csv")
    assert list(manifest.columns) == ["document_id", "file", "job_id", "media_type"] and len(manifest) == 320
    shared = (
        b"".join(
            [
                (folder / "manifest.csv").read_bytes(),
                (folder / "jobs.csv").read_bytes(),
                *(p.name.encode() for p in (folder / "documents").iterdir()),
            ]
        )
        .decode()
        .lower()
    )
    assert not any(word in shared for word in PROTECTED)  # no attribute or applicant id reaches the tool

    # the tool returns a partial Excel sheet first (200 documents in no particular order), then the rest
    vendor_stub.score_files(folder, folder / "all.parquet")
    everything = pd.read_parquet(folder / "all.parquet")
    sheet = everything.sample(200, random_state=1)
    sheet.to_excel(folder / "first.xlsx", index=False)
    everything.drop(sheet.index).to_parquet(folder / "rest.parquet", index=False)
    case = [*PAIRED, *FILE_TOOL, f"screener.dir={folder}"]
    # a partial sheet leaves 37% of the documents without a result: estimated anyway on request
    first = [*case, "screener.results=first.xlsx", "max_failure_share=1.0"]
    partial = PopulationCase.from_config(compose_config(first, tmp_path=tmp_path)).run()
    assert partial.scored["error"].notna().sum() == 320 - len(sheet)
    assert partial.scored["error"].dropna().str.startswith("no result for document d").all()
    report = pd.read_csv(folder / "import_report.csv")
    assert report["problem"].str.startswith("no result for document d").sum() == 120
    assert "### Problems in the tool's results files" in partial.report["report.md"]
    assert "no result for document d" in partial.report["report.md"]

    complete = PopulationCase.from_config(compose_config([*case, "screener.results=rest.parquet"], tmp_path=tmp_path))
    assert complete.screener.plan({}, [], "callback").calls == 0
    result = complete.run()  # the first sheet's answers come from the cache: nothing is scored again
    assert result.scored["error"].isna().all()
    assert not (folder / "import_report.csv").exists()

    in_process = http_case(url, tmp_path, PAIRED).run()
    assert (in_process.scored["y"].to_numpy() == result.scored["y"].to_numpy()).all()
    pd.testing.assert_frame_equal(result.effects.table, in_process.effects.table)
    pd.testing.assert_frame_equal(result.audit.table, in_process.audit.table)
    assert result.effects.table.loc["gap", "estimate"] > 0  # the tool's bias against Black-typical names


def test_pdf_documents_travel_both_ways_with_a_text_layer(vendor, tmp_path):
    _, url = vendor
    case = [
        "population.n=40",
        "renderer=pdf",
        "estimator=outcome_gap",
        "outcome_audit=null",
        "estimator.n_bootstrap=200",
    ]
    folder = tmp_path / "pdf"
    summary = export_case(compose_config([*case, *FILE_TOOL, f"screener.dir={folder}"], tmp_path=tmp_path))
    assert summary.files == 40
    manifest = pd.read_csv(folder / "manifest.csv")
    assert set(manifest["media_type"]) == {"application/pdf"}
    first = (folder / manifest["file"][0]).read_bytes()
    assert first.startswith(b"%PDF") and len(vendor_stub.applicant_name(vendor_stub.pdf_text(first)).split()) >= 2
    vendor_stub.score_files(folder, folder / "results.csv")
    by_file = PopulationCase.from_config(
        compose_config([*case, *FILE_TOOL, f"screener.dir={folder}"], tmp_path=tmp_path)
    ).run()
    upload = ["screener.body={document_id: '{document_id}', resume: {base64: '{document_base64}'}}"]
    over_http = http_case(
        url, tmp_path, [*case, *upload, "tracking.enabled=false"]
    ).run()  # the stub reads the PDF's text layer
    assert by_file.scored["error"].isna().all() and over_http.scored["error"].isna().all()
    pd.testing.assert_frame_equal(by_file.effects.table, over_http.effects.table)
    out = tmp_path / "handover"  # the auditor fetches the case's report from MLflow
    assert (
        report_main(["--audit", by_file.run_id, "--out", str(out), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"])
        == 0
    )
    text = (out / "audit_report" / "report.md").read_text()
    assert "results file" in text and "Not computed for this case" in text and "popfair/data/population" in text
    assert (out / "audit_report" / "report.html").read_text().startswith("<!DOCTYPE html>")


def _malformed_case(tmp_path: Path, results: str, extra: list[str] | None = None):
    cfg = compose_config(
        [
            "experiment=paired_race",
            "occupation.n_postings=2",
            "tracking.enabled=false",
            "screener=file",
            f"screener.dir={tmp_path}",
            f"screener.results={results}",
            "screener.values.range=[0, 10]",
            *(extra or []),
        ],
        tmp_path=tmp_path,
    )
    summary = export_case(cfg)
    experiment = PopulationCase.from_config(cfg)
    return summary, experiment, list(pd.read_csv(tmp_path / "manifest.csv")["document_id"])


def test_each_malformed_sheet_problem_is_named_by_row(tmp_path):
    _, experiment, ids = _malformed_case(tmp_path, "scores.csv")
    assert len(ids) == 16
    rows = [
        (ids[0], "7"),
        ("d-not-ours", "5"),
        (ids[1], "3"),
        (ids[1], "4"),
        (ids[2], "6"),
        (ids[2], "6"),
        ("", "2"),
        (ids[3], "high"),
        (ids[4], "11"),
        *[(i, "5") for i in ids[5:15]],
    ]  # ids[15]: missing
    pd.DataFrame(rows, columns=["document_id", "score"]).to_csv(tmp_path / "scores.csv", index=False)
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, 0)
    documents = render_all(experiment.renderer, profiles.table, profiles.jobs, progress=False)
    results = experiment.screener.screen(profiles.jobs, documents, "score")
    error_of = {document_id(d): r.error for d, r in zip(documents, results)}
    value_of = {document_id(d): r.value for d, r in zip(documents, results)}
    assert value_of[ids[0]] == 7.0 and value_of[ids[2]] == 6.0  # a repeated identical row is used, and reported
    assert (
        error_of[ids[1]]
        == f"scores.csv rows 4, 5: document id {ids[1]} appears in rows 4, 5 with different values ['3', '4']"
    )
    assert error_of[ids[3]] == "scores.csv row 9: unparseable value: value 'high' is not a number"
    assert error_of[ids[4]] == "scores.csv row 10: unparseable value: value '11' is outside the range [0, 10]"
    assert error_of[ids[15]].startswith(f"no result for document {ids[15]}")
    lines = {p.line() for p in experiment.screener.problems}
    assert "scores.csv row 3: unknown document id 'd-not-ours' (not a document of this case)" in lines
    assert "scores.csv row 8: empty document id" in lines
    assert f"scores.csv row 6: document id {ids[2]} appears in rows 6, 7" in lines
    metrics = experiment.screener.metrics()
    assert (
        metrics["screen.file_unknown_id"],
        metrics["screen.file_duplicate_id"],
        metrics["screen.file_empty_id"],
        metrics["screen.file_unparseable"],
        metrics["screen.file_missing"],
    ) == (1, 2, 1, 2, 1)
    assert len(pd.read_csv(tmp_path / "import_report.csv")) == 7
    strict = PopulationCase.from_config(
        compose_config(
            [
                "experiment=paired_race",
                "occupation.n_postings=2",
                "screener=file",
                f"screener.dir={tmp_path}",
                "screener.results=scores.csv",
                "screener.values.range=[0, 10]",
                "screener.strict=true",
                "screener.name=strict",
            ],
            tmp_path=tmp_path,
        )
    ).screener
    with pytest.raises(
        DataError, match=r"(?s)7 problems.*scores.csv row 3: unknown document id.*no result for document d"
    ):
        strict.screen(profiles.jobs, documents, "score")


@pytest.mark.parametrize(
    "writer, name, message",
    [
        (
            lambda path: path.write_text("id,score\nd1,3\n"),
            "bad.csv",
            r"lacks columns \['document_id'\].*\['id', 'score'\]",
        ),
        (lambda path: path.write_bytes(b"PK\x03\x04 not a workbook"), "bad.xlsx", "cannot read .*bad.xlsx as Excel"),
        (lambda path: None, "absent.parquet", "absent.parquet does not exist"),
    ],
)
def test_an_unreadable_sheet_names_the_file(tmp_path, writer, name, message):
    writer(tmp_path / name)
    _, experiment, _ = _malformed_case(tmp_path, name)
    with pytest.raises(DataError, match=message):
        experiment.screener.screen({}, [], "score")


def test_export_missing_only_writes_what_no_sheet_has_answered(tmp_path):
    _, experiment, ids = _malformed_case(tmp_path, "scores.csv")
    pd.DataFrame({"document_id": ids[:10], "score": 5}).to_csv(tmp_path / "scores.csv", index=False)
    experiment.screener.screen(*_documents(experiment), "score")
    summary, _, remaining = _malformed_case(tmp_path, "scores.csv", ["screener.export_missing_only=true"])
    assert (summary.files, summary.skipped_answered) == (6, 10) and sorted(remaining) == sorted(ids[10:])


def _documents(experiment: PopulationCase):
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, 0)
    return profiles.jobs, render_all(experiment.renderer, profiles.table, profiles.jobs, progress=False)


def test_pdf_text_layer_matches_the_resume():
    from pypdf import PdfReader

    experiment = PopulationCase.from_config(compose_config(["population.n=12", "renderer=pdf"]))
    _, documents = _documents(experiment)
    document = documents[0]
    page = PdfReader(io.BytesIO(document.pdf)).pages[0]
    assert (float(page.mediabox.width), float(page.mediabox.height)) == (612.0, 792.0)  # US Letter
    words = set(re.findall(r"\w+", page.extract_text()))
    assert set(re.findall(r"\w+", document.text)) <= words  # every word of the resume is in the text layer
    assert _documents(experiment)[1][0].pdf == document.pdf  # the same profile gives the same bytes
    experiment.renderer.rows_per_process = 1  # forked workers (large tables) return the PDFs too
    profiles = experiment.population.sample(experiment.occupation, experiment.protected, 0)
    forked = render_all(experiment.renderer, profiles.table, profiles.jobs, progress=False, processes=2)
    assert [d.pdf for d in forked] == [d.pdf for d in documents]
