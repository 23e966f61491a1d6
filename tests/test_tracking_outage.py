"""An MLflow tracking store that cannot be reached stops a case before anything is built (one line, in
seconds, no urllib3 retries); a store that fails while the case is logged costs none of its results:
the effects table is printed, the artifacts are kept in a local folder, one line names the server, and
the command exits non-zero. In process: `popfair.__main__.main` with sys.argv set; the failing store is a
local HTTP server that answers the pre-flight probe and rejects every write, as a read-only store does."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FAST_CASE = ["population.n=300", "estimator=outcome_gap", "estimator.n_bootstrap=100", "outcome_audit=null"]


def _main(monkeypatch, capsys, tmp_path: Path, *args: str) -> tuple[int, str, str, float]:
    """Run the command; (status, stdout, stderr with the log's popfair lines, seconds)."""
    import logging

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Keep(logging.WARNING)
    logging.getLogger("popfair").addHandler(handler)
    from popfair.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        sys,
        "argv",
        ["popfair", *args, f"cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/out"],
    )
    start = time.perf_counter()
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        logging.getLogger("popfair").removeHandler(handler)
    out, err = capsys.readouterr()
    return code, out, err + "".join(line + "\n" for line in records), time.perf_counter() - start


class _ReadOnlyStore(BaseHTTPRequestHandler):
    """Up (health, experiment search: what the pre-flight probe asks) but every other call refused."""

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.startswith("/health"):
            self._answer(200, {"status": "OK"})
        else:
            self._answer(400, {"error_code": "INVALID_STATE", "message": "the store is read-only"})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.endswith("/experiments/search"):
            self._answer(200, {"experiments": []})
        else:
            self._answer(400, {"error_code": "INVALID_STATE", "message": "the store is read-only"})

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def read_only_store():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ReadOnlyStore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_unreachable_store_stops_before_the_case_in_seconds(monkeypatch, capsys, tmp_path):
    code, out, err, seconds = _main(
        monkeypatch, capsys, tmp_path, *FAST_CASE, "tracking.uri=http://127.0.0.1:1", "screener=simulated"
    )
    assert code == 2
    assert seconds < 20
    lines = [line for line in err.splitlines() if "popfair:" in line]
    assert len(lines) == 1, err
    assert "tracking.uri=http://127.0.0.1:1" in lines[0] and "nothing was run" in lines[0]
    assert "tracking=none" in lines[0]
    assert "Traceback" not in err
    assert not (tmp_path / "cache").exists()  # nothing built, nothing screened


def test_store_failing_mid_run_keeps_the_results(monkeypatch, capsys, tmp_path, read_only_store):
    code, out, err, _ = _main(
        monkeypatch,
        capsys,
        tmp_path,
        *FAST_CASE,
        f"tracking.uri={read_only_store}",
        f"tracking.artifact_root={tmp_path}/artifacts",
    )
    assert code == 2
    assert "estimate" in out and "nurse-gender" in out  # the effects table was printed
    lines = [line for line in err.splitlines() if "popfair:" in line]
    assert len(lines) == 1, err
    assert f"the MLflow tracking store {read_only_store} failed" in lines[0]
    assert "Traceback" not in err
    kept = sorted((tmp_path / "artifacts" / "unlogged").iterdir())
    assert len(kept) == 1 and str(kept[0]) in lines[0]
    assert (kept[0] / "effects.csv").is_file()
    assert (kept[0] / "scored.parquet").is_file()
    params = json.loads((kept[0] / "params.json").read_text())
    assert params["population.n"] == "300"
