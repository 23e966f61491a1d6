"""Growing audits against the LLM stub on 127.0.0.1 (tests/llm_stub.py, real openai SDK): a paired
race audit 200 -> 1,000 postings, a population audit 1,000 -> 3,000 applicants and a ranking audit
500 -> 2,000 trials. Prints, per design, the distinct prompts the stub answered for the small case,
the new ones it answered for the grown case, the new units' prompts, their ratio (acceptance: at
most 1.05), and the answers the grown case's dry run said it would reuse.

Run from the repository root: python benchmarks/bench_grow.py [--quick] (quick: a tenth of the sizes)"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from popfair.case.population import PopulationCase  # noqa: E402
from popfair.screen.llm import LLMScreener  # noqa: E402
from popfair.sweep.plan import plan_case  # noqa: E402
from tests.conftest import compose_config  # noqa: E402
from tests.llm_stub import StubServer  # noqa: E402
from tests.screen_helpers import FAST_ENGINE, base_url  # noqa: E402

COMMON = ["tracking=none", "outcome_audit=null"]
GROWTH = {  # design: (overrides, size key, small, large, prompts per unit)
    "paired": (["experiment=paired_race"], "occupation.n_postings", 200, 1000, 8),
    "population": (["population.diagnostics=false"], "population.n", 1000, 3000, 1),
    "ranking": (["experiment=ranking_race_gender"], "population.n_trials", 500, 2000, 1),
}


def screener(url: str, cache_dir: Path) -> LLMScreener:
    os.environ["OPENAI_API_KEY"] = "bench-key-0123456789"  # the stub's, not a real key
    return LLMScreener(
        name="stub_openai",
        provider="openai",
        model="stub-model",
        api_key_env="OPENAI_API_KEY",
        base_url=base_url(url, "openai"),
        cache_dir=str(cache_dir),
        engine={**FAST_ENGINE, "concurrency": 16},
        price={"input_per_mtok": 1.0, "output_per_mtok": 4.0},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print(
        f"{'design':<11} {'small':>6} {'large':>6} {'paid_small':>10} {'paid_new':>9} {'new_units':>9} "
        f"{'ratio':>6} {'plan_reuse':>10} {'seconds':>8}"
    )
    worst = 0.0
    for design, (base, key, small, large, per_unit) in GROWTH.items():
        small, large = small // scale, large // scale
        started = time.perf_counter()
        with StubServer() as stub, tempfile.TemporaryDirectory() as tmp:
            screen = screener(stub.url, Path(tmp))

            def case(n: int, screen: LLMScreener = screen, base: list[str] = base, key: str = key) -> PopulationCase:
                return dataclasses.replace(
                    PopulationCase.from_config(compose_config([*COMMON, *base, f"{key}={n}"])), screener=screen
                )

            case(small).run()
            paid_small = len(stub.state.answered)
            reuse = plan_case(case(large)).cached_calls
            case(large).run()
            paid_new = len(stub.state.answered) - paid_small
        new_units = (large - small) * per_unit
        ratio = paid_new / new_units
        worst = max(worst, ratio)
        print(
            f"{design:<11} {small:>6} {large:>6} {paid_small:>10,} {paid_new:>9,} {new_units:>9,} "
            f"{ratio:>6.3f} {reuse:>10,} {time.perf_counter() - started:>8.1f}"
        )
    print(f"worst ratio of new prompts paid to new units' prompts: {worst:.3f} (acceptance: <= 1.05)")
    sys.exit(0 if worst <= 1.05 else 1)


if __name__ == "__main__":
    main()
