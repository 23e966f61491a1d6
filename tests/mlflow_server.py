"""A real `mlflow server` on 127.0.0.1 over a SQLite store in a folder (tests start it themselves)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.pg_server import free_port


@contextlib.contextmanager
def mlflow_server(store: Path, timeout_s: float = 90.0) -> Iterator[str]:
    """Serve `store` (mlflow.db and proxied artifacts); yields the http:// tracking URI. A new store
    starts as popfair's copy of an empty migrated one: the server then skips MLflow's migrations."""
    from popfair.track.mlflow_tracker import seed_sqlite_store

    store.mkdir(parents=True, exist_ok=True)
    seed_sqlite_store(store / "mlflow.db")  # leaves an existing store as it is
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{store}/mlflow.db",
            "--artifacts-destination",
            str(store / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=store,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # without MLflow's job runner (huey consumers for GenAI jobs, which popfair never submits):
        # they took about 7 CPU s per server in the suite
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, "mlflow server exited"
            assert time.time() < deadline, f"mlflow server did not come up in {timeout_s:.0f} s"
            time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
