"""The auditor's deliverable: a summary of results in the layout of published NYC Local Law 144
bias-audit summaries (6 RCNY 5-301 and 5-303), as Markdown, one self-contained HTML page and a PDF
an employer can post.

It opens with what the law asks the summary to state: the tool, the date of the audit, the source
and explanation of the data (historical data: the tool's recorded decisions; test data: applicants
popfair generated), the data's date range, the number of applicants, and the number in an unknown
category. Then one table per category set (sex, race/ethnicity, their intersection): number of
applicants, number selected (or scoring above the sample's median), selection (scoring) rate and
impact ratio, with categories under 2% excluded from the ratios and shown with the auditor's
justification. Beside the law's columns: each ratio's bootstrap CI, the four-fifths flag, and
whether the flag survives the test of "no category differs" that accounts for the reference being
the most selected category (`popfair.estimate.impact_ratio.inference`), explained in plain words under
each table. A generated case adds the tool's settings, the design, how screening went, the
estimator's effects and the provenance of the bundled data.

`audit_report(experiment, result)` (generated cases; logged under `audit_report/` for screener=http
and screener=file, or with `audit_report=true`) and `table_audit_report(case, result)` (table cases)
build the files in memory; `popfair-report --audit RUN_ID --out DIR` fetches them from a run."""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from popfair.core.types import Effects
from popfair.data import DATA_DIR
from popfair.estimate.impact_ratio.table import ImpactRatios
from popfair.population.base import population_name
from popfair.report.document import Block, to_html, to_markdown, to_pdf
from popfair.report.effects import effects_blocks
from popfair.report.ll144 import AuditData, ll144_blocks
from popfair.report.trend import period_blocks, watch_blocks
from popfair.runtime.version import __version__
from popfair.track.mlflow_tracker import git_commit


class GeneratedCase(Protocol):
    """What the report reads of a generated case (popfair.case.population.PopulationCase)."""

    config: dict[str, Any]
    population: Any
    occupation: Any
    renderer: Any
    screener: Any
    estimator: Any
    protected: Any
    seed: int

    def case_name(self) -> str: ...


class RunResult(Protocol):
    """What the report reads of a generated case's result (popfair.case.result.RunResult)."""

    effects: Effects
    audit: Effects | None
    scored: pd.DataFrame
    notes: list[str]
    run_id: str | None
    screening: dict[str, float]
    data_sha256: str
    sequential: Any  # a sequential case's looks (popfair.case.looks), else None
    power: Any  # the power plan (config plan.*), else None


class TableCase(Protocol):
    """What the report reads of a table case (popfair.case.table.TableCase)."""

    table: Any
    estimator: Any
    protected: Any

    def shown_source(self) -> str: ...


class TableRunResult(Protocol):
    """What the report reads of a table case's result (popfair.case.table.TableRunResult)."""

    effects: Effects
    audit: Effects | None
    notes: list[str]
    run_id: str | None
    mapping: pd.DataFrame | None
    source: Any
    periods: Any  # PeriodRatios (table.period) or None
    watch: Any  # a watch's look (table.watch) or None


ARTIFACT_DIR = "audit_report"
MAX_PROBLEMS = 50


def impact_ratios_of(effects: Effects | None) -> ImpactRatios | None:
    """The impact-ratio result behind an estimator's effects, when it has one."""
    detail = None if effects is None else effects.detail
    return detail if isinstance(detail, ImpactRatios) else None


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
    return pd.DataFrame({"Setting": list(shown), "Value": [str(v) for v in shown.values()]})


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


def noise_blocks(screening: dict[str, float]) -> list[Block]:
    """The tool's own noise where it answered each prompt several times (screener.samples > 1): the
    answers per prompt, the share of prompts answered differently and the share of the outcome's
    variance within prompts (docs/concepts/screener_noise.md); nothing for one answer per prompt."""
    if "screen.noise_share" not in screening:
        return []
    k, prompts = int(screening["screen.samples"]), int(screening["screen.noise_prompts"])
    return [
        Block(
            "text",
            f"The tool answered each prompt {k} times; each applicant's outcome is the mean of its answers. "
            f"{100 * screening['screen.flip_rate']:.1f}% of {prompts:,} prompts got differing answers, and "
            f"{100 * screening['screen.noise_share']:.1f}% of the variance of one answer lies within prompts "
            "(the tool's own noise, not the applicants).",
        )
    ]


def audit_blocks(experiment: GeneratedCase, result: RunResult, out: Path, audit_date: dt.date) -> list[Block]:
    """The report of a generated (test-data) case, in order."""
    screener, protected = experiment.screener, experiment.protected
    described = screener.describe() if hasattr(screener, "describe") else {"name": screener.name}
    scored = result.scored
    paired = "pair_key" in scored.columns
    roles = experiment.config.get("protected_attr") or {}
    x0, x1 = roles.get("x0", "x0"), roles.get("x1", "x1")
    n, failed = len(scored), int(scored["error"].notna().sum())
    from_cache = int(result.screening.get("screen.rows_from_cache", 0))
    population = population_name(experiment.population)
    facts = _header_facts(_tool_name(screener), audit_date, result.run_id)
    facts["Data"] = f"test data: {n:,} applicants popfair generated (population {population}, seed {experiment.seed})"
    if result.data_sha256:  # the digest the run's dataset input carries (its first 16 characters)
        facts["Data"] += f"; sha256 of the applicant rows {result.data_sha256}"
    blocks = [Block("facts", facts)]
    if impact_ratios_of(result.effects) is None:  # the estimator's effects first, unless they are the LL144 ones
        blocks += effects_blocks(result.effects, f"Effect of {protected.name} ({experiment.estimator.name})")
    ratios = impact_ratios_of(result.audit) or impact_ratios_of(result.effects)
    if ratios is not None:
        data = AuditData(
            kind="test",
            explanation=f"popfair generated {n:,} applicants (population {population}, seed {experiment.seed}) "
            f"and had the tool screen their {experiment.renderer.kind} resumes for {experiment.occupation.key}.",
            source="public statistics bundled with popfair (see Data sources below)",
            date_range=f"screened on {audit_date.isoformat()}",
            applicants=f"{ratios.n:,} with an answer from the tool ({failed:,} failed screens left out)",
        )
        blocks += ll144_blocks(ratios, data, out)
    else:
        blocks += [
            Block("h2", "Summary of results (NYC Local Law 144)"),
            Block("text", "Not computed for this case (outcome_audit=null, or it was skipped: see Notes)."),
        ]
    blocks += [
        Block("h2", "Tool audited"),
        Block("table", _tool_table(described)),
        Block("h2", "Design"),
        Block(
            "text",
            f"Case {experiment.case_name()}: "
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
    blocks += noise_blocks(result.screening)
    sequential = result.sequential  # a sequential case: its looks, stop, both intervals
    if sequential is not None:
        blocks += [
            Block("h2", "Sequential audit: looks and stopping"),
            Block(
                "text",
                "The tool was asked in batches, and after each batch the target effect's anytime-valid "
                "confidence interval (a confidence sequence: it holds at every look at once) decided whether "
                "to go on. The effects below are the fixed-n analysis of the answers used; its interval is "
                "valid only for a sample size planned in advance, so the decision rests on the anytime-valid one.",
            ),
            Block("list", sequential.sentences()),
            Block("table", sequential.table().round(4)),
        ]
    reasons = _failure_reasons(scored)
    if len(reasons):
        blocks += [
            Block("text", "Failed rows are left out of the estimates; each keeps its reason:"),
            Block("table", reasons),
        ]
    problems = screener.problems  # screener=file: the results sheets' problems by row
    if problems:
        shown = pd.DataFrame([vars(p) for p in problems[:MAX_PROBLEMS]])
        more = f" (the first {MAX_PROBLEMS} of {len(problems)})" if len(problems) > MAX_PROBLEMS else ""
        blocks += [
            Block("h3", "Problems in the tool's results files"),
            Block("text", f"Each by file and row{more}; all are in import_report.csv of the exchange folder."),
            Block("table", shown),
        ]
    blocks += power_blocks(result)
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
        blocks += [Block("h2", "Notes"), Block("list", notes)]
    return blocks


def power_blocks(result: Any) -> list[Block]:
    """What the audit can and cannot detect at its n (config plan.*), in plain words; nothing without a plan."""
    power = result.power
    if power is None:
        return []
    return [Block("h2", "What this audit can and cannot detect"), Block("text", power.sentence())]


def _data_explanation(kind: str, test_data: Any) -> str:
    """The data statement: a historical audit says it used historical data; a test-data audit gives
    the LL144 rules' explanation (table.test_data) of why, and how the data were made."""
    if kind == "historical":
        return (
            "This audit used historical data: the tool's outcomes for each applicant are read from the source "
            "below; nothing was generated or re-screened."
        )
    why = test_data.why_not_historical or "not stated (table.test_data.why_not_historical)"
    how = test_data.how_made or "not stated (table.test_data.how_made)"
    return (
        "The outcomes in the source below were produced by running the tool on test data. "
        f"Why historical data were not used: {why.rstrip('.')}. How the test data were made: {how.rstrip('.')}."
    )


def table_blocks(case: TableCase, result: TableRunResult, out: Path, audit_date: dt.date) -> list[Block]:
    """The report of a table case (the decisions already exist), in order."""
    source = result.source
    tool = case.table.tool
    facts = _header_facts(_table_name(case), audit_date, result.run_id)
    # published summaries state these: say they were not stated rather than leave them out silently
    # (docs/tables.md names the keys that state them; a report names no config key)
    facts |= {
        "Vendor": tool.vendor or "not stated",
        "Distribution date": tool.distribution_date or "not stated",
        "Independent auditor": tool.auditor or "not stated",
    }
    fingerprint = ", ".join(f"{k} {v}" for k, v in source.fingerprint.items())
    facts["Data"] = f"{case.shown_source()} ({source.format}{'; ' + fingerprint if fingerprint else ''})"
    blocks = [Block("facts", facts)]
    ratios = impact_ratios_of(result.audit) or impact_ratios_of(result.effects)
    dropped = f"; {source.rows_dropped:,} rows left out (see table_report.csv)" if source.rows_dropped else ""
    filtered = (
        f"; {source.rows_read - source.rows_after_filters:,} removed by filters ({'; '.join(source.filters)})"
        if source.rows_after_filters != source.rows_read
        else ""
    )
    data = AuditData(
        kind=source.kind,
        explanation=_data_explanation(source.kind, case.table.test_data),
        source=facts["Data"],
        date_range=(
            f"{source.date_min} to {source.date_max} (column {source.date_column})"
            if source.date_min
            else "not stated (the table has no date column)"
        ),
        applicants=f"{source.rows_used:,} ({source.rows_read:,} rows read{filtered}{dropped})",
    )
    if ratios is not None:
        blocks += ll144_blocks(ratios, data, out)
    if result.periods is not None:  # table.period (popfair.report.trend)
        blocks += period_blocks(result.periods, out)
    if result.watch is not None:  # table.watch
        blocks += watch_blocks(result.watch)
    if impact_ratios_of(result.effects) is None:
        blocks += effects_blocks(result.effects, f"Effect of {case.protected.name} ({case.estimator.name})")
    blocks += power_blocks(result)
    if result.mapping is not None and len(result.mapping):
        blocks += [
            Block("h2", "How the table's columns and values were read"),
            Block("table", result.mapping.reset_index(drop=True)),
        ]
    notes = list(dict.fromkeys([*source.notes, *result.notes]))
    if notes:
        blocks += [Block("h2", "Notes"), Block("list", notes)]
    return blocks


def _header_facts(tool: str, audit_date: dt.date, run_id: str | None) -> dict[str, str]:
    """What every report states first: the tool, the date, the MLflow run and the popfair that computed it."""
    commit = git_commit()
    return {
        "Automated employment decision tool": tool,
        "Date of the bias audit": audit_date.isoformat(),
        "MLflow run": run_id or "none (tracking off)",
        "Computed by": f"popfair {__version__}" + (f", commit {commit[:12]}" if commit and commit != "unknown" else ""),
    }


def _tool_name(screener: Any) -> str:
    return str(screener.display_name or screener.name)


def _table_name(case: TableCase) -> str:
    if case.table.tool.name:
        return case.table.tool.name
    return f"the tool whose decisions are recorded in {case.shown_source()}"


def render(title: str, blocks: list[Block], out: Path, run_id: str | None = None) -> dict[str, str | bytes]:
    """The report's files by name: report.md, report.html (figures embedded), report.pdf (each page's
    foot names the report and its MLflow run), and the figures the Markdown links to."""
    files: dict[str, str | bytes] = {
        "report.md": to_markdown(title, blocks, out),
        "report.html": to_html(title, blocks),
        # the run id first and whole: a long title is what the foot's width cuts
        "report.pdf": to_pdf(title, blocks, footer=(f"MLflow run {run_id} | " if run_id else "") + title),
    }
    for path in out.iterdir():
        files[path.name] = path.read_bytes()
    return files


def audit_report(
    experiment: GeneratedCase, result: RunResult, audit_date: dt.date | None = None
) -> dict[str, str | bytes]:
    """The report of a generated case (test data) by file name (see `render`)."""
    day = audit_date or dt.datetime.now(dt.timezone.utc).date()
    title = f"Bias audit of {_tool_name(experiment.screener)}: {experiment.occupation.key}, {experiment.protected.name}"
    with tempfile.TemporaryDirectory() as folder:
        return render(title, audit_blocks(experiment, result, Path(folder), day), Path(folder), result.run_id)


def table_audit_report(
    case: TableCase, result: TableRunResult, audit_date: dt.date | None = None
) -> dict[str, str | bytes]:
    """The report of a table case (historical data, or test data the table says it holds)."""
    day = audit_date or dt.datetime.now(dt.timezone.utc).date()
    title = "Bias audit summary: " + _table_name(case)
    with tempfile.TemporaryDirectory() as folder:
        return render(title, table_blocks(case, result, Path(folder), day), Path(folder), result.run_id)


def fetch_audit_report(tracking_uri: str, run_id: str, out_dir: str | Path) -> Path:
    """Download a run's audit report (`popfair-report --audit`); DataError if the run has none."""
    from mlflow import MlflowClient

    from popfair.core.errors import DataError

    client = MlflowClient(tracking_uri)
    if not [f for f in client.list_artifacts(run_id, ARTIFACT_DIR)]:
        raise DataError(
            f"run {run_id} at {tracking_uri} has no {ARTIFACT_DIR}/ (it is written for screener=http, "
            "screener=file and table cases, or with audit_report=true)"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    client.download_artifacts(run_id, ARTIFACT_DIR, str(out))
    return out / ARTIFACT_DIR / "report.html"
