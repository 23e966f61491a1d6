"""Benchmark: repeated answers and probability scores at equal calls (issue 59). A stub screener with
a known gap and known noise answers a paired audit; popfair's paired_gap (posting-cluster bootstrap CI,
and the posting-clustered t) estimates the gap. Three ways to spend the same number of answers:

- text, k=1: N pairs, one yes/no answer per profile (2N answers);
- text, k=3: N/3 pairs, three answers per profile, the outcome their mean (2N answers);
- logprobs: N pairs, P(yes) of each profile read from the first token's probabilities (2N answers).

The stub is the answer law of tests/llm_stub.py at temperature > 0: profile j of pair i says yes with
probability p_ij, drawn afresh each time it is asked; logprobs return p_ij itself. p_i0 = b_i with
b_i ~ U(0.2, 0.7); p_i1 = b_i + gap + u_g + e_i, u_g ~ U(-0.05, 0.05) per posting, e_i ~ U(-0.1, 0.1)
per pair (so no probability leaves [0.1, 0.9] and the population gap is exactly `gap`). Four pairs
per posting, as the callback paper's race axis. Each replication draws new postings, pairs and answers;
coverage is the share of replications whose 95% CI holds the known gap.

Run: python benchmarks/bench_samples.py [--reps 400] [--pairs 1200]
(The paper's size is 24,024 pairs; the default here is reduced to 1,200 pairs and 400 replications
so that it runs in a few minutes on two shared cores. The answers are drawn in-process from the stub's
law rather than over HTTP: the pipeline's own path through the stub is covered by
tests/test_screen_samples.py.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout this script lives in

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from popfair.estimate.gap.paired import paired_gap  # noqa: E402
from popfair.screen.request_loop import noise_metrics  # noqa: E402

GAP, PER_POSTING = 0.05, 4


def probabilities(n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P(yes) of the x1 and x0 profile of each pair, and the pairs' postings."""
    postings = np.repeat(np.arange(n_pairs // PER_POSTING), PER_POSTING)
    base = rng.uniform(0.2, 0.7, len(postings))
    effect = GAP + rng.uniform(-0.05, 0.05, postings.max() + 1)[postings] + rng.uniform(-0.1, 0.1, len(postings))
    return base + effect, base, postings


def answers(p: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k fresh yes/no answers (1/0) per profile: the stub at temperature > 0."""
    return (rng.random((len(p), k)) < p[:, None]).astype(float)


def one(kind: str, n_pairs: int, rng: np.random.Generator, n_bootstrap: int) -> dict[str, float]:
    k = 3 if kind == "text, k=3" else 1
    p1, p0, postings = probabilities(n_pairs // k, rng)
    if kind == "logprobs":
        y1, y0, noise = p1, p0, None
    else:
        a1, a0 = answers(p1, k, rng), answers(p0, k, rng)
        y1, y0 = a1.mean(axis=1), a0.mean(axis=1)
        noise = noise_metrics(np.r_[a1, a0].tolist(), k).get("screen.noise_share") if k > 1 else None
    pairs = pd.DataFrame({"adv": y1, "other": y0, "posting": postings})
    r = paired_gap(pairs, y_adv="adv", y_other="other", cluster="posting", n_bootstrap=n_bootstrap, seed=0)
    from scipy import stats

    half = stats.t.ppf(0.975, r.n_clusters - 1) * r.cluster_se / 100
    gap = r.gap_pp / 100
    return {
        "answers": 2 * len(p1) * k,
        "width": (r.ci_high - r.ci_low) / 100,
        "covered": r.ci_low / 100 <= GAP <= r.ci_high / 100,
        "t_width": 2 * half,
        "t_covered": gap - half <= GAP <= gap + half,
        "noise_share": np.nan if noise is None else noise,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--pairs", type=int, default=1200)
    parser.add_argument("--bootstrap", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(59)
    start = time.perf_counter()
    rows = [
        {"design": kind, **one(kind, args.pairs, rng, args.bootstrap)}
        for _ in range(args.reps)
        for kind in ("text, k=1", "text, k=3", "logprobs")
    ]
    table = (
        pd.DataFrame(rows)
        .groupby("design", sort=False)
        .agg(
            answers=("answers", "mean"),
            ci_width_pp=("width", lambda w: 100 * w.mean()),
            coverage=("covered", "mean"),
            t_ci_width_pp=("t_width", lambda w: 100 * w.mean()),
            t_coverage=("t_covered", "mean"),
            noise_share=("noise_share", "mean"),
        )
    )
    mc = np.sqrt(0.95 * 0.05 / args.reps)
    print(
        f"known gap {100 * GAP:.0f} pp; {args.pairs} pairs ({args.pairs // 3} with k=3), {PER_POSTING} per posting; "
        f"{args.reps} replications (coverage Monte Carlo SE {100 * mc:.1f} pp); {args.bootstrap} bootstrap resamples"
    )
    print(table.round(4).to_string())
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
