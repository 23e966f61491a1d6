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
report, `estimand.txt`).

Where the screener is known to read a raw column that the roles hold only grouped (the screener's
`reads`, e.g. a simulated screener's coefficients), the grouping is a known failure of the model, not
a conjecture: a counterfactual mean that sets R to the other group's distribution while X stays
(psi(x1, ., x0)) moves only the group, and the raw value then follows X. Such a mean does not
estimate the screener's counterfactual, and every effect that contrasts it is not identified
(`grouping_problems`, applied by `structural_gate` with the overlap rule's problems: one rule,
docs/concepts/identification.md). The same holds for a grouped B and the means that set B to the
other group's distribution (psi(x1, x0, .)). psi(x1, x0, x1), behind the coarser split, keeps R with
X and is unaffected by a grouped R. A screener that reads the document (`reads` None) gets the note,
not the gate: what it reads is not known."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.types import Effects, Roles
from popfair.estimate.base import CaseFacts, estimand_design
from popfair.estimate.pse.identification import gate
from popfair.estimate.pse.sfm import COARSE_CONTRASTS, COARSE_EFFECTS, COARSE_MEANING, EFFECTS, TARGETS, pattern_labels

OBSERVED_PREFIX = "dml_"  # DML-UCA beside the counterfactual design (estimator=counterfactual)
# The effects whose estimand the design and DML-UCA share. The worlds redraw the raw proxies (names,
# state) while DML-UCA holds R grouped, so what a screener reads from a raw name or state beyond its
# grouping is in the design's RIE and in DML's NDE: NDE, NIE and RIE are two different quantities,
# and only their sum NDE + RIE = TE - BIE is common (NIE = BIE + RIE in both).
SAME_ESTIMAND = ("TE", "BIE")
NOT_COMPARED = (
    "DML-UCA holds R grouped while the worlds redraw the raw names and state, so what the screener reads "
    "from them beyond their grouping is in DML's NDE and in the design's RIE"
)


def explain_effects(estimator: Any, effects: Effects, facts: CaseFacts) -> Effects:
    """The path-specific effects with what they mean in this case (`estimand_notes`, first among the
    effects' notes and kept as `estimand.txt`) and the structural gate (`grouping_problems`: a raw
    column the screener reads but the roles hold grouped); the family's `ExplainsEffects`
    (popfair.estimate.registry.register_family). A table without the five effects is as it is."""
    if not set(EFFECTS) <= set(effects.table.index):
        return effects
    roles = facts.roles
    effects.notes[:0] = estimand_notes(
        roles, facts.shows, facts.grouped_from, facts.documents, estimand_design(estimator)
    )
    known = grouping_problems(roles, facts.reads, facts.grouped_from)
    effects = structural_gate(effects, known, str(roles.x0), str(roles.x1))
    effects.artifacts["estimand.txt"] = "\n".join(effects.notes)
    return effects


def _columns(columns: tuple[str, ...], grouped_from: Mapping[str, str]) -> str:
    return ", ".join(
        f"{c} (grouped from the raw {grouped_from[c]})" if c in grouped_from else f"{c} (raw)" for c in columns
    )


def estimand_notes(
    roles: Roles,
    shows: frozenset[str] | None,
    grouped_from: Mapping[str, str],
    documents: str,
    design: str = "observational",
) -> list[str]:
    """Plain-words lines: the mediators as modeled (raw or grouped) and what the NDE means given what
    the `documents` (the renderer's kind) display (`shows`, None when the renderer does not declare it).
    `design` "worlds": the effects are measured on counterfactual worlds (`worlds_notes`)."""
    if design == "worlds":
        return worlds_notes(roles, shows, grouped_from, documents)
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


def worlds_notes(
    roles: Roles, shows: frozenset[str] | None, grouped_from: Mapping[str, str], documents: str
) -> list[str]:
    """The estimand of the counterfactual design in plain words: what each world redraws, that the
    effects are the screener's under popfair's population model, and what NDE means for documents
    that do or do not display X (the worlds redraw the raw proxies, so a raw name is in R)."""
    raw_r = list(dict.fromkeys(grouped_from.get(c, c) for c in roles.r))
    raw_b = list(dict.fromkeys(grouped_from.get(c, c) for c in roles.b))
    lines = [
        f"Estimand (counterfactual design): each effect contrasts means over the applicants of their score in "
        f"worlds psi(x_y, x_b, x_r). A world sets {roles.x} to x_y, redraws the proxies R ({', '.join(raw_r)}, "
        f"and from them {', '.join(c for c in roles.r if c in grouped_from)}) as under x_r and the qualifications "
        f"B ({', '.join(raw_b)}) as under x_b given those proxies; the confounders Z ({', '.join(roles.z)}) and every "
        "noise term stay the applicant's own (common random numbers). These are the screener's effects under "
        "popfair's population model (PopResume's structural model fitted to the population data), not effects "
        "in a labour market."
    ]
    if shows is None:
        lines.append(
            f"The {documents} renderer does not declare what its documents display, so popfair cannot say "
            f"whether {roles.x} itself is visible: NDE is the effect of {roles.x} with the raw proxies and "
            "qualifications held at their x0 values."
        )
    elif roles.x in shows:
        lines.append(f"The {documents} documents display {roles.x}: NDE includes the screener reading it directly.")
    else:
        lines.append(
            f"The {documents} documents never display {roles.x}, so the direct path X -> Y is structurally "
            f"absent: the two worlds NDE contrasts show the same document, and a screener that reads only the "
            f"document has NDE exactly 0. What it reads from the raw {', '.join(raw_r)} is in RIE (and NIE), "
            "because the worlds redraw the raw values. DML-UCA beside it holds R grouped, so its NDE counts what "
            "the screener reads from the raw name beyond R's grouping."
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


def grouping_problems(roles: Roles, reads: frozenset[str] | None, grouped_from: Mapping[str, str]) -> dict[str, str]:
    """Target mean -> why it is not the screener's counterfactual: the screener reads a raw column that
    B or R hold only grouped, and the mean moves that role to the other group's distribution while X
    stays. Empty when the screener's columns are unknown (`reads` None) or it reads no such column."""
    if not reads:
        return {}
    modeled = {*roles.b, *roles.r}
    problems: dict[str, list[str]] = {}
    for role, position in ((roles.b, 1), (roles.r, 2)):
        for column in role:
            raw = grouped_from.get(column)
            if raw is None or raw not in reads or raw in modeled:
                continue
            for target, levels in TARGETS.items():
                if levels[position] != levels[0]:  # the role moves to the other group, X stays
                    problems.setdefault(target, []).append(
                        f"the screener reads the raw {raw}, which the model holds only grouped ({column}); "
                        f"this mean moves {column} to the other group's distribution while X stays, so the raw "
                        f"{raw} follows X and the estimate is not the screener's counterfactual"
                    )
    return {target: f"{target}: " + "; ".join(dict.fromkeys(reasons)) for target, reasons in problems.items()}


def structural_gate(effects: Effects, problems: Mapping[str, str], x0: str, x1: str) -> Effects:
    """The path-specific effects gated again with `problems` added to the overlap rule's (from the
    estimator's `pse_identification.csv`): the numbers, significance and labels of the effects that
    contrast a failing mean are dropped, the coarser split is gated the same way and offered anew."""
    table = effects.table
    identification = effects.artifacts.get("pse_identification.csv")
    if problems and f"{SIDE}identified" in table and identification is not None:
        return _side_gate(effects, problems, identification)
    if not problems or "identified" not in table or identification is None:
        return effects
    if not table["reason"].astype(bool).any() and identification["reason"].astype(bool).any():
        return effects  # estimator.gate=false: every number is kept, for diagnosis
    merged = {t: str(r) for t, r in identification["reason"].items() if r}
    for target, reason in problems.items():
        merged[target] = f"{merged[target]}; {reason.split(': ', 1)[1]}" if target in merged else reason
    n = int(effects.metrics.get("pse.n", 0)) or len(table)
    gated = gate(table.drop(columns=["identified", "reason"]), merged, n)
    if "difference" in gated:  # estimator=both: nothing to compare where DML is not identified
        gated.loc[~gated["identified"], "difference"] = np.nan
        gated.loc[~gated["identified"], "same_conclusion"] = False
    labels = pattern_labels(gated)
    if "pattern" in gated:
        gated["pattern"] = "; ".join(labels) if labels else "none"
    artifacts = dict(effects.artifacts)
    artifacts["pse_identification.csv"] = identification.assign(
        identified=[t not in merged for t in identification.index],
        reason=[merged.get(t, "") for t in identification.index],
    )
    coarse = artifacts.get("pse_coarse.csv")
    if coarse is not None:
        coarse = gate(coarse.drop(columns=["identified", "reason"]), merged, n, COARSE_EFFECTS, COARSE_CONTRASTS)
        artifacts["pse_coarse.csv"] = coarse
    old_coarse = [note for note in effects.notes if "coarser split" in note]
    notes = [note for note in effects.notes if note not in old_coarse] + coarse_notes(gated, coarse, x0, x1)
    metrics = {k: v for k, v in effects.metrics.items() if not k.startswith("coarse.")}
    metrics.update(coarse_metrics(coarse))
    metrics["pse.identified_effects"] = float(gated["identified"].sum())
    return Effects(table=gated, labels=labels, metrics=metrics, artifacts=artifacts, detail=effects.detail, notes=notes)


SIDE = OBSERVED_PREFIX  # the columns of DML-UCA beside the counterfactual design


def _side_gate(effects: Effects, problems: Mapping[str, str], identification: pd.DataFrame) -> Effects:
    """The structural check applied to DML-UCA beside the counterfactual design: its effects that
    contrast a failing mean lose their numbers and agreement; the design's own effects are measured
    on worlds that redraw the raw values and are untouched."""
    table = effects.table.copy()
    merged = {t: str(r) for t, r in identification["reason"].items() if r}
    for target, reason in problems.items():
        merged[target] = f"{merged[target]}; {reason.split(': ', 1)[1]}" if target in merged else reason
    side = table[[c for c in table if c.startswith(SIDE)]].rename(columns=lambda c: c[len(SIDE) :])
    n = int(effects.metrics.get("pse.n", 0)) or len(table)
    gated = gate(side.drop(columns=["identified", "reason"]), merged, n)
    for column in gated:
        table[SIDE + column] = gated[column]
    hidden = ~gated["identified"].astype(bool)
    for column in ("difference", "difference_se"):
        if column in table:
            table.loc[hidden, column] = np.nan
    if "agree" in table:
        table["agree"] = table["agree"].astype(object).where(~hidden, None)
    artifacts = dict(effects.artifacts)
    artifacts["pse_identification.csv"] = identification.assign(
        identified=[t not in merged for t in identification.index],
        reason=[merged.get(t, "") for t in identification.index],
    )
    notes = [n for n in effects.notes if not n.startswith("DML-UCA")]
    notes += comparison_notes(table)
    return Effects(
        table=table,
        labels=effects.labels,
        metrics=effects.metrics,
        artifacts=artifacts,
        detail=effects.detail,
        notes=notes,
    )


def two_sided_p(z: float) -> float:
    from scipy import stats

    return float(2 * stats.norm.sf(abs(z)))


def comparison_notes(table: pd.DataFrame) -> list[str]:
    """DML-UCA beside the design, in words: each identified effect's estimate, the difference and
    whether they agree; a disagreement beyond the CIs said as a finding; the effects DML cannot
    identify, with why (its first failing mean)."""
    parts, disagree, apart = [], [], []
    for effect, row in table.iterrows():
        if not bool(row[OBSERVED_PREFIX + "identified"]):
            continue
        shown = (
            f"{effect} {row[OBSERVED_PREFIX + 'estimate']:+.4g} [{row[OBSERVED_PREFIX + 'ci_low']:.4g}, "
            f"{row[OBSERVED_PREFIX + 'ci_high']:.4g}]"
        )
        if not bool(row.get("comparable", True)):
            apart.append(shown)
            continue
        verdict = "agree" if bool(row["agree"]) else "DISAGREE"
        parts.append(f"{shown}, difference {row['difference']:+.3g} (SE {row['difference_se']:.2g}): {verdict}")
        if not bool(row["agree"]):
            disagree.append(f"{effect} (p = {two_sided_p(row['difference'] / row['difference_se']):.2g})")
    lines = []
    if parts:
        lines.append(
            "DML-UCA on the factual data (estimator=pse_dml, the paper's estimator) where it identifies an effect: "
            + "; ".join(parts)
            + "."
        )
    if apart:
        lines.append(
            f"DML-UCA's {'; '.join(apart)} are shown, not compared: {NOT_COMPARED} (their sums NDE + RIE "
            "= TE - BIE are the same quantity, compared through TE and BIE)."
        )
    missing = [str(e) for e, row in table.iterrows() if not bool(row[OBSERVED_PREFIX + "identified"])]
    if missing:
        reason = next((str(r) for r in table[OBSERVED_PREFIX + "reason"] if r), "")
        why = reason.split(": ", 1)[1].split(" | ")[0].split(" (estimator=")[0] if ": " in reason else ""
        lines.append(
            f"DML-UCA does not identify {', '.join(missing)} from the factual data"
            + (f" ({why})" if why else "")
            + "; the design measures them on counterfactual resumes."
        )
    if disagree:
        lines.append(
            f"The design and DML-UCA disagree beyond their 95% CIs on {', '.join(disagree)}. By chance alone one "
            "comparison in twenty does; a difference that holds on another seed is a finding about the population "
            "model (the worlds it draws) or the screener. Look at counterfactual_example.txt and the DML "
            "diagnostics (pse_identification.csv) before reading either number."
        )
    return lines
