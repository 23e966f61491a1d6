"""Paired callback gap ("Can LLMs Hire Fairly?"): statistics that respect the pairing and the
clustering of pairs within postings.

On one row per pair with the 0/1 decisions of the advantaged-group (x1) and other-group (x0) profile:
- callback rates and the gap in percentage points, 100 * (rate_x1 - rate_x0);
- discordant counts b (x1 yes, x0 no) and c (x1 no, x0 yes); McNemar's chi-square with continuity
  correction (|b - c| - 1)^2 / (b + c), 1 df;
- a posting-cluster bootstrap percentile CI (default 2,000 resamples);
- a cluster-robust t: each cluster's mean within-pair difference is one observation, t with G-1 df.
Pairs missing either decision (a failed screen) are dropped and counted.

With several answers per prompt (`screener.samples` > 1, or probability scores) a profile's decision is
its mean callback, a number in [0, 1]: McNemar's test is for single yes/no answers and is not computed
(NaN); the gap is tested by the cluster-robust t on the mean callbacks, and the result says so
(`test`). b and c then count the pairs whose mean callbacks differ either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.constraints import Text, validate
from popfair.core.errors import EstimationError
from popfair.core.types import Effects, Roles
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED, bootstrap_means, cluster_t_test, mcnemar_cc


@dataclass(frozen=True)
class PairedGapResult:
    """paired_gap's output; also readable as a mapping (result["gap_pp"]).

    Parameters
    ----------
    gap_pp : float
        Callback gap in percentage points, 100 * (rate_adv - rate_other); positive favours x1.
    ci_low, ci_high : float
        Posting-cluster bootstrap percentile CI of the gap (pp).
    se : float
        Bootstrap standard error of gap_pp.
    b, c : int
        Discordant pairs: x1 called back and x0 not (b), x0 called back and x1 not (c).
    n_pairs : int
        Pairs with both decisions.
    n_clusters : int
        Postings (clusters) among them.
    n_dropped : int
        Pairs dropped because a side had no yes/no decision (a failed screen).
    rate_adv, rate_other : float
        Callback rates of the x1 and x0 profiles, in [0, 1].
    mcnemar_chi2, mcnemar_p : float
        McNemar's chi-square with continuity correction, ``(abs(b - c) - 1)**2 / (b + c)``, and
        its p-value.
    cluster_t, cluster_p : float
        Cluster-robust t (one observation per posting, G - 1 df) and its two-sided p-value.
    cluster_se : float
        Its standard error in pp: sd of the cluster mean differences / sqrt(G).
    test : str
        The test that labels the gap: "mcnemar" (single 0/1 answers) or "cluster_t" (mean callbacks
        of several answers, or probabilities).
    """

    gap_pp: float
    ci_low: float
    ci_high: float
    se: float  # bootstrap standard error of gap_pp
    b: int
    c: int
    n_pairs: int
    n_clusters: int
    n_dropped: int  # pairs dropped because a side had no yes/no decision
    rate_adv: float  # callback rate of the x1 profiles, in [0, 1]
    rate_other: float
    mcnemar_chi2: float
    mcnemar_p: float
    cluster_t: float
    cluster_p: float
    cluster_se: float  # pp: sd of cluster mean differences / sqrt(G)
    test: str = "mcnemar"  # mcnemar (0/1 answers) | cluster_t (mean callbacks: McNemar does not apply)

    @property
    def bc_ratio(self) -> float:
        return self.b / self.c if self.c else float("inf") if self.b else float("nan")

    @property
    def discordant_share(self) -> float:
        return (self.b + self.c) / self.n_pairs

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bc_ratio": self.bc_ratio, "discordant_share": self.discordant_share}

    def __getitem__(self, key: str) -> float:
        return self.as_dict()[key]


def _complete_pairs(
    pairs: pd.DataFrame, y_adv: str, y_other: str, cluster: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The pairs with both 0/1 decisions and a cluster: x1 and x0 decisions, cluster codes (0..G-1,
    G >= 2) and how many pairs were dropped; EstimationError naming what makes the table unusable."""
    missing = [col for col in (y_adv, y_other, cluster) if col not in pairs.columns]
    if missing:
        raise EstimationError(f"paired_gap: pairs table lacks columns {missing}; has {list(pairs.columns)}")
    adv = pd.to_numeric(pairs[y_adv], errors="coerce").to_numpy(dtype=float)
    other = pd.to_numeric(pairs[y_other], errors="coerce").to_numpy(dtype=float)
    complete = ~(np.isnan(adv) | np.isnan(other)) & pairs[cluster].notna().to_numpy()
    n_dropped = int((~complete).sum())
    adv, other = adv[complete], other[complete]
    if len(adv) == 0:
        raise EstimationError(
            f"paired_gap: none of {len(pairs)} pairs has both decisions "
            f"({y_adv}, {y_other}); every pair is missing a side"
        )
    outside = (adv < 0) | (adv > 1) | (other < 0) | (other > 1)
    if outside.any():
        raise EstimationError(
            f"paired_gap: decisions must be callbacks in [0, 1] (0/1, or the mean of several answers); found "
            f"values {sorted(set(np.r_[adv[outside], other[outside]]))[:5]}"
        )
    codes, _ = pd.factorize(pairs.loc[complete, cluster])
    n_clusters = int(codes.max()) + 1
    if n_clusters < 2:
        raise EstimationError(
            f"paired_gap: the {len(adv)} complete pairs lie in {n_clusters} "
            f"{cluster} cluster; clustered inference needs at least 2"
        )
    return adv, other, codes, n_dropped


def paired_gap(
    pairs: pd.DataFrame,
    *,
    y_adv: str,
    y_other: str,
    cluster: str,
    n_bootstrap: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
) -> PairedGapResult:
    """Paired callback gap of `y_adv` over `y_other`, clustered by posting.

    Parameters
    ----------
    pairs : DataFrame
        One row per pair: the 0/1 decisions of the advantaged-group (x1) and the other-group (x0)
        profile, and the cluster (posting). Pairs missing a decision are dropped and counted.
    y_adv, y_other : str
        Columns of the x1 and x0 decisions.
    cluster : str
        Column whose values are the clusters (postings) for the bootstrap and the cluster-robust t.
    n_bootstrap : int, default 2000
        Posting-cluster bootstrap resamples (>= 100).
    seed : int, default 0
        Seed of the bootstrap.
    alpha : float, default 0.05
        1 - CI level, in (0, 0.5).

    Returns
    -------
    PairedGapResult
        gap_pp (100 x (rate_x1 - rate_x0)), its percentile CI ci_low / ci_high and bootstrap se,
        discordant counts b and c, McNemar's chi-square with continuity correction and p-value,
        the cluster-robust t (G - 1 df) and p-value, n_pairs, n_clusters, n_dropped. Also
        readable as a mapping (`result["gap_pp"]`).

    Examples
    --------
    >>> import pandas as pd
    >>> from popfair import paired_gap
    >>> pairs = pd.DataFrame({"white": [1, 1, 0, 1] * 50, "black": [1, 0, 0, 0] * 50,
    ...                       "posting_id": [i // 4 for i in range(200)]})
    >>> result = paired_gap(pairs, y_adv="white", y_other="black", cluster="posting_id")
    >>> round(result.gap_pp, 1), result.b, result.c
    (50.0, 100, 0)
    """
    validate(PairedGap.parameter_constraints, {"n_bootstrap": n_bootstrap, "alpha": alpha, "seed": seed})
    adv, other, codes, n_dropped = _complete_pairs(pairs, y_adv, y_other, cluster)
    n_clusters = int(codes.max()) + 1
    diff = adv - other
    b, c = int((diff > 0).sum()), int((diff < 0).sum())
    single = bool(np.isin(adv, (0.0, 1.0)).all() and np.isin(other, (0.0, 1.0)).all())
    chi2, p_mcnemar = mcnemar_cc(b, c) if single else (float("nan"), float("nan"))

    sums = np.bincount(codes, weights=diff, minlength=n_clusters)
    sizes = np.bincount(codes, minlength=n_clusters).astype(float)
    t, p_cluster, cluster_se = cluster_t_test(sums / sizes)
    # posting-cluster bootstrap; with 4 pairs per posting the clusters fall in at most 24 classes of
    # (sum of differences, pairs), so each resample costs O(classes) whatever the number of postings
    boot = 100.0 * bootstrap_means(sums, sizes, n_bootstrap, np.random.default_rng(seed))[:, 0]
    low, high = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return PairedGapResult(
        gap_pp=float(100.0 * diff.mean()),
        ci_low=float(low),
        ci_high=float(high),
        se=float(boot.std(ddof=1)),
        b=b,
        c=c,
        n_pairs=len(diff),
        n_clusters=n_clusters,
        n_dropped=n_dropped,
        rate_adv=float(adv.mean()),
        rate_other=float(other.mean()),
        mcnemar_chi2=chi2,
        mcnemar_p=p_mcnemar,
        cluster_t=float(t),
        cluster_p=p_cluster,
        cluster_se=100.0 * cluster_se,
        test="mcnemar" if single else "cluster_t",
    )


def pair_decisions(
    data: pd.DataFrame, roles: Roles, y: str, pair_key: str = "pair_key", cluster: str = "posting_id"
) -> pd.DataFrame:
    """Pivot a scored table (one row per candidate) to one row per pair_key with the x1 and x0
    decisions (NaN where that side is absent, e.g. its screen failed) and the cluster."""
    missing = [col for col in (pair_key, cluster, roles.x, y) if col not in data.columns]
    if missing:
        raise EstimationError(
            f"paired_gap: scored table lacks columns {missing} (use experiment=paired_race or paired_gender)"
        )
    rows = data.loc[data[roles.x].isin([roles.x0, roles.x1]), [pair_key, cluster, roles.x, y]]
    duplicated = rows.duplicated([pair_key, roles.x])
    if duplicated.any():
        examples = rows.loc[duplicated, pair_key].head(3).tolist()
        raise EstimationError(
            f"paired_gap: {int(duplicated.sum())} pairs have two rows for the same "
            f"{roles.x} level (e.g. pair_key {examples}); each pair needs one "
            f"{roles.x1} and one {roles.x0} row"
        )
    clusters = rows.groupby(pair_key, sort=False)[cluster].agg(["first", "nunique"])
    if (clusters["nunique"] > 1).any():
        raise EstimationError(
            f"paired_gap: some pairs span several {cluster} values; a pair must lie within one cluster"
        )
    wide = rows.pivot(index=pair_key, columns=roles.x, values=y)
    wide = wide.reindex(columns=[roles.x1, roles.x0])
    wide[cluster] = clusters["first"].reindex(wide.index)
    return wide.rename_axis(columns=None)


class PairedGap:
    """Estimator `paired_gap`: pivots the scored table within pair_key and runs `paired_gap`."""

    name = "paired_gap"
    counterfactuals = None  # a function of the factual scored table alone: no counterfactual worlds
    parameter_constraints = {
        "n_bootstrap": N_BOOTSTRAP,
        "alpha": ALPHA,
        "cluster": Text(),
        "pair_key": Text(),
        "seed": SEED,
    }

    def effect_unit(self, effect: str, outcome: str) -> str:
        """The gap is reported x 100: percentage points (`DeclaresUnits`)."""
        return "pp"

    def __init__(
        self,
        n_bootstrap: int = 2000,
        alpha: float = 0.05,
        cluster: str = "posting_id",
        pair_key: str = "pair_key",
        seed: int = 0,
    ) -> None:
        validate(
            self.parameter_constraints,
            {"n_bootstrap": n_bootstrap, "alpha": alpha, "cluster": cluster, "pair_key": pair_key, "seed": seed},
        )
        self.n_bootstrap, self.alpha, self.cluster, self.pair_key, self.seed = (
            n_bootstrap,
            alpha,
            cluster,
            pair_key,
            seed,
        )

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        wide = pair_decisions(data, roles, y, self.pair_key, self.cluster)
        result = paired_gap(
            wide,
            y_adv=roles.x1,
            y_other=roles.x0,
            cluster=self.cluster,
            n_bootstrap=self.n_bootstrap,
            seed=self.seed,
            alpha=self.alpha,
        )
        values: dict[str, Any] = result.as_dict()
        test = values.pop("test")
        values["estimate"] = values.pop("gap_pp")
        values[f"rate_{roles.x1}"] = values.pop("rate_adv")
        values[f"rate_{roles.x0}"] = values.pop("rate_other")
        table = pd.DataFrame([values], index=pd.Index(["gap"], name="effect"))
        table = table[EFFECT_COLUMNS + [col for col in table.columns if col not in EFFECT_COLUMNS]]
        labels, notes = [], []
        p_value, named = (result.mcnemar_p, "McNemar") if test == "mcnemar" else (result.cluster_p, "clustered t")
        if p_value < self.alpha:
            favoured = roles.x1 if result.gap_pp > 0 else roles.x0
            labels.append(f"callback gap favouring {favoured} ({named} p={p_value:.2g})")
        if test == "cluster_t":
            notes.append(
                "Each profile's decision is its mean callback over several answers (screener.samples > 1, "
                "or probability scores): the gap is tested by the posting-clustered t-test on the mean "
                "callbacks; McNemar's test is for single yes/no answers and is not computed."
            )
        return Effects(
            table=table,
            labels=labels,
            notes=notes,
            metrics={
                "pairs_dropped_share": result.n_dropped / (result.n_dropped + result.n_pairs),
                "mcnemar_used": float(test == "mcnemar"),
            },
        )
