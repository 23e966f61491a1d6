"""The auditor's report on decisions over time: impact ratios by period with what changed between
periods in plain words and the trend chart (`table.period`), and what a watch's look found and
whether its alert fired (`table.watch`). Blocks for `popfair.report.audit.table_blocks`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from popfair.estimate.impact_ratio.labels import DIMENSION_TITLES, category_label
from popfair.report.document import Block


def period_blocks(periods: Any, out: Path) -> list[Block]:
    """By period: what changed (one line per period), the ratios of each category per period with
    their CIs (one table per dimension, first metric), and the chart."""
    from popfair.track.figures import draw

    level = round((1 - periods.settings.alpha) * 100)
    blocks = [
        Block("h2", f"Impact ratios by {periods.period}"),
        Block(
            "text",
            f"The rows are split by the {periods.period} of their date, and each {periods.period}'s rates and impact "
            f"ratios are computed as for the whole table, with {level}% confidence intervals that account for the "
            "choice of the reference category. A change is tested per period against the periods before it: a "
            "likelihood-ratio test that the categories' rate ratios are those of the earlier periods (a change of "
            "the overall selection rate alone is not a change), with Holm's adjustment over every period and "
            "over sex and race/ethnicity, so a table with no change flags a period at most "
            f"{periods.settings.alpha:g} of the time.",
        ),
        Block("list", periods.sentences() + list(periods.notes)),
    ]
    table = periods.table()
    metric = table["metric"].iloc[0]
    for dimension, title in DIMENSION_TITLES.items():
        block = table[(table["metric"] == metric) & (table["dimension"] == dimension)]
        if block.empty:
            continue
        wide = block.assign(
            cell=[
                "excluded (small)"
                if status == "excluded"
                else (f"{ratio:.2f} [{low:.2f}, {high:.2f}]" if np.isfinite(ratio) else "")
                for status, ratio, low, high in zip(
                    block["status"], block["impact_ratio"], block["ci_low"], block["ci_high"]
                )
            ],
            category=[category_label(c) for c in block["category"]],
        ).pivot(index="category", columns="period", values="cell")
        wide = wide.reindex(columns=[p for p in periods.periods if p in wide.columns]).fillna("")
        blocks += [
            Block("h3", f"{title}: impact ratio by {periods.period} ({metric})"),
            Block("table", wide.reset_index(), caption=f"Impact ratio [{level}% CI] per {periods.period}."),
        ]
    path = out / "trend.png"
    draw(periods.plot()).savefig(path, dpi=100, bbox_inches="tight")
    blocks.append(
        Block(
            "figure",
            path,
            caption=f"Rates and impact ratios by {periods.period} with their CIs; shaded: a change flagged; dashed: "
            f"{periods.settings.flag_below:g}.",
        )
    )
    return blocks


def watch_blocks(look: Any) -> list[Block]:
    """What the watch's look read, its alert rule, and whether the alert fired."""
    blocks = [Block("h2", "Watch: the rows added since the last look"), Block("list", look.sentences())]
    if len(look.bounds):
        shown = look.bounds.assign(
            dimension=[DIMENSION_TITLES[d] for d in look.bounds["dimension"]],
            category=[category_label(c) for c in look.bounds["category"]],
            crossed=np.where(look.bounds["crossed"], "ALERT", ""),
        ).rename(columns={"low": "anytime_low", "high": "anytime_high"})
        blocks.append(
            Block(
                "table",
                shown.round(3),
                caption="Impact ratios with their anytime-valid intervals per window, after this look.",
            )
        )
    return blocks
