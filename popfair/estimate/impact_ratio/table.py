"""The result of an impact-ratio audit (`ImpactRatios`): the LL144 tables with their CIs, as Markdown,
a figure, MLflow metrics and an effects table."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from popfair.core.formats import decisive_percent
from popfair.core.types import Effects, Plot
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.impact_ratio.labels import (
    DIMENSION_TITLES,
    category_label,
    markdown_table,
    metric_description,
    metric_key,
)
from popfair.estimate.impact_ratio.pairwise import PAIRWISE_CONSOLE, PAIRWISE_NOTE
from popfair.estimate.impact_ratio.settings import ImpactRatioSettings


@dataclass
class ImpactRatios:
    """The LL144 table and what it was computed from.

    `table`: one row per metric x dimension x category (plus an `unknown` row per dimension) with
    n_applicants, share, n_selected, rate (+ CI), impact_ratio (+ se, CI), status (included /
    excluded / unknown), small, is_reference, flag (ratio < flag_below), flag_ci (CI upper bound
    below it too), p_adjusted and flag_survives (the reference-aware test: `RatioInference`),
    fisher_p, z and z_p (each category against the reference, conditional on its choice: `pairwise`),
    threshold (the cutoff the metric used on the sample). `tests`: per metric x dimension, the
    test of "no category differs" (p_value, min_ratio, null_flag_rate, null_method, explanation)."""

    table: pd.DataFrame
    outcome: str
    n: int
    thresholds: dict[str, float]
    cluster: str | None
    n_clusters: int | None
    settings: ImpactRatioSettings
    tests: pd.DataFrame = field(default_factory=pd.DataFrame)  # per metric x dimension: the permutation test
    notes: list[str] = field(default_factory=list)

    def included(self) -> pd.DataFrame:
        """The rows of `table` that enter the impact ratios (neither excluded as small nor unknown)."""
        return self.table[self.table["status"] == "included"]

    def n_unknown(self) -> dict[str, int]:
        """Applicants of unknown category per dimension (sex, race, intersection), as the report gives them."""
        rows = self.table[self.table["status"] == "unknown"].drop_duplicates("dimension")
        return dict(zip(rows["dimension"], rows["n_applicants"].astype(int)))

    def summary(self) -> pd.DataFrame:
        """The layout of published LL144 audit summaries, one block per metric and dimension."""
        t = self.table
        selected_header = "n_selected" if self.outcome == "callback" else "n_above_threshold"
        ci = [
            f"{lo:.3f} - {hi:.3f}" if np.isfinite(lo) and np.isfinite(hi) else ""
            for lo, hi in zip(t["ci_low"], t["ci_high"])
        ]
        cut = self.settings.min_category_share
        share_pct = [
            decisive_percent(s, cut) for s in t["share"]
        ]  # 1.9986% prints 1.999%, not "2.00%", under a 2% rule
        notes = np.select(
            [t["status"] == "unknown", t["status"] == "excluded", t["is_reference"], t["small"]],
            [
                "unknown category: not in the ratios",
                [f"excluded: {s} of sample (< {cut * 100:g}%)" for s in share_pct],
                "reference (highest rate)",
                [f"small: {s} of sample, kept" for s in share_pct],
            ],
            default="",
        )
        out = pd.DataFrame(
            {
                "metric": t["metric"],
                "dimension": t["dimension"].map(DIMENSION_TITLES),
                "category": [category_label(c) for c in t["category"]],
                "n_applicants": t["n_applicants"].astype(int),
                selected_header: t["n_selected"].astype(int),
                "rate": t["rate"].round(4),
                "impact_ratio": t["impact_ratio"].round(3),
                f"ci_{round((1 - self.settings.alpha) * 100):d}": ci,
                f"flag_below_{self.settings.flag_below:g}": np.where(t["flag"], "yes", ""),
                "adjusted_p": t["p_adjusted"].round(4),
                "flag_survives_test": np.where(t["flag"], np.where(t["flag_survives"], "yes", "no"), ""),
                "fisher_p": t["fisher_p"].round(4),
                "z": t["z"].round(2),
                "z_p": t["z_p"].round(4),
                "note": [
                    "; ".join(part for part in (str(n), str(v or "")) if part and part != "nan")
                    for n, v in zip(notes, t.get("verdict_note", pd.Series("", index=t.index)))
                ],
            }
        )
        return out.reset_index(drop=True)

    def markdown(self) -> str:
        """The summary as Markdown: one table per metric x dimension, as audits publish it."""
        summary = self.summary()
        lines = [
            "# Impact ratios (NYC Local Law 144 / four-fifths rule)",
            "",
            f"Applicants: {self.n}; outcome: {self.outcome}; "
            + (
                f"bootstrap clustered by {self.cluster} ({self.n_clusters} clusters)"
                if self.cluster
                else "bootstrap over applicants"
            )
            + f", {self.settings.n_bootstrap} resamples.",
        ]
        for metric, cutoff in self.thresholds.items():
            lines.append(
                f"- `{metric}`: {metric_description(metric)}"
                + (f" (cutoff on this sample: {cutoff:g})" if np.isfinite(cutoff) else "")
            )
        for dimension, count in self.n_unknown().items():
            lines.append(f"- Applicants with unknown {DIMENSION_TITLES[dimension].lower()} category: {count}")
        lines.extend(f"- Note: {note}" for note in self.notes)
        lines.append(f"- {PAIRWISE_NOTE}")
        if self.table["status"].eq("excluded").any():
            lines.append(f"- Excluded categories: {self.settings.exclusion_justification}")
        explanations = self.explanations()
        for (metric, dimension), block in summary.groupby(["metric", "dimension"], sort=False):
            lines += ["", f"## {metric}: {dimension}", "", markdown_table(block.drop(columns=["metric", "dimension"]))]
            key = (metric, next(d for d, title in DIMENSION_TITLES.items() if title == dimension))
            if key in explanations:
                lines += ["", explanations[key]]
        return "\n".join(lines) + "\n"

    def explanations(self) -> dict[tuple[str, str], str]:
        """Per (metric, dimension): the reference-aware test and the flags, in plain words."""
        if self.tests.empty:
            return {}
        return {(r.metric, r.dimension): r.explanation for r in self.tests.itertuples()}

    def plot(self) -> Plot:
        """Horizontal bars of impact ratios with CIs, one panel per metric x dimension, 0.8 line
        (`popfair.track.figures.draw` makes the Figure)."""
        return Plot(
            "impact_ratio",
            self.table.assign(category=[category_label(c) for c in self.table["category"]]),  # the report's names
            options={
                "dimensions": DIMENSION_TITLES,
                "flag_below": self.settings.flag_below,
                "alpha": self.settings.alpha,
            },
        )

    def metrics(self) -> dict[str, float]:
        """Key ratios for MLflow: per included category ratio + CI, per block min ratio and flags."""
        out: dict[str, float] = {f"ll144.{d}.n_unknown": float(c) for d, c in self.n_unknown().items()}
        for metric, cutoff in self.thresholds.items():
            if np.isfinite(cutoff):
                out[f"ll144.{metric}.cutoff"] = float(cutoff)
        for (metric, dimension), block in self.included().groupby(["metric", "dimension"], sort=False):
            prefix = f"ll144.{metric}.{dimension}"
            out[f"{prefix}.min_ratio"] = float(block["impact_ratio"].min())
            if block["impact_ratio"].notna().any():  # the lowest ratio's CI and verdict: the run list's headline
                lowest = block.loc[block["impact_ratio"].idxmin()]
                out[f"{prefix}.min_ratio_ci_low"] = float(lowest["ci_low"])
                out[f"{prefix}.min_ratio_ci_high"] = float(lowest["ci_high"])
                out[f"{prefix}.min_ratio_flag_survives"] = float(bool(lowest["flag_survives"]))
            out[f"{prefix}.n_flagged"] = float(block["flag"].sum())
            out[f"{prefix}.n_flags_surviving"] = float(block["flag_survives"].sum())
            for row in block.itertuples():
                name = f"{prefix}.{metric_key(row.category)}"
                out[f"{name}.ratio"] = float(row.impact_ratio)
                out[f"{name}.ci_low"] = float(row.ci_low)
                out[f"{name}.ci_high"] = float(row.ci_high)
                if not row.is_reference:  # against the reference, conditional on its choice: said in the key
                    out[f"{name}.given_reference.fisher_p"] = float(row.fisher_p)
                    out[f"{name}.given_reference.z"] = float(row.z)
                    out[f"{name}.given_reference.z_p"] = float(row.z_p)
        for test in self.tests.itertuples():
            out[f"ll144.{test.metric}.{test.dimension}.p_value"] = float(test.p_value)
            out[f"ll144.{test.metric}.{test.dimension}.null_flag_rate"] = float(test.null_flag_rate)
        return out

    def labels(self) -> list[str]:
        """One label per metric with ratios below the four-fifths line: how many, and the lowest."""
        labels = []
        for metric, block in self.included().groupby("metric", sort=False):
            compared, flagged = block[~block["is_reference"]], block[block["flag"]]
            if len(flagged):
                worst = flagged.loc[flagged["impact_ratio"].idxmin()]
                labels.append(
                    f"impact ratio < {self.settings.flag_below:g} ({metric}): {len(flagged)} of "
                    f"{len(compared)} categories compared, lowest {worst['dimension']}="
                    f"{worst['category']} {worst['impact_ratio']:.2f} "
                    f"[{worst['ci_low']:.2f}, {worst['ci_high']:.2f}]; "
                    f"{int(flagged['flag_survives'].sum())} confirmed (the test of no difference rejects "
                    "and the CI excludes 1)"
                )
        return labels

    def effects(self) -> Effects:
        """As an estimator's output: effects rows `<metric>/<dimension>/<category>`, estimate =
        impact ratio; the LL144 summary (CSV + Markdown), the full table and the chart as artifacts."""
        known = self.table[self.table["status"] != "unknown"]
        table = known.assign(estimate=known["impact_ratio"], se=known["ratio_se"])
        table.index = pd.Index(
            [f"{m}/{d}/{c}" for m, d, c in zip(table["metric"], table["dimension"], table["category"])], name="effect"
        )
        table = table.drop(columns=["impact_ratio", "ratio_se"])
        table = table[EFFECT_COLUMNS + [c for c in table.columns if c not in EFFECT_COLUMNS]]
        artifacts = {
            "impact_ratios/summary.csv": self.summary().set_index(["metric", "dimension"]),
            "impact_ratios/summary.md": self.markdown(),
            "impact_ratios/table.csv": self.table.set_index(["metric", "dimension", "category"]),
            "impact_ratios/tests.csv": self.tests.set_index(["metric", "dimension"]),
            "impact_ratios/impact_ratios.png": self.plot(),
        }
        return Effects(
            table=table,
            labels=self.labels(),
            metrics=self.metrics(),
            artifacts=artifacts,
            detail=self,
            notes=[*self.notes, PAIRWISE_CONSOLE],
        )
