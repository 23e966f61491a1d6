"""The auditor's deliverable for one case: a report (Markdown and self-contained HTML) that can be
handed over as it is. It says which tool was audited and how it was reached, the audit date and
software version, the applicants and documents used and where their statistics come from, how
screening went (answers, failures by reason), the case's causal or paired estimates with CIs, and
the NYC Local Law 144 summary (selection or scoring rates, impact ratios with CIs, small categories
excluded, unknown counts).

`audit_report(experiment, result)` builds it in memory (Experiment.run logs it to MLflow under
`audit_report/` for screener=http and screener=file, or any case with `audit_report=true`);
`popfair-report --audit RUN_ID --out DIR` fetches it from a run."""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

import popfair
from popfair.report.sweep import Block, to_html, to_markdown

if TYPE_CHECKING:
    from popfair.experiment import Experiment, RunResult

DATA_DIR = Path(popfair.__file__).parent / "data"
ARTIFACT_DIR = "audit_report"
EFFECT_COLUMNS = ["estimate", "se", "ci_low", "ci_high", "p_value", "mcnemar_p", "cluster_p", "n_pairs", "b", "c"]
LL144_SUMMARY = "impact_ratios/summary.csv"
LL144_MARKDOWN = "impact_ratios/summary.md"
MAX_PROBLEMS = 50


def data_sources(paired: bool) -> pd.DataFrame:
    """The bundled data files the case's applicants were built from, with the heading of their
    provenance entry (popfair/data/<folder>/SOURCES.md; the full text ships with popfair)."""
    folders = ("audit", "names") if paired else ("population", "names", "resume")
    rows = []
    for folder in folders:
        sources = DATA_DIR / folder / "SOURCES.md"
        if not sources.is_file():
            continue
        text = sources.read_text(encoding="utf-8")
        title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("# ")), folder)
        entries = [
            m.group(1).strip()
            for m in re.finditer(r"^##\s+(?:\d+\.\s*)?(.+)$", text, re.MULTILINE)
            if not m.group(1).lower().startswith(("searched", "not found"))
        ]
        rows.append(
            {
                "folder": f"popfair/data/{folder}",
                "provenance": title,
                "files": "; ".join(e.replace("`", "") for e in entries) or "(see SOURCES.md)",
            }
        )
    return pd.DataFrame(rows)


def _tool_table(described: dict[str, Any]) -> pd.DataFrame:
    shown = {k: v for k, v in described.items() if v not in (None, {}, [], "")}
    return pd.DataFrame({"setting": list(shown), "value": [str(v) for v in shown.values()]})


def _failure_reasons(scored: pd.DataFrame) -> pd.DataFrame:
    """Failed rows grouped by the kind of failure (the text before the first colon or digit)."""
    errors = scored["error"].dropna().astype(str)
    if errors.empty:
        return pd.DataFrame(columns=["reason", "rows", "example"])
    kinds = errors.str.replace(r"\b(d[0-9a-f]{20}|row[s]? [0-9, ]+)\b", "<...>", regex=True).str.split(":").str[0]
    grouped = errors.groupby(kinds)
    return pd.DataFrame(
        {
            "reason": list(grouped.groups),
            "rows": grouped.size().to_numpy(),
            "example": grouped.first().str.slice(0, 160).to_numpy(),
        }
    )


def _effects_table(effects: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in EFFECT_COLUMNS if c in effects.columns]
    table = effects[columns].reset_index(names="effect")
    return table.round({c: 4 for c in columns if c not in ("n_pairs", "b", "c")})


def audit_blocks(experiment: Experiment, result: RunResult, out: Path, audit_date: dt.date) -> list[Block]:
    """The report's content, in order."""
    screener, protected = experiment.screener, experiment.protected
    described = screener.describe() if hasattr(screener, "describe") else {"name": screener.name}
    scored = result.scored
    paired = "pair_key" in scored.columns
    roles = experiment.config.get("protected_attr") or {}
    x0, x1 = roles.get("x0", "x0"), roles.get("x1", "x1")
    n, failed = len(scored), int(scored["error"].notna().sum())
    from_cache = int(result.screening.get("screen.rows_from_cache", 0))
    blocks = [
        Block(
            "text",
            f"Audit date: {audit_date.isoformat()}. Software: popfair {popfair.__version__}"
            + (f", MLflow run {result.run_id}" if result.run_id else "")
            + ".",
        ),
        Block("h2", "Tool audited"),
        Block("table", _tool_table(described)),
        Block("h2", "Design"),
        Block(
            "text",
            f"Case `{experiment.case_name()}`: "
            + (
                "a paired correspondence audit: pairs of identical profiles that differ only in a "
                f"{protected.name}-coded name"
                if paired
                else "a population audit: applicants drawn from U.S. population microdata, keeping the "
                "natural relationships between their attributes"
            )
            + f". Protected attribute: {protected.name} ({x0} vs {x1}); positive effects favour {x1}. "
            f"Documents: {experiment.renderer.kind} resumes. Estimator: {experiment.estimator.name}. "
            f"Seed {experiment.seed}. The tool received only the documents (resume content and "
            "opaque ids derived from it): no applicant id, no protected attribute.",
        ),
        Block("h2", "Screening"),
        Block(
            "table",
            pd.DataFrame(
                {
                    "applicants": [n],
                    "answered": [n - failed],
                    "failed": [failed],
                    "answers from earlier runs (cache)": [from_cache],
                }
            ),
        ),
    ]
    reasons = _failure_reasons(scored)
    if len(reasons):
        blocks += [
            Block("text", "Failed rows are left out of the estimates; each keeps its reason:"),
            Block("table", reasons),
        ]
    problems = getattr(screener, "problems", None)  # screener=file: the results sheets' problems by row
    if problems:
        shown = pd.DataFrame([vars(p) for p in problems[:MAX_PROBLEMS]])
        more = f" (the first {MAX_PROBLEMS} of {len(problems)})" if len(problems) > MAX_PROBLEMS else ""
        blocks += [
            Block("h3", "Problems in the tool's results files"),
            Block("text", f"Each by file and row{more}; all are in import_report.csv of the exchange folder."),
            Block("table", shown),
        ]
    blocks += [
        Block("h2", f"Effect of {protected.name} ({experiment.estimator.name})"),
        Block("table", _effects_table(result.effects.table)),
        Block("text", "Discrimination pattern: " + result.effects.case),
    ]
    blocks += _ll144_blocks(result, out)
    blocks += [
        Block("h2", "Data sources"),
        Block(
            "text",
            "Applicant attributes come from public statistics shipped with popfair; the "
            "provenance of every file is in the SOURCES.md of its folder.",
        ),
        Block("table", data_sources(paired)),
    ]
    notes = list(dict.fromkeys(result.notes))
    if notes:
        blocks += [Block("h2", "Notes"), Block("text", "\n".join(f"- {note}" for note in notes))]
    return blocks


def _ll144_blocks(result: RunResult, out: Path) -> list[Block]:
    """The LL144 summary as audits publish it: notes (counts, cutoffs, unknowns), one table per
    metric x dimension, the impact-ratio chart."""
    from popfair.report.figures import draw

    source = result.audit if result.audit is not None else result.effects
    summary = source.artifacts.get(LL144_SUMMARY)
    if summary is None:
        return [
            Block("h2", "NYC Local Law 144 summary"),
            Block("text", "Not computed for this case (outcome_audit=null, or it was skipped: see Notes)."),
        ]
    markdown = str(source.artifacts.get(LL144_MARKDOWN, ""))
    facts = [line for line in markdown.splitlines() if line.startswith(("Applicants:", "- "))]
    blocks = [
        Block("h2", "NYC Local Law 144 summary"),
        Block(
            "text",
            "Selection or scoring rates and impact ratios by sex, race/ethnicity and their "
            "intersection, with bootstrap CIs; categories under 2% of the sample are "
            "excluded from the ratios and shown; ratios below 0.8 are flagged.\n" + "\n".join(facts),
        ),
    ]
    table = summary.reset_index()
    for (metric, dimension), block in table.groupby(["metric", "dimension"], sort=False):
        blocks += [Block("h3", f"{metric}: {dimension}"), Block("table", block.drop(columns=["metric", "dimension"]))]
    plot = source.artifacts.get("impact_ratios/impact_ratios.png")
    if plot is not None:
        figure = draw(plot) if not hasattr(plot, "savefig") else plot
        path = out / "impact_ratios.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        blocks.append(Block("figure", path))
    return blocks


def audit_report(
    experiment: Experiment, result: RunResult, audit_date: dt.date | None = None
) -> dict[str, str | bytes]:
    """The report's files by name (report.md, report.html with the chart embedded, impact_ratios.png)."""
    day = audit_date or dt.datetime.now(dt.timezone.utc).date()
    screener = experiment.screener
    tool = getattr(screener, "display_name", None) or screener.name
    title = f"Bias audit of {tool}: {experiment.occupation.key}, {experiment.protected.name}"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        blocks = audit_blocks(experiment, result, out, day)
        files: dict[str, str | bytes] = {
            "report.md": to_markdown(title, blocks, out),
            "report.html": to_html(title, blocks),
        }
        for path in out.iterdir():
            files[path.name] = path.read_bytes()
    return files


def fetch_audit_report(tracking_uri: str, run_id: str, out_dir: str | Path) -> Path:
    """Download a run's audit report (`popfair-report --audit`); DataError if the run has none."""
    from mlflow import MlflowClient

    from popfair.errors import DataError

    client = MlflowClient(tracking_uri)
    if not [f for f in client.list_artifacts(run_id, ARTIFACT_DIR)]:
        raise DataError(
            f"run {run_id} at {tracking_uri} has no {ARTIFACT_DIR}/ (it is written for screener=http "
            "and screener=file, or with audit_report=true)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    client.download_artifacts(run_id, ARTIFACT_DIR, str(out))
    return out / ARTIFACT_DIR / "report.html"
