"""Comparing audits where users compare them: a two-case sweep logged to a real `mlflow server`
(SQLite) on 127.0.0.1, opened in chromium at 1280 px as a new user would, from the links the sweep
prints. The parent link and a child link open the Model training view with the description shown;
the run list with the headline columns chosen shows the effects. Screenshots go to
$POPFAIR_SCREENSHOTS when set (docs/comparing_audits.md shows them)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, CHROMIUM_ARGS
from tests.mlflow_server import mlflow_server

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")


def _open(browser, url: str, shot: Path, wait_for: str):
    """`url` in a fresh browser (no stored view choice), 1280 px wide; the assistant panel closed."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(url, wait_until="commit")
    page.get_by_text(wait_for, exact=False).first.wait_for(timeout=90_000)
    page.wait_for_timeout(1500)
    close = page.get_by_role("button", name="Close")
    if close.count():
        close.first.click()
        page.wait_for_timeout(800)
    return context, page


def _model_training(page) -> bool:
    """Whether the Model training view is the one shown (its side bar lists Runs and Models)."""
    side = page.inner_text("nav") if page.locator("nav").count() else page.inner_text("body")
    return "Model registry" in side and "Evaluation runs" not in side


def _keep(shot: Path) -> None:
    folder = os.environ.get("POPFAIR_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(folder) / shot.name)


def test_a_sweep_opens_in_model_training_and_its_run_list_shows_the_effects(tmp_path):
    from playwright.sync_api import sync_playwright

    with mlflow_server(tmp_path / "store") as uri:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "popfair", "-m", "occupation=nurse,teacher", "population.n=600",
             f"tracking.uri={uri}", f"cache_dir={tmp_path}/cache"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        parent = re.search(r"^the sweep:\s+(\S+)$", done.stdout, re.M).group(1)
        compare = re.search(r"^compare cases:\s+(\S+)$", done.stdout, re.M).group(1)
        children = re.findall(r"^the run:\s+(\S+)$", done.stdout, re.M)
        assert len(children) == 2 and all(u.startswith(f"{uri}/#/experiments/") for u in [parent, *children])
        assert "workflowType=machine_learning" in parent and compare.startswith(f"{uri}/#/compare-runs?runs=")
        experiment = parent.split("/#/experiments/")[1].split("/")[0]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            # the parent: Model training, its description (the comparison) shown
            context, page = _open(browser, parent, tmp_path / "parent.png", "Description")
            assert _model_training(page)
            assert page.get_by_text("Sweep comparison: 2 cases").first.is_visible()
            page.screenshot(path=str(tmp_path / "mlflow_sweep_parent.png"))
            _keep(tmp_path / "mlflow_sweep_parent.png")
            context.close()
            # a child: Model training, its description (the effects table) shown
            context, page = _open(browser, children[0], tmp_path / "child.png", "Description")
            assert _model_training(page)
            assert page.get_by_text("applicants:").first.is_visible()
            assert page.get_by_text("Metrics (2").first.is_visible()  # the headline: at most 40
            page.screenshot(path=str(tmp_path / "mlflow_sweep_child.png"))
            _keep(tmp_path / "mlflow_sweep_child.png")
            context.close()
            # the run list, the parent expanded, the headline columns chosen: the effects in the list
            runs = f"{uri}/#/experiments/{experiment}/runs?workflowType=machine_learning"
            context, page = _open(browser, runs, tmp_path / "list.png", "sweep-")
            page.get_by_role("button", name="Columns").click()
            search = page.get_by_placeholder("Search columns")
            # the attributes that take the width off (unticked), then the headline's effects (ticked)
            for name in ("Dataset", "Source", "Models", "TE.estimate", "TE.ci_low", "TE.ci_high", "BIE.estimate"):
                search.fill(name)
                page.get_by_text(name, exact=True).last.click()
                page.wait_for_timeout(300)
            page.keyboard.press("Escape")
            page.get_by_role("button", name="Columns").focus()
            page.keyboard.press("Escape")
            expand = page.locator("[data-testid='experiment-view-runs-table-expand-button'], .ag-group-contracted")
            if expand.count():
                expand.first.click()
            else:  # the parent's "+" in front of its name
                page.locator("button:near(:text('sweep-'), 40)").first.click()
            page.wait_for_timeout(2500)
            page.screenshot(path=str(tmp_path / "mlflow_run_list.png"))
            _keep(tmp_path / "mlflow_run_list.png")
            body = page.inner_text("body")
            assert "TE.estimate" in body and "BIE.estimate" in body and "population (seed" not in body
            assert "tfidf-gender" in body  # the children's rows, named by what differs (occupation first)
            estimates = re.findall(r"-?0\.0\d{2,}", body)
            assert len(estimates) >= 4, body[-2000:]  # the effects' numbers in the list, not "0.00"
            context.close()
            browser.close()
