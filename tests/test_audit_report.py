"""The auditor's report of a table case: the LL144 summary's facts and tables equal a hand computation
of the decisions, the unknown counts are a list, excluded categories carry the configured
justification; the HTML loads in headless Debian chromium with aligned headers and cells, the PDF
carries the same text; only path-specific effects print a discrimination pattern."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pandas as pd
import pytest

from popfair.core.errors import ConfigError
from popfair.core.types import Effects
from popfair.report.document import Block, to_html, to_markdown, to_pdf
from popfair.report.effects import effects_blocks
from popfair.sweep.run_case import case_from_config
from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import compose_config
from tests.test_table_source import CELLS, COLUMNS, decisions, write

JUSTIFICATION = "Fewer than 2% of applicants: too few to compare, as the auditor decided on 2025-01-10."


@pytest.fixture(scope="module")
def table_case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    path = tmp / "decisions.csv"
    write(decisions(), path, "csv")
    overrides = [
        "experiment=table_audit",
        f"table.path={path}",
        *COLUMNS,
        "estimator.n_bootstrap=200",
        f"estimator.exclusion_justification='{JUSTIFICATION}'",
        "table.tool.name='Acme Screen 4'",
        "table.tool.vendor='Acme HR Software, Inc.'",
        "table.tool.distribution_date=2024-03-01",
    ]
    result = case_from_config(compose_config(overrides, tmp_path=tmp)).run()
    for name, content in result.report.items():
        (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return tmp, result


def hand_rate(sex: str | None = None, race: str | None = None) -> tuple[int, int]:
    cells = [(n, k) for (s, r), (n, k) in CELLS.items() if (sex is None or s == sex) and (race is None or r == race)]
    return sum(n for n, _ in cells), sum(k for _, k in cells)


def test_the_summary_states_the_data_and_the_hand_computed_tables(table_case):
    _, result = table_case
    text = result.report["report.md"]
    source = result.source
    assert "**Data used:** Historical data" in text
    assert result.report["report.md"].startswith("# Bias audit summary: Acme Screen 4")
    assert "**Automated employment decision tool:** Acme Screen 4" in text
    assert "**Vendor:** Acme HR Software, Inc." in text and "**Distribution date:** 2024-03-01" in text
    assert "**Independent auditor:** not stated" in text and "table.tool" not in text  # said, no config key
    assert f"{source.date_min} to {source.date_max} (column Decided)" in text
    assert "**Applicants assessed:** 1,574" in text
    # sex: "F" and "Male" rows (those of unknown race included); blank sex left out of the rates
    (women, women_selected), (men, men_selected) = hand_rate("F"), hand_rate("Male")
    ratio = (women_selected / women) / (men_selected / men)
    assert f"| Female | {women:,} | {women_selected:,} | {women_selected / women:.2%} | {ratio:.3f} |" in text
    assert f"| Male | {men:,} | {men_selected:,} | {men_selected / men:.2%} | 1.000 |" in text
    # race: Native Hawaiian or Other Pacific Islander (24 of 1,574 < 2%) excluded, still shown with its rate
    assert "| Native Hawaiian or Pacific Islander | 24 | 7 | 29.17% |  |" in text
    assert JUSTIFICATION in text
    white, white_selected = hand_rate(race="White")  # the 20 of unknown sex are White: in the race table
    assert f"| White | {white:,} | {white_selected:,} | {white_selected / white:.2%} | 1.000 |" in text
    for line in (
        "- Unknown sex: 20 applicants, not included in the calculations above.",
        "- Unknown race/ethnicity: 30 applicants, not included in the calculations above.",
        "- Unknown sex or race/ethnicity: 50 applicants, not included in the calculations above.",
    ):
        assert line in text
    assert text.count("would flag at least one category in") == 3  # the plain words next to each table
    assert "Discrimination pattern" not in text


def _headers_and_alignment(page) -> list[dict]:
    return page.evaluate(
        """() => [...document.querySelectorAll('table:not(.facts)')].map(t => ({
            headers: [...t.querySelectorAll('thead th')].map(h => h.textContent),
            header_align: [...t.querySelectorAll('thead th')].map(h => getComputedStyle(h).textAlign),
            cell_align: [...t.querySelectorAll('tbody tr:first-child td')].map(d => getComputedStyle(d).textAlign),
            rows: t.querySelectorAll('tbody tr').length,
        }))"""
    )


@pytest.mark.skipif(
    shutil.which(CHROMIUM) is None, reason="Debian chromium is not installed (apt-get install chromium)"
)
def test_the_html_loads_in_chromium_with_the_expected_tables(table_case):
    playwright = pytest.importorskip("playwright.sync_api")
    folder, _ = table_case
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto((folder / "report.html").as_uri())
            tables = _headers_and_alignment(page)
            headings = page.evaluate("() => [...document.querySelectorAll('h3')].map(h => h.textContent)")
            bullets = page.evaluate("() => [...document.querySelectorAll('li')].map(li => li.textContent)")
            images = page.evaluate("() => [...document.images].map(i => i.naturalWidth)")
            page.screenshot(path=str(folder / "report.png"), full_page=True)
        finally:
            browser.close()
    ll144 = [
        t for t in tables if t["headers"][1:5] == ["# of applicants", "# selected", "Selection rate", "Impact ratio"]
    ]
    assert [t["headers"][0] for t in ll144] == [
        "Sex category",
        "Race/Ethnicity category",
        "Intersectional (sex and race) category",
    ]
    assert [t["rows"] for t in ll144] == [2, 5, 10]
    for table in tables:  # every header sits over its cells
        assert table["header_align"] == table["cell_align"], table["headers"]
    assert ll144[0]["cell_align"][:5] == ["left", "right", "right", "right", "right"]
    assert headings[:3] == ["Sex", "Race/Ethnicity", "Intersectional (sex and race)"]
    assert sum(b.startswith("Unknown ") for b in bullets) == 3  # one list item each, not one paragraph
    assert images and all(width > 0 for width in images)  # the chart is embedded and decodes


def test_the_pdf_carries_the_summary(table_case):
    from pypdf import PdfReader

    folder, result = table_case
    assert result.report["report.pdf"][:4] == b"%PDF"
    text = " ".join(page.extract_text() for page in PdfReader(folder / "report.pdf").pages)
    text = " ".join(text.split())
    for expected in ("Summary of results (NYC Local Law 144)", "Historical data", "Unknown sex: 20 applicants"):
        assert expected in text
    assert "Impact ratio" in text and "Selection rate" in text


def test_tool_facts_are_checked():
    from popfair.design.table.settings import ToolFacts

    with pytest.raises(ConfigError, match="table.tool.distribution_date: must be a date YYYY-MM-DD"):
        ToolFacts.from_config({"distribution_date": "March 2024"})
    with pytest.raises(ConfigError, match="table.tool: unknown keys \\['version'\\]"):
        ToolFacts.from_config({"version": "4"})
    assert ToolFacts.from_config({"name": "  ", "auditor": "Jane Doe LLP"}) == ToolFacts(auditor="Jane Doe LLP")


def test_only_path_specific_effects_print_a_discrimination_pattern():
    paired = Effects(table=pd.DataFrame({"estimate": [0.02]}, index=["gap"]), labels=[])
    pse = Effects(table=pd.DataFrame({"estimate": [0.1] * 5}, index=["TE", "NDE", "NIE", "BIE", "RIE"]), labels=[])
    paired_text = to_markdown("t", effects_blocks(paired, "Effect"), Path("."))
    assert "Discrimination pattern" not in paired_text and "No finding reached significance." in paired_text
    assert "Discrimination pattern (PopResume, section 5.2): none" in to_markdown(
        "t", effects_blocks(pse, "E"), Path(".")
    )
    found = Effects(table=paired.table, labels=["callback gap favouring white (McNemar p=0.001)"])
    assert "<li>callback gap favouring white" in to_html("t", effects_blocks(found, "Effect"))


def test_lists_and_paragraphs_stay_apart_in_html():
    page = to_html("t", [Block("text", "one\n\ntwo"), Block("list", ["a", "b"]), Block("facts", {"Date": "x"})])
    assert "<p>one</p>" in page and "<p>two</p>" in page
    assert "<ul><li>a</li><li>b</li></ul>" in page
    assert "<th scope='row'>Date</th><td>x</td>" in page


def test_the_report_shows_each_effect_at_every_clipping_bound():
    """Sensitivity instead of one silent choice: the estimator's clip x effect table becomes a table of
    the report, one column per bound (the case's own marked), "n.i." where the rule fails there."""
    rows = [
        {"clip": clip, "effect": effect, "estimate": est, "se": 0.1, "identified": ok, "case_clip": clip == 0.01}
        for clip in (0.05, 0.001, 0.01)
        for effect, est, ok in (("TE", 1.0 + clip, True), ("NDE", 4.0 - 40 * clip, clip >= 0.05))
    ]
    table = pd.DataFrame({"estimate": [1.0] * 5}, index=["TE", "NDE", "NIE", "BIE", "RIE"])
    effects = Effects(table=table, labels=[], artifacts={"pse_clip_sensitivity.csv": pd.DataFrame(rows)})
    (shown,) = [b.content for b in effects_blocks(effects, "E") if b.kind == "table" and "clip 0.05" in b.content]
    shown = shown.set_index("effect")
    assert list(shown.columns) == ["clip 0.001", "clip 0.01 (this case)", "clip 0.05"]
    assert list(shown.index) == ["TE", "NDE"]
    assert shown.loc["TE", "clip 0.001"] == "+1 (0.1)" and shown.loc["NDE", "clip 0.05"] == "+2 (0.1)"
    assert shown.loc["NDE", "clip 0.01 (this case)"] == "+3.6 (0.1) n.i."
    assert "Sensitivity to the propensity clipping bound" in to_markdown("t", effects_blocks(effects, "E"), Path("."))
    assert not [b for b in effects_blocks(Effects(table=table, labels=[]), "E") if "Sensitivity" in str(b.content)]


def test_the_table_report_names_its_run_and_its_file_never_its_path(table_case):
    """The report one posts: the MLflow run id, popfair's version and the date; the table by its file
    name and sha256, never the folder it was read from; PDF pages numbered."""
    tmp, result = table_case
    page = result.report["report.html"]
    assert result.run_id and result.run_id in page
    assert str(tmp) not in page and str(tmp) not in result.report["report.md"]
    sha = result.source.fingerprint["sha256"]
    assert f"decisions.csv (csv; sha256 {sha})" in result.report["report.md"]
    assert "popfair " in page and "Date of the bias audit" in page
    from pypdf import PdfReader

    pages = PdfReader(tmp / "report.pdf").pages
    assert len(pages) > 1
    for number, page_of_pdf in enumerate(pages, start=1):
        text = page_of_pdf.extract_text()
        assert f"page {number} of {len(pages)}" in text and result.run_id in text  # every page's foot


def test_pdf_headings_stay_with_their_content_without_empty_pages():
    """Each heading goes on the page of the table under it, and a page is filled before the next
    begins: six short sections fit on a few pages (a keep-together inside another broke a page
    before every table: 13 pages)."""
    from pypdf import PdfReader

    table = pd.DataFrame({"category": list("abcde"), "rate": [0.5] * 5})
    blocks = [Block("facts", {"Tool": "tfidf"})]
    for i in range(6):
        blocks += [Block("h2", f"Section {i}"), Block("table", table), Block("text", "Words " * 60)]
        blocks += [Block("h3", f"Part {i}"), Block("table", table)]
    pages = [page.extract_text() for page in PdfReader(io.BytesIO(to_pdf("Audit", blocks))).pages]
    assert len(pages) <= 4, len(pages)
    for page in pages:  # no heading is the last line of a page's body (above the footer)
        body = [line for line in page.splitlines() if line.strip() and "page " not in line]
        assert not body[-1].startswith(("Section", "Part")), body[-3:]
    assert all(f"page {i} of {len(pages)}" in page for i, page in enumerate(pages, start=1))
