"""Console summary of one case: the effects table, notes and how to open MLflow."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from popfair.core.formats import format_p
from popfair.core.types import Effects
from popfair.estimate.base import EFFECT_COLUMNS
from popfair.estimate.pse.identification import reason_problems

MAX_COLUMNS = 10  # wider tables (the LL144 table has 26 columns) show these, the rest is in effects.csv
CONSOLE_COLUMNS = [
    *EFFECT_COLUMNS,
    "unit",
    "p_value",
    "significant",
    "n_applicants",
    "rate",
    "flag",
    "flag_survives",
    "fisher_p",
    "z_p",
    "n_pairs",
    "mcnemar_p",
    "pattern",
]


def format_effects(effects: Effects) -> str:
    """The effects table as text: every column when there are at most MAX_COLUMNS, else the
    estimate, its interval and the decision columns, with the names of the others."""
    table = effects.table
    reasons = table["reason"] if "reason" in table else pd.Series(dtype=str)
    if "identified" in table:  # an unidentified effect prints "not identified", never a number
        table = table.drop(columns=["reason"], errors="ignore").astype(object)
        hidden_rows = ~effects.table["identified"].astype(bool)
        for column in ("estimate", "se", "ci_low", "ci_high", "p_value", "significant"):
            if column in table:
                table.loc[hidden_rows, column] = "not identified" if column == "estimate" else "-"
        table = table.drop(columns=["identified"])
    shown = list(table.columns)
    if len(shown) > MAX_COLUMNS:
        shown = [c for c in CONSOLE_COLUMNS if c in table.columns]
    hidden = [c for c in table.columns if c not in shown]
    with pd.option_context("display.float_format", "{:.4g}".format, "display.width", 140, "display.max_columns", 20):
        shown_table = table[shown].astype(object)
        for column in ("fisher_p", "z_p"):  # the reference is not tested against itself
            if column in shown_table:
                shown_table[column] = shown_table[column].where(pd.notna(shown_table[column]), "-")
        for column in ("p_value", "mcnemar_p", "cluster_p", "fisher_p", "z_p"):  # a p-value never prints as 0
            if column in shown_table:
                shown_table[column] = [
                    format_p(v, digits=4) if isinstance(v, float) and v < 1e-4 else v for v in shown_table[column]
                ]
        text = _rounded(shown_table).to_string()
    if hidden:
        text += f"\n({len(hidden)} more columns in the run's effects.csv: {', '.join(map(str, hidden))})"
    text += not_identified_text(reasons)
    for note in effects.notes:  # what the effects mean here (estimand, a coarser split where offered)
        text += f"\n{note}"
    return text


def not_identified_lines(reasons: pd.Series) -> tuple[str, list[str]]:
    """Why effects are not identified: a header ("Not identified at n=...: ...") and one line per failing
    counterfactual mean with the effects that need it (four effects often share one mean); ("", [])
    when every effect is identified."""
    needs: dict[str, list[str]] = {}
    header = ""
    for effect, reason in reasons.items():
        for problem in reason_problems(str(reason)):
            needs.setdefault(problem, []).append(str(effect))
            header = str(reason).split(": ", 1)[0]  # "not identified at n=..."
    if not needs:
        return "", []
    head = f"{header[:1].upper()}{header[1:]}: the data cannot answer a counterfactual mean these effects need"
    return head, [f"{', '.join(effects)} need {problem}" for problem, effects in needs.items()]


def not_identified_text(reasons: pd.Series) -> str:
    """`not_identified_lines` as the console prints them, under the effects table."""
    head, lines = not_identified_lines(reasons)
    if not head:
        return ""
    text = f"\n{head}" + "".join(f"\n  {line}" for line in lines)
    return text + (
        "\n  (estimator=counterfactual, the default of population cases, measures them on counterfactual resumes)"
    )


def _rounded(table: pd.DataFrame) -> pd.DataFrame:
    """Floats of an object table (one mixing numbers and "not identified") as 4 significant digits."""
    return table.apply(lambda column: column.map(lambda v: f"{v:.4g}" if isinstance(v, float) else v))


def timing_line(timings: Mapping[str, float], total: float | None = None) -> str:
    """One line of stage times, e.g. `time: population 2.1s | render 0.8s | ... | total 17.3s`
    (`total`: the case's wall time, start-up after Hydra included; default the stages' sum)."""
    stages = " | ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items())
    return f"time: {stages} | total {sum(timings.values()) if total is None else total:.1f}s"


def summary(
    case_name: str,
    effects: Effects,
    run_id: str | None,
    n_rows: int,
    n_failed: int,
    tracking_uri: str,
    timings: Mapping[str, float] | None = None,
    total: float | None = None,
    failed_label: str = "failed screens",
    sequential: list[str] | None = None,
) -> str:
    """The case's closing lines; `failed_label` names what `n_failed` counts (a table case drops rows,
    it screens nothing); `sequential`: a sequential case's record in words (looks, stop, both CIs),
    printed under the effects table, which is then the fixed-n analysis of the n used."""
    lines = [
        f"\n=== popfair case: {case_name} ===",
        f"applicants: {n_rows}   {failed_label}: {n_failed}",
        format_effects(effects),
        f"pattern: {effects.pattern}",
    ]
    if sequential:
        lines += [
            "(the table above is the estimator's own analysis of the n used, as if it had been fixed in advance, "
            "with its own CI (for the paired gap: a percentile bootstrap over postings); the 'fixed-n' line below "
            "is the sequential rule's t interval for its target at the same n: the two differ in method only, "
            "and neither is valid after looking, the anytime-valid CI is)",
            *sequential,
        ]
    if run_id:
        lines += [
            f"MLflow run id: {run_id}",
            f"open the UI:   mlflow ui --backend-store-uri {_as_typed(tracking_uri)}",
            f"the run:       {run_page(tracking_uri, run_id)}",
        ]
    if timings:
        lines.append(timing_line(timings, total))
    return "\n".join(lines)


MODEL_TRAINING = "workflowType=machine_learning"  # MLflow 3's Model training view, not its GenAI view


def ui_base(tracking_uri: str) -> str:
    """The MLflow UI's address: `mlflow ui`'s default for a local store, the server itself for http(s)."""
    from popfair.runtime.secrets import safe_url

    remote = tracking_uri.startswith(("http://", "https://"))
    return safe_url(tracking_uri).rstrip("/") if remote else "http://127.0.0.1:5000"


def run_page(tracking_uri: str, run_id: str, experiment_id: str | None = None) -> str:
    """The run's page in the MLflow UI, on the experiment's route in the Model training view
    (`#/experiments/<id>/runs/<run>?workflowType=machine_learning`), which shows the run's
    description (checked in chromium with MLflow 3.17: the bare `#/runs/<run>` route, and the
    experiment's route without the view, open the GenAI view in a fresh browser).
    `experiment_id`: default the one this process logged the run to."""
    from popfair.track.mlflow_tracker import EXPERIMENT_OF

    experiment_id = experiment_id or EXPERIMENT_OF.get(run_id)
    if experiment_id is None:  # a run logged elsewhere: MLflow finds its experiment
        return f"{ui_base(tracking_uri)}/#/runs/{run_id}?{MODEL_TRAINING}"
    return f"{ui_base(tracking_uri)}/#/experiments/{experiment_id}/runs/{run_id}?{MODEL_TRAINING}"


def compare_page(tracking_uri: str, run_ids: list[str], experiment_id: str) -> str:
    """MLflow's compare view of `run_ids` (a sweep's children): their parameters, metrics and charts."""
    import json
    from urllib.parse import quote

    runs, experiments = quote(json.dumps(list(run_ids))), quote(json.dumps([experiment_id]))
    return f"{ui_base(tracking_uri)}/#/compare-runs?runs={runs}&experiments={experiments}&{MODEL_TRAINING}"


def _as_typed(uri: str | None) -> str | None:
    """A sqlite store below this folder as the user types it (sqlite:///mlruns/mlflow.db): the tracker
    holds it absolute (popfair.track.mlflow_tracker.absolute_sqlite_uri), which works from anywhere
    but reads worse in the line a user copies from this folder."""
    if uri and uri.startswith("sqlite:////"):
        path = Path(uri.removeprefix("sqlite:///"))
        if path.is_relative_to(Path.cwd()):
            return f"sqlite:///{path.relative_to(Path.cwd())}"
    return uri
