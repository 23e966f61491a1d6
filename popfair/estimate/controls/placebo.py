"""How far a placebo edit (popfair.render.placebo) moves a screener, and how a demographic effect
compares with that movement.

For each edit the same applicants are screened with their document and with the edited document;
the row `placebo.<edit>` holds the mean change (edited minus original) with a t interval over the
applicants (scipy.stats.ttest_1samp), and the mean absolute change: a screener that moves both ways
can have a mean change near 0 and still move a lot. The report states each demographic effect as a
multiple of the mean absolute change ("the gap is 0.3x the screener's movement under reorder")."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

PREFIX = "placebo."
COLUMNS = ["estimate", "se", "ci_low", "ci_high", "p_value", "significant", "n", "mean_abs_change", "share_changed"]
WHAT = {
    "reorder": "its sections reordered",
    "rephrase": "boilerplate rephrased",
    "format": "bullets, separators and spacing changed",
    "pad": "a neutral sentence added",
    "within_group": "another applicant's name and qualifications from its own group (same job, X and Z)",
}


def placebo_change(changes: np.ndarray | pd.Series, alpha: float = 0.05) -> dict[str, float]:
    """Mean of the paired changes (edited minus original answer) with its t interval, the mean absolute
    change and the share of answers that changed at all. All changes equal: the interval is that
    value (no variation to estimate)."""
    d = pd.to_numeric(pd.Series(changes), errors="coerce").dropna().to_numpy(dtype=float)
    n = len(d)
    if n == 0:
        nan = float("nan")
        return dict(
            estimate=nan, se=nan, ci_low=nan, ci_high=nan, p_value=nan, significant=False, n=0,
            mean_abs_change=nan, share_changed=nan,
        )  # fmt: skip
    mean = float(d.mean())
    spread = float(d.std(ddof=1)) if n > 1 else 0.0
    if n > 1 and spread > 0:
        from scipy import stats

        test = stats.ttest_1samp(d, 0.0)
        low, high = test.confidence_interval(1 - alpha)
        se, p = spread / math.sqrt(n), float(test.pvalue)
    else:
        low = high = mean
        se = 0.0 if n > 1 else float("nan")
        p = float("nan") if n == 1 else (1.0 if mean == 0 else 0.0)
    return dict(
        estimate=mean,
        se=se,
        ci_low=float(low),
        ci_high=float(high),
        p_value=p,
        significant=bool(low > 0 or high < 0),
        n=float(n),
        mean_abs_change=float(np.abs(d).mean()),
        share_changed=float((d != 0).mean()),
    )


def placebo_table(
    changes: Mapping[str, np.ndarray | pd.Series], scale: float = 1.0, alpha: float = 0.05
) -> pd.DataFrame:
    """One row `placebo.<edit>` per edit, in the effects table's unit (`scale`: 100 for 0/1 answers
    reported in percentage points)."""
    rows = {}
    for edit, d in changes.items():
        row = placebo_change(np.asarray(d, dtype=float) * scale, alpha)
        rows[PREFIX + edit] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=COLUMNS).rename_axis("effect")


def demographic_effects(effects: pd.DataFrame, unit: str, estimator: str) -> dict[str, float]:
    """The effects a placebo movement is compared with: the rows in its unit (not placebo rows); for
    the ranking estimator, whose top-1 rows are rates, the largest gap between two groups' top-1 rates."""
    rows = effects[~effects.index.astype(str).str.startswith(PREFIX)]
    if "unit" in rows:
        rows = rows[rows["unit"] == unit]
    estimates = pd.to_numeric(rows["estimate"], errors="coerce").dropna() if "estimate" in rows else pd.Series()
    if estimator == "ranking":
        names = estimates.index.astype(str)
        rates = estimates[names.str.startswith("top1.")]
        return {"the largest top-1 gap between groups": float(rates.max() - rates.min())} if len(rates) > 1 else {}
    return {str(k): float(v) for k, v in estimates.items()}


def comparison_notes(effects: Mapping[str, float], placebo: pd.DataFrame, unit: str) -> list[str]:
    """One line per edit: how far it moves the screener, and each demographic effect (name -> estimate,
    same unit) as a multiple of that movement."""
    notes = []
    for name, row in placebo.iterrows():
        edit = str(name)[len(PREFIX) :]
        n, moved = int(row["n"]), float(row["mean_abs_change"])
        if n == 0:
            notes.append(f"{name}: no applicant was scored both ways; no placebo effect")
            continue
        head = (
            f"{name}: with {WHAT.get(edit, edit)}, {n:,} applicants' answers change by {moved:.3g} {unit} on average "
            f"(mean absolute change; {100 * row['share_changed']:.0f}% changed), mean change {row['estimate']:+.3g} "
            f"[{row['ci_low']:+.3g}, {row['ci_high']:+.3g}]"
        )
        if moved == 0:
            notes.append(head + ": the screener does not react to this edit at all")
            continue
        sizes = [
            f"{effect} ({value:+.3g}) is {abs(value) / moved:.2g}x that movement" for effect, value in effects.items()
        ]
        notes.append(head + ("; " + ", ".join(sizes) if sizes else ""))
    return notes
