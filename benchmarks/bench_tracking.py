"""Per-case cost of MLflow tracking, as a sweep pays it: the same cases run in one process with
`tracking=mlflow` and with `tracking=none`, alternating, and the difference of their wall times is
the tracking overhead. Target (issue 27): at most 0.4 s per case.

The cases are the screener cells of one (occupation, attribute), as in the paper's grid: one
1,000-applicant PopResume population (nurse, gender, seed 0; DML-UCA with the LL144 outcome audit)
scored by tfidf screeners of different settings, so each cell has its own scores. As in a sweep,
the propensities come from the nuisance cache (warmed by one cell beforehand; each setting has its
own cache, so both do the same work) and the outcome nuisances are tuned and fitted per cell.
The run is logged by the tracking worker while the case computes; what the case still waits for at
its end is the `track` stage, printed too. The first tracked case also starts the worker (MLflow
imported there, on the other core) and is reported apart.

The load average is printed with each figure: wall times on a shared machine include waiting for
a core. On two cores the worker's drawing slows the estimate beside it, so what the figures cost
(the impact ratio chart is placed without a layout engine: 0.23 s instead of 0.56 s) still counts.

    python benchmarks/bench_tracking.py [--cells 5] [--n 1000]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

from hydra import compose, initialize_config_dir

from popfair.case.population import PopulationCase
from popfair.runtime.paths import CONF_DIR

CELLS = [  # tfidf screener settings: one screener cell each
    f"screener.ngram_max={ngram}" + ("" if sublinear else " screener.sublinear_tf=false")
    for sublinear in (True, False)
    for ngram in (1, 2, 3)
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=5, help="screener cells per setting after the first")
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    logging.getLogger("popfair").setLevel(logging.ERROR)  # the population's notes, once per case
    if args.cells + 1 > len(CELLS):
        parser.error(f"--cells: at most {len(CELLS) - 1}")
    print(f"cpu cores visible: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f} (machine shared)")
    with tempfile.TemporaryDirectory() as tmp:
        tracked = [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_root={tmp}/artifacts"]

        def case(setting: str, cell: str, *extra: str) -> tuple[float, float]:
            overrides = [f"population.n={args.n}", f"cache_dir={tmp}/cache-{setting}", *cell.split(), *extra]
            overrides += tracked if setting == "mlflow" else ["tracking=none"]
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                cfg = compose(config_name="config", overrides=overrides)
            experiment = PopulationCase.from_config(cfg)
            start = time.perf_counter()
            result = experiment.run()
            return time.perf_counter() - start, result.timings["track"]

        def compare(cases: list[tuple[str, ...]], what: str) -> None:
            walls: dict[str, list[float]] = {"none": [], "mlflow": []}
            tracks = []
            for cell in cases:
                for setting in ("none", "mlflow"):
                    wall, track = case(setting, *cell)
                    walls[setting].append(wall)
                    if setting == "mlflow":
                        tracks.append(track)
            none, mlflow = statistics.mean(walls["none"]), statistics.mean(walls["mlflow"])
            overhead = mlflow - none
            print(
                f"{len(cases)} {what} of n={args.n} each way: tracking=none {none:.2f} s/case, tracking=mlflow "
                f"{mlflow:.2f} s/case; track stage {statistics.mean(tracks):.2f} s/case  "
                f"(load {os.getloadavg()[0]:.2f})"
            )
            print(
                f"per-case tracking overhead: {overhead:.2f} s  target <= 0.4 s: {'PASS' if overhead <= 0.4 else 'FAIL'}"
            )

        case("none", CELLS[0])  # warms the propensities in each setting's nuisance cache
        first, first_track = case("mlflow", CELLS[0])
        print(
            f"first tracked case (starts the tracking worker): {first:.2f} s, track stage {first_track:.2f} s  "
            f"(load {os.getloadavg()[0]:.2f})"
        )
        compare([(cell,) for cell in CELLS[1 : args.cells + 1]], "screener cells")


if __name__ == "__main__":
    main()
