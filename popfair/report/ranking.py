"""The ranking audits of a sweep (estimator `ranking`, experiment=ranking_panel*): one row per model x
job (is any group ranked differently, the lowest impact ratio and whether its flag survives the
reference-aware test, the first-position effect), and per model a forest of the rank-ordered logit's
group effects and position effects, one series per job."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from popfair.estimate.registry import in_section
from popfair.report.document import Block
from popfair.track.figures import forest_plot

COLOURS = [f"C{i}" for i in range(10)]


def ranking_effects(effects: pd.DataFrame) -> pd.DataFrame:
    """The effect rows of the ranking cases."""
    if effects.empty or "estimator" not in effects:
        return effects.iloc[0:0]
    return effects[effects["estimator"].isin(in_section("ranking"))]


def ranking_summary(rows: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per ranking case: trials, the logit's test of "no group differs" and of "no position
    effect", the lowest impact ratio, and the first shown position's log-worth with its CI."""
    metrics = runs.set_index("run_id")["metrics"]
    out = []
    for (model, job, run_id), case in rows.groupby(["model", "occupation", "run_id"], sort=True):
        values = metrics.get(run_id, {})
        first = case[case["effect"] == "logit.position.1"]
        out.append(
            {
                "model": model,
                "job": job,
                "trials": values.get("ranking.trials", np.nan),
                "groups_differ_p": values.get("ranking.no_group_differs_logit_p", np.nan),
                "position_effect_p": values.get("ranking.no_position_effect_logit_p", np.nan),
                "min_impact_ratio": values.get("ranking.min_impact_ratio", np.nan),
                "top1_test_p": values.get("ranking.no_group_differs_top1_p", np.nan),
                "first_position": first["estimate"].iloc[0] if len(first) else np.nan,
                "first_position_ci": (
                    f"[{first['ci_low'].iloc[0]:.3f}, {first['ci_high'].iloc[0]:.3f}]" if len(first) else ""
                ),
            }
        )
    return pd.DataFrame(out)


def model_forest(rows: pd.DataFrame, model: str) -> Figure:
    """The logit's group and position effects of one model, one series (colour) per job."""
    logit = rows[rows["effect"].str.startswith("logit.")]
    jobs = sorted(logit["occupation"].unique())
    wide = pd.DataFrame(index=pd.Index(list(dict.fromkeys(logit["effect"])), name="effect"))
    for job in jobs:
        part = logit[logit["occupation"] == job].set_index("effect")
        for column in ("estimate", "ci_low", "ci_high"):
            wide[f"{job}:{column}"] = part[column]
    wide.index = [name.removeprefix("logit.") for name in wide.index]
    series = [(f"{job}:", job, COLOURS[i % len(COLOURS)]) for i, job in enumerate(jobs)]
    figure = forest_plot(wide, f"{model}: log-worth vs the reference group / position", series=tuple(series))
    figure.axes[0].set_xlabel("log-worth (rank-ordered logit; 0 = the reference)")
    return figure


def ranking_blocks(
    effects: pd.DataFrame,
    runs: pd.DataFrame,
    save: Callable[[Figure, str], Path],
    csv: Callable[[str, pd.DataFrame], None],
) -> list[Block]:
    """Report blocks of the ranking cases (none when the sweep has none)."""
    rows = ranking_effects(effects)
    if rows.empty:
        return []
    summary = ranking_summary(rows, runs)
    csv("ranking_summary.csv", summary)
    csv("ranking_effects.csv", rows)
    blocks = [
        Block("h2", "Ranking audits"),
        Block(
            "text",
            "Per model and job: the rank-ordered logit's Wald tests of 'no group differs' and 'no position "
            "effect' (trial-clustered), the lowest LL144 impact ratio of the top-1 rates and the p-value of "
            "the reference-aware test, and the log-worth of the first shown position against the last.",
        ),
        Block("table", summary),
    ]
    for model in sorted(rows["model"].unique()):
        path = save(model_forest(rows[rows["model"] == model], model), f"ranking_forest_{model}.png")
        blocks.append(Block("figure", path))
    return blocks
