"""The standard fairness model's vocabulary: path-specific effects, the counterfactual means they
contrast, and the discrimination patterns (PopResume, arXiv 2603.22714, Table 1 and section 5.2).

Shared by the observational (DML-UCA), interventional and simulated-SFM code, so all three speak of
the same five means and contrasts."""

from __future__ import annotations

import numpy as np
import pandas as pd

EFFECTS = ("TE", "NDE", "NIE", "BIE", "RIE")
# The five counterfactual means psi(x_y, x_b, x_r) = E[Y_{x_y, B_{x_b, R_{x_r}}, R_{x_r}}],
# as (x_y, x_b, x_r) with 0 = x0 and 1 = x1.
TARGETS: dict[str, tuple[int, int, int]] = {
    "E[Y_x0]": (0, 0, 0),
    "E[Y_x1]": (1, 1, 1),
    "E[Y_x1,W_x0]": (1, 0, 0),
    "E[Y_x1,B_x0R_x1,R_x1]": (1, 0, 1),
    "E[Y_x1,B_x1R_x0,R_x0]": (1, 1, 0),
}
# Rows: effects; columns: TARGETS in order. TE = NDE + NIE and NIE = BIE + RIE hold exactly.
CONTRASTS = np.array(
    [
        [-1.0, 1.0, 0.0, 0.0, 0.0],  # TE  = E[Y_x1] - E[Y_x0]
        [-1.0, 0.0, 1.0, 0.0, 0.0],  # NDE = E[Y_x1,W_x0] - E[Y_x0]
        [0.0, 1.0, -1.0, 0.0, 0.0],  # NIE = E[Y_x1] - E[Y_x1,W_x0]
        [0.0, 0.5, -0.5, -0.5, 0.5],  # BIE = 1/2[(E[Y_x1] - psi(x1,x0,x1)) + (psi(x1,x1,x0) - E[Y_x1,W_x0])]
        [0.0, 0.5, -0.5, 0.5, -0.5],  # RIE = 1/2[(E[Y_x1] - psi(x1,x1,x0)) + (psi(x1,x0,x1) - E[Y_x1,W_x0])]
    ]
)
# The coarser split offered where the fine decomposition is not identified: the qualification path
# against everything else. Both contrast only E[Y_x0], E[Y_x1] and psi(x1, x0, x1), so they need one
# mixing mean instead of three; TE = BIE_coarse + TE_minus_BIE exactly.
COARSE_EFFECTS = ("BIE_coarse", "TE_minus_BIE")
# BIE_coarse   = E[Y_x1] - psi(x1, x0, x1): qualifications x0 -> x1, proxies at x1
# TE_minus_BIE = psi(x1, x0, x1) - E[Y_x0]: the direct and proxy paths, qualifications at x0
COARSE_CONTRASTS = np.array([[0.0, 1.0, 0.0, -1.0, 0.0], [-1.0, 0.0, 0.0, 1.0, 0.0]])
COARSE_MEANING = {
    "BIE_coarse": "the qualification path: qualifications moved from their {x0} to their {x1} distribution (proxies and X at {x1})",
    "TE_minus_BIE": "everything else (TE - BIE_coarse): the direct and proxy paths, qualifications at their {x0} distribution",
}
CASE_LABELS = {
    1: "Case 1: direct discrimination without explicit demographics",
    2: "Case 2: discrimination masked by cancellation",
    3: "Case 3: disparity through qualifications (business necessity)",
    4: "Case 4: discrimination through demographic proxies (redlining)",
    5: "Case 5: mixed mediation through qualifications and proxies",
}


# The effects each section 5.2 pattern reads: a pattern is not decided when one of them is not
# identified (column `identified`, popfair.estimate.pse.identification).
LABEL_DEPENDS: dict[int, tuple[str, ...]] = {
    1: ("NDE",),
    2: ("TE", "NDE", "NIE"),
    3: ("NDE", "RIE", "BIE"),
    4: ("NDE", "BIE", "RIE"),
    5: ("BIE", "RIE"),
}


def pattern_labels(table: pd.DataFrame) -> list[str]:
    """Section 5.2 patterns from the `significant` column (CI excludes 0) of an effects table; with an
    `identified` column, no pattern that reads an unidentified effect."""
    missing = (
        {e for e in EFFECTS if e in table.index and not bool(table.loc[e, "identified"])}
        if "identified" in table
        else set()
    )
    sig = {effect: bool(table.loc[effect, "significant"]) for effect in EFFECTS}
    est = {effect: float(table.loc[effect, "estimate"]) for effect in EFFECTS}
    cases = []
    if sig["NDE"]:
        cases.append(1)
    if not sig["TE"] and sig["NDE"] and sig["NIE"] and est["NDE"] * est["NIE"] < 0:
        cases.append(2)
    if not sig["NDE"] and not sig["RIE"] and sig["BIE"]:
        cases.append(3)
    if not sig["NDE"] and not sig["BIE"] and sig["RIE"]:
        cases.append(4)
    if sig["BIE"] and sig["RIE"]:
        cases.append(5)
    return [CASE_LABELS[c] for c in cases if not missing & set(LABEL_DEPENDS[c])]
