"""A paper-size grid on one machine (issue 27): the paper grid's offline twin at full size for one
occupation, run on a baseline tree (today's main before the issue: commit 6c2f4d2) and on this tree
in the same run, each as one sweep in a fresh folder (fresh response cache, document store and MLflow
store; the population's disk cache is shared and warmed first).

1. Full size: cells text-tfidf, text-simulated, image-simulated x protected_attr gender, race =
   6 cases, every PUMS record of the occupation (nurse: 18,963 applicants), estimator pse_dml.
   Targets: this tree's total wall <= 1/3 of the baseline's; the second image case's render
   stage <= 3 s (its pages come from the document store).
2. `--grid40`: the 40-case offline grid (experiment=popresume_grid_offline, population.n=1000).

For every sweep it prints the wall time, the CPU seconds of the sweep process and its workers, the
load average before and after, and per case (in run order) the stage times each case logged as MLflow
metrics `time.<stage>_s` (the same figures as the case's summary line), then the per-stage sums,
and (this tree, full size) the wall and CPU seconds of reading the race image case's pages back from
the sweep's document store: CPU seconds do not grow with the load of a shared machine.

    python benchmarks/bench_grid.py [--baseline PATH | --baseline-commit 6c2f4d2] [--occupation nurse]
        [--skip-baseline] [--skip-full] [--grid40] [--n N]

Without --baseline, the baseline tree is a detached `git worktree` of --baseline-commit made in a
temporary folder and removed at the end. The machine is shared: read each ratio with the load
averages printed beside it (both trees run back to back, so both see much the same load)."""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._side_by_side import baseline_tree, child_cpu, load  # noqa: E402

BASELINE_COMMIT = "6c2f4d2"  # main when issue 27 was filed
FULL_CELLS = "text-tfidf,text-simulated,image-simulated"
STAGES = ("population", "worlds", "render", "screen", "estimate", "outcome_audit", "report", "track", "total")
TOTAL_RATIO_TARGET = 1 / 3
SECOND_IMAGE_RENDER_TARGET_S = 3.0


STORE_READ = """
import os, sys, time
from hydra import compose, initialize_config_dir
from popfair.case.population import PopulationCase
from popfair.runtime.paths import CONF_DIR
from popfair.render.base import render_all
with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
    cfg = compose(config_name="config", overrides=sys.argv[1:] + ["tracking=none"])
experiment = PopulationCase.from_config(cfg)
profiles = experiment.sample()
wall, cpu = time.perf_counter(), time.process_time()
documents = render_all(experiment.renderer, profiles.table, profiles.jobs, progress=False, store=experiment.documents)
print(f"{len(documents)} {time.perf_counter() - wall:.3f} {time.process_time() - cpu:.3f}")
"""


def store_read(folder: str, overrides: list[str], env: dict[str, str]) -> str:
    """Wall and CPU seconds of rendering an image case's pages again from the sweep's document store
    (the second image case's render stage, without the rest of the case): CPU seconds do not grow
    with the load average, so they show what a quiet machine's wall time would be."""
    out = subprocess.run(
        [sys.executable, "-c", STORE_READ, *overrides, f"cache_dir={folder}/.popfair_cache"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    n, wall, cpu = out.stdout.split()[-3:]
    return f"{n} image pages from the document store: {float(wall):.2f} s wall, {float(cpu):.2f} s CPU (load {load()})"


def sweep(tree: Path, overrides: list[str], label: str, image_case: list[str] | None = None) -> dict:
    """Run one sweep of `tree`'s popfair in a fresh folder; its wall, CPU, load and per-case stage
    times; with `image_case` (overrides of one image case), the store read of its pages after."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    env.update(PYTHONPATH=str(tree), DATAFRAME_FRAMEWORK="pandas", MPLBACKEND="Agg", HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="popfair-bench-grid-") as tmp:
        args = [sys.executable, "-m", "popfair", "-m", *overrides, f"hydra.sweep.dir={tmp}/multirun"]
        before = load()
        start, cpu = time.perf_counter(), child_cpu()
        out = subprocess.run(args, cwd=tmp, capture_output=True, text=True, env=env, check=False)
        wall, cpu = time.perf_counter() - start, child_cpu() - cpu
        if out.returncode != 0:
            raise SystemExit(
                f"{label}: popfair {' '.join(overrides)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
            )
        cases = case_times(Path(tmp) / "mlruns" / "mlflow.db", out.stdout)
        after = load()
        reread = store_read(tmp, image_case, env) if image_case else None
    return {
        "label": label,
        "wall": wall,
        "cpu": cpu,
        "load_before": before,
        "load_after": after,
        "cases": cases,
        "store_read": reread,
    }


def case_times(database: Path, stdout: str) -> list[tuple[str, dict[str, float]]]:
    """(case name, {stage: seconds}) of every case run, in start order: the `time.<stage>_s` metrics
    of its MLflow run, plus `track` and `total` from its summary line (the track stage ends after
    the metrics are logged)."""
    printed = {
        name: {stage: float(seconds) for stage, seconds in re.findall(r"(\w+) ([\d.]+)s", line)}
        for name, line in re.findall(r"=== popfair case: (\S+) ===.*?\n(time: [^\n]*)", stdout, flags=re.S)
    }
    with sqlite3.connect(database) as db:
        runs = db.execute(
            "SELECT r.run_uuid, t.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'case_name' "
            "ORDER BY r.start_time"
        ).fetchall()
        cases = []
        for run, name in runs:
            metrics = db.execute(
                "SELECT key, value FROM latest_metrics WHERE run_uuid = ? AND key LIKE 'time.%'", (run,)
            ).fetchall()
            times = {
                stage: printed.get(name, {})[stage] for stage in ("track", "total") if stage in printed.get(name, {})
            }
            times.update({key[len("time.") : -len("_s")]: value for key, value in metrics})
            cases.append((name, times))
    return cases


def report(result: dict) -> None:
    print(
        f"\n--- {result['label']}: {len(result['cases'])} cases, {result['wall']:.1f} s wall, "
        f"{result['cpu']:.1f} CPU s (load {result['load_before']} before, {result['load_after']} after)"
    )
    stages = [s for s in STAGES if any(s in times for _, times in result["cases"])]
    print(f"  {'case':58s}" + "".join(f"{s:>14s}" for s in stages))
    sums: dict[str, float] = defaultdict(float)
    for name, times in result["cases"]:
        print(f"  {name:58s}" + "".join(f"{times.get(s, float('nan')):14.2f}" for s in stages))
        for stage in stages:
            sums[stage] += times.get(stage, 0.0)
    print(f"  {'sum of stages':58s}" + "".join(f"{sums[s]:14.2f}" for s in stages))
    if result["store_read"]:
        print(f"  read again: {result['store_read']}")


def second_image_render(result: dict) -> float | None:
    renders = [times.get("render") for name, times in result["cases"] if "-image-" in f"-{name}-"]
    return renders[1] if len(renders) > 1 and renders[1] is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="source tree of the baseline (default: a worktree of --baseline-commit)")
    parser.add_argument("--baseline-commit", default=BASELINE_COMMIT)
    parser.add_argument("--occupation", default="nurse")
    parser.add_argument("--n", default="null", help="population.n of the full-size grid (null = every record)")
    parser.add_argument("--cells", default=FULL_CELLS, help="format_model cells of the full-size grid")
    parser.add_argument("--skip-baseline", action="store_true", help="time this tree only")
    parser.add_argument("--skip-full", action="store_true", help="skip the full-size 6-case grid")
    parser.add_argument("--grid40", action="store_true", help="also the 40-case offline grid at population.n=1000")
    args = parser.parse_args()

    full = [
        "experiment=popresume_grid_offline",
        f"occupation={args.occupation}",
        f"format_model={args.cells}",
        "protected_attr=gender,race",
        f"population.n={args.n}",
    ]
    grid40 = ["experiment=popresume_grid_offline"]
    runs = ([] if args.skip_full else [("full", full)]) + ([("grid40", grid40)] if args.grid40 else [])
    print(f"load average {load()} at start; {os.cpu_count()} CPUs")
    with baseline_tree(args.baseline, args.baseline_commit, prefix="popfair-bench-baseline-") as baseline:
        trees = ([] if args.skip_baseline else [("baseline " + args.baseline_commit, baseline)]) + [("this tree", ROOT)]
        # warm each tree's entries of the population disk cache, so that neither pays the cold fit
        warm = ["experiment=popresume_grid_offline", f"occupation={args.occupation}", "population.n=50"]
        for label, tree in trees:
            sweep(tree, [*warm, "format_model=text-tfidf", "protected_attr=gender", "estimator=outcome_gap"], label)
        for name, overrides in runs:
            image_case = [
                *[o for o in overrides if not o.startswith(("format_model=", "protected_attr="))],
                "format_model=image-simulated",
                "protected_attr=race",
            ]
            results = {
                label: sweep(
                    tree,
                    overrides,
                    f"{name} grid, {label}",
                    image_case if tree == ROOT and name == "full" and "image-simulated" in args.cells else None,
                )
                for label, tree in trees
            }
            for result in results.values():
                report(result)
            mine = results["this tree"]
            if name == "full":
                render = second_image_render(mine)
                if render is not None:
                    verdict = "PASS" if render <= SECOND_IMAGE_RENDER_TARGET_S else "FAIL"
                    print(f"  second image case's render stage: {render:.2f} s (target <= 3 s): {verdict}")
            if len(results) == 2:
                base = results["baseline " + args.baseline_commit]
                ratio = mine["wall"] / base["wall"]
                verdict = "PASS" if ratio <= TOTAL_RATIO_TARGET else "FAIL"
                target = f" (target <= {TOTAL_RATIO_TARGET:.3f}): {verdict}" if name == "full" else ""
                print(
                    f"  {name} grid total wall: this tree {mine['wall']:.1f} s / baseline {base['wall']:.1f} s "
                    f"= {ratio:.3f}{target}"
                )


if __name__ == "__main__":
    main()
