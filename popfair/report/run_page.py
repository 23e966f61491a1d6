"""What a case's MLflow run page shows without the user picking columns: the run's description
(tag `mlflow.note.content`, Markdown) with the effects table and its units, the pattern, why effects
are not identified and the impact ratios at a glance; the effects as an MLflow table artifact; and
"not identified" said one way: no estimate and no significance flag, but a tag `<effect>.identified`
("yes", or "no: " and the reason) and `not_identified` listing them. The MLflow UI shows a tag key
whole only while it has at most 15 characters or the key and value together at most 30, so the
effect leads the key and the list's key stays short.

The description is built from whatever effects table the case has (path-specific effects, a gap,
impact ratios, ranking estimates), identified or not."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from popfair.core.formats import format_p
from popfair.core.types import Effects
from popfair.report.console import not_identified_lines
from popfair.report.units import UNIT_COLUMN, unit_legend

DESCRIPTION_TAG = "mlflow.note.content"  # what the MLflow UI shows as the run's description
NOT_IDENTIFIED = "not_identified"  # tag: the effects that are not identified, comma-separated
IDENTIFIED_SUFFIX, NO = ".identified", "no: "  # tag <effect>.identified: "yes", or "no: <reason>"
MAX_DESCRIPTION = 7_900  # MLflow keeps tag values up to 8,000 characters
MAX_ROWS = 24  # a longer effects table (impact ratios of every category) is cut: the table artifact has all
P_COLUMNS = ("p_value", "mcnemar_p", "cluster_p")
DECISION_COLUMNS = ("significant", "flag", "flag_survives")


def identified_mask(table: pd.DataFrame) -> pd.Series:
    """True for each effect the data identify (every effect, for tables without the column)."""
    if "identified" not in table:
        return pd.Series(True, index=table.index)
    return table["identified"].fillna(True).astype(bool)


def not_identified_tags(effects: Effects) -> dict[str, str]:
    """`<effect>.identified` ("yes", or "no: <reason>") for each effect of a table that says whether it
    is identified, and `not_identified` (the effects, comma-separated, rows of the coarser split as
    `coarse.<name>`) when any is not; nothing for tables whose effects are always identified."""
    table = effects.table
    if "identified" not in table:
        return {}
    tags: dict[str, str] = {}
    hidden: list[str] = []
    for effect, ok in identified_mask(table).items():
        reason = str(table.loc[effect, "reason"]) if "reason" in table and not ok else "not identified"
        tags[f"{effect}{IDENTIFIED_SUFFIX}"] = "yes" if ok else (NO + reason)[:4900]
        if not ok:
            hidden.append(str(effect))
    coarse = effects.artifacts.get("pse_coarse.csv")
    if isinstance(coarse, pd.DataFrame) and "identified" in coarse:
        hidden += [f"coarse.{name}" for name, row in coarse.iterrows() if not bool(row["identified"])]
    if hidden:
        tags[NOT_IDENTIFIED] = ", ".join(hidden)
    return tags


def unit_tag(effects: Effects) -> dict[str, str]:
    """`unit`: the units of the effects (one, usually: points, pp, ratio ...), so a comparison of runs
    can label its axes without reading each run's effects table."""
    table = effects.table
    if UNIT_COLUMN not in table or not len(table):
        return {}
    return {"unit": ", ".join(dict.fromkeys(str(u) for u in table[UNIT_COLUMN]))}


def not_identified_reasons(tags: Mapping[str, str]) -> dict[str, str]:
    """Effect -> why it is not identified, read back from a run's `<effect>.identified` tags (the
    rows of the coarser split, named only in `not_identified`, as "not identified")."""
    listed = [name for name in tags.get(NOT_IDENTIFIED, "").split(", ") if name]
    reasons = {name: "not identified" for name in listed}
    reasons.update(
        {
            key.removesuffix(IDENTIFIED_SUFFIX): value.removeprefix(NO)
            for key, value in tags.items()
            if key.endswith(IDENTIFIED_SUFFIX) and value.startswith(NO)
        }
    )
    return reasons


def _number(value: Any, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:+.4g}" if signed else f"{value:.4g}"
    return str(value)


def effects_display(effects: Effects) -> pd.DataFrame:
    """The effects as a reader sees them: effect, estimate, interval, p-value, the decision columns and
    the unit, "not identified" where the data cannot answer (no number beside it)."""
    table = effects.table
    shown = identified_mask(table)
    p_column = next((c for c in P_COLUMNS if c in table), None)
    rows = []
    for effect, row in table.iterrows():
        ok = bool(shown[effect])
        out = {"effect": str(effect)}
        status = str(row.get("status", "included"))  # an impact-ratio category left out (under 2%)
        if not ok:
            out["estimate"] = "not identified"
        elif status not in ("included", "nan") and not _number(row.get("estimate")):
            out["estimate"] = status
        else:
            out["estimate"] = _number(row.get("estimate"), signed=True)
        low, high = row.get("ci_low"), row.get("ci_high")
        out["95% CI"] = f"[{_number(low)}, {_number(high)}]" if ok and _number(low) and _number(high) else ""
        if p_column is not None:
            value = row.get(p_column)
            out["p"] = format_p(value) if ok and isinstance(value, (int, float)) else ""
        for column in DECISION_COLUMNS:
            if column in table:
                out[column.replace("_", " ")] = _number(bool(row[column])) if ok and pd.notna(row[column]) else ""
        if UNIT_COLUMN in table:
            out[UNIT_COLUMN] = str(row[UNIT_COLUMN])
        rows.append(out)
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    right = [c in ("estimate", "p") for c in table.columns]
    lines = [
        "| " + " | ".join(cell(c) for c in table.columns) + " |",
        "| " + " | ".join("---:" if r else "---" for r in right) + " |",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def impact_ratio_lines(ratios: Any) -> list[str]:
    """The lowest impact ratio per rate and category set, with its CI and whether its flag survives."""
    if ratios is None:
        return []
    included = ratios.included()
    lines = []
    for (metric, dimension), block in included.groupby(["metric", "dimension"], sort=False):
        worst = block.loc[block["impact_ratio"].idxmin()]
        flag = ""
        if bool(worst["flag"]):
            flag = (
                " (below four-fifths; "
                + ("survives" if bool(worst["flag_survives"]) else "not")
                + " the test of no difference)"
            )
        lines.append(
            f"{metric}, {dimension}: lowest {worst['category']} {worst['impact_ratio']:.2f} "
            f"[{worst['ci_low']:.2f}, {worst['ci_high']:.2f}]{flag}"
        )
    return lines


def run_description(
    title: str,
    effects: Effects,
    *,
    facts: Mapping[str, str],
    ratios: Any = None,
    notes: Sequence[str] = (),
    power: Any = None,
) -> str:
    """The run's description in Markdown (see the module docstring), at most MAX_DESCRIPTION characters."""
    table = effects.table
    parts = [f"### {title}"]
    parts.append(" · ".join(f"**{k}:** {v}" for k, v in facts.items() if v))
    if len(table):
        shown = effects_display(effects)
        cut = len(shown) > MAX_ROWS
        parts.append(markdown_table(shown.head(MAX_ROWS)))
        if cut:
            parts.append(f"*{len(shown) - MAX_ROWS} more rows in the artifact effects.csv and the effects table.*")
        if UNIT_COLUMN in table:
            parts.append(f"*Units: {unit_legend(table[UNIT_COLUMN])}.*")
    parts.append(f"**Pattern:** {effects.pattern}")
    if "reason" in table:
        head, lines = not_identified_lines(table["reason"])
        if head:
            parts.append(f"**{head}:**\n" + "\n".join(f"- {line}" for line in lines))
    if effects.notes:
        parts.append("**What the effects mean here:**\n" + "\n".join(f"- {note}" for note in effects.notes))
    ratio_lines = impact_ratio_lines(ratios)
    if ratio_lines:
        parts.append("**Impact ratios (LL144):**\n" + "\n".join(f"- {line}" for line in ratio_lines))
    if power is not None:
        parts.append(f"**Power:** {power.sentence()}")
    if notes:
        parts.append("**Notes:**\n" + "\n".join(f"- {note}" for note in dict.fromkeys(notes)))
    text = "\n\n".join(parts) + "\n"
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 60].rsplit("\n", 1)[0] + "\n\n*(cut: the artifacts hold the rest)*\n"
    return text


def effects_records(effects: Effects) -> pd.DataFrame:
    """The effects table as the run's MLflow table artifact: one row per effect, numbers only where
    identified (missing otherwise, never NaN in the JSON), the unit and the reason."""
    table = effects.table.reset_index(names="effect")
    keep = [c for c in table.columns if c != "pattern"]
    out = table[keep].astype(object)
    return out.where(pd.notna(out), None)
