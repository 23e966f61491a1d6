"""Per-case cost of MLflow tracking, as a sweep pays it: the same cases run in one process with
`tracking=mlflow` and with `tracking=none`, alternating, and the difference of their wall times is
the tracking overhead. Target (issue 27): at most 0.4 s per case.

Each case is a 1,000-applicant PopResume case (the offline grid's size: tfidf screener, DML-UCA,
outcome audit) with a warm response and nuisance cache, so a case is a few seconds, mostly estimate.
The run is logged by the tracking worker while the case computes; what the case still waits for
at its end is the `track` stage, printed too. The first tracked case also starts the worker
(MLflow imported there, on the other core) and is reported apart. The load average is printed
with each figure: wall times on a shared machine include waiting for a core.

    python benchmarks/bench_tracking.py [--cases 4] [--n 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from hydra import compose, initialize_config_dir

from popfair import Experiment
from popfair.paths import CONF_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=4, help="cases per setting after the first")
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    print(f"cpu cores visible: {os.cpu_count()}; load average: {os.getloadavg()[0]:.2f} (machine shared)")
    with tempfile.TemporaryDirectory() as tmp:
        base = [f"population.n={args.n}", f"cache_dir={tmp}/cache"]
        tracked = base + [f"tracking.uri=sqlite:///{tmp}/mlflow.db", f"tracking.artifact_root={tmp}/artifacts"]
        settings = {"none": base + ["tracking=none"], "mlflow": tracked}

        def case(setting: str, seed: int) -> tuple[float, float]:
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                cfg = compose(config_name="config", overrides=settings[setting] + [f"seed={seed}"])
            experiment = Experiment.from_config(cfg)
            start = time.perf_counter()
            result = experiment.run()
            return time.perf_counter() - start, result.timings["track"]

        for seed in range(args.cases + 1):  # warm the caches (responses, nuisances) of every seed
            case("none", seed)
        first, first_track = case("mlflow", 0)
        walls: dict[str, list[float]] = {"none": [], "mlflow": []}
        tracks = []
        for seed in range(1, args.cases + 1):
            for setting in ("none", "mlflow"):
                wall, track = case(setting, seed)
                walls[setting].append(wall)
                if setting == "mlflow":
                    tracks.append(track)
        none, mlflow = statistics.mean(walls["none"]), statistics.mean(walls["mlflow"])
        overhead = mlflow - none
        print(
            f"first tracked case (starts the tracking worker): {first:.2f} s, track stage {first_track:.2f} s  "
            f"(load {os.getloadavg()[0]:.2f})"
        )
        print(
            f"{args.cases} cases of n={args.n} each way: tracking=none {none:.2f} s/case, tracking=mlflow "
            f"{mlflow:.2f} s/case; track stage {statistics.mean(tracks):.2f} s/case  (load {os.getloadavg()[0]:.2f})"
        )
        print(f"per-case tracking overhead: {overhead:.2f} s  target <= 0.4 s: {'PASS' if overhead <= 0.4 else 'FAIL'}")


if __name__ == "__main__":
    main()
