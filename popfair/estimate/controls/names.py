"""Name-level effects: is a gap carried by a few names?

Audits signal a group by names (Bertrand & Mullainathan; Kline, Rose & Walters; Bloomberg used 100
names per race x gender group). A gap between groups can come from one name the screener treats
differently. For each first name this module reports its own effect: the mean outcome of the
applicants carrying it, against its race x gender cell's mean, shrunk by empirical Bayes:

- each name's mean has sampling variance v_j = sigma^2 / n_j (sigma^2: the variance of the outcome
  within names, pooled);
- within each cell, the spread of the names' true means (tau^2) and the cell's mean are a
  random-effects meta-analysis of the names' means (statsmodels `combine_effects`, Paule-Mandel);
- a name's effect is B_j (mean_j - cell mean), B_j = tau^2 / (tau^2 + v_j), with posterior SD
  sqrt(B_j v_j): a name seen rarely, or in a cell whose names hardly differ, is pulled to 0.

Leave one name out: the gap between the protected attribute's two levels (x1 minus x0, the rows'
mean outcome, Welch interval) recomputed without each name. The most influential name is the one
whose removal moves the gap most towards 0; the gap depends on it when its interval excludes 0
with every name and covers 0 without that one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import DataError
from popfair.core.types import Effects, Plot
from popfair.estimate.light_stats import norm_ppf

NAME = "first_name"
PAIR = "pair_key"  # the paired design's pair: an x1 and an x0 profile, identical but for the name
CELLS = ("race", "gender")
DESIGNS = ("paired", "ranking")  # designs whose applicants differ by names drawn from lists
SHOWN = 30  # names drawn in the figure: the largest effects


@dataclass
class NameEffects:
    """Each name's shrunk effect (`table`), the gap with every name and without each one
    (`leave_one_out`), and what that says."""

    table: pd.DataFrame
    leave_one_out: pd.DataFrame
    gap: dict[str, float]
    most_influential: str | None
    depends: bool
    cells: tuple[str, ...]
    x: str
    tau2: dict[str, float] = field(default_factory=dict)

    def notes(self, unit: str = "") -> list[str]:
        flagged = self.table[self.table["significant"]].sort_values("effect", key=np.abs, ascending=False)
        cells = " x ".join(self.cells) or "all"
        shown = ", ".join(
            f"{n} {r['effect']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}]" for n, r in flagged.head(5).iterrows()
        )
        lines = [
            f"Name-level effects ({NAME}, shrunk by empirical Bayes within each {cells} cell; artifacts "
            f"names/effects.csv, names/effects.png): {len(flagged)} of {len(self.table)} names differ from their "
            f"cell's mean (95% CI excludes 0){': ' + shown if shown else ''}. Each name is tested on its own: "
            "among many names, a few intervals exclude 0 by chance."
        ]
        g = self.gap
        if self.most_influential is not None:
            row = self.leave_one_out.loc[self.most_influential]
            verdict = (
                "the gap depends on it"
                if self.depends
                else "the gap survives without it"
                if g["ci_low"] > 0 or g["ci_high"] < 0
                else "the gap's CI covers 0 with every name"
            )
            lines.append(
                f"Leave one name out: the {self.x} gap {g['estimate']:+.3g} [{g['ci_low']:+.3g}, {g['ci_high']:+.3g}]{unit} "
                f"is {row['gap']:+.3g} [{row['ci_low']:+.3g}, {row['ci_high']:+.3g}] without {self.most_influential}, "
                f"its most influential name: {verdict}."
            )
        return lines

    def artifacts(self) -> dict[str, Any]:
        shown = self.table.reindex(self.table["effect"].abs().sort_values(ascending=False).index[:SHOWN])
        return {
            "names/effects.csv": self.table.reset_index(),
            "names/leave_one_out.csv": self.leave_one_out.reset_index(),
            "names/effects.png": Plot(  # the forest draws `estimate`: here the name's effect
                "forest",
                shown.sort_values("effect").assign(estimate=lambda t: t["effect"]),
                f"Name effects vs their cell's mean (the {len(shown)} largest)",
            ),
        }

    def metrics(self) -> dict[str, float]:
        out = {"names.n": float(len(self.table)), "names.flagged": float(self.table["significant"].sum())}
        if self.most_influential is not None:
            out["names.loo_gap"] = float(self.leave_one_out.loc[self.most_influential, "gap"])
            out["names.gap_depends_on_one_name"] = float(self.depends)
        return out


def name_effects(
    data: pd.DataFrame,
    *,
    x: str,
    x0: Any,
    x1: Any,
    y: str = "y",
    name: str = NAME,
    cells: Sequence[str] = CELLS,
    alpha: float = 0.05,
) -> NameEffects:
    """Name effects and the leave-one-name-out check on scored rows (one per applicant or candidate)."""
    from statsmodels.stats.meta_analysis import combine_effects

    missing = [c for c in (y, name, x) if c not in data]
    if missing:
        raise DataError(f"name effects need columns {missing}")
    cells = tuple(c for c in cells if c in data)
    paired = [PAIR] if PAIR in data else []
    d = data[list(dict.fromkeys([name, x, *cells, y, *paired]))].assign(_y=pd.to_numeric(data[y], errors="coerce"))
    d = d[d["_y"].notna()]
    cell = d[list(cells)].astype(str).agg(" ".join, axis=1) if cells else pd.Series("all", index=d.index)
    per = d.assign(_cell=cell).groupby([name, "_cell"], sort=True, observed=True)["_y"].agg(["size", "mean", "var"])
    per = per.reset_index().rename(columns={"_cell": "cell", "size": "n"})
    twice = per[name].duplicated(keep=False)  # a name listed in two cells: one row per cell
    per.index = pd.Index(per[name].astype(str).where(~twice, per[name].astype(str) + " (" + per["cell"] + ")"))
    per["var"] = per["var"].fillna(0.0)
    within = float(((per["n"] - 1) * per["var"]).sum() / max(float((per["n"] - 1).sum()), 1.0))
    per["v"] = within / per["n"]
    z = float(norm_ppf(1 - alpha / 2))
    per["cell_mean"], per["shrinkage"] = np.nan, 0.0
    tau2 = {}
    for key, rows in per.groupby("cell", sort=True):
        if len(rows) >= 2 and within > 0:
            fit = combine_effects(rows["mean"].to_numpy(float), rows["v"].to_numpy(float), method_re="iterated")
            tau2[str(key)], center = float(fit.tau2), float(fit.mean_effect_re)
        else:  # one name, or no spread at all: nothing to shrink towards but the cell itself
            tau2[str(key)], center = 0.0, float(np.average(rows["mean"], weights=rows["n"]))
        per.loc[rows.index, "cell_mean"] = center
        t2 = tau2[str(key)]
        per.loc[rows.index, "shrinkage"] = t2 / (t2 + rows["v"]) if t2 > 0 else 0.0
    raw = per["mean"] - per["cell_mean"]
    effect = per["shrinkage"] * raw
    se = np.sqrt(per["shrinkage"] * per["v"])
    table = pd.DataFrame(
        {
            "cell": per["cell"],
            "n": per["n"].astype(int),
            "mean": per["mean"],
            "cell_mean": per["cell_mean"],
            "raw_effect": raw,
            "shrinkage": per["shrinkage"],
            "estimate": per["cell_mean"] + effect,
            "effect": effect,
            "se": se,
            "ci_low": effect - z * se,
            "ci_high": effect + z * se,
        }
    ).rename_axis(name)
    table["significant"] = (table["ci_low"] > 0) | (table["ci_high"] < 0)
    loo, gap = _leave_one_out(d, name, x, x0, x1, z)
    influence = np.sign(gap["estimate"]) * (gap["estimate"] - loo["gap"])
    top = str(influence.idxmax()) if len(loo) and np.isfinite(influence).any() else None
    excludes = gap["ci_low"] > 0 or gap["ci_high"] < 0
    depends = bool(top is not None and excludes and loo.loc[top, "ci_low"] <= 0 <= loo.loc[top, "ci_high"])
    return NameEffects(table, loo.assign(influence=influence), gap, top, depends, cells, x, tau2)


def _leave_one_out(
    d: pd.DataFrame, name: str, x: str, x0: Any, x1: Any, z: float
) -> tuple[pd.DataFrame, dict[str, float]]:
    """The x1-minus-x0 gap in mean outcome with every name, and without each name: over pairs (a
    paired design's `pair_key`: the mean within-pair difference, its t interval) or else over rows
    (Welch interval)."""
    if PAIR in d:
        return _leave_one_out_paired(d, name, x, x0, x1, z)
    sides = {}
    for label, level in (("1", x1), ("0", x0)):
        rows = d[d[x].astype(str) == str(level)]
        if rows.empty:
            raise DataError(f"name effects: no scored rows with {x}={level}")
        g = rows.assign(_name=rows[name].astype(str)).groupby("_name")["_y"]
        sides[label] = (
            float(rows["_y"].sum()),
            float((rows["_y"] ** 2).sum()),
            len(rows),
            g.sum(),
            (g.apply(lambda s: (s**2).sum())),
            g.size(),
        )
    names = sorted(set(d[name].astype(str)))

    def moments(label: str, drop: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        total, squares, count, by_sum, by_sq, by_n = sides[label]
        s = total - (by_sum.reindex(names).fillna(0).to_numpy() if drop else 0)
        q = squares - (by_sq.reindex(names).fillna(0).to_numpy() if drop else 0)
        n = count - (by_n.reindex(names).fillna(0).to_numpy() if drop else 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = s / n
            var = (q - s**2 / n) / (n - 1)
        return np.atleast_1d(mean), np.atleast_1d(var), np.atleast_1d(n)

    def gap_of(drop: bool) -> tuple[np.ndarray, np.ndarray]:
        m1, v1, n1 = moments("1", drop)
        m0, v0, n0 = moments("0", drop)
        with np.errstate(invalid="ignore", divide="ignore"):
            return m1 - m0, np.sqrt(v1 / n1 + v0 / n0)

    full, full_se = gap_of(False)
    gap = {"estimate": float(full[0]), "se": float(full_se[0])}
    gap.update(ci_low=gap["estimate"] - z * gap["se"], ci_high=gap["estimate"] + z * gap["se"])
    without, se = gap_of(True)
    loo = pd.DataFrame(
        {"gap": without, "se": se, "ci_low": without - z * se, "ci_high": without + z * se},
        index=pd.Index(names, name=name),
    )
    return loo, gap


def _leave_one_out_paired(
    d: pd.DataFrame, name: str, x: str, x0: Any, x1: Any, z: float
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Leave one name out over complete pairs: a pair is left out when either member carries the name."""
    level = d[x].astype(str)
    one = d[level == str(x1)].drop_duplicates(PAIR).set_index(PAIR)
    zero = d[level == str(x0)].drop_duplicates(PAIR).set_index(PAIR)
    pairs = one[[name, "_y"]].add_suffix("_1").join(zero[[name, "_y"]].add_suffix("_0"), how="inner")
    if pairs.empty:
        raise DataError(f"name effects: no complete pair with {x}={x1} and {x}={x0}")
    diff = (pairs["_y_1"] - pairs["_y_0"]).to_numpy(float)
    first, second = pairs[f"{name}_1"].astype(str).to_numpy(), pairs[f"{name}_0"].astype(str).to_numpy()
    names = sorted(set(first) | set(second))

    def by_name(values: np.ndarray) -> np.ndarray:  # sum over the pairs each name is in (one side each)
        total = pd.Series(values).groupby(first).sum().reindex(names, fill_value=0.0)
        other = pd.Series(values).groupby(second).sum().reindex(names, fill_value=0.0)
        same = pd.Series(np.where(first == second, values, 0.0)).groupby(first).sum().reindex(names, fill_value=0.0)
        return (total + other - same).to_numpy(float)  # a pair with the name on both sides counted once

    s, q, n = by_name(diff), by_name(diff**2), by_name(np.ones_like(diff))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (diff.sum() - s) / (len(diff) - n)
        var = ((diff**2).sum() - q - (diff.sum() - s) ** 2 / (len(diff) - n)) / (len(diff) - n - 1)
        se = np.sqrt(var / (len(diff) - n))
    full_se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    gap = {"estimate": float(diff.mean()), "se": full_se}
    gap.update(ci_low=gap["estimate"] - z * full_se, ci_high=gap["estimate"] + z * full_se)
    loo = pd.DataFrame(
        {"gap": mean, "se": se, "ci_low": mean - z * se, "ci_high": mean + z * se, "pairs_left_out": n.astype(int)},
        index=pd.Index(names, name=name),
    )
    return loo, gap


def with_name_effects(effects: Effects, scored: pd.DataFrame, roles: Any, design: str) -> Effects:
    """The effects with the name-level notes, artifacts and metrics of a paired or ranking case (others
    unchanged). `scored`: the factual rows that were scored."""
    if design not in DESIGNS or NAME not in scored or scored.empty:
        return effects
    unit = ""
    result = name_effects(scored, x=roles.x, x0=roles.x0, x1=roles.x1)
    if design == "paired":  # the paired gap is in percentage points
        for frame in (result.leave_one_out,):
            frame[["gap", "se", "ci_low", "ci_high"]] *= 100
        result.gap = {k: 100 * v for k, v in result.gap.items()}
        unit = " pp"
    effects.notes += result.notes(unit)
    effects.artifacts.update(result.artifacts())
    effects.metrics.update(result.metrics())
    return effects
