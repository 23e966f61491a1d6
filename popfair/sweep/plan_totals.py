"""A sweep's dry run ends with its totals: per screener, the sums of its cases' plans
(popfair.sweep.plan.Planner), and the sweep's TOTAL."""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["PLAN_SUMS", "format_totals", "plan_totals"]

PLAN_SUMS = [
    "cases",
    "documents",
    "calls",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "new_calls",
    "new_input_tokens",
    "new_output_tokens",
    "new_cost_usd",
]


def plan_totals(plans: list[dict[str, Any]]) -> pd.DataFrame:
    """Per-screener sums of case plans plus a TOTAL row (what a sweep's dry run prints at the end)."""
    table = pd.DataFrame(plans).assign(cases=1)
    per_model = table.groupby("screener")[PLAN_SUMS].sum()
    per_model.loc["TOTAL"] = per_model.sum()
    return per_model


def format_totals(totals: pd.DataFrame) -> str:
    shown = totals.copy()
    for column in ("cost_usd", "new_cost_usd"):
        shown[column] = shown[column].map("${:,.2f}".format)
    for column in [c for c in PLAN_SUMS if c not in ("cost_usd", "new_cost_usd")]:
        shown[column] = shown[column].map("{:,.0f}".format)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        return shown.to_string()
