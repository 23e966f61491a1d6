"""Outcome-level disparity: mean outcome of x1 minus x0, with a stratified bootstrap CI."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from popfair.core.constraints import validate
from popfair.core.types import Effects, Roles
from popfair.estimate.base import EFFECT_COLUMNS, contrast_rows
from popfair.estimate.inference import ALPHA, N_BOOTSTRAP, SEED, bootstrap_group_means


class OutcomeGap:
    """The disparity an auditor starts with: E[Y | x1] - E[Y | x0] (no causal claim).

    CI: percentile bootstrap resampling within each group; p-value: Welch's t-test."""

    name = "outcome_gap"
    counterfactuals = None  # a function of the factual scored table alone: no counterfactual worlds
    parameter_constraints = {"n_bootstrap": N_BOOTSTRAP, "alpha": ALPHA, "seed": SEED}

    def __init__(self, n_bootstrap: int = 2000, alpha: float = 0.05, seed: int = 0) -> None:
        validate(self.parameter_constraints, {"n_bootstrap": n_bootstrap, "alpha": alpha, "seed": seed})
        self.n_bootstrap, self.alpha, self.seed = n_bootstrap, alpha, seed

    def estimate(self, data: pd.DataFrame, roles: Roles, y: str = "y") -> Effects:
        rows = contrast_rows(data, roles, y)
        y1 = rows.loc[rows[roles.x] == roles.x1, y].to_numpy(dtype=float)
        y0 = rows.loc[rows[roles.x] == roles.x0, y].to_numpy(dtype=float)
        gap = y1.mean() - y0.mean()
        rng = np.random.default_rng(self.seed)
        boot = bootstrap_group_means(y1, self.n_bootstrap, rng) - bootstrap_group_means(y0, self.n_bootstrap, rng)
        lo, hi = np.quantile(boot, [self.alpha / 2, 1 - self.alpha / 2])
        test = stats.ttest_ind(y1, y0, equal_var=False)
        table = pd.DataFrame(
            {
                "estimate": [gap],
                "se": [boot.std(ddof=1)],
                "ci_low": [lo],
                "ci_high": [hi],
                "p_value": [test.pvalue],
                "n_x0": [len(y0)],
                "n_x1": [len(y1)],
                "mean_x0": [y0.mean()],
                "mean_x1": [y1.mean()],
            },
            index=pd.Index(["gap"], name="effect"),
        )
        significant = bool(lo > 0 or hi < 0)
        labels = [f"outcome gap favouring {roles.x1 if gap > 0 else roles.x0}"] if significant else []
        return Effects(table=table[EFFECT_COLUMNS + [c for c in table if c not in EFFECT_COLUMNS]], labels=labels)
