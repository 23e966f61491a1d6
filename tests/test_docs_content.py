"""The documentation's sources, checked without building the site: the sample table and what the
tables guide says it prints, the guide's Python example, and the files a repository is expected to
have (LICENSE, CITATION.cff, CHANGELOG.md), the copy button's extension, no stray MLflow store."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from tests.conftest import popfair_in_process

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SAMPLE = DOCS / "data" / "sample_decisions.csv"
TABLES = (DOCS / "tables.md").read_text()


def _block(text: str, after: str, language: str) -> str:
    """The first fenced block of `language` after the line `after`."""
    rest = text[text.index(after) :]
    match = re.search(rf"```{language}\n(.*?)\n```", rest, re.S)
    assert match, f"no {language} block after {after!r}"
    return match.group(1)


def test_sample_table_is_what_its_script_writes(tmp_path):
    """The committed sample is the generator's output byte for byte (its provenance holds)."""
    done = subprocess.run(
        [sys.executable, str(DOCS / "_tools" / "sample_decisions.py"), str(tmp_path / "s.csv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.csv").read_bytes() == SAMPLE.read_bytes()
    assert SAMPLE.stat().st_size < 100_000
    assert "sample_decisions.csv <data/sample_decisions.csv>" in TABLES  # downloadable from the page


def test_tables_guide_prints_what_the_command_prints(tmp_path):
    """The guide's sample command, run as a reader would, prints the rows the guide shows."""
    command = _block(TABLES, "### Try it on the sample table", "bash").replace("\\\n", " ").split()
    assert command[:3] == ["python", "-m", "popfair"]
    overrides = [a.replace("docs/data/", f"{DOCS}/data/") for a in command[3:]] + ["tracking=none"]
    done = popfair_in_process(*overrides, cwd=tmp_path)  # what it prints: in this process
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout.splitlines()
    shown = _block(TABLES, "### Try it on the sample table", "text").splitlines()
    rows = [line for line in shown if line.startswith(("selection/", "applicants:", "pattern:", "=== popfair"))]
    assert len(rows) >= 10
    for line in rows:
        assert line in printed, f"the guide shows {line!r}; the command printed:\n{done.stdout[-3000:]}"


def test_tables_guide_python_example_runs_on_the_public_api(tmp_path, monkeypatch):
    code = _block(TABLES, "## Python API", "python")
    assert "case_from_config" not in TABLES and "/path/to/" not in TABLES
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(code.replace("docs/data/", f"{DOCS}/data/"), scope)  # noqa: S102 - the guide's own example
    result = scope["result"]
    assert result.source.rows_used == 800
    summary = result.ratios.summary()
    assert {"Sex", "Race/Ethnicity"} <= set(summary["dimension"])


def test_tables_guide_links_into_the_references():
    for target in (
        "reference/config/table.md",
        "reference/cli.md",
        "reference/api/generated/popfair.TableCase.rst",
        "reference/api/generated/popfair.estimate.ImpactRatios.rst",
        "concepts/inference.md",
    ):
        assert f"]({target})" in TABLES, f"docs/tables.md does not link {target}"


def test_license_citation_and_changelog():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in license_text
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "MIT"
    assert str(citation["version"]) == project["version"]
    assert citation["title"].startswith("popfair") and citation["authors"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and f"## {project['version']}" in changelog
    assert "{include} ../CHANGELOG.md" in (DOCS / "changelog.md").read_text()
    assert "changelog" in (DOCS / "index.md").read_text()


def test_copy_button_is_part_of_the_docs_extra():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    assert any(dep.startswith("sphinx-copybutton") for dep in extra)
    assert '"sphinx_copybutton"' in (DOCS / "conf.py").read_text()


def test_replication_page_points_only_at_what_the_site_has():
    text = (DOCS / "replication.md").read_text()
    assert "../shared" not in text and "arxiv.org/abs/2603.22714" in text


def test_no_mlflow_store_committed_at_the_root():
    tracked = subprocess.run(["git", "ls-files", "mlflow.db"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert tracked.stdout.strip() == "", "mlflow.db is committed at the repository root"
    ignored = subprocess.run(["git", "check-ignore", "-q", "mlflow.db"], cwd=ROOT)
    assert ignored.returncode == 0, ".gitignore does not cover a root mlflow.db"
