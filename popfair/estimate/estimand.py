"""What the path-specific effects of one case mean: which mediators are raw or grouped, and whether a direct path exists.

The five effects are defined on the roles the case models (`Roles`): X, confounders Z, qualifications
B and proxies R. Two facts of the case decide what "direct" means:

- what the documents display (`popfair.render.base.displayed_attributes`): where the renderer never
  shows X, the screener cannot read X itself, so the path X -> Y that does not pass through the
  document's content is structurally absent. An NDE different from 0 then measures what the screener
  reads from content that depends on X but is not in B or R as modeled. It is not evidence that the
  screener sees X.
- which role columns are grouped (the population's `grouped_from`, e.g. `name_gender_typicality`
  from `first_name`, paper C.4): the document shows the raw column, so whatever a screener reads
  from it beyond its group is counted in the NDE, not in the RIE (issue 31: a screener that reads only
  raw first names gets a "direct" effect from the grouping alone).

`estimand_notes` says both in plain words; the case puts them under its effects table (console,
report, `estimand.txt`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from popfair.core.types import Roles
from popfair.estimate.sfm import COARSE_EFFECTS, COARSE_MEANING, EFFECTS


def _columns(columns: tuple[str, ...], grouped_from: Mapping[str, str]) -> str:
    return ", ".join(
        f"{c} (grouped from the raw {grouped_from[c]})" if c in grouped_from else f"{c} (raw)" for c in columns
    )


def estimand_notes(
    roles: Roles, shows: frozenset[str] | None, grouped_from: Mapping[str, str], documents: str
) -> list[str]:
    """Plain-words lines: the mediators as modeled (raw or grouped) and what the NDE means given what
    the `documents` (the renderer's kind) display (`shows`, None when the renderer does not declare it)."""
    lines = [
        f"Estimand: qualifications B = {_columns(roles.b, grouped_from)}; proxies R = "
        f"{_columns(roles.r, grouped_from)}; confounders Z = {', '.join(roles.z)}."
    ]
    raw_behind = sorted({grouped_from[c] for c in roles.r if c in grouped_from})
    if shows is None:
        lines.append(
            f"The {documents} renderer does not declare what its documents display, so popfair cannot say "
            f"whether {roles.x} itself is visible: NDE is the effect not through B or R as modeled."
        )
    elif roles.x in shows:
        lines.append(f"The {documents} documents display {roles.x}: NDE includes the screener reading it directly.")
    else:
        beyond = (
            f", such as the raw {', '.join(raw_behind)} beyond {'its' if len(raw_behind) == 1 else 'their'} grouping"
            if raw_behind
            else ""
        )
        lines.append(
            f"The {documents} documents never display {roles.x}, so the direct path X -> Y is structurally absent: "
            f"an NDE different from 0 is what the screener reads from content that depends on {roles.x} but is not "
            f"in B or R as modeled{beyond}. It is not evidence that the screener sees {roles.x}."
        )
    return lines


def coarse_notes(table: pd.DataFrame, coarse: pd.DataFrame | None, x0: str, x1: str) -> list[str]:
    """Where the fine decomposition (NDE, NIE, BIE, RIE) is not identified, the coarser split it offers
    instead (`sfm.COARSE_EFFECTS`), or why that is not identified either."""
    if coarse is None or "identified" not in table or bool(table.loc[list(EFFECTS[1:]), "identified"].all()):
        return []
    if bool(coarse["identified"].all()):
        parts = [
            f"{name} = {coarse.loc[name, 'estimate']:+.4g} [{coarse.loc[name, 'ci_low']:.4g}, "
            f"{coarse.loc[name, 'ci_high']:.4g}]{' (significant)' if bool(coarse.loc[name, 'significant']) else ''}: "
            + COARSE_MEANING[name].format(x0=x0, x1=x1)
            for name in COARSE_EFFECTS
        ]
        return ["The fine decomposition is not identified; the coarser split is: " + "; ".join(parts) + "."]
    reason = next(str(r) for r in coarse["reason"] if r)
    return [f"The coarser split (the qualification path against everything else) is {reason}"]


def coarse_metrics(coarse: pd.DataFrame | None) -> dict[str, float]:
    """MLflow metrics of the coarser split: `coarse.<name>.identified`, and its numbers where identified."""
    if coarse is None:
        return {}
    metrics: dict[str, float] = {}
    for name, row in coarse.iterrows():
        metrics[f"coarse.{name}.identified"] = float(bool(row["identified"]))
        if bool(row["identified"]):
            for column in ("estimate", "se", "ci_low", "ci_high", "p_value"):
                if column in row and np.isfinite(float(row[column])):
                    metrics[f"coarse.{name}.{column}"] = float(row[column])
    return metrics
