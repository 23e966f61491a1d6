"""Figures of one case (matplotlib `Figure` objects, no pyplot state, Agg-safe): the effects forest
plot (one estimate or observational vs interventional side by side), the impact ratio chart, and
the population's age-vs-experience and Q-Q plots. Estimators and the population ask for them as
data (`popfair.types.Plot` artifacts) and `draw` renders them when the run is logged; the sweep report reuses `forest_plot` so a report and a run's
artifact look alike. matplotlib is imported when drawing, which keeps `import popfair` light."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from popfair.types import Plot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Series = tuple[tuple[str, str, str], ...]


def forest_plot(
    table: pd.DataFrame, title: str = "Path-specific effects", series: Series = (("", "", "C0"),)
) -> Figure:
    """Forest plot of effect estimates with CI whiskers. `series` lists (column prefix, legend
    label, colour) per estimate drawn side by side (e.g. observational and interventional). With
    one series, effects whose `significant` flag is set are drawn filled, the others hollow."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.2 + 0.3 * (len(series) - 1)))
    ax = fig.add_subplot()
    rows = list(table.index)[::-1]
    ypos = np.arange(len(rows), dtype=float)
    offsets = np.linspace(0.15, -0.15, len(series)) if len(series) > 1 else [0.0]
    for offset, (prefix, label, colour) in zip(offsets, series):
        est = table.loc[rows, prefix + "estimate"].to_numpy(float)
        lo = table.loc[rows, prefix + "ci_low"].to_numpy(float)
        hi = table.loc[rows, prefix + "ci_high"].to_numpy(float)
        y = ypos + offset
        ax.hlines(y, lo, hi, color=colour, lw=2)
        if len(series) > 1:
            ax.scatter(est, y, color=colour, zorder=3, label=label)
            continue
        sig = table.loc[rows, "significant"].to_numpy(bool) if "significant" in table else np.zeros(len(rows), bool)
        ax.scatter(est[sig], y[sig], color="C3", zorder=3, label="CI excludes 0")
        ax.scatter(est[~sig], y[~sig], facecolor="white", edgecolor=colour, zorder=3, label="CI covers 0")
    ax.axvline(0.0, color="0.5", lw=1, ls="--")
    ax.set_yticks(ypos, rows)
    ax.set_xlabel("effect on Y (positive favours x1)")
    ax.set_title(title)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def impact_ratio_figure(
    table: pd.DataFrame, title: str = "", *, dimensions: Mapping[str, str], flag_below: float, alpha: float
) -> Figure:
    """Horizontal bars of impact ratios with CIs, one panel per metric x dimension, and the
    four-fifths line. `table` holds every row (metric, dimension, category, status, impact_ratio,
    ci_low, ci_high, flag); `dimensions` maps each dimension to its title, in panel order."""
    from matplotlib.figure import Figure

    rows = table[table["status"] == "included"]
    metrics: Sequence[str] = list(dict.fromkeys(table["metric"]))
    tallest = max(1, rows.groupby(["metric", "dimension"]).size().max() if len(rows) else 1)
    fig = Figure(figsize=(13, 0.9 + len(metrics) * (0.8 + 0.32 * tallest)))
    axes = fig.subplots(len(metrics), len(dimensions), squeeze=False)
    for i, metric in enumerate(metrics):
        for j, (dimension, dimension_title) in enumerate(dimensions.items()):
            ax = axes[i][j]
            block = rows[(rows["metric"] == metric) & (rows["dimension"] == dimension)]
            ratio = block["impact_ratio"].to_numpy(float)
            lo, hi = block["ci_low"].to_numpy(float), block["ci_high"].to_numpy(float)
            ypos = np.arange(len(block))
            ax.barh(ypos, np.nan_to_num(ratio), color=np.where(block["flag"], "#c0392b", "#2e86c1"))
            err = np.vstack([np.clip(ratio - lo, 0, None), np.clip(hi - ratio, 0, None)])
            ax.errorbar(ratio, ypos, xerr=np.nan_to_num(err), fmt="none", ecolor="black", capsize=3)
            ax.axvline(flag_below, color="#c0392b", linestyle="--", linewidth=1)
            ax.set_yticks(ypos, [str(c) for c in block["category"]], fontsize=8)
            ax.set_xlim(0, 1.05)
            ax.set_title(f"{metric}: {dimension_title}", fontsize=9)
            if i == len(metrics) - 1:
                ax.set_xlabel("impact ratio (rate / highest rate)")
    fig.suptitle(
        title
        or f"Impact ratios with {round((1 - alpha) * 100)}% bootstrap CIs; "
        f"dashed line: {flag_below:g} (four-fifths rule)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def qq_figure(points: pd.DataFrame, title: str = "") -> Figure:
    """Q-Q plot of standardised experience against the normal (columns theoretical, empirical,
    weight: marker size), with the identity line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.5, 4.5))
    ax = fig.subplots()
    jitter = np.random.default_rng(0).normal(0, 0.02, len(points))
    ax.scatter(
        points["theoretical"] + jitter,
        points["empirical"],
        s=8 + 40 * points["weight"] / points["weight"].max(),
        alpha=0.5,
    )
    lim = [-2.5, 2.5]
    ax.plot(lim, lim, color="k", lw=1)
    ax.set(xlabel="normal quantile", ylabel="empirical quantile, standardised", title=title, xlim=lim, ylim=lim)
    return fig


def age_experience_figure(stats: pd.DataFrame, title: str = "") -> Figure:
    """Mean experience by age per gender with the 10th-90th percentile band (columns gender, age,
    mean, p10, p90) and the age - 18 upper bound."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for gender, rows in stats.groupby("gender", sort=True):
        ax.plot(rows["age"], rows["mean"], label=f"{gender} mean")
        ax.fill_between(rows["age"], rows["p10"], rows["p90"], alpha=0.2)
    ages = np.arange(18, 45)
    ax.plot(ages, ages - 18, "k--", lw=1, label="age - 18 (upper bound)")
    ax.set(xlabel="age", ylabel="years of experience", title=title)
    ax.legend()
    return fig


DRAW: dict[str, Callable[..., Figure]] = {
    "forest": forest_plot,
    "impact_ratio": impact_ratio_figure,
    "qq": qq_figure,
    "age_experience": age_experience_figure,
}


def draw(plot: Plot) -> Figure:
    """The matplotlib Figure of a `Plot` artifact."""
    return DRAW[plot.kind](plot.table, plot.title, **plot.options)
