"""Read a sweep (or a whole MLflow experiment) back from MLflow as tidy tables.

One row per case run (`load_runs`) and one row per case x effect (`effects_long`): the report's
raw material. Works against any tracking URI (sqlite store or a running `mlflow server`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from popfair.core.errors import DataError
from popfair.report.run_page import not_identified_reasons
from popfair.track.headline import logged_metrics

PARENT_TAG = "popfair.sweep"  # set to "parent" on a sweep's parent run
CASE_COLUMNS = [
    "run_id",
    "status",
    "case_name",
    "occupation",
    "protected_attr",
    "format",
    "model",
    "screener",
    "estimator",
    "pattern",
    "release_date",
    "error",
    "design",  # "table" for the audit of an existing table (its own report section), else None
    "source",  # a table audit's file or query (tag table.source)
    "detects",  # the minimum detectable effect at the case's n, as shown (tag plan.detects; config plan.*)
    "units",  # what its n counts: applicants, pairs, trials, rows (tag plan.units)
    "unit",  # the unit of its effects: points, pp, ratio ... (tag unit)
    "context",  # the screener's context (config group context: none, company, anti_bias ...); "" for runs without
    "variant",  # the sweep's varying key=value overrides of the case (population.n=2000), "" when none
]


def variant_of(tags: dict[str, str]) -> str:
    """The case's values of the keys its sweep varies that are not group options (those are the
    occupation, format and model columns): `sweep.population.n` -> population.n=2000."""
    keys = sorted(k for k in tags if k.startswith("sweep.") and ("." in k[6:] or k[6:] == "seed"))
    return " ".join(f"{k[6:]}={tags[k]}" for k in keys)


def _all_runs(client, experiment_ids: list[str], filter_string: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def load_runs(tracking_uri: str, experiment_name: str | None = None, parent_run_id: str | None = None) -> pd.DataFrame:
    """Case runs of a sweep (children of `parent_run_id`) or of an experiment (all but parents).

    Columns: CASE_COLUMNS plus `metrics` (dict) and `stopped_by` (a sequential case's stop) for each run."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    client = MlflowClient(tracking_uri)
    if parent_run_id:
        try:
            parent = client.get_run(parent_run_id)
        except MlflowException as exc:
            raise DataError(f"no MLflow run {parent_run_id!r} at {tracking_uri}: {exc.message}") from None
        runs = _all_runs(client, [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'")
    else:
        experiment = client.get_experiment_by_name(experiment_name or "popfair")
        if experiment is None:
            raise DataError(f"no MLflow experiment {experiment_name!r} at {tracking_uri}")
        runs = [r for r in _all_runs(client, [experiment.experiment_id], "") if r.data.tags.get(PARENT_TAG) != "parent"]
    rows = []
    for run in runs:
        tags, params = run.data.tags, run.data.params
        rows.append(
            {
                "run_id": run.info.run_id,
                "status": run.info.status,
                "case_name": tags.get("case_name", run.info.run_name),
                "occupation": tags.get("occupation", params.get("occupation.key")),
                "protected_attr": tags.get("protected_attr", params.get("protected_attr.name")),
                "format": tags.get("choice.renderer", tags.get("renderer")),
                "model": tags.get("screener", params.get("screener.name")),
                "screener": tags.get("choice.screener", tags.get("screener")),
                "estimator": tags.get("estimator"),
                "pattern": tags.get("pattern", tags.get("case")),  # runs logged before the rename say "case"
                "release_date": params.get("screener.release_date"),
                "error": tags.get("error"),
                "design": tags.get("design"),
                "source": tags.get("table.source"),
                "detects": tags.get("plan.detects"),
                "units": tags.get("plan.units"),
                "unit": tags.get("unit"),
                "context": tags.get("context", ""),
                "variant": variant_of(tags),
                "metrics": logged_metrics(client, run),  # the headline metrics and the tables' cells
                "stopped_by": tags.get("sequential.stopped_by"),  # a sequential case: why it stopped
                "not_identified": not_identified_reasons(tags),
            }
        )
    return pd.DataFrame(rows, columns=CASE_COLUMNS + ["metrics", "stopped_by", "not_identified"])


def _ll144_rows(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """An impact_ratio run's ratios from its `ll144.<metric>.<dimension>.<category>.ratio|ci_low|ci_high`
    metrics, as effects `<metric>/<dimension>/<category>` (the estimate is the ratio)."""
    rows: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        parts = key.split(".")
        if len(parts) == 5 and parts[0] == "ll144" and parts[4] in ("ratio", "ci_low", "ci_high"):
            column = "estimate" if parts[4] == "ratio" else parts[4]
            rows.setdefault("/".join(parts[1:4]), {})[column] = value
    return rows


def effects_long(runs: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per finished case x effect, from the `<effect>.<column>` metrics of each run.

    `significant`: the estimator's own `significant` flag when it logs one (pse_dml: CI excludes 0),
    else p_value < alpha when it reports a p-value, else the CI excludes 0."""
    rows = []
    for run in runs[runs["status"] == "FINISHED"].itertuples(index=False):
        metrics: dict[str, float] = run.metrics
        fields = run._asdict()
        hidden = fields.get("not_identified") or {}  # not identified: a tag with the reason, no number
        # (runs logged before the tags: `<effect>.identified` = 0)
        effects = list(
            dict.fromkeys(
                [k.rsplit(".", 1)[0] for k in metrics if k.endswith(".estimate") or k.endswith(".identified")]
                + list(hidden)
            )
        )
        for effect in effects:
            values = {k[len(effect) + 1 :]: v for k, v in metrics.items() if k.startswith(effect + ".")}
            if effect in hidden:
                values["identified"] = 0.0
            row = {c: fields[c] for c in CASE_COLUMNS if c not in ("status", "error")}
            row.update(effect=effect, **values)
            rows.append(row)
        if run.estimator == "impact_ratio" and not effects:  # impact ratios are logged once, as ll144.*
            for effect, values in _ll144_rows(metrics).items():
                row = {c: fields[c] for c in CASE_COLUMNS if c not in ("status", "error")}
                row.update(effect=effect, **values)
                rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    for column in ("estimate", "se", "ci_low", "ci_high", "p_value"):
        if column not in table:
            table[column] = math.nan
    table["identified"] = (
        table["identified"].fillna(1).astype(bool) if "identified" in table else pd.Series(True, index=table.index)
    )
    by_ci = (table["ci_low"] > 0) | (table["ci_high"] < 0)
    computed = table["p_value"].lt(alpha).where(table["p_value"].notna(), by_ci).astype(bool)
    if "significant" in table:  # the estimator's own flag (a 0/1 metric) wins where it was logged
        own = table["significant"]
        table["significant"] = own.fillna(0).astype(bool).where(own.notna(), computed)
    else:
        table["significant"] = computed
    table["significant"] = table["significant"] & table["identified"]
    return table
