"""A stand-in for a vendor's screening tool with a known bias, in two forms:

- an HTTP service on 127.0.0.1 (POST /score, JSON in, JSON out) that injects faults per attempt:
  429 with Retry-After, 500, hangs past the client timeout, malformed JSON bodies;
- a batch scorer over an exported folder (`python -m tests.vendor_stub score-files DIR OUT`), the
  "upload resumes, download a scores sheet" kind of tool.

Both decide with `decide(text)`: a callback with probability P_WHITE, or P_BLACK when the applicant's
surname is on Kline, Rose & Walters' list of distinctively Black surnames, drawn deterministically
from the document's content. Tests compute the exact expected gap from `callback_probability`."""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pandas as pd

import popfair

P_WHITE, P_BLACK = 0.60, 0.35
SCORE_PENALTY = 15  # score outcome: points taken off Black-typical surnames
_SURNAMES = Path(popfair.__file__).parent / "data" / "audit" / "surnames_kline_rose_walters_2022.csv"
BLACK_SURNAMES = frozenset(pd.read_csv(_SURNAMES).query("race == 'black'")["last_name"].str.lower())


def unit(*parts: object) -> float:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()
    return int(digest[:12], 16) / 16**12


def applicant_name(text: str) -> str:
    """The name a resume opens with: the JSON profile's "name", else the first non-empty line."""
    stripped = text.strip()
    if stripped.startswith("{"):
        return str(json.loads(stripped)["name"])
    return next(line for line in stripped.splitlines() if line.strip()).strip()


def black_typical(text: str) -> bool:
    return applicant_name(text).split()[-1].lower() in BLACK_SURNAMES


def callback_probability(text: str) -> float:
    return P_BLACK if black_typical(text) else P_WHITE


def decide(text: str) -> dict:
    """The tool's verdict on one resume: a 0-100 score and an advance/reject decision."""
    u = unit("vendor", text)
    advance = u < callback_probability(text)
    score = max(0, min(100, int(u * 101) - (SCORE_PENALTY if black_typical(text) else 0)))
    return {"score": score, "decision": "advance" if advance else "reject"}


def pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)


@dataclass
class VendorState:
    rate_limit: float = 0.0  # per-attempt fault shares, decided from (document, attempt)
    server_error: float = 0.0
    timeout: float = 0.0
    malformed: float = 0.0
    retry_after: str = "0.01"
    hang_s: float = 1.0
    latency_s: float = 0.0  # every answer waits this long (benchmarks)
    answered: Counter = field(default_factory=Counter)  # document_id -> successful answers
    attempts: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    headers_seen: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    state: VendorState

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self) -> None:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            return self._send(400, b'{"error": "request body is not JSON"}')
        self._answer(body)

    def do_GET(self) -> None:
        """GET /score?document_id=...&text=...: the same verdict from the query string."""
        query = parse_qs(urlparse(self.path).query)
        self._answer({"document_id": query["document_id"][0], "resume": {"text": query["text"][0]}})

    def _answer(self, body: dict) -> None:
        state = self.state
        if state.latency_s:
            time.sleep(state.latency_s)
        doc = body["document_id"]
        with state.lock:
            state.attempts[doc] += 1
            attempt = state.attempts[doc]
            state.headers_seen.append(dict(self.headers))
        u = unit("fault", doc, attempt)
        edges = [
            ("rate_limit", state.rate_limit),
            ("server_error", state.server_error),
            ("timeout", state.timeout),
            ("malformed", state.malformed),
        ]
        fault, low = None, 0.0
        for name, share in edges:
            if low <= u < low + share:
                fault = name
            low += share
        if fault:
            with state.lock:
                state.faults[fault] += 1
        if fault == "rate_limit":
            return self._send(429, b'{"error": "slow down"}', {"Retry-After": state.retry_after})
        if fault == "server_error":
            return self._send(500, b'{"error": "internal"}')
        if fault == "timeout":
            time.sleep(state.hang_s)
            return self._send(504, b'{"error": "late"}')
        if fault == "malformed":
            return self._send(200, b'{"result": {"score": 4')
        resume = body.get("resume", {})
        if resume.get("base64"):
            text = pdf_text(base64.b64decode(resume["base64"]))
        elif isinstance(resume.get("json"), dict):
            text = json.dumps(resume["json"])
        else:
            text = resume["text"]
        with state.lock:
            state.answered[doc] += 1
        self._send(200, json.dumps({"candidate": doc, "result": decide(text)}).encode())


def start(state: VendorState | None = None) -> tuple[ThreadingHTTPServer, VendorState, str]:
    """Serve on 127.0.0.1 at a free port in a daemon thread: (server, state, url of /score)."""
    state = state or VendorState()
    handler = type("VendorHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, state, f"http://127.0.0.1:{server.server_address[1]}/score"


def score_files(folder: Path, out: Path) -> None:
    """The upload-only tool: read the export's manifest and files, write a scores sheet (CSV, Excel
    or Parquet by suffix) with the tool's own column names."""
    manifest = pd.read_csv(folder / "manifest.csv")
    rows = []
    for record in manifest.itertuples():
        data = (folder / record.file).read_bytes()
        text = pdf_text(data) if record.file.endswith(".pdf") else data.decode("utf-8")
        verdict = decide(text)
        rows.append(
            {
                "Candidate ID": record.document_id,
                "Fit score": verdict["score"],
                "Recommendation": verdict["decision"].upper(),
            }
        )
    sheet = pd.DataFrame(rows)
    if out.suffix == ".xlsx":
        sheet.to_excel(out, index=False)
    elif out.suffix == ".parquet":
        sheet.to_parquet(out, index=False)
    else:
        sheet.to_csv(out, index=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    files = sub.add_parser("score-files")
    files.add_argument("folder", type=Path)
    files.add_argument("out", type=Path)
    args = parser.parse_args()
    score_files(args.folder, args.out)
    sys.exit(0)
