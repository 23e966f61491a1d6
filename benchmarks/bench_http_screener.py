"""screener=http speed against the vendor stub on 127.0.0.1 (tests/vendor_stub.py):
(1) live throughput with 50 ms answers at concurrency 16 (bound 16 / 0.05 s = 320 requests/s), with
and without 10% injected faults (429 + Retry-After, 500, malformed JSON); (2) a fully cached rerun
(rows/s: keys from the filled templates, one cache read, answers re-read through the JSONPath).

Run from the repository root: python benchmarks/bench_http_screener.py [--calls 2000]"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from popfair.core.types import Document, Job  # noqa: E402
from popfair.screen.http_endpoint import HttpScreener  # noqa: E402
from tests import vendor_stub  # noqa: E402

LATENCY_S, CONCURRENCY = 0.05, 16
JOBS = {"nurse": Job("nurse", "Registered Nurse", "Care for patients in a hospital ward. " * 20)}
ENGINE = {
    "concurrency": CONCURRENCY,
    "timeout_s": 5.0,
    "backoff_initial_s": 0.01,
    "backoff_max_s": 0.05,
    "backoff_jitter_s": 0.01,
    "retry_after_max_s": 0.05,
    "progress": False,
    "adaptive": False,
}


def docs(n: int, tag: str) -> list[Document]:
    surnames = ["Washington", "Becker", "Jefferson", "Bauer"]
    return [
        Document(f"{tag}{i}", "nurse", "text", f"Pat {surnames[i % 4]}\nApplicant {tag}{i}. " * 8) for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    bound = CONCURRENCY / LATENCY_S
    server, state, url = vendor_stub.start(vendor_stub.VendorState(latency_s=LATENCY_S))
    try:
        with tempfile.TemporaryDirectory() as cache:
            screener = HttpScreener(url=url, response_path="$.result.score", cache_dir=cache, engine=ENGINE)
            for label, faults, tag in (
                ("clean", {}, "c"),
                ("10% faults", {"rate_limit": 0.04, "server_error": 0.03, "malformed": 0.03}, "f"),
            ):
                for name, share in faults.items():
                    setattr(state, name, share)
                start = time.perf_counter()
                results = screener.screen(JOBS, docs(args.calls, tag), "score")
                wall = time.perf_counter() - start
                failed = sum(r.error is not None for r in results)
                print(
                    f"live {label}: {args.calls} requests in {wall:.2f}s = {args.calls / wall:.0f} req/s "
                    f"({args.calls / wall / bound:.2f} of the {bound:.0f} req/s bound), {failed} failed rows"
                )
            documents = docs(args.calls, "c") * 10  # every answer cached, 10 rows per distinct document
            start = time.perf_counter()
            results = screener.screen(JOBS, documents, "score")
            wall = time.perf_counter() - start
            assert all(r.cached and r.error is None for r in results)
            print(f"cached rerun: {len(documents)} rows in {wall:.2f}s = {len(documents) / wall:,.0f} rows/s")
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
