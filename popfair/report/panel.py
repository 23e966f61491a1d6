"""Model-panel report of the paired callback audit ("Can LLMs Hire Fairly?", Tables and Figure):
one table per axis, a chart of gaps by release date and the race-gender correlation across models.

Input: a DataFrame with one row per model x axis holding `paired_gap`'s outputs (gap_pp, ci_low,
ci_high, b, c, n_pairs, mcnemar_chi2, mcnemar_p, cluster_p) plus model, axis and release_date.
`panel_row` builds such a row from a `PairedGapResult` or from a paired_gap Effects table row, so a
sweep (one MLflow run per model x axis) can assemble the panel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy import stats  # noqa: E402

from popfair.core.errors import DataError, EstimationError, require  # noqa: E402
from popfair.core.formats import format_p
from popfair.estimate.gap.paired import PairedGapResult  # noqa: E402

PANEL_INPUT_COLUMNS = (
    "model",
    "axis",
    "release_date",
    "gap_pp",
    "ci_low",
    "ci_high",
    "b",
    "c",
    "n_pairs",
    "mcnemar_chi2",
    "mcnemar_p",
    "cluster_p",
)
BONFERRONI_P = ("cluster_p", "mcnemar_p")
# "Can LLMs Hire Fairly?" tests 14 models on race and 13 on gender and prints per-model thresholds
# p < 0.0036 (0.05/14 = 0.00357) and p < 0.005 for gender: a slip for 0.05/13 = 0.00385. popfair
# uses alpha / m of each axis's own family; the printed figures are kept for the report's note.
PAPER_PANEL_SIZE = {"race": 14, "gender": 13}
PAPER_PRINTED_THRESHOLD = {"race": 0.0036, "gender": 0.005}


def bonferroni_note(axis: str, m: int, alpha: float = 0.05) -> str:
    """How an axis's Bonferroni threshold compares with the one the paper prints."""
    note = f"Bonferroni over {m} models: p < {alpha:g}/{m} = {alpha / m:.4f}"
    printed = PAPER_PRINTED_THRESHOLD.get(axis)
    if printed is not None and m == PAPER_PANEL_SIZE[axis] and alpha == 0.05:
        exact = alpha / m
        note += (
            f" (the paper prints {printed:g}" + (", a slip for 0.05/13" if abs(printed - exact) > 5e-4 else "") + ")"
        )
    return note


def panel_row(model: str, axis: str, release_date: str, result: PairedGapResult | Mapping[str, Any]) -> dict:
    """One panel input row from a PairedGapResult or a paired_gap Effects row (`estimate` = gap_pp)."""
    values = result.as_dict() if isinstance(result, PairedGapResult) else dict(result)
    if "gap_pp" not in values and "estimate" in values:
        values["gap_pp"] = values["estimate"]
    row: dict[str, Any] = {"model": model, "axis": axis, "release_date": release_date}
    row.update({col: values[col] for col in PANEL_INPUT_COLUMNS[3:] if col in values})
    return row


def significance_stars(p: pd.Series) -> pd.Series:
    """'***' p < .001, '**' p < .01, '*' p < .05, else ''."""
    return pd.Series(np.select([p < 0.001, p < 0.01, p < 0.05], ["***", "**", "*"], ""), index=p.index)


def _validated(results: pd.DataFrame) -> pd.DataFrame:
    missing = [col for col in PANEL_INPUT_COLUMNS if col not in results.columns]
    if missing:
        raise DataError(
            f"panel results lack columns {missing}; one row per model x axis needs "
            f"{list(PANEL_INPUT_COLUMNS)} (panel_row builds them)"
        )
    duplicated = results.duplicated(["model", "axis"])
    if duplicated.any():
        raise DataError(
            f"panel results repeat model x axis rows: {results.loc[duplicated, ['model', 'axis']].values.tolist()[:3]}"
        )
    out = results.copy()
    out["release_date"] = pd.to_datetime(
        out["release_date"], errors="coerce", format="mixed"
    )  # YYYY-MM and YYYY-MM-DD side by side
    if out["release_date"].isna().any():
        raise DataError(
            "panel results: release_date must be a date for every model; missing or bad for "
            f"{results.loc[out['release_date'].isna(), 'model'].tolist()}"
        )
    return out


def panel_tables(
    results: pd.DataFrame, *, alpha: float = 0.05, bonferroni_on: str = "cluster_p"
) -> dict[str, pd.DataFrame]:
    """The paper's table per axis, models ordered by release date.

    Bonferroni: a model's gap is significant when its `bonferroni_on` p-value (cluster-robust by
    default, as the paper: its Bonferroni losses quote cluster-robust p; or McNemar) is below alpha / m,
    m = number of models on that axis (the paper: 14 race, 13 gender)."""
    require(0 < alpha < 1, "alpha", f"must be in (0, 1), got {alpha!r}")
    require(bonferroni_on in BONFERRONI_P, "bonferroni_on", f"choose one of {list(BONFERRONI_P)}")
    data = _validated(results)
    tables = {}
    for axis, group in data.groupby("axis", sort=True):
        m = group["model"].nunique()
        if m < 2:
            raise EstimationError(
                f"panel axis {axis!r} has one model ({group['model'].iloc[0]}); "
                "Bonferroni across the panel needs a family of at least 2 models"
            )
        g = group.sort_values(["release_date", "model"]).reset_index(drop=True)
        table = g[["model", "release_date", "gap_pp", "ci_low", "ci_high", "b", "c"]].copy()
        table["release_date"] = g["release_date"].dt.strftime("%Y-%m-%d")
        table["bc_ratio"] = np.where(g["c"] > 0, g["b"] / g["c"].where(g["c"] > 0), np.nan)
        table["discordant_share"] = (g["b"] + g["c"]) / g["n_pairs"]
        table["mcnemar_chi2"] = g["mcnemar_chi2"]
        table["mcnemar_p"] = g["mcnemar_p"]
        table["stars"] = significance_stars(g["mcnemar_p"])
        table["cluster_p"] = g["cluster_p"]
        table["bonferroni_alpha"] = alpha / m
        table["significant_bonferroni"] = g[bonferroni_on] < alpha / m
        tables[str(axis)] = table
    return tables


def format_panel_table(table: pd.DataFrame) -> str:
    """The table as the paper prints it: +2.12, [+1.82, +2.43], 953:443 (2.15:1), 5.8%, ..."""
    shown = pd.DataFrame(
        {
            "model": table["model"],
            "released": table["release_date"],
            "gap (pp)": table["gap_pp"].map("{:+.2f}".format) + table["stars"],
            "95% CI": "[" + table["ci_low"].map("{:+.2f}".format) + ", " + table["ci_high"].map("{:+.2f}".format) + "]",
            "b:c": table["b"].astype(int).astype(str) + ":" + table["c"].astype(int).astype(str),
            "ratio": table["bc_ratio"].map("{:.2f}".format),
            "discordant": (100 * table["discordant_share"]).map("{:.1f}%".format),
            "McNemar chi2": table["mcnemar_chi2"].map("{:.1f}".format),
            "p": table["mcnemar_p"].map(_p2),
            "cluster p": table["cluster_p"].map(_p2),
            f"Bonferroni (p<{table['bonferroni_alpha'].iloc[0]:.2g})": np.where(
                table["significant_bonferroni"], "yes", "no"
            ),
        }
    )
    return shown.to_string(index=False)


def gap_chart(results: pd.DataFrame) -> Figure:
    """Gap (pp) with 95% CI by release date, one panel per axis, models labelled."""
    data = _validated(results)
    axes_names = sorted(data["axis"].unique())
    fig, axes = plt.subplots(1, len(axes_names), figsize=(6 * len(axes_names), 4.2), squeeze=False)
    for ax, axis in zip(axes[0], axes_names):
        g = data[data["axis"] == axis].sort_values("release_date")
        err = np.vstack([g["gap_pp"] - g["ci_low"], g["ci_high"] - g["gap_pp"]])
        ax.errorbar(g["release_date"], g["gap_pp"], yerr=err, fmt="o", capsize=3)
        for _, row in g.iterrows():  # one label per model (a dozen points)
            ax.annotate(
                row["model"],
                (row["release_date"], row["gap_pp"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(f"{axis} callback gap by model release date")
        ax.set_xlabel("release date")
        ax.set_ylabel("gap (pp, 95% cluster-bootstrap CI)")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def panel_forest(tables: dict[str, pd.DataFrame]) -> Figure:
    """The panel at a glance, as the paper's figure: per axis, each model's gap (pp) with its 95%
    CI, models in release order; filled markers are Bonferroni-significant. `tables` is
    `panel_tables`' output."""
    heights = [len(t) for t in tables.values()]
    fig, axes = plt.subplots(
        1, len(tables), figsize=(5.2 * len(tables), 1.2 + 0.32 * max(heights)), squeeze=False, sharex=True
    )
    for ax, (axis, table) in zip(axes[0], tables.items()):
        y = np.arange(len(table))[::-1]
        err = np.vstack([table["gap_pp"] - table["ci_low"], table["ci_high"] - table["gap_pp"]])
        ax.errorbar(table["gap_pp"], y, xerr=err, fmt="none", ecolor="C0", capsize=2)
        sig = table["significant_bonferroni"].to_numpy(bool)
        ax.scatter(table["gap_pp"][sig], y[sig], color="C3", zorder=3, label="Bonferroni significant")
        ax.scatter(table["gap_pp"][~sig], y[~sig], facecolor="white", edgecolor="C0", zorder=3, label="not significant")
        ax.axvline(0.0, color="grey", lw=0.8, ls="--")
        ax.set_yticks(y, [f"{m} ({d})" for m, d in zip(table["model"], table["release_date"])], fontsize=7)
        ax.set_title(f"{axis}: Bonferroni p < {table['bonferroni_alpha'].iloc[0]:.4f}", fontsize=9)
        ax.set_xlabel("callback gap, pp (x1 minus x0), 95% CI")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def race_gender_correlation(results: pd.DataFrame, axes: tuple[str, str] = ("race", "gender")) -> pd.Series:
    """Pearson and Spearman correlation of the two axes' gaps across the models that have both."""
    data = _validated(results)
    wide = data.pivot(index="model", columns="axis", values="gap_pp")
    missing = [a for a in axes if a not in wide.columns]
    if missing:
        raise DataError(f"panel results have no rows for axis {missing}; axes present: {sorted(wide.columns)}")
    both = wide[list(axes)].dropna()
    if len(both) < 3:
        raise EstimationError(
            f"a correlation of {axes[0]} and {axes[1]} gaps needs at least 3 models with both axes, got {len(both)}"
        )
    pearson = stats.pearsonr(both[axes[0]], both[axes[1]])
    spearman = stats.spearmanr(both[axes[0]], both[axes[1]])
    return pd.Series(
        {
            "n_models": len(both),
            "pearson_r": float(pearson.statistic),
            "pearson_p": float(pearson.pvalue),
            "spearman_rho": float(spearman.statistic),
            "spearman_p": float(spearman.pvalue),
        }
    )


@dataclass
class PanelReport:
    """What `panel_report` returns: tables per axis, the figures and the race-gender correlation."""

    tables: dict[str, pd.DataFrame]
    figure: Figure  # gaps by release date
    correlation: pd.Series | None
    forest: Figure | None = None  # per axis, every model's gap with its CI (`panel_forest`)

    def to_text(self) -> str:
        parts = []
        for axis, table in self.tables.items():
            parts += [
                f"== {axis} axis ({bonferroni_note(axis, len(table), table['bonferroni_alpha'].iloc[0] * len(table))})",
                format_panel_table(table),
                "",
            ]
        if self.correlation is not None:
            c = self.correlation
            parts.append(
                f"race vs gender gap across {int(c['n_models'])} models: Pearson r={c['pearson_r']:+.2f} "
                f"(p={_p2(c['pearson_p'])}), Spearman rho={c['spearman_rho']:+.2f} (p={_p2(c['spearman_p'])})"
            )
        return "\n".join(parts)


def panel_report(results: pd.DataFrame, *, alpha: float = 0.05, bonferroni_on: str = "cluster_p") -> PanelReport:
    """The model-panel report of a paired callback audit ("Can LLMs Hire Fairly?").

    Parameters
    ----------
    results : DataFrame
        One row per model x axis with model, axis ("race" or "gender"), release_date and the
        `paired_gap` outputs gap_pp, ci_low, ci_high, b, c, n_pairs, mcnemar_chi2, mcnemar_p,
        cluster_p (`panel_row` builds a row from a `PairedGapResult`).
    alpha : float, default 0.05
        Family-wise significance level; each axis is Bonferroni-corrected over its models.
    bonferroni_on : {"cluster_p", "mcnemar_p"}, default "cluster_p"
        The p-value the Bonferroni threshold is applied to.

    Returns
    -------
    PanelReport
        `tables` (one DataFrame per axis, the paper's layout with stars and the corrected
        significance), `forest` (per axis, every model's gap with its CI, Bonferroni-significant
        ones filled: the paper's figure), `figure` (gaps with CIs by release date) and
        `correlation` (race vs gender gaps across models, when at least 3 models have both axes;
        else None).

    Examples
    --------
    >>> from popfair import paired_gap, panel_report
    >>> from popfair.report.panel import panel_row
    >>> rows = [panel_row(paired_gap(pairs[m], y_adv="white", y_other="black", cluster="posting_id"),
    ...                   model=m, axis="race", release_date=dates[m]) for m in models]  # doctest: +SKIP
    >>> print(panel_report(pd.DataFrame(rows)).to_text())  # doctest: +SKIP
    """
    tables = panel_tables(results, alpha=alpha, bonferroni_on=bonferroni_on)
    correlation = None
    shared = results.groupby("model")["axis"].agg(lambda a: {"race", "gender"} <= set(a))
    if shared.sum() >= 3:
        correlation = race_gender_correlation(results)
    return PanelReport(tables=tables, figure=gap_chart(results), correlation=correlation, forest=panel_forest(tables))


def _p2(value: float) -> str:
    """A p-value to two significant digits, never "0" (below 1e-12: "< 1e-12")."""
    return format_p(value) if value < 1e-4 else f"{value:.2g}"
