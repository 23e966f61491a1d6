"""Sequential paired audits by simulation: the stopping rule "the anytime-valid CI of the gap
excludes 0" (config sequential.rule=excludes_zero) against the fixed-n audit it replaces.

Each simulated audit is a paired race audit as popfair runs it: postings with 4 pairs each, a pair
= two identical profiles that differ only in the name; P(callback) = expit(b0 + posting + profile
+ delta * [x1 name]) with a posting effect (sd 0.7) and a profile effect shared by the pair (sd 1),
so pairs are clustered in postings as in the real design. The unit of the confidence sequence is
the posting (its mean within-pair difference), exactly as popfair.design.sequential computes it,
and the intervals come from the same code (popfair.design.sequential.path, the betting CS).

The fixed-n plan: the number of postings a fixed audit would plan for 80% power to detect a 5 pp
gap with the cluster-robust t at alpha = 0.05 (the posting-mean sd taken from a 5 pp pilot).
The sequential audit looks after each tenth of that plan and stops when the CS excludes 0.

(1) No bias: the share of audits whose CS ever excludes 0 (target <= 5%), beside the share where
    the fixed-n CI looked at after every batch would have (what peeking costs without a CS).
(2) +10 pp bias: the share of audits where the sequential audit reaches the fixed-n audit's
    conclusion (the sign of a gap whose CI excludes 0, or "not settled"), and the calls it pays
    for on average against the fixed-n plan (target <= 50%).
Both print the distribution of stopping looks.

Run from the repository root: python benchmarks/bench_sequential.py [--reps 500] [--quick]"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from popfair.design import design_named  # noqa: E402
from popfair.design.sequential import UNIT, SequentialSettings, path  # noqa: E402
from popfair.estimate.sequential.sequences import looks_for  # noqa: E402

PAIRS = 4  # pairs per posting (population.pairs_per_posting)
PROMPTS = 2 * PAIRS  # prompts per posting
POSTING_SD, PROFILE_SD, B0 = 0.7, 1.0, 0.0
ALPHA, POWER, PLANNED_GAP = 0.05, 0.8, 0.05


def posting_gaps(rng: np.random.Generator, n: int, delta: float) -> np.ndarray:
    """n postings' mean within-pair differences y_x1 - y_x0 (in [-1, 1])."""
    base = B0 + rng.normal(0, POSTING_SD, (n, 1)) + rng.normal(0, PROFILE_SD, (n, PAIRS))
    y1 = rng.random((n, PAIRS)) < special.expit(base + delta)
    y0 = rng.random((n, PAIRS)) < special.expit(base)
    return (y1.astype(float) - y0.astype(float)).mean(axis=1)


def delta_for(gap: float, rng: np.random.Generator) -> float:
    """The name effect (logit) whose expected callback gap is `gap` (common random numbers)."""
    base = B0 + rng.normal(0, POSTING_SD, (200_000, 1)) + rng.normal(0, PROFILE_SD, (200_000, 1))
    return float(optimize.brentq(lambda d: float((special.expit(base + d) - special.expit(base)).mean()) - gap, -3, 3))


def fixed_conclusion(x: np.ndarray) -> int:
    """+1 / -1: the fixed-n cluster-robust t CI excludes 0 above / below; 0: not settled."""
    half = stats.t.ppf(1 - ALPHA / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return int(np.sign(x.mean())) if abs(x.mean()) > half else 0


def one_audit(x: np.ndarray, looks: list[int], settings: SequentialSettings) -> tuple[int, int, int]:
    """(look at which it stopped, 1-based, or 0 = ran to the plan; postings used; its conclusion)."""
    values = pd.DataFrame({UNIT: np.arange(len(x)), "value": x})
    for k, iv in enumerate(path(design_named("paired").sequential, "gap", values, looks, [], None, settings), start=1):  # type: ignore[arg-type]
        if iv.interval.excludes(0.0):
            return k, looks[k - 1], 1 if iv.interval.low > 0 else -1
    return 0, looks[-1], 0


def peeked_fixed(x: np.ndarray, looks: list[int]) -> bool:
    """Whether a fixed-n t CI looked at after every batch ever excludes 0 (the naive sequential)."""
    return any(fixed_conclusion(x[:n]) != 0 for n in looks)


def stopping_table(stops: list[int], n_looks: int) -> str:
    counts = Counter(stops)
    cells = [f"look {k}: {counts.get(k, 0)}" for k in range(1, n_looks + 1)]
    return " | ".join(cells) + f" | ran to the plan: {counts.get(0, 0)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=500, help="audits per scenario (>= 500 for the acceptance)")
    parser.add_argument("--looks", type=int, default=10)
    parser.add_argument("--method", default="betting", choices=("betting", "bernstein"))
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="100 audits per scenario (a smoke run)")
    args = parser.parse_args()
    reps = 100 if args.quick else args.reps
    rng = np.random.default_rng(args.seed)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start")

    d5, d10 = delta_for(PLANNED_GAP, rng), delta_for(0.10, rng)
    sd = posting_gaps(rng, 100_000, d5).std()
    n_plan = math.ceil(((stats.norm.ppf(1 - ALPHA / 2) + stats.norm.ppf(POWER)) * sd / PLANNED_GAP) ** 2)
    looks = looks_for(n_plan, n_looks=args.looks)
    settings = SequentialSettings(rule="excludes_zero", looks=args.looks, alpha=ALPHA, method=args.method)
    print(
        f"fixed-n plan: {n_plan} postings ({n_plan * PROMPTS} prompts) for {POWER:.0%} power at a "
        f"{100 * PLANNED_GAP:.0f} pp gap (posting-mean sd {sd:.3f}); sequential: {args.looks} looks at "
        f"{looks}, {args.method} CS, alpha {ALPHA}; {reps} audits per scenario"
    )

    results = {}
    for name, delta in (("no bias", 0.0), ("+10 pp bias", d10)):
        start = time.perf_counter()
        stops, used, agree, fixed_yes, seq_yes, peeked = [], [], 0, 0, 0, 0
        for _ in range(reps):
            x = posting_gaps(rng, n_plan, delta)
            look, n, conclusion = one_audit(x, looks, settings)
            fixed = fixed_conclusion(x)
            stops.append(look)
            used.append(n)
            agree += conclusion == fixed
            fixed_yes += fixed != 0
            seq_yes += conclusion != 0
            peeked += peeked_fixed(x, looks)
        results[name] = (stops, used, agree, fixed_yes, seq_yes, peeked, time.perf_counter() - start)

    stops, used, agree, fixed_yes, seq_yes, peeked, secs = results["no bias"]
    reject = seq_yes / reps
    print(f"\n(1) no bias, {reps} audits ({secs:.1f} s):")
    print(f"    sequential rule rejects (CS excludes 0 at some look): {reject:.1%}  (target <= 5%)")
    print(f"    fixed-n CI peeked at after every look would reject:   {peeked / reps:.1%}")
    print(f"    fixed-n audit at the plan rejects:                    {fixed_yes / reps:.1%}")
    print(f"    stopping looks: {stopping_table(stops, len(looks))}")
    ok_null = reject <= 0.05

    stops, used, agree, fixed_yes, seq_yes, peeked, secs = results["+10 pp bias"]
    share = float(np.mean(used)) / n_plan
    print(f"\n(2) +10 pp bias, {reps} audits ({secs:.1f} s):")
    print(f"    fixed-n audit concludes gap > 0:                      {fixed_yes / reps:.1%}")
    print(f"    sequential concludes gap > 0:                         {seq_yes / reps:.1%}")
    print(f"    sequential reaches the fixed-n conclusion:            {agree / reps:.1%}")
    print(f"    calls paid, mean over audits, vs the fixed-n plan:    {share:.1%}  (target <= 50%)")
    q = np.percentile(np.array(used) * PROMPTS, [10, 50, 90])
    print(
        f"    prompts used: mean {np.mean(used) * PROMPTS:.0f}, p10/p50/p90 {q[0]:.0f}/{q[1]:.0f}/{q[2]:.0f} of {n_plan * PROMPTS}"
    )
    print(f"    stopping looks: {stopping_table(stops, len(looks))}")
    ok_bias = share <= 0.5
    print(f"\nload average {os.getloadavg()[0]:.1f} at end")
    print(f"acceptance: no-bias rejections <= 5%: {'met' if ok_null else 'NOT met'}; "
          f"+10 pp calls <= 50% of the fixed-n plan: {'met' if ok_bias else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
