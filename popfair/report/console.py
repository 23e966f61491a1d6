"""Console summary of one case: the effects table, notes and how to open MLflow."""
from __future__ import annotations

import pandas as pd

from popfair.types import Effects


def format_effects(effects: Effects) -> str:
    table = effects.table.copy()
    with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 140,
                           "display.max_columns", 20):
        return table.to_string()


def summary(case_name: str, effects: Effects, run_id: str | None, n_rows: int, n_failed: int,
            tracking_uri: str) -> str:
    lines = [f"\n=== popfair case: {case_name} ===",
             f"applicants: {n_rows}   failed screens: {n_failed}",
             format_effects(effects),
             f"case label: {effects.case}"]
    if run_id:
        lines += [f"MLflow run id: {run_id}",
                  f"open the UI:   mlflow ui --backend-store-uri {tracking_uri}"]
    return "\n".join(lines)
