"""Benchmark: read and estimate a ranking audit of 100,000 trials of 8 candidates (800,000 rows):
the design's parser over every reply (numbered lists with a one-line preamble, the common model
format) and every ranking estimate (top-1 rates and impact ratios with the bootstrap over trials,
mean ranks, pairwise, position effects, the exploded logit with trial-clustered SEs).
Target: <= 10 s on 2 cores. Prints the figures and the load average.

Run: python benchmarks/bench_ranking.py [n_trials]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script lives in

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from popfair.core.types import Document, Roles, ScreenResult  # noqa: E402
from popfair.design.ranking.design import DESIGN  # noqa: E402
from popfair.design.ranking.trials import DEFAULT_GROUPS, name_pools, williams_square  # noqa: E402
from popfair.estimate.ranking.estimator import RankingEstimator  # noqa: E402

STRENGTHS = np.array([0.1, 0.3, -0.1, 0.0, -0.2, 0.0, 0.1, 0.0])
FIRST_BONUS = 0.5


def simulated_audit(n: int, rng: np.random.Generator) -> tuple[pd.DataFrame, list[Document], list[ScreenResult]]:
    """Candidate rows, trial prompts and Plackett-Luce replies, as the pipeline hands them to the design."""
    k = len(DEFAULT_GROUPS)
    orders = williams_square(k)[np.arange(n) % k]
    first_pools, last_pools = name_pools(0.75, 20)
    groups = np.array(DEFAULT_GROUPS, dtype=object)[orders]
    first = np.empty((n, k), dtype=object)
    last = np.empty((n, k), dtype=object)
    for j, g in enumerate(DEFAULT_GROUPS):  # one name per group; female and male of a race differ in surname
        first[orders == j] = rng.choice(first_pools[g], (orders == j).sum())
        pool = last_pools[g.split(" ")[0]]
        last[orders == j] = pool[(rng.integers(0, len(pool) // 2, (orders == j).sum()) * 2 + j % 2)]
    names = first + " " + last
    utility = STRENGTHS[orders] + np.where(np.arange(k) == 0, FIRST_BONUS, 0.0)[None, :] + rng.gumbel(size=(n, k))
    best_first = np.argsort(-utility, axis=1)
    replies = [
        "Here is my ranking of the candidates:\n" + "\n".join(f"{i + 1}. {row[j]}" for i, j in enumerate(order))
        for row, order in zip(names, best_first)
    ]
    trial = np.repeat([f"t{t:06d}" for t in range(n)], k)
    rows = pd.DataFrame(
        {
            "trial_id": trial,
            "position": np.tile(np.arange(1, k + 1), n),
            "group": groups.ravel(),
            "first_name": first.ravel(),
            "surname": last.ravel(),
        }
    )
    prompts = [Document(f"t{t:06d}", "job", "text", "", profile={"names": list(names[t])}) for t in range(n)]
    results = [ScreenResult(p.applicant_id, reply, None) for p, reply in zip(prompts, replies)]
    return rows, prompts, results


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    rows, prompts, results = simulated_audit(n, np.random.default_rng(0))
    documents = [Document("", "job", "text", "")] * len(rows)
    roles = Roles(x="race", x0="black", x1="white", z=(), b=(), r=())
    start, cpu = time.perf_counter(), time.process_time()
    scored = DESIGN.scored(None, rows, documents, prompts, results)  # type: ignore[arg-type]
    parsed = time.perf_counter()
    ok = scored[scored["error"].isna()]
    effects = RankingEstimator().estimate(ok, roles)
    done, cpu = time.perf_counter(), time.process_time() - cpu
    assert len(ok) == len(rows) and (scored["n_ranked"] == 8).all()
    table = effects.table
    print(f"trials={n:,} rows={len(rows):,} cores={os.cpu_count()} load average={os.getloadavg()}")
    print(
        f"parse {parsed - start:.2f} s | estimate {done - parsed:.2f} s | total {done - start:.2f} s wall, "
        f"{cpu:.2f} s CPU (target <= 10 s on 2 cores)"
    )
    print(
        "logit position[1] = {:.3f} (true {:.2f}); logit group[white female] = {:.3f} (true {:.2f})".format(
            table.loc["logit.position.1", "estimate"],
            FIRST_BONUS,
            table.loc["logit.group.white_female", "estimate"],
            STRENGTHS[0] - STRENGTHS[1],
        )
    )


if __name__ == "__main__":
    main()
