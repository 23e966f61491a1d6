"""The effect sections of the auditor's report, for whatever effects table a case has: the effects
with their units ("not identified" where the data cannot answer, never a number), which effects are
not identified and why, and the pattern or findings (PopResume's discrimination patterns for the
path-specific effects, the estimator's own findings otherwise) with the clipping-bound sensitivity."""

from __future__ import annotations

import pandas as pd

from popfair.core.formats import format_p
from popfair.core.types import Effects
from popfair.report.console import not_identified_lines
from popfair.report.document import Block
from popfair.report.units import UNIT_COLUMN, unit_legend

EFFECT_COLUMNS = ["estimate", "se", "ci_low", "ci_high", "p_value", "mcnemar_p", "cluster_p", "n_pairs", "b", "c"]
NUMBERS = ("estimate", "se", "ci_low", "ci_high", "p_value", "mcnemar_p", "cluster_p")
PSE_EFFECTS = ("TE", "NDE", "NIE", "BIE", "RIE")  # estimators whose labels are PopResume's patterns
NOT_IDENTIFIED = "not identified"


def side_by_side_rows(table: pd.DataFrame) -> pd.DataFrame:
    """estimator=both's comparison as a report table: each side's estimate and CI, the difference, and
    whether they reach the same conclusion; "not identified" where the DML estimate is gated."""
    rows = []
    for effect, row in table.iterrows():
        identified = bool(row.get("identified", True))
        rows.append(
            {
                "effect": effect,
                "DML-UCA": f"{row['estimate']:+.4g} [{row['ci_low']:.4g}, {row['ci_high']:.4g}]"
                if identified
                else NOT_IDENTIFIED,
                "interventional": f"{row['intv_estimate']:+.4g} [{row['intv_ci_low']:.4g}, {row['intv_ci_high']:.4g}]",
                "difference": round(float(row["difference"]), 4) if identified else None,
                "same conclusion": bool(row["same_conclusion"]) if identified else None,
            }
        )
    return pd.DataFrame(rows)


DIFFERENT_ESTIMAND = "different estimand"  # DML-UCA holds R grouped; the worlds redraw the raw proxies


def beside_rows(table: pd.DataFrame) -> pd.DataFrame:
    """estimator=counterfactual's comparison as a report table: the design's estimate and CI, DML-UCA's
    on the factual data where it identifies the effect ("not identified" where not), the difference
    (design minus DML) and whether the two agree (the difference's 95% CI covers 0), where the two
    estimate the same quantity ("different estimand" where not: estimand.SAME_ESTIMAND)."""
    rows = []
    for effect, row in table.iterrows():
        identified = bool(row["dml_identified"])
        compared = identified and bool(row.get("comparable", True))
        rows.append(
            {
                "effect": effect,
                "counterfactual design": f"{row['estimate']:+.4g} [{row['ci_low']:.4g}, {row['ci_high']:.4g}]",
                "DML-UCA": f"{row['dml_estimate']:+.4g} [{row['dml_ci_low']:.4g}, {row['dml_ci_high']:.4g}]"
                if identified
                else NOT_IDENTIFIED,
                "difference": round(float(row["difference"]), 4) if compared else None,
                "agree": ("yes" if bool(row["agree"]) else "NO")
                if compared
                else (DIFFERENT_ESTIMAND if identified else None),
            }
        )
    return pd.DataFrame(rows)


def effects_table(effects: Effects) -> pd.DataFrame:
    """The report's effects table: the numbers rounded to 4 digits, "not identified" in place of the
    estimate of an effect the data cannot answer (its other numbers blank), and the unit column."""
    table = effects.table
    columns = [c for c in EFFECT_COLUMNS if c in table.columns]
    p_columns = [c for c in ("p_value", "mcnemar_p", "cluster_p") if c in columns]
    rounded = {c: 4 for c in columns if c not in ("n_pairs", "b", "c", *p_columns)}
    shown = table[columns].round(rounded).astype(object)
    for p_column in p_columns:  # never "0": 1.9e-12 prints as such, below 1e-12 as "< 1e-12"
        shown[p_column] = [format_p(v) if isinstance(v, (int, float)) else v for v in table[p_column]]
    if "identified" in table:
        hidden = ~table["identified"].fillna(True).astype(bool)
        for column in NUMBERS:
            if column in shown:
                shown.loc[hidden, column] = NOT_IDENTIFIED if column == "estimate" else None
    if UNIT_COLUMN in table:
        shown[UNIT_COLUMN] = table[UNIT_COLUMN]
    return shown.reset_index(names="effect")


def effect_table_blocks(effects: Effects, heading: str) -> list[Block]:
    """The effects table under `heading`, the units' meaning, and estimator=both's comparison."""
    blocks = [Block("h2", heading), Block("table", effects_table(effects))]
    if UNIT_COLUMN in effects.table:
        blocks.append(Block("text", f"Units: {unit_legend(effects.table[UNIT_COLUMN])}."))
    if "intv_estimate" in effects.table:  # estimator=both: the observational estimate beside the measured one
        blocks += [
            Block(
                "text",
                "Observational (DML-UCA, from the factual resumes) beside interventional (measured on "
                "counterfactual resumes of the same applicants); an effect DML cannot identify has no "
                "observational number:",
            ),
            Block("table", side_by_side_rows(effects.table)),
        ]
    if "dml_estimate" in effects.table:  # estimator=counterfactual: DML-UCA beside the design's effects
        blocks += [
            Block(
                "text",
                "The counterfactual design (measured on counterfactual resumes of a sample of the applicants, "
                "combined with every factual answer) beside DML-UCA (the paper's estimator, from the factual "
                "resumes alone); an effect DML cannot identify has no number of its own:",
            ),
            Block("table", beside_rows(effects.table)),
        ]
    return blocks


def identification_blocks(effects: Effects) -> list[Block]:
    """Which effects the data cannot answer at this n and why (each failing counterfactual mean once,
    with the effects that need it), and what the effects mean in this case (the estimand notes)."""
    table = effects.table
    if "identified" not in table and not effects.notes:
        return []
    blocks = [Block("h2", "Identification")]
    head, lines = not_identified_lines(table["reason"]) if "reason" in table else ("", [])
    if head:
        blocks += [
            Block(
                "text",
                f"{head}. These effects are reported as not identified, without an estimate, interval or "
                "significance (estimator=counterfactual, the default of population cases, measures them on "
                "counterfactual resumes):",
            ),
            Block("list", lines),
        ]
    elif "identified" in table:
        blocks.append(Block("text", "Every effect above is identified by the data at this sample size."))
    if effects.notes:
        blocks.append(Block("list", list(effects.notes)))
    return blocks


def pattern_blocks(effects: Effects) -> list[Block]:
    """The discrimination pattern of path-specific effects (with the clipping-bound sensitivity), or the
    estimator's own findings."""
    if set(PSE_EFFECTS) <= set(effects.table.index):
        return [
            Block("h2", "Discrimination pattern"),
            Block("text", "Discrimination pattern (PopResume, section 5.2): " + effects.pattern),
            *clip_sensitivity_blocks(effects),
        ]
    if effects.labels:
        return [Block("h2", "Findings"), Block("list", list(effects.labels))]
    return [Block("h2", "Findings"), Block("text", "No finding reached significance.")]


def effects_blocks(effects: Effects, heading: str) -> list[Block]:
    """An estimator's effects, in the report's order: the table, identification, pattern or findings."""
    return effect_table_blocks(effects, heading) + identification_blocks(effects) + pattern_blocks(effects)


def clip_sensitivity_blocks(effects: Effects) -> list[Block]:
    """The effects re-scored at every propensity clipping bound with the same nuisances (the
    estimator's `pse_clip_sensitivity.csv`): estimate (SE) per bound, "n.i." where the identification
    rule fails at that bound. An identified effect barely moves; one that moves with the bound is
    telling that no single bound is right."""
    raw = effects.artifacts.get("pse_clip_sensitivity.csv")
    if not isinstance(raw, pd.DataFrame) or raw.empty:
        return []
    raw = raw.sort_values("clip", kind="stable")
    bounds = [f"clip {c:g}" + (" (this case)" if own else "") for c, own in zip(raw["clip"], raw["case_clip"])]
    cells = [
        f"{e:+.3g} ({s:.2g})" + ("" if ok else " n.i.")
        for e, s, ok in zip(raw["estimate"], raw["se"], raw["identified"])
    ]
    wide = pd.DataFrame({"effect": raw["effect"].to_numpy(), "bound": bounds, "cell": cells}).pivot(
        index="effect", columns="bound", values="cell"
    )
    wide = wide.loc[list(dict.fromkeys(raw["effect"])), list(dict.fromkeys(bounds))]
    # beside the counterfactual design the bounds are DML-UCA's: the design has no propensities
    whose = "DML-UCA's effects beside the design" if "dml_estimate" in effects.table else "each effect"
    return [
        Block(
            "text",
            f"Sensitivity to the propensity clipping bound: {whose} re-estimated with the same "
            "nuisances at each bound, estimate (standard error); n.i. = not identified at that bound. "
            "These numbers are the diagnosis, not the finding: an effect that moves with the bound is "
            "not identified by the data, whichever bound is chosen.",
        ),
        Block("table", wide.reset_index()),
    ]
