"""Screenshot of the MLflow UI showing a real popfair run, for the getting-started page.

Run the default case first (``python -m popfair`` in FOLDER), then
``python docs/_tools/mlflow_screenshot.py FOLDER docs/_static/mlflow_ui.png``: this starts
``mlflow server`` on 127.0.0.1 on a free port over FOLDER/mlruns, opens the newest run in headless
Debian chromium and saves the page. Not part of the build (the PNG is committed).

``--compare N`` instead opens MLflow's run comparison of the newest N case runs (a sweep's child
runs, its parent left out) for the tutorial's "Compare runs" section: run a sweep first, e.g.
``python -m popfair -m screener=tfidf,simulated population.n=1500 seed=1`` in FOLDER, then
``python docs/_tools/mlflow_screenshot.py FOLDER docs/_static/mlflow_compare.png --compare 2``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import mlflow
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: chromium as the tests launch it
from tests.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(folder: Path, out: Path, compare: int = 0) -> None:
    store = f"sqlite:///{(folder / 'mlruns' / 'mlflow.db').resolve()}"
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["popfair"], order_by=["start_time DESC"])
    if compare:
        parent = runs.get("tags.popfair.sweep", "") == "parent"
        runs = runs[~parent].head(compare)
        if len(runs) < 2:
            raise SystemExit(f"--compare {compare}: the store has {len(runs)} case runs; run a sweep first")
    run = runs.iloc[0]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            store,
            "--default-artifact-root",
            str((folder / "mlruns").resolve()),
            "--workers",
            "1",
        ],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        url = f"{base}/#/experiments/{run['experiment_id']}/runs/{run['run_id']}"
        if compare:
            query = urllib.parse.urlencode(
                {"runs": json.dumps(list(runs["run_id"])), "experiments": json.dumps([str(run["experiment_id"])])}
            )
            url = f"{base}/#/compare-runs?{query}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(base + "/", wait_until="networkidle")
            page.get_by_text("Model training", exact=True).first.click()  # the classic run view, not GenAI's
            page.goto(url, wait_until="commit")  # a hash route: no network idle to wait for
            page.get_by_text(str(run["tags.mlflow.runName"]), exact=False).first.wait_for(timeout=60_000)
            close = page.get_by_role("button", name="Close")  # the assistant side panel, if shown
            if close.count():
                close.first.click()
            more = page.get_by_text("Show more", exact=True)  # the description: the effects table, whole
            if not compare and more.count():
                more.first.click()
            page.wait_for_timeout(3000)
            if compare:  # the tables of what differs: parameters and metrics side by side
                page.get_by_text("Visualizations", exact=True).first.click()
                for toggle in page.get_by_role("switch").all():
                    if toggle.get_attribute("aria-checked") == "false":
                        toggle.click()  # "Show diff only"
                tags = page.get_by_text("Tags", exact=True).last
                tags.evaluate("e => e.scrollIntoView({block: 'start'})")
                page.wait_for_timeout(1000)
                top = tags.bounding_box()["y"] - 16  # the tags that differ: the case's choices and its label
                page.screenshot(path=str(out), clip={"x": 190, "y": top, "width": 1020, "height": 1000 - top})
            else:
                page.screenshot(path=str(out))
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's workers too
        server.wait(timeout=60)
    print(f"saved {out} ({url})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the folder popfair ran in (its mlruns/)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--compare", type=int, default=0, metavar="N", help="compare the newest N case runs")
    args = parser.parse_args()
    main(args.folder, args.out, args.compare)
