"""Comparison figures of a sweep (matplotlib, headless): forest plots per case, the panel's gaps
when models have no release date, race vs gender gaps across models, and with-photo vs
without-photo NDE per VLM."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from popfair.track.figures import forest_plot as effects_forest_plot

PSE_ORDER = ["TE", "NDE", "NIE", "BIE", "RIE"]


def _errors(table: pd.DataFrame) -> np.ndarray:
    """Asymmetric error bars (lower, upper) from estimate and CI; 0 where the CI is missing."""
    low = (table["estimate"] - table["ci_low"]).fillna(0).clip(lower=0)
    high = (table["ci_high"] - table["estimate"]).fillna(0).clip(lower=0)
    return np.vstack([low.to_numpy(float), high.to_numpy(float)])


def forest_plot(case: pd.DataFrame, title: str, xlim: tuple[float, float] | None = None) -> Figure:
    """Effects of one case (long form: one row per effect) with 95% CIs, TE..RIE first;
    drawn like a run's artifact (`popfair.track.figures.forest_plot`); `xlim`: the x scale shared
    by every case of a report (`shared_xlim`)."""
    order = [e for e in PSE_ORDER if e in set(case["effect"])] + sorted(set(case["effect"]) - set(PSE_ORDER))
    table = case.set_index("effect").loc[order]
    fig = effects_forest_plot(table.rename(index=short_effect), title)
    if xlim is not None:
        fig.axes[0].set_xlim(*xlim)
    return fig


def shared_xlim(rows: pd.DataFrame) -> tuple[float, float] | None:
    """One x range holding every estimate and CI of `rows` (and 0), with a margin: forest plots of
    several cases compare at a glance only on one scale."""
    values = pd.concat([rows[c] for c in ("estimate", "ci_low", "ci_high") if c in rows]).astype(float)
    values = values[np.isfinite(values)]
    if values.empty:
        return None
    low, high = min(float(values.min()), 0.0), max(float(values.max()), 0.0)
    pad = 0.05 * (high - low or 1.0)
    return low - pad, high + pad


def cases_forest(pse: pd.DataFrame, label: str = "case_name") -> Figure:
    """Every case's effects on one x scale: one panel per effect (TE..RIE), one row per case, colour
    by significance (filled red: the CI excludes 0), "not identified" where a case cannot answer it;
    the unit on the x axis."""
    effects = [e for e in PSE_ORDER if e in set(pse["effect"])] + sorted(set(pse["effect"]) - set(PSE_ORDER))
    cases = list(dict.fromkeys(pse[label]))
    fig, axes = plt.subplots(
        1, len(effects), figsize=(2.4 * len(effects) + 2.2, 0.45 * len(cases) + 1.6), sharex=True, sharey=True,
        squeeze=False, layout="constrained",
    )  # fmt: skip
    xlim = shared_xlim(pse)
    units = list(dict.fromkeys(pse["unit"].dropna().astype(str))) if "unit" in pse else []
    y = np.arange(len(cases))[::-1]
    for ax, effect in zip(axes[0], effects):
        rows = pse[pse["effect"] == effect].set_index(label).reindex(cases)
        identified = rows["identified"].fillna(False).astype(bool) if "identified" in rows else rows["estimate"].notna()
        sig = (
            rows["significant"].fillna(False).astype(bool) & identified if "significant" in rows else identified * False
        )
        for yy, (_, r), s, ok in zip(y, rows.iterrows(), sig, identified):
            if not ok or not np.isfinite(r["estimate"]):
                ax.text(0.5, yy, "not identified", transform=ax.get_yaxis_transform(), ha="center", va="center",
                        fontsize=7, style="italic", color="0.4")  # fmt: skip
                continue
            colour = "#c0392b" if s else "0.45"
            ax.hlines(yy, r["ci_low"], r["ci_high"], color=colour, lw=2)
            ax.scatter([r["estimate"]], [yy], color=colour if s else "white", edgecolor=colour, zorder=3)
        ax.axvline(0, color="0.5", lw=1, ls="--")
        ax.set_title(short_effect(effect))
        ax.set_xlabel(units[0] if len(units) == 1 else "effect")
        if xlim is not None:
            ax.set_xlim(*xlim)
    axes[0][0].set_yticks(y, cases, fontsize=8)
    axes[0][0].set_ylim(-0.6, len(cases) - 0.4)
    fig.suptitle("Every case's effects with 95% CIs (red: the CI excludes 0), one x scale")
    return fig


def panel_gaps_by_model(panel: pd.DataFrame) -> Figure:
    """Callback gap (pp) with 95% CI per model and axis, for panels without release dates (with
    dates, popfair.report.panel.gap_chart plots them on a time axis)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    order = sorted(panel["model"].unique())
    for offset, (axis, rows) in zip((-0.12, 0.12), panel.groupby("protected_attr")):
        x = np.array([order.index(m) for m in rows["model"]]) + offset
        ax.errorbar(x, rows["estimate"], yerr=_errors(rows), fmt="o", capsize=3, label=axis)
    ax.set_xticks(range(len(order)), order, rotation=45, ha="right", fontsize=7)
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("callback gap, pp (x1 minus x0)")
    ax.set_title("Callback gaps by model (no release dates in the screener configs)")
    ax.legend()
    fig.tight_layout()
    return fig


def race_vs_gender(panel: pd.DataFrame) -> Figure | None:
    """Each model's race gap against its gender gap, with CIs and the Pearson correlation."""
    wide = panel.pivot_table(
        index="model", columns="protected_attr", values=["estimate", "ci_low", "ci_high"], aggfunc="first"
    )
    if "race" not in wide["estimate"] or "gender" not in wide["estimate"]:
        return None
    wide = wide.dropna()
    if wide.empty:
        return None
    race = pd.DataFrame({c: wide[(c, "race")] for c in ("estimate", "ci_low", "ci_high")})
    gender = pd.DataFrame({c: wide[(c, "gender")] for c in ("estimate", "ci_low", "ci_high")})
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.errorbar(race["estimate"], gender["estimate"], xerr=_errors(race), yerr=_errors(gender), fmt="o", capsize=2)
    for model in wide.index:
        ax.annotate(
            model,
            (race.loc[model, "estimate"], gender.loc[model, "estimate"]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.axhline(0, color="grey", lw=0.8, ls="--")
    ax.axvline(0, color="grey", lw=0.8, ls="--")
    r = race["estimate"].corr(gender["estimate"]) if len(wide) >= 3 else math.nan
    ax.set_title(
        f"Race vs gender gap across models (Pearson r = {r:.2f}, n = {len(wide)})"
        if math.isfinite(r)
        else f"Race vs gender gap across models (n = {len(wide)})",
        fontsize=9,
    )
    ax.set_xlabel("race gap, pp (White minus Black)")
    ax.set_ylabel("gender gap, pp (male minus female)")
    fig.tight_layout()
    return fig


def photo_vs_no_photo(pairs: pd.DataFrame) -> Figure | None:
    """NDE without photo (x) vs with photo (y) per VLM, one point per occupation x attribute."""
    if pairs.empty:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for model, rows in pairs.groupby("model"):
        ax.errorbar(
            rows["estimate_image"],
            rows["estimate_image_photo"],
            xerr=_errors(
                rows.rename(
                    columns={"estimate_image": "estimate", "ci_low_image": "ci_low", "ci_high_image": "ci_high"}
                )
            ),
            yerr=_errors(
                rows.rename(
                    columns={
                        "estimate_image_photo": "estimate",
                        "ci_low_image_photo": "ci_low",
                        "ci_high_image_photo": "ci_high",
                    }
                )
            ),
            fmt="o",
            capsize=2,
            label=model,
        )
    values = pairs[["estimate_image", "estimate_image_photo"]].to_numpy(float)
    lo, hi = np.nanmin(values), np.nanmax(values)
    pad = 0.05 * (hi - lo or 1)
    ax.plot([lo - pad, hi + pad], [lo - pad, hi + pad], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("NDE, image resume without photo")
    ax.set_ylabel("NDE, image resume with photo")
    ax.set_title("With-photo vs without-photo NDE per VLM", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def short_effect(effect: str) -> str:
    """An effect's name as a heatmap column label: the coarser split's rows without their prefix."""
    return effect.removeprefix("coarse.").replace("_minus_", "\u2212").replace("_coarse", " coarse")


def effects_overview(pse: pd.DataFrame) -> Figure:
    """Every case's effects in one figure, the first thing a sweep report shows: one heatmap per
    protected attribute, a row per (format, model, variant) and a column per occupation x effect. Colour
    follows significance: an effect whose CI excludes 0 is coloured by its estimate (red favours x1,
    blue x0, one symmetric scale over the significant ones) and outlined; the others are white with
    their estimate in grey; an effect not identified at its n is hatched and says so. `pse` is long
    form (`sweep.popresume_effects`: one row per case x effect)."""
    from matplotlib.patches import Rectangle

    pse = pse.assign(variant=pse["variant"].fillna("") if "variant" in pse else "")
    attrs = sorted(pse["protected_attr"].dropna().unique())
    effects = [e for e in PSE_ORDER if e in set(pse["effect"])] + sorted(set(pse["effect"]) - set(PSE_ORDER))
    occupations = sorted(pse["occupation"].dropna().unique())
    columns = [(occ, eff) for occ in occupations for eff in effects]
    rows_of = {
        a: sorted(
            pse.loc[pse["protected_attr"] == a, ["format", "model", "variant"]]
            .drop_duplicates()
            .itertuples(index=False, name=None)
        )
        for a in attrs
    }
    significant = pse["significant"].fillna(False).astype(bool) if "significant" in pse else pd.Series(False)
    coloured = pse.loc[significant.to_numpy(), "estimate"].to_numpy(float) if len(pse) else np.array([])
    vmax = float(np.nanmax(np.abs(coloured))) if np.isfinite(coloured).any() else 1.0
    vmax = vmax if np.isfinite(vmax) and vmax > 0 else 1.0
    labels = [short_effect(eff) for _, eff in columns]
    rotate = max((len(label) for label in labels), default=0) > 5  # wider than a cell: turned upright
    cell_in = 0.55
    heights = [max(len(rows_of[a]), 1) for a in attrs]
    fig, axes = plt.subplots(
        len(attrs),
        1,
        figsize=(2.6 + cell_in * len(columns), 1.6 + sum(0.42 * h + 1.1 for h in heights) + (0.5 if rotate else 0)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
        layout="constrained",  # room for each panel's occupation labels and title
    )
    annotate = len(columns) * max(heights) <= 400
    image = None
    for ax, attr in zip(axes[:, 0], attrs):
        cases = rows_of[attr]
        value = np.full((len(cases), len(columns)), np.nan)
        sig = np.zeros(value.shape, bool)
        unidentified = np.zeros(value.shape, bool)
        sub = pse[pse["protected_attr"] == attr].set_index(["format", "model", "variant", "occupation", "effect"])
        for (i, case), (j, (occ, eff)) in ((a, b) for a in enumerate(cases) for b in enumerate(columns)):
            key = (*case, occ, eff)
            if key in sub.index:
                row = sub.loc[key]
                row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
                value[i, j], sig[i, j] = float(row["estimate"]), bool(row["significant"])
                unidentified[i, j] = "identified" in row.index and not bool(row["identified"])
                if unidentified[i, j]:  # no colour, no number: the data cannot answer it
                    value[i, j], sig[i, j] = np.nan, False
        image = ax.imshow(np.where(sig, value, np.nan), cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto")
        for i, j in zip(*np.nonzero(sig)):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", lw=1.6))
        if annotate:
            for i, j in zip(*np.nonzero(np.isfinite(value))):
                ax.text(
                    j,
                    i,
                    f"{value[i, j]:+.2g}",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    fontweight="bold" if sig[i, j] else "normal",
                    color=("white" if abs(value[i, j]) > 0.6 * vmax else "black") if sig[i, j] else "0.45",
                )
        for i, j in zip(*np.nonzero(unidentified)):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.75", lw=0))
            if annotate:
                ax.text(j, i, "not\nidentified", ha="center", va="center", fontsize=5, color="0.25",
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})  # fmt: skip
        for k in range(1, len(occupations)):
            ax.axvline(k * len(effects) - 0.5, color="0.3", lw=2)
        ax.set_xticks(range(len(columns)), labels, fontsize=7, rotation=90 if rotate else 0)
        ax.set_yticks(range(len(cases)), [" / ".join(str(k) for k in case if str(k)) for case in cases], fontsize=7)
        top = ax.secondary_xaxis("top")
        top.set_xticks(
            [k * len(effects) + (len(effects) - 1) / 2 for k in range(len(occupations))], occupations, fontsize=8
        )
        top.tick_params(length=0)
        ax.set_title(f"protected attribute: {attr}", fontsize=9, pad=18)
    if image is not None:
        fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.8, label="significant estimate (positive favours x1)")
    fig.suptitle(
        "Every case's effects: coloured and outlined where the 95% CI excludes 0; grey numbers: CI covers 0;\n"
        "hatched: not identified at the case's n",
        fontsize=10,
    )
    return fig
