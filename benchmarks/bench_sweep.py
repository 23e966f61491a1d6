"""Sweep-level figures: (1) the dry-run plan of the full 120-case PopResume grid and the 27-case
callback panel (every PUMS record, 6,006 postings; no keys, nothing called) in one process each,
(2) the comparison report of a paper-sized sweep (120 PopResume cases + 27 panel cases) read back
from a sqlite MLflow store: CSV, Markdown, HTML with 120 forest plots and the panel charts.

Run from the repository root: python benchmarks/bench_sweep.py [--skip-dry-runs] [--skip-report] [--estimator pse_dml]"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._side_by_side import child_cpu  # noqa: E402
from popfair.report.sweep import write_report  # noqa: E402
from popfair.track.mlflow_tracker import MlflowTracker  # noqa: E402

PSE = ["TE", "NDE", "NIE", "BIE", "RIE"]


def _sweep_param(experiment: str, key: str) -> list[str]:
    """One sweep parameter of a grid preset, as its list of values (the cases the paper ran)."""
    params = yaml.safe_load((ROOT / "conf" / "experiment" / f"{experiment}.yaml").read_text())["hydra"]["sweeper"]
    return [value.strip() for value in params["params"][key].split(",")]


CELLS = [cell.split("-", 1) for cell in _sweep_param("popresume_grid", "format_model")]  # (format, model)
OCCUPATIONS = _sweep_param("popresume_grid", "occupation")
PANEL_CELLS = [cell.split("-", 1) for cell in _sweep_param("callback_panel", "panel_cell")]  # (axis, model)


DRY_RUN_TARGETS_S = {"popresume_grid": 30.0, "callback_panel": 10.0}  # issue 18, on 2 cores


def dry_run(experiment: str, estimator: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu = time.perf_counter(), child_cpu()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "popfair",
                "-m",
                f"experiment={experiment}",
                "dry_run=true",
                *([f"estimator={estimator}"] if experiment == "popresume_grid" else []),
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": str(ROOT)},
        )
        seconds, cpu = time.perf_counter() - start, child_cpu() - cpu
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    summary = out.stdout[out.stdout.index("=== popfair sweep") :]
    target = DRY_RUN_TARGETS_S[experiment]
    print(
        f"\n--- dry run experiment={experiment}: {seconds:.1f} s wall, {cpu:.1f} CPU s (this process and its "
        f"forked workers)  target <= {target:.0f} s: {'PASS' if seconds <= target else 'FAIL'}  "
        f"(load {os.getloadavg()[0]:.2f})\n{summary}"
    )


def report_benchmark() -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tracker = MlflowTracker(uri=f"sqlite:///{tmp}/mlflow.db", artifact_root=f"{tmp}/artifacts")
        parent = tracker.start_parent("bench", {"popfair.sweep": "parent"})
        start = time.perf_counter()
        for fmt, model in CELLS:
            for occupation in OCCUPATIONS:
                for attr in ("gender", "race"):
                    est = rng.normal(0, 1, 5)
                    metrics = {
                        f"{e}.{k}": v
                        for e, x in zip(PSE, est)
                        for k, v in (("estimate", x), ("ci_low", x - 0.6), ("ci_high", x + 0.6))
                    }
                    with tracker.run(
                        f"{occupation}-{attr}-{fmt}-{model}",
                        {
                            "occupation": occupation,
                            "protected_attr": attr,
                            "renderer": fmt,
                            "choice.renderer": fmt,
                            "screener": model,
                            "estimator": "pse_dml",
                            "case": "direct discrimination" if abs(est[1]) > 0.6 else "none",
                        },
                        parent,
                    ) as run:
                        run.metrics(metrics)
        release = {model: i for i, model in enumerate(dict.fromkeys(model for _, model in PANEL_CELLS))}
        for attr, model in PANEL_CELLS:
            i = release[model]
            gap = rng.normal(0, 1.5)
            with tracker.run(
                f"panel-{attr}-{model}",
                {"protected_attr": attr, "screener": model, "estimator": "paired_gap"},
                parent,
            ) as run:
                run.params({"screener.release_date": f"{2023 + i // 5}-{1 + i % 12:02d}-01"})
                run.metrics(
                    {
                        "gap.estimate": gap,
                        "gap.ci_low": gap - 0.3,
                        "gap.ci_high": gap + 0.3,
                        "gap.b": 900,
                        "gap.c": 450,
                        "gap.n_pairs": 24024,
                        "gap.mcnemar_chi2": 140.0,
                        "gap.mcnemar_p": float(rng.uniform(0, 0.1)),
                        "gap.cluster_p": float(rng.uniform(0, 0.1)),
                    }
                )
        logged = time.perf_counter() - start
        start = time.perf_counter()
        files = write_report(tracker.uri, None, Path(tmp) / "report", parent_run_id=parent)
        seconds = time.perf_counter() - start
        size = files["report.html"].stat().st_size / 1e6
        print(
            f"\n--- report of 120 PopResume + 27 panel cases: {seconds:.1f} s "
            f"({len(files)} files, report.html {size:.1f} MB self-contained); logging them took {logged:.1f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--skip-dry-runs", action="store_true", help="only the report benchmark")
    parser.add_argument("--skip-report", action="store_true", help="only the dry runs")
    parser.add_argument("--estimator", default="pse_dml", help="estimator for the grid dry run")
    args = parser.parse_args()
    if not args.skip_dry_runs:
        dry_run("popresume_grid", args.estimator)
        dry_run("callback_panel", args.estimator)
    if not args.skip_report:
        report_benchmark()


if __name__ == "__main__":
    main()
