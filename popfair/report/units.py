"""What the unit of every effect a case reports means, for the reports' legends.

An estimate is in the unit of what its estimator compares, which the estimator declares
(popfair.estimate.base.DeclaresUnits, `with_units`): score points for differences of scores (the
screener's own scale: 0-100 for a model asked for a score, a matcher's own range otherwise),
percentage points for the paired callback gap (which `paired_gap` reports x 100), a proportion for
a difference of 0/1 outcomes or a rate, a ratio for impact ratios; the ranking estimator mixes
rates, ranks, probabilities and log-worths, one per row."""

from __future__ import annotations

import pandas as pd

from popfair.estimate.base import UNIT_COLUMN

__all__ = ["UNIT_COLUMN", "UNIT_MEANING", "unit_legend"]

# what each unit means, for the reports' and the run page's legend
UNIT_MEANING = {
    "points": "points on the screener's own score scale (0-100 for a model asked for a score; a matcher's "
    "scores have their own range)",
    "pp": "percentage points (a difference of two rates x 100)",
    "proportion": "a proportion or a difference of proportions (0.03 = 3 pp)",
    "ratio": "a ratio of two rates (1 = equal)",
    "rank": "a mean rank (1 = first)",
    "probability": "a probability (0.5 = no preference)",
    "log-worth": "a Plackett-Luce log-worth (0 = the reference group)",
}


def unit_legend(units: list[str] | pd.Series) -> str:
    """One line saying what the units in a table mean ("points: ...; pp: ...")."""
    seen = list(dict.fromkeys(str(u) for u in units if str(u)))
    return "; ".join(f"{u}: {UNIT_MEANING.get(u, u)}" for u in seen)


def units_on_figures(table: pd.DataFrame, artifacts: dict) -> None:
    """Give the forest plots among `artifacts` (popfair.core.types.Plot, drawn when logged) the
    effects' unit, so their x axis names it: an estimator draws its forest before the case knows
    the unit (`with_units`)."""
    from popfair.core.types import Plot

    if UNIT_COLUMN not in table:
        return
    import dataclasses

    for name, figure in list(artifacts.items()):
        if isinstance(figure, Plot) and figure.kind == "forest" and UNIT_COLUMN not in figure.table:
            unit = table[UNIT_COLUMN].reindex(figure.table.index)
            artifacts[name] = dataclasses.replace(figure, table=figure.table.assign(**{UNIT_COLUMN: unit}))
