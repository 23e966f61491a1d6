"""Console summary of one case: the effects table, notes and how to open MLflow."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from popfair.types import Effects


def format_effects(effects: Effects) -> str:
    table = effects.table.copy()
    with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 140, "display.max_columns", 20):
        return table.to_string()


def timing_line(timings: Mapping[str, float], total: float | None = None) -> str:
    """One line of stage times, e.g. `time: population 2.1s | render 0.8s | ... | total 17.3s`
    (`total`: the case's wall time, start-up after Hydra included; default the stages' sum)."""
    stages = " | ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items())
    return f"time: {stages} | total {sum(timings.values()) if total is None else total:.1f}s"


def summary(
    case_name: str,
    effects: Effects,
    run_id: str | None,
    n_rows: int,
    n_failed: int,
    tracking_uri: str,
    timings: Mapping[str, float] | None = None,
    total: float | None = None,
    failed_label: str = "failed screens",
) -> str:
    """The case's closing lines; `failed_label` names what `n_failed` counts (a table case drops rows,
    it screens nothing)."""
    lines = [
        f"\n=== popfair case: {case_name} ===",
        f"applicants: {n_rows}   {failed_label}: {n_failed}",
        format_effects(effects),
        f"case label: {effects.case}",
    ]
    if run_id:
        lines += [f"MLflow run id: {run_id}", f"open the UI:   mlflow ui --backend-store-uri {tracking_uri}"]
    if timings:
        lines.append(timing_line(timings, total))
    return "\n".join(lines)
