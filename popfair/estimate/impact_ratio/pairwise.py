"""The tests auditors are asked for beside the impact ratios: each category against the reference.

- Fisher's exact test, two-sided (`scipy.stats.fisher_exact` on the 2 x 2 table category / reference x
  selected / not selected);
- the two-standard-deviation Z test: the two-proportion Z statistic with the pooled rate (as the EEOC's
  practice and audit-AI compute it), `statsmodels.stats.proportion.proportions_ztest`; |z| > 2 is the
  "two standard deviations" rule of thumb.

Both take the reference category as given. It was chosen as the most selected category, from the same
noisy rates, so these p-values are conditional on that choice and too small under pure chance (the
reason `popfair.estimate.impact_ratio.inference` exists): they are reported, the flags follow the
reference-aware test. Both treat applicants as independent, even where the bootstrap resamples clusters.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

PAIRWISE_COLUMNS = ["fisher_p", "z", "z_p"]
PAIRWISE_NOTE = (
    "fisher_p (Fisher's exact test, two-sided) and z, z_p (the two-proportion Z test, pooled; |z| > 2: two "
    "standard deviations) compare each category with the reference as if the reference had been fixed in "
    "advance: they are conditional on the reference choice and treat applicants as independent. The flags "
    "follow the test that accounts for the choice (adjusted_p, flag_survives_test)."
)
PAIRWISE_CONSOLE = (  # under the console's table, whose columns are the effects table's
    "fisher_p, z_p: Fisher's exact and the two-proportion Z test of each category against the reference, "
    "conditional on the reference choice; the flags follow the test that accounts for it (flag_survives)"
)


def reference_tests(n: np.ndarray, selected: np.ndarray, compared: np.ndarray, reference: np.ndarray) -> pd.DataFrame:
    """Per category: Fisher's exact p-value, the pooled two-proportion Z and its two-sided p-value of
    the category against the reference (`reference`: one True). NaN where `compared` is False (the
    reference itself, excluded, unknown), where there is no single reference, or where the Z test is
    undefined (every applicant of both selected, or none)."""
    # imported here: every case imports this module (through the effects table), few compute the tests,
    # and a sweep's warm-up imports only what its design's power line needs
    from scipy import stats
    from statsmodels.stats.proportion import proportions_ztest

    out = pd.DataFrame(np.nan, index=range(len(n)), columns=PAIRWISE_COLUMNS)
    if reference.sum() != 1:
        return out
    ref = int(np.flatnonzero(reference)[0])
    n_ref, s_ref = int(round(n[ref])), int(round(selected[ref]))
    for i in np.flatnonzero(compared & ~reference):
        n_i, s_i = int(round(n[i])), int(round(selected[i]))
        if n_i == 0 or n_ref == 0:
            continue
        table = [[s_i, n_i - s_i], [s_ref, n_ref - s_ref]]
        out.loc[i, "fisher_p"] = float(stats.fisher_exact(table, alternative="two-sided").pvalue)
        if 0 < s_i + s_ref < n_i + n_ref:  # a pooled rate of 0 or 1 has no variance: z undefined
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                z, p = proportions_ztest([s_i, s_ref], [n_i, n_ref], value=0.0, alternative="two-sided")
            out.loc[i, ["z", "z_p"]] = [float(z), float(p)]
    return out
