"""Outcome-level audit metrics as the law defines them: selection / scoring rates and impact ratios
(NYC Local Law 144 bias audits, 6 RCNY 5-300; the EEOC four-fifths rule), with bootstrap CIs.

LL144 definitions used here:
- selection rate: share of a category selected (callback y = 1);
- scoring rate: share of a category scoring strictly above the median score of the whole sample;
- impact ratio: a category's rate divided by the rate of the highest-rate category;
- categories: sex, race/ethnicity, and the intersection sex x race;
- a category under 2% of the audited data may be excluded from the ratios (its counts and rate are
  still reported); the number of applicants whose category is unknown is reported.
The four-fifths rule flags ratios below 0.8. For scores we also report a configurable threshold
(top k% of scores, or an absolute minimum score) as a selection rule an employer might apply.

Uncertainty: percentile bootstrap that resamples applicants (or whole postings, when the table has
a posting column: the paired design's natural cluster) and recomputes everything, including the
median or top-k cutoff and which category is highest, so the CIs carry all the sampling noise.
Fisher exact and chi-square tests compare each category with the top one (they assume independent
applicants; with postings the bootstrap CI is the honest statement).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd

from popfair.constraints import Boolean, Interval, ListOf, Options, Rules, Text, validate
from popfair.errors import DataError, EstimationError
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED, bootstrap_counts, bootstrap_se, percentile_ci
from popfair.race_coding import LL144_DISPLAY, RACE_SCHEMES, recode_race
from popfair.types import Effects, Plot, Roles

DIMENSIONS = ("sex", "race", "sex_race")
DIMENSION_TITLES = {"sex": "Sex", "race": "Race/Ethnicity", "sex_race": "Intersectional (sex x race)"}
UNKNOWN = "unknown"
OUTCOMES = ("auto", "score", "callback")
DEFAULT_CLUSTER = "posting_id"
# Display labels for the published-summary layout; other values are shown as they are.
DISPLAY = {
    "female": "Female",
    "male": "Male",
    "black": "Black or African American",
    "white": "White",
    "hispanic": "Hispanic or Latino",
    "api": "Asian or Pacific Islander",
    "other": "Other race",
    UNKNOWN: "Unknown",
    **LL144_DISPLAY,
}


@dataclass(frozen=True)
class ImpactRatioSettings:
    """What to compute and how (`check` validates against IMPACT_RATIO_CONSTRAINTS)."""

    outcome: str = "auto"  # auto (0/1 values = callback), score or callback
    top_share: float | None = 0.2  # scores: also the rate of landing in the top share (None = off)
    min_score: float | None = None  # scores: also the rate of scoring >= this value (None = off)
    min_category_share: float = 0.02  # LL144: categories under this share of the sample are small
    exclude_small: bool = True  # leave small categories out of the ratios (still reported)
    flag_below: float = 0.8  # four-fifths rule
    cluster: str = "auto"  # auto (posting_id when present), none, or a column name
    unknown_labels: tuple[str, ...] = (UNKNOWN, "")  # category values meaning "unknown" (and NaN)
    n_bootstrap: int = 2000
    alpha: float = 0.05
    seed: int = 0

    def check(self) -> None:
        """ParameterError naming the first setting that breaks `IMPACT_RATIO_CONSTRAINTS`."""
        validate(IMPACT_RATIO_CONSTRAINTS, asdict(self))


IMPACT_RATIO_CONSTRAINTS: Rules = {
    "outcome": Options(OUTCOMES),
    "top_share": [None, Interval(float, 0, 1, closed="neither")],
    "min_score": [None, Interval(float, None, None)],
    "min_category_share": Interval(float, 0, 0.5, closed="left"),  # LL144 uses 0.02
    "exclude_small": Boolean(),
    "flag_below": Interval(float, 0, 1, closed="right"),  # the four-fifths rule uses 0.8
    "cluster": Text(),  # auto, none or a column name
    "unknown_labels": ListOf(str, "strings"),
    "n_bootstrap": N_BOOTSTRAP,
    "alpha": ALPHA,
    "seed": SEED,
}


@dataclass(frozen=True)
class _Metric:
    """One rate: `selection` (callbacks) or a score rule: above the median, top share, >= value."""

    name: str
    rule: str  # selected | above_median | top_share | min_score
    value: float | None = None


def _metrics_for(outcome: str, settings: ImpactRatioSettings) -> list[_Metric]:
    if outcome == "callback":
        return [_Metric("selection", "selected")]
    metrics = [_Metric("scoring_median", "above_median")]
    if settings.top_share is not None:
        metrics.append(_Metric(f"top_{settings.top_share * 100:g}pct", "top_share", settings.top_share))
    if settings.min_score is not None:
        metrics.append(_Metric(f"score_ge_{settings.min_score:g}", "min_score", settings.min_score))
    return metrics


@dataclass
class ImpactRatios:
    """The LL144 table and what it was computed from.

    `table`: one row per metric x dimension x category (plus an `unknown` row per dimension) with
    n_applicants, share, n_selected, rate (+ CI), impact_ratio (+ se, CI), status (included /
    excluded / unknown), small, is_reference, flag (ratio < flag_below), flag_ci (CI upper bound
    below it too), fisher_p, chi2, chi2_p, threshold (the cutoff the metric used on the sample)."""

    table: pd.DataFrame
    outcome: str
    n: int
    thresholds: dict[str, float]
    cluster: str | None
    n_clusters: int | None
    settings: ImpactRatioSettings
    notes: list[str] = field(default_factory=list)

    def included(self) -> pd.DataFrame:
        return self.table[self.table["status"] == "included"]

    def n_unknown(self) -> dict[str, int]:
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
        share_pct = (t["share"] * 100).round(2)
        notes = np.select(
            [t["status"] == "unknown", t["status"] == "excluded", t["is_reference"], t["small"]],
            [
                "unknown category: not in the ratios",
                [f"excluded: {s}% of sample (< {self.settings.min_category_share * 100:g}%)" for s in share_pct],
                "reference (highest rate)",
                [f"small: {s}% of sample, kept" for s in share_pct],
            ],
            default="",
        )
        out = pd.DataFrame(
            {
                "metric": t["metric"],
                "dimension": t["dimension"].map(DIMENSION_TITLES),
                "category": [_display(c) for c in t["category"]],
                "n_applicants": t["n_applicants"].astype(int),
                selected_header: t["n_selected"].astype(int),
                "rate": t["rate"].round(4),
                "impact_ratio": t["impact_ratio"].round(3),
                f"ci_{round((1 - self.settings.alpha) * 100):d}": ci,
                f"flag_below_{self.settings.flag_below:g}": np.where(t["flag"], "yes", ""),
                "note": notes,
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
                f"- `{metric}`: {_metric_description(metric)}"
                + (f" (cutoff on this sample: {cutoff:g})" if np.isfinite(cutoff) else "")
            )
        for dimension, count in self.n_unknown().items():
            lines.append(f"- Applicants with unknown {DIMENSION_TITLES[dimension].lower()} category: {count}")
        lines.extend(f"- Note: {note}" for note in self.notes)
        for (metric, dimension), block in summary.groupby(["metric", "dimension"], sort=False):
            lines += ["", f"## {metric}: {dimension}", "", _markdown_table(block.drop(columns=["metric", "dimension"]))]
        return "\n".join(lines) + "\n"

    def plot(self) -> Plot:
        """Horizontal bars of impact ratios with CIs, one panel per metric x dimension, 0.8 line
        (`popfair.report.figures.draw` makes the Figure)."""
        return Plot(
            "impact_ratio",
            self.table,
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
            out[f"{prefix}.n_flagged"] = float(block["flag"].sum())
            for row in block.itertuples():
                name = f"{prefix}.{_metric_safe(row.category)}"
                out[f"{name}.ratio"] = float(row.impact_ratio)
                out[f"{name}.ci_low"] = float(row.ci_low)
                out[f"{name}.ci_high"] = float(row.ci_high)
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
                    f"[{worst['ci_low']:.2f}, {worst['ci_high']:.2f}]"
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
            "impact_ratios/impact_ratios.png": self.plot(),
        }
        return Effects(table=table, labels=self.labels(), metrics=self.metrics(), artifacts=artifacts)


def impact_ratios(
    data: pd.DataFrame,
    *,
    y: str = "y",
    sex: str = "gender",
    race: str = "race",
    settings: ImpactRatioSettings | None = None,
) -> ImpactRatios:
    """The NYC Local Law 144 impact-ratio table (and four-fifths flags) of a scored table.

    Parameters
    ----------
    data : DataFrame
        One row per applicant: the outcome, the sex and race categories, and optionally a
        `posting_id` column (or `settings.cluster`), which makes the bootstrap resample whole postings.
    y : str, default "y"
        Outcome column: 0/1 callbacks (selection rates) or numeric scores (scoring rates: share above
        the sample's median, plus the top-share and minimum-score rules of `settings`).
    sex, race : str
        Category columns; NaN or one of `settings.unknown_labels` counts as unknown.
    settings : ImpactRatioSettings, optional
        What to compute (outcome, small-category rule, flag threshold, cluster, bootstrap size,
        alpha, seed); the defaults follow LL144.

    Returns
    -------
    ImpactRatios
        `table` (one row per metric x dimension x category: rates, impact ratios with bootstrap CIs,
        flags, Fisher and chi-square tests), `summary()` / `markdown()` in the layout of published
        audits, `plot()` (drawn by `popfair.report.figures.draw`), `metrics()` and `effects()`.

    Examples
    --------
    >>> import pandas as pd
    >>> from popfair import ImpactRatioSettings, impact_ratios
    >>> data = pd.DataFrame({"y": [1, 0, 1, 1] * 100, "gender": ["female", "female", "male", "male"] * 100,
    ...                      "race": ["black", "white"] * 200})
    >>> result = impact_ratios(data, settings=ImpactRatioSettings(n_bootstrap=200))
    >>> result.included().query("dimension == 'sex'")[["category", "rate", "impact_ratio"]].round(2).values.tolist()
    [['female', 0.5, 0.5], ['male', 1.0, 1.0]]
    """
    settings = settings or ImpactRatioSettings()
    settings.check()
    missing = [c for c in (y, sex, race) if c not in data.columns]
    if missing:
        raise DataError(
            f"scored table lacks columns {missing} needed for impact ratios "
            f"(outcome {y!r}, sex {sex!r}, race {race!r}); it has {sorted(map(str, data.columns))}"
        )
    if data.empty:
        raise EstimationError("impact ratios: the scored table has no rows")
    values = _outcome_values(data[y], y)
    outcome = _resolve_outcome(values, settings.outcome, y)
    cluster = _resolve_cluster(data, settings.cluster)
    sex_codes, sex_levels = _category_codes(data[sex], settings.unknown_labels)
    race_codes, race_levels = _category_codes(data[race], settings.unknown_labels)
    n_race = len(race_levels) + 1  # last slot = unknown
    cells = np.where(sex_codes < 0, len(sex_levels), sex_codes) * n_race + np.where(
        race_codes < 0, len(race_levels), race_codes
    )
    n_cells = (len(sex_levels) + 1) * n_race
    dimensions = _dimension_maps(sex_levels, race_levels)

    # Atoms: distinct (cell, outcome value) pairs, cell-major then by value. Every statistic is a
    # function of the atom weights, so a bootstrap replicate is just a vector of atom counts.
    keys = np.column_stack([cells.astype(float), values])
    atoms, atom_of_row, atom_counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    atom_of_row = atom_of_row.ravel().astype(np.int32)
    atom_table = _Atoms(cell=atoms[:, 0].astype(np.int64), value=atoms[:, 1], n_cells=n_cells)
    metrics = _metrics_for(outcome, settings)

    def cell_counts(weights: np.ndarray) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
        return atom_table.counts(weights, metrics)

    point_totals, point = cell_counts(atom_counts[None, :].astype(float))
    rng = np.random.default_rng([settings.seed, 10])
    boot_rates: dict[tuple[str, str], list[np.ndarray]] = {}
    n_clusters = None
    if cluster is not None:
        cluster_codes, cluster_index = pd.factorize(data[cluster], sort=True)
        if (cluster_codes < 0).any():
            raise DataError(
                f"{cluster}: {(cluster_codes < 0).sum()} rows have no {cluster}; "
                "every row of a clustered design needs one (or set cluster: none)"
            )
        n_clusters = len(cluster_index)
        from scipy import sparse  # scipy at first use: a dry run builds this estimator without it (0.6 s)

        # resample whole clusters; a replicate's atom counts are its cluster counts mapped to atoms
        atoms_of_cluster = sparse.csr_matrix(
            (np.ones(len(atom_of_row)), (atom_of_row, cluster_codes)), shape=(len(atoms), n_clusters)
        )
        resample: Iterator[np.ndarray] = (
            np.ascontiguousarray((atoms_of_cluster @ np.ascontiguousarray(times.T)).T)
            for times in bootstrap_counts(
                rng, np.arange(n_clusters), n_clusters, settings.n_bootstrap, width=len(atoms)
            )
        )
    else:  # resample applicants: each atom is a class of identical applicants
        resample = bootstrap_counts(rng, atom_of_row, len(atoms), settings.n_bootstrap)
    for weights in resample:
        totals, chosen = cell_counts(weights)
        for metric in metrics:
            for dim, mapping in dimensions.items():
                n_d, e_d = totals @ mapping.matrix, chosen[metric.name][1] @ mapping.matrix
                with np.errstate(invalid="ignore", divide="ignore"):
                    boot_rates.setdefault((metric.name, dim), []).append(e_d / n_d)

    n = len(data)
    blocks, notes, thresholds = [], [], {}
    for metric in metrics:
        cutoff, chosen_cells = point[metric.name]
        thresholds[metric.name] = math.nan if metric.rule == "selected" else float(cutoff[0])
        for dim, mapping in dimensions.items():
            block, note = _block(
                metric.name,
                dim,
                mapping,
                (point_totals @ mapping.matrix)[0],
                (chosen_cells @ mapping.matrix)[0],
                np.vstack(boot_rates[(metric.name, dim)]),
                n,
                thresholds[metric.name],
                settings,
            )
            blocks.append(block)
            notes += [note] if note else []
    return ImpactRatios(
        table=pd.concat(blocks, ignore_index=True),
        outcome=outcome,
        n=n,
        thresholds=thresholds,
        cluster=cluster,
        n_clusters=n_clusters,
        settings=settings,
        notes=notes,
    )


@dataclass(frozen=True)
class _Dimension:
    categories: list[str]  # known categories, then UNKNOWN last
    matrix: np.ndarray  # cells x categories, 0/1


def _dimension_maps(sex_levels: list[str], race_levels: list[str]) -> dict[str, _Dimension]:
    """How the (sex incl. unknown) x (race incl. unknown) cells add up to each dimension's categories."""
    n_sex, n_race = len(sex_levels), len(race_levels)
    s, r = np.divmod(np.arange((n_sex + 1) * (n_race + 1)), n_race + 1)
    known = (s < n_sex) & (r < n_race)
    columns = {
        "sex": (sex_levels, s),
        "race": (race_levels, r),
        "sex_race": (
            [f"{a}-{b}" for a in sex_levels for b in race_levels],
            np.where(known, s * n_race + r, n_sex * n_race),
        ),
    }
    out = {}
    for dim, (levels, column) in columns.items():
        matrix = np.zeros((len(s), len(levels) + 1))
        matrix[np.arange(len(s)), column] = 1.0
        out[dim] = _Dimension(categories=[*levels, UNKNOWN], matrix=matrix)
    return out


def _block(
    metric: str,
    dim: str,
    mapping: _Dimension,
    n_cat: np.ndarray,
    e_cat: np.ndarray,
    boot: np.ndarray,
    n: int,
    cutoff: float,
    s: ImpactRatioSettings,
) -> tuple[pd.DataFrame, str]:
    """Rates, ratios, CIs and tests for one metric x dimension."""
    is_unknown = np.arange(len(mapping.categories)) == len(mapping.categories) - 1
    share = n_cat / n
    small = ~is_unknown & (share < s.min_category_share)
    included = ~is_unknown & (n_cat > 0) & ~(small & s.exclude_small)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = e_cat / n_cat
    reference = int(np.nanargmax(np.where(included, rate, np.nan))) if included.any() else -1
    note = ""
    with np.errstate(invalid="ignore", divide="ignore"):
        if reference >= 0 and rate[reference] > 0:
            ratio = np.where(included, rate / rate[reference], np.nan)
        else:
            ratio = np.full(len(rate), np.nan)
            if reference >= 0:
                note = f"{metric} / {dim}: no category has a positive rate, impact ratios undefined"
        boot_top = _nanmax(np.where(included[None, :], boot, np.nan))
        boot_ratio = np.where(included[None, :] & (boot_top[:, None] > 0), boot / boot_top[:, None], np.nan)
    rate_ci, ratio_ci = percentile_ci(boot, s.alpha), percentile_ci(boot_ratio, s.alpha)
    fisher_p, chi2, chi2_p = (np.full(len(rate), np.nan) for _ in range(3))
    if reference >= 0:
        for k in np.flatnonzero(included):
            if k != reference:
                fisher_p[k], chi2[k], chi2_p[k] = _tests(e_cat[k], n_cat[k], e_cat[reference], n_cat[reference])
    flag = included & (ratio < s.flag_below)
    block = pd.DataFrame(
        {
            "metric": metric,
            "dimension": dim,
            "category": mapping.categories,
            "status": np.where(is_unknown, "unknown", np.where(included, "included", "excluded")),
            "small": small,
            "is_reference": np.arange(len(rate)) == reference,
            "n_applicants": n_cat.round().astype(np.int64),
            "share": share,
            "n_selected": e_cat.round().astype(np.int64),
            "rate": rate,
            "rate_ci_low": rate_ci[0],
            "rate_ci_high": rate_ci[1],
            "impact_ratio": ratio,
            "ratio_se": bootstrap_se(boot_ratio),
            "ci_low": ratio_ci[0],
            "ci_high": ratio_ci[1],
            "flag": flag,
            "flag_ci": flag & (ratio_ci[1] < s.flag_below),
            "fisher_p": fisher_p,
            "chi2": chi2,
            "chi2_p": chi2_p,
            "threshold": cutoff,
        }
    )
    # categories never seen in the data (possible only for intersections) carry no information
    block = block[(block["n_applicants"] > 0) | (block["status"] == "unknown")]
    return block, note


def _tests(e1: float, n1: float, e0: float, n0: float) -> tuple[float, float, float]:
    """Fisher exact (two-sided) and chi-square with Yates' correction on the 2x2 vs the reference."""
    from scipy import stats

    table = np.array([[e1, n1 - e1], [e0, n0 - e0]]).round().astype(np.int64)
    fisher = float(stats.fisher_exact(table)[1])
    if (table.sum(axis=0) == 0).any():  # nobody (or everybody) selected: chi-square undefined
        return fisher, math.nan, math.nan
    result = stats.chi2_contingency(table, correction=True)
    return fisher, float(result[0]), float(result[1])


class _Atoms:
    """Atoms in cell-major, value-ascending order, and the per-replicate counts a rule selects.

    Every rule selects the atoms at or above a cutoff (strictly above, for the median rule), so
    within a cell the selected atoms are a suffix: two cumulative sums per replicate and a binary
    search per cell give all counts, with no replicates x atoms boolean masks."""

    def __init__(self, cell: np.ndarray, value: np.ndarray, n_cells: int) -> None:
        self.value, self.n_atoms = value, len(value)
        self.start = np.searchsorted(cell, np.arange(n_cells), side="left")
        self.end = np.searchsorted(cell, np.arange(n_cells), side="right")
        self.by_value = np.argsort(value, kind="stable")
        self.sorted_value = value[self.by_value]

    def counts(
        self, weights: np.ndarray, metrics: list[_Metric]
    ) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """(replicates x cells totals, {metric: (cutoff per replicate, selected per cell)})."""
        size = len(weights)
        within = np.zeros((size, self.n_atoms + 1))
        np.cumsum(weights, axis=1, out=within[:, 1:])
        totals = within[:, self.end] - within[:, self.start]
        # np.take keeps rows contiguous (fancy indexing here would return a column-major copy)
        ordered = (
            np.cumsum(np.take(weights, self.by_value, axis=1), axis=1)
            if any(m.rule in ("above_median", "top_share") for m in metrics)
            else None
        )
        rows = np.arange(size)
        out = {}
        for metric in metrics:
            cutoff, strict = self._cutoff(metric, ordered, totals.sum(axis=1))
            below = np.empty_like(totals)
            for c, (start, end) in enumerate(zip(self.start, self.end)):
                j = np.searchsorted(self.value[start:end], cutoff, side="right" if strict else "left")
                below[:, c] = within[rows, start + j] - within[:, start]
            out[metric.name] = (cutoff, totals - below)
        return totals, out

    def _cutoff(self, metric: _Metric, ordered: np.ndarray | None, total: np.ndarray) -> tuple[np.ndarray, bool]:
        """Per replicate: the score a rule selects from, and whether it must be exceeded strictly."""
        if metric.rule == "selected":
            return np.ones(len(total)), False
        if metric.rule == "min_score":
            return np.full(len(total), float(metric.value or 0.0)), False
        assert ordered is not None  # computed whenever a rule needs order statistics
        if metric.rule == "above_median":
            low = self._order_statistic(ordered, np.floor((total + 1) / 2))
            high = self._order_statistic(ordered, np.floor(total / 2) + 1)
            return (low + high) / 2, True
        # top share: everyone tied with the ceil(k n)-th best score is in (tied applicants are equal)
        k = np.maximum(1, np.ceil(float(metric.value or 0.0) * total - 1e-9))
        return self._order_statistic(ordered, total - k + 1), False

    def _order_statistic(self, ordered: np.ndarray, position: np.ndarray) -> np.ndarray:
        """The position-th smallest value (1-based) of each replicate, by one vectorised binary
        search over the replicates' cumulative weights laid end to end (each row offset past the last)."""
        size, n_atoms = ordered.shape
        offset = np.arange(size) * (ordered[:, -1].max() + 1)
        flat = (ordered + offset[:, None]).ravel()
        index = np.searchsorted(flat, position + offset, side="left") - np.arange(size) * n_atoms
        return self.sorted_value[np.minimum(index, n_atoms - 1)]


def _outcome_values(column: pd.Series, y: str) -> np.ndarray:
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        example = column[bad].iloc[0]
        raise EstimationError(
            f"{y}: {int(bad.sum())} of {len(values)} rows have no finite numeric "
            f"outcome (e.g. {example!r}); drop failed screens before impact ratios"
        )
    return values


def _resolve_outcome(values: np.ndarray, outcome: str, y: str) -> str:
    binary = bool(np.isin(values, (0.0, 1.0)).all())
    if outcome == "callback" and not binary:
        odd = np.unique(values[~np.isin(values, (0.0, 1.0))])[:5]
        raise EstimationError(
            f"{y}: outcome=callback needs 0/1 values, found {odd.tolist()} (use outcome: score for numeric scores)"
        )
    if outcome == "auto":
        return "callback" if binary else "score"
    return outcome


def _resolve_cluster(data: pd.DataFrame, cluster: str) -> str | None:
    if cluster == "none":
        return None
    if cluster == "auto":
        return DEFAULT_CLUSTER if DEFAULT_CLUSTER in data.columns else None
    if cluster not in data.columns:
        raise DataError(
            f"cluster column {cluster!r} is not in the scored table "
            f"(set cluster: auto or none, or one of {sorted(map(str, data.columns))})"
        )
    return cluster


def _category_codes(column: pd.Series, unknown_labels: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """Integer codes of the known categories (sorted), -1 for unknown (NaN or an unknown label)."""
    text = column.astype("string").str.strip()
    unknown = (text.isna() | text.str.lower().isin([u.strip().lower() for u in unknown_labels])).to_numpy(bool)
    levels = sorted(text[~unknown].unique().tolist())
    codes = pd.Categorical(text.where(~unknown), categories=levels).codes.astype(np.int64)
    return codes, levels


def _nanmax(matrix: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows stay NaN
        return np.nanmax(matrix, axis=1) if matrix.shape[1] else np.full(len(matrix), np.nan)


def _display(category: str) -> str:
    return " / ".join(DISPLAY.get(part, part) for part in str(category).split("-"))


def _metric_safe(category: str) -> str:
    """MLflow metric names allow letters, digits, _ - . / and space; replace anything else."""
    return re.sub(r"[^\w\-/ ]", "_", str(category)).replace(".", "_")


def _metric_description(metric: str) -> str:
    if metric == "selection":
        return "selection rate (share called back)"
    if metric == "scoring_median":
        return "LL144 scoring rate (share scoring above the sample's median)"
    if metric.startswith("top_"):
        return "share in the top of the score distribution (ties at the cutoff included)"
    return "share scoring at or above the absolute threshold"


def _markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if (isinstance(v, float) and not np.isfinite(v)) else str(v) for v in row) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])


class ImpactRatio:
    """`estimator=impact_ratio`: the LL144 / four-fifths table as an effects table (one row per
    metric x dimension x category, estimate = impact ratio). Categories are the law's (sex, race and
    their intersection), not the case's protected attribute, so `roles` is not used."""

    name = "impact_ratio"
    design = None  # a function of the factual scored table alone: no counterfactual worlds
    parameter_constraints: ClassVar[Rules] = {
        **IMPACT_RATIO_CONSTRAINTS,
        "sex_column": Text(),
        "race_column": Text(),
        "race_scheme": Options(RACE_SCHEMES),
    }

    def __init__(
        self,
        outcome: str = "auto",
        top_share: float | None = 0.2,
        min_score: float | None = None,
        min_category_share: float = 0.02,
        exclude_small: bool = True,
        flag_below: float = 0.8,
        cluster: str = "auto",
        unknown_labels: list[str] | tuple[str, ...] = (UNKNOWN, ""),
        sex_column: str = "gender",
        race_column: str = "race",
        race_scheme: str = "five",
        n_bootstrap: int = 2000,
        alpha: float = 0.05,
        seed: int = 0,
    ) -> None:
        validate(
            self.parameter_constraints,
            {
                "outcome": outcome,
                "top_share": top_share,
                "min_score": min_score,
                "min_category_share": min_category_share,
                "exclude_small": exclude_small,
                "flag_below": flag_below,
                "cluster": cluster,
                "unknown_labels": unknown_labels,
                "sex_column": sex_column,
                "race_column": race_column,
                "race_scheme": race_scheme,
                "n_bootstrap": n_bootstrap,
                "alpha": alpha,
                "seed": seed,
            },
        )
        self.settings = ImpactRatioSettings(
            outcome=outcome,
            top_share=top_share,
            min_score=min_score,
            min_category_share=min_category_share,
            exclude_small=exclude_small,
            flag_below=flag_below,
            cluster=cluster,
            unknown_labels=tuple(unknown_labels),
            n_bootstrap=n_bootstrap,
            alpha=alpha,
            seed=seed,
        )
        self.sex_column, self.race_column, self.race_scheme = sex_column, race_column, race_scheme

    def compute(self, data: pd.DataFrame, y: str = "y") -> ImpactRatios:
        race = self.race_column
        if self.race_scheme != "five":  # e.g. LL144's categories, recoded from the raw ACS race code
            race = f"{self.race_column}_{self.race_scheme}"
            data = data.assign(**{race: recode_race(data, self.race_column, self.race_scheme)})
        return impact_ratios(data, y=y, sex=self.sex_column, race=race, settings=self.settings)

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        return self.compute(data, y).effects()
