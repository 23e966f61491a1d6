"""Response-cache backends side by side: SQLite (a folder) and PostgreSQL (a real server on 127.0.0.1,
started here from the pgserver wheel's binaries).

(1) Bulk cached lookups: `get_many` of N cached keys, and a fully cached `screen` rerun of N documents
    through LLMScreener. Target: PostgreSQL >= 20,000 rows/s in bulk.
(2) Live throughput through the claim protocol: the same fresh screening job against the LLM stub
    (50 ms latency, concurrency 16: the bound is 320 requests/s), once through a SQLite cache and once
    through the PostgreSQL cache, alternated over rounds. Target: PostgreSQL within 5% of SQLite.

Run from the repository root: python benchmarks/bench_cache_backends.py [--rows 60000] [--calls 1500]"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_engine import CONCURRENCY, JOBS, LATENCY_S, docs, screener, start_stub  # noqa: E402
from popfair.store.responses import CachedAnswer  # noqa: E402
from tests.pg_server import PASSWORD, start_postgres  # noqa: E402


def best_of(n: int, work) -> tuple[float, list[float]]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times), times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench-key-not-secret")
    os.environ["PGPASSWORD"] = PASSWORD
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")
    stub, url = start_stub()
    server = start_postgres()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # (1) bulk cached lookups ------------------------------------------------------------
            locations = {"sqlite": {"cache_dir": f"{tmp}/bulk"}, "postgres": {"cache_url": server.new_database()}}
            cached_docs = docs(args.rows, offset=10**7)
            answer = CachedAnswer("50", 50.0, None, 100, 1, 0.0, 0.05, time.time())
            for name, where in locations.items():
                s = screener(url, CONCURRENCY, **where)
                keys = s.provider.cache_keys(s.prompts.system("score"), s.prompts.users("score", JOBS, cached_docs))
                start = time.perf_counter()
                s.cache.insert_rows("responses", [(k, "openai", "stub-model", *astuple(answer)) for k in keys])
                fill_s = time.perf_counter() - start
                lookup_s, lookups = best_of(3, lambda s=s, keys=keys: s.cache.get_many(keys))
                screen_s, screens = best_of(3, lambda s=s: s.screen(JOBS, cached_docs, "score"))
                again = s.screen(JOBS, cached_docs[:100], "score")
                assert all(r.cached and r.value == 50.0 for r in again)
                print(
                    f"bulk {name:8s}: fill {args.rows / fill_s:>9,.0f} rows/s | get_many {args.rows / lookup_s:>9,.0f}"
                    f" rows/s (runs {', '.join(f'{t:.2f}' for t in lookups)} s) | cached screen rerun "
                    f"{args.rows / screen_s:>9,.0f} rows/s (runs {', '.join(f'{t:.2f}' for t in screens)} s)"
                )
                if name == "postgres":
                    print(
                        f"               PostgreSQL bulk lookups: ratio to the 20,000 rows/s target "
                        f"{args.rows / lookup_s / 20_000:.2f}"
                    )
                s.cache.close()

            # (2) live throughput through the claim protocol --------------------------------------
            rates: dict[str, list[float]] = {"sqlite": [], "postgres": []}
            warm = screener(url, CONCURRENCY, cache_dir=f"{tmp}/warm")
            warm.screen(JOBS, docs(64, offset=10**6), "score")  # imports, first connections
            for round_ in range(args.rounds):
                for name in ("sqlite", "postgres") if round_ % 2 == 0 else ("postgres", "sqlite"):
                    where = (
                        {"cache_dir": f"{tmp}/live-{round_}"}
                        if name == "sqlite"
                        else {"cache_url": server.new_database()}
                    )
                    s = screener(url, CONCURRENCY, **where)
                    live = docs(args.calls, offset=(round_ + 1) * 10**5)  # fresh prompts: all sent
                    start = time.perf_counter()
                    results = s.screen(JOBS, live, "score")
                    rates[name].append(args.calls / (time.perf_counter() - start))
                    assert all(r.error is None and not r.cached for r in results)
                    assert s.metrics()["screen.answered"] == args.calls
                    s.cache.close()
            bound = CONCURRENCY / LATENCY_S
            for name, values in rates.items():
                print(
                    f"live {name:8s}: median {statistics.median(values):.0f} req/s (rounds "
                    f"{', '.join(f'{v:.0f}' for v in values)}); bound {bound:.0f} req/s"
                )
            ratio = statistics.median(rates["postgres"]) / statistics.median(rates["sqlite"])
            print(f"live PostgreSQL / SQLite (both claiming every call): {ratio:.3f} (target >= 0.95)")
            print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")
    finally:
        server.stop()
        stub.stdin.close()
        stub.wait(timeout=10)


if __name__ == "__main__":
    main()
