"""Figures of one case (matplotlib `Figure` objects, no pyplot state, Agg-safe): the effects forest
plot (one estimate or observational vs interventional side by side), the impact ratio chart, the
rates and impact ratios by period (the trend chart), and
the population's age-vs-experience and Q-Q plots. Estimators and the population ask for them as
data (`popfair.core.types.Plot` artifacts) and `draw` renders them when the run is logged; the sweep report reuses `forest_plot` so a report and a run's
artifact look alike. matplotlib is imported when drawing, which keeps `import popfair` light."""

from __future__ import annotations

import hashlib
import io
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import pandas as pd

from popfair.core.types import Plot
from popfair.population.cache import cached_path, mark_used, write_atomically

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Series = tuple[tuple[str, str, str], ...]
T = TypeVar("T", bytes, Future)


SIGNIFICANT, NOT_SIGNIFICANT = "#c0392b", "0.45"  # colour follows significance: red where the CI excludes 0
MARKERS = ("o", "s", "^", "D")  # one per method drawn side by side (the design, DML-UCA, ...)
PALE_FLAG = "#f1a9a0"  # an impact ratio below the line whose flag does not survive the test


def forest_plot(
    table: pd.DataFrame, title: str = "Path-specific effects", series: Series = (("", "", "C0"),)
) -> Figure:
    """Forest plot of effect estimates with CI whiskers. `series` lists (column prefix, legend
    label, colour) per estimate drawn side by side (e.g. observational and interventional): the
    method is the marker's shape (the colour entry is unused). Colour follows significance in every
    series: effects whose `significant` flag is set (a second series: whose CI excludes 0) are red and
    filled, the others grey and hollow. An effect no method estimates is marked "not identified" on
    its row; one a second method does not identify (`<prefix>identified` false) is marked "n.i." at
    its place. The x axis names the unit (column `unit`). The legend sits under the axes, off the data."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 3.4 + 0.3 * (len(series) - 1)), layout="constrained")
    ax = fig.add_subplot()
    rows = list(table.index)[::-1]
    ypos = np.arange(len(rows), dtype=float)
    offsets = np.linspace(0.15, -0.15, len(series)) if len(series) > 1 else [0.0]
    missing = np.ones(len(rows), bool)
    for index, (offset, (prefix, label, _colour)) in enumerate(zip(offsets, series)):
        est = table.loc[rows, prefix + "estimate"].to_numpy(float)
        lo = table.loc[rows, prefix + "ci_low"].to_numpy(float)
        hi = table.loc[rows, prefix + "ci_high"].to_numpy(float)
        missing &= ~np.isfinite(est)
        y = ypos + offset
        # colour follows significance in every series (the series' own flag, else its CI excluding 0);
        # the method is the marker's shape
        if prefix + "significant" in table:
            sig = table.loc[rows, prefix + "significant"].fillna(False).to_numpy(bool)
        else:
            sig = (lo > 0) | (hi < 0)
        marker = MARKERS[index % len(MARKERS)]
        ax.hlines(y[sig], lo[sig], hi[sig], color=SIGNIFICANT, lw=2)
        ax.hlines(y[~sig], lo[~sig], hi[~sig], color=NOT_SIGNIFICANT, lw=2)
        ax.scatter(est[sig], y[sig], color=SIGNIFICANT, marker=marker, zorder=3)
        ax.scatter(est[~sig], y[~sig], facecolor="white", edgecolor=NOT_SIGNIFICANT, marker=marker, zorder=3)
        if len(series) > 1:  # the method's legend entry: its marker, in neutral grey
            ax.scatter([], [], marker=marker, facecolor="0.3", edgecolor="0.3", label=label)
            if prefix + "identified" in table:  # a method that does not identify an effect says so on its row
                for yy in y[~table.loc[rows, prefix + "identified"].fillna(False).to_numpy(bool)]:
                    ax.text(0.01, yy, f"{label.split(' ')[0]}: n.i.", transform=ax.get_yaxis_transform(), ha="left", va="center",
                            fontsize=7, style="italic", color="0.35")  # fmt: skip
    ax.scatter([], [], color=SIGNIFICANT, label="95% CI excludes 0")
    ax.scatter([], [], facecolor="white", edgecolor=NOT_SIGNIFICANT, label="CI covers 0")
    ax.axvline(0.0, color="0.5", lw=1, ls="--")
    if missing.all():
        ax.set_xlim(-1, 1)
    for y in ypos[missing]:  # inside the axes, in axes coordinates across: wherever the data lie
        ax.text(0.5, y, "not identified", transform=ax.get_yaxis_transform(), ha="center", va="center",
                fontsize=8, style="italic", color="0.35",
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "0.8"})  # fmt: skip
    ax.set_yticks(ypos, rows)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    units = list(dict.fromkeys(table["unit"].dropna().astype(str))) if "unit" in table else []
    ax.set_xlabel(f"effect ({units[0]})" if len(units) == 1 else "effect")  # the title says which way is positive
    ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


def impact_ratio_figure(
    table: pd.DataFrame, title: str = "", *, dimensions: Mapping[str, str], flag_below: float, alpha: float
) -> Figure:
    """Horizontal bars of impact ratios with CIs, one panel per metric with the dimensions stacked
    under their titles, and the four-fifths line. `table` holds every row (metric, dimension,
    category, status, impact_ratio, ci_low, ci_high, flag); `dimensions` maps each dimension to
    its title, in order. One panel per metric rather than per metric x dimension: the chart is
    drawn for every case, and matplotlib's cost is per axes and label (with the placement below:
    0.23 s instead of 0.56 s)."""
    from matplotlib.figure import Figure

    rows = table[table["status"] == "included"]
    metrics: Sequence[str] = list(dict.fromkeys(table["metric"])) or [""]
    panels = [_ratio_panel(rows[rows["metric"] == metric], dimensions) for metric in metrics]
    # Placed in inches from the labels' lengths, not by a layout engine: laying out measures every
    # label's extent, a third of the drawing time of a chart that is drawn for every case.
    label_in = 0.2 + IN_PER_CHAR * max(len(label) for labels, _, _ in panels for label in labels)
    plot_in, gap_in, top_in, bottom_in = 4.2, 0.35, 1.1, 0.55
    bars_in = 0.22 * max(len(labels) for labels, _, _ in panels)
    width, height = len(panels) * (label_in + plot_in + gap_in), top_in + bars_in + bottom_in
    fig = Figure(figsize=(width, height))
    for i, (metric, (labels, headers, shown)) in enumerate(zip(metrics, panels)):
        left = i * (label_in + plot_in + gap_in) + label_in
        ax = fig.add_axes((left / width, bottom_in / height, plot_in / width, bars_in / height))
        ypos = -shown["position"].to_numpy(float)  # first dimension on top
        ratio = shown["impact_ratio"].to_numpy(float)
        lo, hi = shown["ci_low"].to_numpy(float), shown["ci_high"].to_numpy(float)
        flag = shown["flag"].astype(bool).to_numpy()
        survives = flag & shown.get("flag_survives", shown["flag"]).astype(bool).to_numpy()
        # colour follows the test: a flag that chance alone could produce is pale, not alarm red
        ax.barh(ypos, np.nan_to_num(ratio), color=np.where(survives, SIGNIFICANT, np.where(flag, PALE_FLAG, "#2e86c1")))
        err = np.vstack([np.clip(ratio - lo, 0, None), np.clip(hi - ratio, 0, None)])
        ax.errorbar(ratio, ypos, xerr=np.nan_to_num(err), fmt="none", ecolor="black", capsize=3)
        ax.axvline(flag_below, color="#c0392b", linestyle="--", linewidth=1)
        ax.set_yticks(-np.arange(len(labels), dtype=float), labels, fontsize=8)
        for j in headers:
            ax.get_yticklabels()[j].set_fontweight("bold")
        ax.set_ylim(-len(labels) + 0.4, 0.6)
        ax.set_xlim(0, 1.05)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("impact ratio (rate / highest rate)", fontsize=9)
    fig.suptitle(
        title
        or f"Impact ratios with {round((1 - alpha) * 100)}% bootstrap CIs; "
        f"dashed line: {flag_below:g} (four-fifths rule)\nred: below {flag_below:g}, the flag survives the test of no "
        f"difference\npale red: below {flag_below:g}, within chance",
        fontsize=10,
        y=1 - 0.25 / height,
    )
    return fig


IN_PER_CHAR = 0.056  # width of a character of an 8-point tick label (DejaVu Sans, bold: at most this)


def _ratio_panel(rows: pd.DataFrame, dimensions: Mapping[str, str]) -> tuple[list[str], list[int], pd.DataFrame]:
    """One metric's labels top to bottom (each dimension's title, then its categories), the
    positions of the titles, and its rows with their `position`."""
    labels: list[str] = []
    headers: list[int] = []
    shown = []
    for dimension, dimension_title in dimensions.items():
        block = rows[rows["dimension"] == dimension]
        headers.append(len(labels))
        labels.append(dimension_title)
        shown.append(block.assign(position=np.arange(len(labels), len(labels) + len(block))))
        labels += [str(c) for c in block["category"]]
    return labels, headers, pd.concat(shown)


def qq_figure(points: pd.DataFrame, title: str = "") -> Figure:
    """Q-Q plot of standardised experience against the normal (columns theoretical, empirical,
    weight: marker size), with the identity line."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.5, 4.5), layout="constrained")
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

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for gender, rows in stats.groupby("gender", sort=True):
        ax.plot(rows["age"], rows["mean"], label=f"{gender} mean")
        ax.fill_between(rows["age"], rows["p10"], rows["p90"], alpha=0.2)
    ages = np.arange(18, 45)
    ax.plot(ages, ages - 18, "k--", lw=1, label="age - 18 (upper bound)")
    ax.set(xlabel="age", ylabel="years of experience", title=title)
    ax.legend()
    return fig


MIN_TREND_N = 50  # applicants of a category in a period below which its point is drawn as small


def trend_figure(
    table: pd.DataFrame,
    title: str = "",
    *,
    periods: Sequence[str],
    dimensions: Mapping[str, str],
    flag_below: float,
    flagged: Mapping[str, Sequence[str]],
) -> Figure:
    """Selection (scoring) rates and impact ratios by period with their CIs: one row of two panels
    per dimension (rates left, ratios right, the four-fifths line dashed), a line per category with
    its CI as a band, the periods whose change test flagged the dimension shaded. Small categories
    are drawn as small: a period with fewer than MIN_TREND_N applicants of a category is a hollow
    point off the line, and a category small in most periods a thin dotted line, so its swings
    (a wide band) do not dominate. The legend sits right of the panels, off the data. `table`:
    period, dimension, category, n_applicants, rate, rate_ci_low, rate_ci_high, impact_ratio,
    ci_low, ci_high (the included rows)."""
    from matplotlib.figure import Figure

    rows = list(dimensions) or [""]
    fig = Figure(figsize=(11.0, 2.9 * len(rows) + 0.5), layout="constrained")
    axes = fig.subplots(len(rows), 2, squeeze=False)
    x_of = {p: i for i, p in enumerate(periods)}
    sizes = table["n_applicants"] if "n_applicants" in table else pd.Series(MIN_TREND_N, index=table.index)
    for (rate_ax, ratio_ax), dimension in zip(axes, rows):
        block = table[table["dimension"] == dimension]
        for colour, category in enumerate(dict.fromkeys(block["category"])):
            line = block[block["category"] == category].sort_values("period", key=lambda s: s.map(x_of))
            x = line["period"].map(x_of).to_numpy(float)
            small = (sizes.loc[line.index] < MIN_TREND_N).to_numpy()
            mostly_small = small.mean() > 0.5
            label = str(category) + (f" (n < {MIN_TREND_N} per period)" if mostly_small else "")
            for ax, (value, low, high) in (
                (rate_ax, ("rate", "rate_ci_low", "rate_ci_high")),
                (ratio_ax, ("impact_ratio", "ci_low", "ci_high")),
            ):
                y = line[value].to_numpy(float)
                lo, hi = line[low].to_numpy(float), line[high].to_numpy(float)
                shown = np.where(small, np.nan, y)  # the line joins the periods with enough applicants
                c = f"C{colour % 10}"
                if mostly_small:  # thin whiskers, not a band: a wide band would cover the others
                    err = np.vstack([np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)])
                    ax.errorbar(x, y, yerr=np.nan_to_num(err), fmt="none", ecolor=c, elinewidth=0.6, alpha=0.5)
                else:
                    ax.fill_between(x, lo, hi, color=c, alpha=0.13, lw=0)
                ax.plot(x, shown, color=c, lw=0.8 if mostly_small else 1.5, ls=":" if mostly_small else "-",
                        marker="o", ms=3.5, label=label if ax is ratio_ax else None)  # fmt: skip
                ax.scatter(x[small], y[small], s=14, facecolor="white", edgecolor=c, lw=0.8, zorder=3)
        for period in flagged.get(dimension, ()):
            for ax in (rate_ax, ratio_ax):
                ax.axvspan(x_of[period] - 0.4, x_of[period] + 0.4, color="#f5b7b1", alpha=0.5, lw=0)
        ratio_ax.axhline(flag_below, color="#c0392b", ls="--", lw=1)
        ratio_ax.set_ylim(0, 1.08)
        title_of = dimensions.get(dimension, dimension)
        rate_ax.set(ylabel="rate", title=f"{title_of}: rates")
        ratio_ax.set(ylabel="impact ratio", title=f"{title_of}: impact ratios (shaded: changed)")
        for ax in (rate_ax, ratio_ax):
            ax.set_xticks(range(len(periods)), list(periods), fontsize=8, rotation=45 if len(periods) > 8 else 0)
            ax.set_xlim(-0.5, len(periods) - 0.5)
        ratio_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.suptitle(
        (title or "Rates and impact ratios by period")
        + f"\nbands and whiskers: CIs; hollow points: fewer than {MIN_TREND_N} applicants of the category in that period",
        fontsize=10,
    )
    return fig


DRAW: dict[str, Callable[..., Figure]] = {
    "forest": forest_plot,
    "impact_ratio": impact_ratio_figure,
    "trend": trend_figure,
    "qq": qq_figure,
    "age_experience": age_experience_figure,
}


def draw(plot: Plot) -> Figure:
    """The matplotlib Figure of a `Plot` artifact."""
    return DRAW[plot.kind](plot.table, plot.title, **plot.options)


# content key of a Plot -> its PNG (or the tracking worker drawing it), for the cases of one process
_DRAWN: dict[str, bytes | Future[bytes]] = {}
_DRAWN_MAX = 64


def png(figure: Plot | Figure, dpi: int = 120) -> bytes:
    """A `Plot` or Figure as the PNG bytes a run logs. A Plot equal to one this process has drawn
    (the population's figures, the same for every screener cell of a sweep) or had drawn
    (`draw_beside`) is not drawn again; nor, on this machine, one marked `keep` that any process
    has drawn (kept in popfair's disk cache, keyed by the Plot, this module's source and
    matplotlib's version)."""
    key = kept = None
    if isinstance(figure, Plot):
        key = _key(figure, dpi)
        found = _DRAWN.get(key)
        if isinstance(found, Future):
            try:
                return _remember(key, found.result())
            except Exception:  # noqa: BLE001 - the worker could not draw it: drawn here
                found = None
        if found is not None:
            return found
        kept = _kept_path(key) if figure.keep else None
        if kept is not None and kept.is_file():
            mark_used(kept)
            return _remember(key, kept.read_bytes())
        figure = draw(figure)
    buffer = io.BytesIO()
    # the figures lay themselves out; bbox_inches="tight" would draw each once more to measure it
    figure.savefig(buffer, format="png", dpi=dpi)
    if kept is not None:
        write_atomically(kept, buffer.getvalue())
    return buffer.getvalue() if key is None else _remember(key, buffer.getvalue())


def draw_beside(figure: Plot, dpi: int, submit: Callable[..., Future[bytes]]) -> None:
    """Have `submit` (the tracking worker's queue, popfair.track.background) draw `figure` now: `png`
    of an equal Plot in this process then takes the worker's bytes instead of importing matplotlib
    (0.3 s) and drawing it."""
    _remember(_key(figure, dpi), submit(png, figure, dpi))


def _key(figure: Plot, dpi: int) -> str:
    return hashlib.sha256(
        pickle.dumps((figure.kind, figure.title, dict(figure.options), figure.table, dpi))
    ).hexdigest()


def _remember(key: str, drawn: T) -> T:
    """`drawn` kept in this process's memo of PNGs (the oldest out beyond _DRAWN_MAX)."""
    _DRAWN.pop(key, None)  # a drawing the worker finished replaces its pending entry
    if len(_DRAWN) >= _DRAWN_MAX:
        del _DRAWN[next(iter(_DRAWN))]
    _DRAWN[key] = drawn
    return drawn


def _kept_path(key: str) -> Path | None:
    """Where a kept Plot's PNG lives (None: the disk cache is off)."""
    import matplotlib

    return cached_path("figure", [key, matplotlib.__version__], [sys.modules[__name__]], suffix=".png")
