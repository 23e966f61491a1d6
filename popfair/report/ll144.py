"""The LL144 part of the auditor's report: the impact-ratio tables by sex, race/ethnicity and their
intersection in the layout of published bias-audit summaries, with the method notes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from popfair.core.formats import decisive_percent, format_p
from popfair.estimate.impact_ratio.labels import DIMENSION_TITLES, category_label
from popfair.estimate.impact_ratio.table import ImpactRatios
from popfair.report.document import Block

DATA_KINDS = {
    "historical": "Historical data: the decisions the tool made on real applicants, as recorded",
    "test": "Test data: applicants generated for the audit, not the tool's real applicants",
}


UNKNOWN_OF = {"sex": "sex", "race": "race/ethnicity", "sex_race": "sex or race/ethnicity"}


LL144_METRICS = ("selection", "scoring_median")  # the law's rates; other rules are popfair's additions
FIGURE_DPI = 100  # the impact ratio chart's resolution in the report


@dataclass
class AuditData:
    """What the summary must say about the data (6 RCNY 5-303: source and explanation)."""

    kind: str  # historical | test
    explanation: str
    source: str
    date_range: str
    applicants: str


def ll144_blocks(ratios: ImpactRatios, data: AuditData, out: Path) -> list[Block]:
    """The law's summary of results: the data, then per rate one table per category set."""
    from popfair.track.figures import png

    callback = ratios.outcome == "callback"
    unknown = ratios.n_unknown()
    blocks = [
        Block("h2", "Summary of results (NYC Local Law 144)"),
        Block(
            "facts",
            {
                "Data used": DATA_KINDS.get(data.kind, data.kind) + ". " + data.explanation,
                "Source of the data": data.source,
                "Date range of the data": data.date_range,
                "Applicants assessed": data.applicants,
                "Outcome": _outcome_text(ratios),
                "Applicants in an unknown category": "; ".join(
                    f"{DIMENSION_TITLES[d].split(' (')[0].lower()}: {n:,}"
                    for d, n in unknown.items()
                    if d != "sex_race"
                )
                + " (not included in the rates or impact ratios)",
            },
        ),
        Block(
            "text",
            (
                "Selection rate: the share of a category's applicants who were selected. "
                if callback
                else "Scoring rate: the share of a category's applicants who scored above the median score "
                "of the full sample. "
            )
            + "Impact ratio: a category's rate divided by the rate of the "
            + ("most selected" if callback else "highest scoring")
            + " category. Ratios below "
            f"{ratios.settings.flag_below:g} are flagged (the four-fifths rule). The columns after the impact "
            f"ratio are popfair's: its {round((1 - ratios.settings.alpha) * 100)}% confidence interval and "
            "whether the flag survives a test that accounts for chance (explained under each table).",
        ),
    ]
    metrics = list(dict.fromkeys(ratios.table["metric"]))
    for metric in metrics:
        if metric not in LL144_METRICS:
            blocks.append(Block("h2", f"Additional rule: {_rule_title(metric, ratios)}"))
        for dimension, title in DIMENSION_TITLES.items():
            blocks += _dimension_blocks(ratios, metric, dimension, title.replace("(sex x race)", "(sex and race)"))
    if ratios.table["status"].eq("excluded").any():
        blocks += [
            Block("h3", "Categories excluded from the impact ratios"),
            Block("text", ratios.settings.exclusion_justification),
        ]
    blocks += [Block("h3", "How the uncertainty was computed"), Block("list", _method_notes(ratios))]
    if ratios.notes:
        blocks.append(Block("list", ratios.notes))
    path = out / "impact_ratios.png"
    path.write_bytes(png(ratios.plot(), dpi=FIGURE_DPI))  # laid out by itself: no second drawing to measure it
    blocks.append(
        Block("figure", path, caption="Impact ratios with their confidence intervals; dashed line: four-fifths.")
    )
    return blocks


def _dimension_blocks(ratios: ImpactRatios, metric: str, dimension: str, title: str) -> list[Block]:
    t = ratios.table
    block = t[(t["metric"] == metric) & (t["dimension"] == dimension)]
    known, unknown = block[block["status"] != "unknown"], block[block["status"] == "unknown"]
    if known.empty:
        return []
    rate, chosen = _rate_headers(ratios, metric)
    level = round((1 - ratios.settings.alpha) * 100)
    flag = f"Below {ratios.settings.flag_below:g}"
    table = pd.DataFrame(
        {
            f"{title} category": [category_label(c) for c in known["category"]],
            "# of applicants": [f"{n:,}" for n in known["n_applicants"]],
            chosen: [f"{n:,}" for n in known["n_selected"]],
            rate: [_percent(r) for r in known["rate"]],
            "Impact ratio": [_ratio(r) for r in known["impact_ratio"]],
            f"{level}% CI": [
                f"{lo:.3f}\u2013{hi:.3f}" if pd.notna(lo) and pd.notna(hi) else ""
                for lo, hi in zip(known["ci_low"], known["ci_high"])
            ],
            flag: ["yes" if f else "" for f in known["flag"]],
            "Flag survives test": [
                ("yes" if s else "no") if f else "" for f, s in zip(known["flag"], known["flag_survives"])
            ],
            "Fisher p vs reference": [_p(p) for p in known["fisher_p"]],
            "Z vs reference (p)": [
                f"{z:.2f} ({_p(p)})" if pd.notna(z) else "" for z, p in zip(known["z"], known["z_p"])
            ],
            "Note": [_row_note(row, ratios) for row in known.itertuples()],
        }
    )
    blocks = [Block("h3", title if metric in LL144_METRICS else f"{title}: {_rule_title(metric, ratios)}")]
    blocks.append(Block("table", table))
    if len(unknown) and int(unknown["n_applicants"].iloc[0]):
        blocks.append(
            Block(
                "list",
                [
                    f"Unknown {UNKNOWN_OF[dimension]}: {int(unknown['n_applicants'].iloc[0]):,} applicants, "
                    "not included in the calculations above."
                ],
            )
        )
    explanation = ratios.explanations().get((metric, dimension))
    if explanation:
        blocks.append(Block("text", explanation))
    return blocks


def _rate_headers(ratios: ImpactRatios, metric: str) -> tuple[str, str]:
    if metric == "selection":
        return "Selection rate", "# selected"
    if metric == "scoring_median":
        return "Scoring rate", "# scoring above the median"
    return "Rate", "# meeting the rule"


def _rule_title(metric: str, ratios: ImpactRatios) -> str:
    cutoff = ratios.thresholds.get(metric)
    if metric.startswith("top_"):
        return f"in the top {metric[4:-3]}% of scores (score >= {cutoff:g})"
    if metric.startswith("score_ge_"):
        return f"score of at least {cutoff:g}"
    return metric


def _outcome_text(ratios: ImpactRatios) -> str:
    if ratios.outcome == "callback":
        return "Selected or not (selection rates)"
    median = ratios.thresholds.get("scoring_median", float("nan"))
    return "A score (scoring rates)" + (f"; median score of the full sample: {median:g}" if pd.notna(median) else "")


def _row_note(row: Any, ratios: ImpactRatios) -> str:
    share = f"{decisive_percent(row.share, ratios.settings.min_category_share)} of applicants"
    if row.status == "excluded":
        return f"excluded from the ratios: {share}"
    if row.is_reference:
        return "reference (" + ("most selected" if ratios.outcome == "callback" else "highest rate") + ")"
    verdict = str(getattr(row, "verdict_note", "") or "")
    if row.small:
        return f"small: {share}, kept" + (f"; {verdict}" if verdict else "")
    return verdict


def _method_notes(ratios: ImpactRatios) -> list[str]:
    s = ratios.settings
    unit = f"the {ratios.n_clusters:,} clusters ({ratios.cluster})" if ratios.cluster else "the applicants"
    methods = sorted(set(ratios.tests["null_method"])) if len(ratios.tests) else []
    return [
        f"Confidence intervals: {s.n_bootstrap:,} bootstrap resamples of {unit}, every rate recomputed in each. "
        "Any category may be the one with the highest true rate, so each pair of categories gets an interval for "
        "the ratio of their rates (all pairs at once), and a category's impact ratio, the smallest of its ratios "
        "to every category, lies between the smallest bounds: the intervals of a table hold together in at least "
        f"{1 - s.alpha:.0%} of samples, ties between categories included.",
        f"Test of 'no category differs': the lowest impact ratio is compared with its distribution when category "
        f"labels are shuffled within each {'cluster' if ratios.cluster else 'sample'} "
        f"({s.n_permutations or s.n_bootstrap:,} shuffles; {', '.join(methods) or 'n/a'}). A flag survives when "
        f"the category's ratio is below what the lowest of all ratios reaches by chance in {s.alpha:.0%} of shuffles "
        "(a single-step max-T adjustment over the categories).",
        *(
            ["Score cutoffs (the median) are the sample's own, as LL144 defines the scoring rate; they are held fixed."]
            if any(pd.notna(c) for c in ratios.thresholds.values())  # only where scores are used
            else []
        ),
        "Fisher p vs reference (Fisher's exact test, two-sided) and Z vs reference (the two-proportion Z test "
        "with the pooled rate, two-sided p; |Z| > 2 is the two-standard-deviation rule) compare each category "
        "with the reference as if it had been chosen in advance: they are conditional on the reference choice "
        "and treat applicants as independent, so under pure chance they find differences more often than "
        "their level says. The flags follow the test above, which accounts for the choice.",
    ]


def _p(value: float) -> str:
    """A p-value as tables print it (blank where there is none: the reference, excluded categories)."""
    if pd.isna(value):
        return ""
    return "< 0.0001" if value < 0.0001 else format_p(value)


def _percent(value: float) -> str:
    return "" if pd.isna(value) else f"{value:.2%}"


def _ratio(value: float) -> str:
    return "" if pd.isna(value) else f"{value:.3f}"
