"""Screenshot of the MLflow UI showing a real popfair run, for the getting-started page.

Run the default case first (``python -m popfair`` in FOLDER), then
``python docs/_tools/mlflow_screenshot.py FOLDER docs/_static/mlflow_ui.png``: this starts
``mlflow server`` on 127.0.0.1 on a free port over FOLDER/mlruns, opens the newest run in headless
Debian chromium and saves the page. Not part of the build (the PNG is committed).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
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


def main(folder: Path, out: Path) -> None:
    store = f"sqlite:///{(folder / 'mlruns' / 'mlflow.db').resolve()}"
    mlflow.set_tracking_uri(store)
    run = mlflow.search_runs(experiment_names=["popfair"], order_by=["start_time DESC"], max_results=1).iloc[0]
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
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(base + "/", wait_until="networkidle")
            page.get_by_text("Model training", exact=True).first.click()  # the classic run view, not GenAI's
            page.goto(url, wait_until="commit")  # a hash route: no network idle to wait for
            page.get_by_text(str(run["tags.mlflow.runName"]), exact=True).first.wait_for(timeout=60_000)
            close = page.get_by_role("button", name="Close")  # the assistant side panel, if shown
            if close.count():
                close.first.click()
            page.wait_for_timeout(3000)
            page.screenshot(path=str(out))
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's workers too
        server.wait(timeout=60)
    print(f"saved {out} ({url})")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
