"""The settings of the LL144 impact-ratio audit (config `estimator=impact_ratio`, `outcome_audit`) and
its metrics (the rates whose ratios are taken)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from popfair.core.constraints import Boolean, Interval, ListOf, Options, Rules, Text, validate
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED

UNKNOWN = "unknown"


OUTCOMES = ("auto", "score", "callback")


DEFAULT_CLUSTER = "posting_id"


EXCLUSION_JUSTIFICATION = (
    "Categories with fewer than 2% of the applicants in the audited data are left out of the "
    "impact-ratio calculation (6 RCNY 5-301): their rates rest on too few applicants to be compared "
    "reliably. Their numbers of applicants and rates are shown."
)


@dataclass(frozen=True)
class ImpactRatioSettings:
    """What to compute and how (`check` validates against IMPACT_RATIO_CONSTRAINTS).

    Parameters
    ----------
    outcome : {"auto", "score", "callback"}, default "auto"
        "auto": 0/1 values are callbacks (selection rates), others scores (scoring rates).
    top_share : float or None, default 0.2
        Scores: also the rate of landing in the top share (None = off).
    min_score : float or None
        Scores: also the rate of scoring at least this value (None = off).
    min_category_share : float, default 0.02
        LL144: categories under this share of the sample are small.
    exclude_small : bool, default True
        Leave small categories out of the ratios (their counts and rates are still reported).
    flag_below : float, default 0.8
        The four-fifths rule: ratios below this are flagged.
    cluster : str, default "auto"
        "auto" (posting_id when present), "none", or a column whose values are resampled whole.
    unknown_labels : tuple of str
        Category values meaning "unknown" (NaN too).
    exclusion_justification : str
        The auditor's reason, printed with the exclusions.
    n_bootstrap : int, default 2000
        Bootstrap resamples.
    n_permutations : int or None
        Permutations of the "no category differs" test (None: n_bootstrap).
    alpha : float, default 0.05
        1 - CI level, and the level of the test.
    seed : int, default 0
        Seeds the bootstrap and the permutations.
    """

    outcome: str = "auto"  # auto (0/1 values = callback), score or callback
    top_share: float | None = 0.2  # scores: also the rate of landing in the top share (None = off)
    min_score: float | None = None  # scores: also the rate of scoring >= this value (None = off)
    min_category_share: float = 0.02  # LL144: categories under this share of the sample are small
    exclude_small: bool = True  # leave small categories out of the ratios (still reported)
    flag_below: float = 0.8  # four-fifths rule
    cluster: str = "auto"  # auto (posting_id when present), none, or a column name
    unknown_labels: tuple[str, ...] = (UNKNOWN, "")  # category values meaning "unknown" (and NaN)
    exclusion_justification: str = EXCLUSION_JUSTIFICATION  # the auditor's reason, printed with exclusions
    n_bootstrap: int = 2000
    n_permutations: int | None = None  # permutations of the "no category differs" test (None: n_bootstrap)
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
    "exclusion_justification": Text(),
    "n_bootstrap": N_BOOTSTRAP,
    "n_permutations": [None, N_BOOTSTRAP],
    "alpha": ALPHA,
    "seed": SEED,
}


@dataclass(frozen=True)
class Metric:
    """One rate: `selection` (callbacks) or a score rule: above the median, top share, >= value."""

    name: str
    rule: str  # selected | above_median | top_share | min_score
    value: float | None = None


def metrics_for(outcome: str, settings: ImpactRatioSettings) -> list[Metric]:
    if outcome == "callback":
        return [Metric("selection", "selected")]
    metrics = [Metric("scoring_median", "above_median")]
    if settings.top_share is not None:
        metrics.append(Metric(f"top_{settings.top_share * 100:g}pct", "top_share", settings.top_share))
    if settings.min_score is not None:
        metrics.append(Metric(f"score_ge_{settings.min_score:g}", "min_score", settings.min_score))
    return metrics
