"""A screening process for the multi-process tests: screens `n` stub documents through the cache at
`cache` (a folder or a database URL) and writes each row and the engine figures to `out` as JSON.

    python -m tests.screen_worker STUB_URL CACHE OUT N [CLAIM_LEASE_S [SAMPLES TEMPERATURE]]

With SAMPLES > 1 it asks each prompt SAMPLES times (callback answers) at TEMPERATURE (screener.samples).
SCREEN_WORKER_COMMIT_DELAY_S in the environment makes every cache commit take that long (a slow disk or
a distant database), so a kill lands while answers wait for their commit."""

from __future__ import annotations

import functools
import json
import os
import sys
import time

from popfair.screen.llm import LLMScreener
from popfair.store.responses import is_url
from popfair.store.responses.server import ServerCache
from popfair.store.responses.sqlite import SqliteCache
from tests.screen_helpers import FAST_ENGINE, JOBS, documents


def slow_commits(seconds: float) -> None:
    for cache in (SqliteCache, ServerCache):

        def put_many(self, items, _put=cache.put_many):
            time.sleep(seconds)
            _put(self, items)

        cache.put_many = functools.wraps(cache.put_many)(put_many)


def main() -> None:
    if delay := float(os.environ.get("SCREEN_WORKER_COMMIT_DELAY_S", 0)):
        slow_commits(delay)
    url, cache, out, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    lease = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    samples = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    temperature = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    where = {"cache_url": cache} if is_url(cache) else {"cache_dir": cache}
    screener = LLMScreener(
        name="worker",
        provider="openai",
        model="stub-model",
        api_key_env="OPENAI_API_KEY",
        base_url=url + "/v1",
        **where,
        engine={**FAST_ENGINE, "concurrency": 4, "timeout_s": 30.0, "claim_lease_s": lease, "claim_poll_s": 0.1},
        samples=samples,
        generation={"temperature": temperature, "max_tokens": 200},
    )
    results = screener.screen(JOBS, documents(n), "score" if samples == 1 else "callback")
    with open(out, "w") as f:
        json.dump(
            {"rows": [[r.applicant_id, r.value, r.error, r.cached] for r in results], "metrics": screener.metrics()}, f
        )


if __name__ == "__main__":
    main()
