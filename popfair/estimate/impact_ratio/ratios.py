"""Outcome-level audit metrics as the law defines them: selection / scoring rates and impact ratios
(NYC Local Law 144 bias audits, 6 RCNY 5-300 and 5-301; the EEOC four-fifths rule).

LL144 definitions used here:
- selection rate: share of a category selected (callback y = 1);
- scoring rate: share of a category scoring strictly above the median score of the whole sample
  (every applicant assessed, unknown categories included);
- impact ratio: a category's rate divided by the rate of the most selected (highest-scoring) category;
- categories: sex, race/ethnicity, and the intersection sex x race;
- the auditor may exclude a category under 2% of the audited data from the impact-ratio calculation
  (it cannot be the reference either); its counts and rate are still reported, with the auditor's
  justification; the number of applicants whose category is unknown is reported and left out of
  the rates of the other categories and of the ratios.
The four-fifths rule flags ratios below 0.8. For scores we also report a configurable threshold
(top k% of scores, or an absolute minimum score) as a selection rule an employer might apply.

Every table goes through counts per (cluster x) sex x race cell and `popfair.estimate.impact_ratio.inference`:
bootstrap CIs over clusters (applicants without clusters) that re-choose the reference in every
replicate, and a permutation test of "no category differs" that says which four-fifths flags survive
the choice of reference. Score cutoffs (median, top share) are the sample's, held fixed in the bootstrap.
Beside them: Fisher's exact and the Z test against the reference (`pairwise`). A dimension of fewer than
two categories in the ratios compares nothing: a note, or a DataError when no dimension has two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Options, Rules, Text, validate
from popfair.core.errors import DataError, EstimationError
from popfair.core.race_coding import RACE_SCHEMES, recode_race
from popfair.core.types import Effects, Roles
from popfair.estimate.impact_ratio.dimensions import Dimension, cells, not_compared
from popfair.estimate.impact_ratio.inference import RatioInference, count_values, infer_groupings
from popfair.estimate.impact_ratio.labels import DIMENSION_TITLES, category_label
from popfair.estimate.impact_ratio.pairwise import reference_tests
from popfair.estimate.impact_ratio.resampling import Units
from popfair.estimate.impact_ratio.settings import (
    DEFAULT_CLUSTER,
    EXCLUSION_JUSTIFICATION,
    IMPACT_RATIO_CONSTRAINTS,
    UNKNOWN,
    ImpactRatioSettings,
    Metric,
    metrics_for,
)
from popfair.estimate.impact_ratio.table import ImpactRatios


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
        four-fifths flags and whether each survives the reference-aware test, each category's Fisher
        exact and two-proportion Z tests against the reference), `summary()` / `markdown()` in the
        layout of published audits, `plot()` (drawn by `popfair.track.figures.draw`), `metrics()` and
        `effects()`.

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
    thresholds, selected = {}, {}
    for metric in metrics_for(outcome, settings):
        thresholds[metric.name], selected[metric.name] = _select(metric, values)
    return _ll144(
        data[sex],
        data[race],
        None if cluster is None else data[cluster],
        np.ones(len(data)),
        selected,
        outcome=outcome,
        thresholds=thresholds,
        cluster=cluster,
        settings=settings,
    )


def impact_ratios_from_counts(
    counts: pd.DataFrame,
    *,
    outcome: str = "callback",
    thresholds: Mapping[str, float] | None = None,
    cluster: str | None = None,
    settings: ImpactRatioSettings | None = None,
    sex: str = "sex",
    race: str = "race",
    n: str = "n",
    require_comparison: bool = True,
) -> ImpactRatios:
    """The NYC Local Law 144 tables from counts of applicants per (cluster x) sex x race cell.

    Parameters
    ----------
    counts : DataFrame
        One row per cell (rows of the same cell are summed): the sex and race categories (NaN or one
        of `settings.unknown_labels`: unknown), the cluster when `cluster` is set, `n` applicants,
        and per metric a column of how many of them it selects: `selection` (outcome="callback"), or
        `scoring_median` (scored strictly above the sample's median, outcome="score"), and any other
        metric named in `thresholds` (e.g. `top_20pct`).
    outcome : {"callback", "score"}
        Selection rates, or LL144 scoring rates.
    thresholds : mapping of str to float, optional
        The metrics (column names) and the cutoff each applied on the sample (NaN for selection);
        default: `selection` or `scoring_median` with no cutoff shown.
    cluster : str, optional
        The cluster column; None: applicants are independent.
    settings : ImpactRatioSettings, optional
        Small-category rule and its justification, flag line, bootstrap and permutation sizes,
        alpha, seed (`outcome`, `top_share`, `min_score`, `cluster` are not used here).
    sex, race, n : str
        Column names.
    require_comparison : bool, default True
        Stop (DataError) when no dimension has two categories in the ratios; False: the tables, with a
        note per dimension that compares nothing (one period of several, one look of a watch).

    Returns
    -------
    ImpactRatios
        As `impact_ratios` returns for rows (the row-based function goes through this computation).
    """
    settings = settings or ImpactRatioSettings()
    settings.check()
    if outcome not in ("callback", "score"):
        raise DataError(f"outcome must be callback or score, got {outcome!r}")
    thresholds = dict(thresholds or {"selection" if outcome == "callback" else "scoring_median": math.nan})
    missing = [c for c in (sex, race, cluster) if c is not None and c not in counts.columns]
    if missing:
        raise DataError(f"counts lack columns {missing}; they have {sorted(map(str, counts.columns))}")
    values = count_values(counts, n, list(thresholds))
    return _ll144(
        counts[sex],
        counts[race],
        None if cluster is None else counts[cluster],
        values[n].to_numpy(float),
        {metric: values[metric].to_numpy(float) for metric in thresholds},
        outcome=outcome,
        thresholds=thresholds,
        cluster=cluster,
        settings=settings,
        require_comparison=require_comparison,
    )


def uncompared(
    counts: pd.DataFrame, settings: ImpactRatioSettings, sex: str = "sex", race: str = "race", n: str = "n"
) -> dict[str, str]:
    """Per dimension (sex, race) that would compare nothing, why (fewer than two known categories
    kept by the small-category rule): the rule the tables apply, for a dry run to say before any
    estimate (`counts`: one row per cell, as `impact_ratios_from_counts` takes)."""
    cell, n_cells, dimensions = cells(counts[sex], counts[race], settings)
    cell_n = _sum_by(cell, counts[n].to_numpy(float), n_cells)
    return _groupings(cell_n, dimensions, float(cell_n.sum()), settings)[1]


def _ll144(
    sex: pd.Series,
    race: pd.Series,
    cluster_values: pd.Series | None,
    n: np.ndarray,
    selected: dict[str, np.ndarray],
    *,
    outcome: str,
    thresholds: dict[str, float],
    cluster: str | None,
    settings: ImpactRatioSettings,
    require_comparison: bool = True,
) -> ImpactRatios:
    """Counts per (cluster x) sex x race cell -> the tables, through `infer_groupings` (the same
    code that every other impact-ratio audit uses)."""
    cell, n_cells, dimensions = cells(sex, race, settings)
    chosen = np.column_stack(list(selected.values()))
    cell_n = _sum_by(cell, n, n_cells)
    total = float(n.sum())
    groupings, lone = _groupings(cell_n, dimensions, total, settings)
    if require_comparison and len(lone) == len(dimensions):  # ratios of 1 and "no pattern" would read as a result
        raise DataError(
            f"impact ratios: nothing was compared: {lone['sex']}, and {lone['race']}; "
            "a comparison needs at least two categories of sex or of race"
        )

    def infer(units: Units) -> list[list[RatioInference]]:
        return infer_groupings(
            units,
            groupings,
            n_bootstrap=settings.n_bootstrap,
            n_permutations=settings.n_permutations or settings.n_bootstrap,
            alpha=settings.alpha,
            flag_below=settings.flag_below,
            seed=settings.seed,
        )

    n_clusters = None
    if cluster_values is not None:
        units, n_clusters = _cluster_units(cluster_values, cluster, cell, n_cells, n, chosen)
        inference = infer(units)
    else:  # independent applicants: each metric splits the cells into selected or not
        inference = [infer(Units.of_applicants(cell_n, _sum_by(cell, c, n_cells)))[0] for c in chosen.T]
    blocks, tests = [], []
    notes = [f"{DIMENSION_TITLES[dim]}: nothing compared: {why}" for dim, why in lone.items()]
    for (metric, cutoff), results in zip(thresholds.items(), inference):
        for (dim, mapping), result, (_, _, included) in zip(dimensions.items(), results, groupings):
            block, test = _block(metric, cutoff, dim, mapping.categories, result, included, total, settings)
            blocks.append(block)
            tests.append(test)
            if included.any() and not np.isfinite(result.min_ratio):
                notes.append(f"{metric} / {dim}: no category has a positive rate, impact ratios undefined")
    return ImpactRatios(
        table=pd.concat(blocks, ignore_index=True),
        outcome=outcome,
        n=int(round(total)),
        thresholds=thresholds,
        cluster=cluster,
        n_clusters=n_clusters,
        settings=settings,
        tests=pd.DataFrame(tests),
        notes=notes,
    )


def _cluster_units(
    cluster_values: pd.Series, cluster: str | None, cell: np.ndarray, n_cells: int, n: np.ndarray, chosen: np.ndarray
) -> tuple[Units, int]:
    """Counts per cluster x cell (applicants, and selected per metric) for the cluster bootstrap."""
    unit, index = pd.factorize(cluster_values, sort=True)
    if (unit < 0).any():
        raise DataError(
            f"{cluster}: {int((unit < 0).sum())} rows have no {cluster}; "
            "every row of a clustered design needs one (or set cluster: none)"
        )
    n_clusters = len(index)
    flat, size = unit * n_cells + cell, n_clusters * n_cells
    units = Units(
        n=_sum_by(flat, n, size).reshape(n_clusters, n_cells),
        selected=np.stack([_sum_by(flat, c, size).reshape(n_clusters, n_cells) for c in chosen.T], axis=1),
        clustered=True,
    )
    return units, n_clusters


def _groupings(
    cell_n: np.ndarray, dimensions: dict[str, Dimension], total: float, settings: ImpactRatioSettings
) -> tuple[list[tuple[np.ndarray, list[str], np.ndarray]], dict[str, str]]:
    """Per dimension, each cell's category and the categories compared (known, seen, not left out as
    small); and why a dimension with fewer than two compared categories compares nothing."""
    groupings = []
    for mapping in dimensions.values():
        n_cat = cell_n @ mapping.matrix
        known = np.arange(len(n_cat)) < len(n_cat) - 1
        small = known & (n_cat / total < settings.min_category_share)
        included = known & (n_cat > 0) & ~(small & settings.exclude_small)
        groupings.append((mapping.matrix.argmax(axis=1), mapping.categories, included))
    lone = {
        dim: not_compared(dim, mapping.categories, (cell_n @ mapping.matrix) > 0, g[2], settings.min_category_share)
        for (dim, mapping), g in zip(dimensions.items(), groupings)
        if g[2].sum() < 2
    }
    return groupings, lone


def _block(
    metric: str,
    cutoff: float,
    dim: str,
    categories: list[str],
    result: RatioInference,
    included: np.ndarray,
    total: float,
    settings: ImpactRatioSettings,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One metric x dimension: its rows of the impact-ratio table (the unknown category last), and its
    test of no difference."""
    t = result.table
    is_unknown = np.arange(len(t)) == len(t) - 1
    share = t["n"].to_numpy() / total
    pairwise = reference_tests(
        t["n"].to_numpy(float), t["selected"].to_numpy(float), included, t["is_reference"].to_numpy(bool)
    )
    block = pd.DataFrame(
        {
            "metric": metric,
            "dimension": dim,
            "category": categories,
            "status": np.where(is_unknown, "unknown", t["status"].to_numpy()),
            "small": ~is_unknown & (share < settings.min_category_share),
            "is_reference": t["is_reference"].to_numpy(),
            "n_applicants": t["n"].round().astype(np.int64).to_numpy(),
            "share": share,
            "n_selected": t["selected"].round().astype(np.int64).to_numpy(),
            **{c: t[c].to_numpy() for c in RESULT_COLUMNS},
            **{c: v.to_numpy() for c, v in pairwise.items()},
            "threshold": cutoff,
        }
    )
    # categories never seen in the data (possible only for intersections) carry no information
    block = block[(block["n_applicants"] > 0) | is_unknown]
    test = {
        "metric": metric,
        "dimension": dim,
        "p_value": result.p_value,
        "min_ratio": result.min_ratio,
        "n_flagged": int(t["flag"].sum()),
        "n_flags_surviving": int(t["flag_survives"].sum()),
        "null_flag_rate": result.null_flag_rate,
        "null_method": result.null_method,
        "n_permutations": result.n_permutations,
        "explanation": result.explain(category_label),
    }
    return block, test


RESULT_COLUMNS = [
    "rate",
    "rate_ci_low",
    "rate_ci_high",
    "impact_ratio",
    "ratio_se",
    "ci_low",
    "ci_high",
    "flag",
    "flag_ci",
    "p_adjusted",
    "flag_survives",
    "verdict_note",  # where the test and the CI disagree, in one sentence (inference.verdict_notes)
]


def _sum_by(key: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    return np.bincount(key, weights=weights, minlength=size).astype(float)


def _select(metric: Metric, values: np.ndarray) -> tuple[float, np.ndarray]:
    """The cutoff a rule applies to this sample, and who it selects (held fixed in the bootstrap:
    LL144 defines the scoring rate against the sample's own median)."""
    if metric.rule == "selected":
        return math.nan, (values == 1).astype(float)
    if metric.rule == "above_median":
        cutoff = float(np.median(values))
        return cutoff, (values > cutoff).astype(float)
    if metric.rule == "top_share":  # everyone tied with the ceil(k n)-th best score is in
        k = max(1, math.ceil(float(metric.value or 0.0) * len(values) - 1e-9))
        cutoff = float(np.partition(values, len(values) - k)[len(values) - k])
    else:
        cutoff = float(metric.value or 0.0)
    return cutoff, (values >= cutoff).astype(float)


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


class ImpactRatio:
    """`estimator=impact_ratio`: the LL144 / four-fifths table as an effects table (one row per
    metric x dimension x category, estimate = impact ratio). Categories are the law's (sex, race and
    their intersection), not the case's protected attribute, so `roles` is not used."""

    name = "impact_ratio"
    counterfactuals = None  # a function of the factual scored table alone: no counterfactual worlds
    parameter_constraints: ClassVar[Rules] = {
        **IMPACT_RATIO_CONSTRAINTS,
        "sex_column": Text(),
        "race_column": Text(),
        "race_scheme": Options(RACE_SCHEMES),
    }

    def effect_unit(self, effect: str, outcome: str) -> str:
        """Every row is an impact ratio (`DeclaresUnits`)."""
        return "ratio"

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
        exclusion_justification: str = EXCLUSION_JUSTIFICATION,
        sex_column: str = "gender",
        race_column: str = "race",
        race_scheme: str = "five",
        n_bootstrap: int = 2000,
        n_permutations: int | None = None,
        alpha: float = 0.05,
        seed: int = 0,
    ) -> None:
        values = dict(locals())
        del values["self"]
        validate(self.parameter_constraints, values)
        self.sex_column, self.race_column, self.race_scheme = sex_column, race_column, race_scheme
        for name in ("sex_column", "race_column", "race_scheme"):
            del values[name]
        self.settings = ImpactRatioSettings(**{**values, "unknown_labels": tuple(unknown_labels)})

    def compute(self, data: pd.DataFrame, y: str = "y") -> ImpactRatios:
        race = self.race_column
        if self.race_scheme != "five":  # e.g. LL144's categories, recoded from the raw ACS race code
            race = f"{self.race_column}_{self.race_scheme}"
            data = data.assign(**{race: recode_race(data, self.race_column, self.race_scheme)})
        return impact_ratios(data, y=y, sex=self.sex_column, race=race, settings=self.settings)

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        return self.compute(data, y).effects()
