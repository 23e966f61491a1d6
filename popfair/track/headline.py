"""Which numbers a run logs as MLflow metrics, and where the others go.

MLflow's run list, chart view and compare view work on metrics: a run with 300 of them buries the
few people sort and chart audits by. A run therefore logs at most `MAX_METRICS` metrics, the
*headline*: per effect its estimate, CI and p-value (the population design's TE, NDE, NIE, BIE,
RIE; the paired design's gap; the ranking design's impact ratios and top-1 shares; a table audit's
lowest impact ratio per metric and dimension, its CI and whether its flag survives), plus the
screening calls, their cost, the applicants (rows) and the run's total time. Every other number is
a cell of an MLflow table (`mlflow.log_table`), one row per effect, category or diagnostic:

- `effects_table.json`: every column of effects.csv, one row per effect (logged by the case);
- `metrics/<group>.json`: the other metrics, grouped by their first name segment (`ll144`, `pse`,
  `counterfactual`, `plan`, `time`, `screen`, ...), one row per what the middle segments name
  (an LL144 category `selection.race.black`, a diagnostic `ess`), one column per last segment;
- `metrics/steps.json`: metrics with a history (a table's periods), one row per step and name, but
  for the lowest impact ratio per period, metric and dimension, which stays a metric with a history.

`mlflow.load_table("metrics/ll144.json", run_ids=..., extra_columns=["run_id"])` gives one frame
across runs; `restore` turns a run's tables back into the flat `<name>: value` metrics."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_METRICS = 40
METRICS_FOLDER = "metrics"
STEPS_TABLE = f"{METRICS_FOLDER}/steps.json"
ROW = "row"  # the column naming a table's row (the middle segments of the metric names)
OWN_GROUP = "run"  # the table of one-segment names (n_rows, failure_rate)
COMPOUND_FIELDS = ("given_reference",)  # a field of two segments: `<category>.given_reference.fisher_p`

# Always headline when logged: the applicants or rows, the calls, their cost and the run's time;
# a sequential case's stop (anytime-valid CI, what it used, what it saved); a watch's look.
BASE = (
    "n_rows",
    "screen.requests",
    "screen.cost_usd",
    "screen.noise_share",  # the screener's own noise (screener.samples > 1) and its determinism check
    "screen.flip_rate",
    "served.prefix_cache_hit_rate",  # route=local: how much of the shared prompt prefix the engine reused
    "time.total_s",
    "sequential.anytime_estimate",
    "sequential.anytime_low",
    "sequential.anytime_high",
    "sequential.n_used",
    "sequential.saved_share",
    "watch.look",
    "watch.rows_new",
    "watch.n_crossed",
)
# Per effect family, in order: the effect names' pattern and the columns that are headline.
EFFECT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"TE|NDE|NIE|BIE|RIE", ("estimate", "ci_low", "ci_high", "p_value")),
    (r"gap(\.[^.]+)?", ("estimate", "ci_low", "ci_high", "mcnemar_p", "cluster_p")),
    # the ranking design: an impact ratio's upper bound is 1 by construction (the top group is the
    # reference), so it is in the table only; the top-1 shares' CIs and tests too
    (r"impact_ratio\.[^.]+", ("estimate", "ci_low", "p_value")),
    (r"top1\.[^.]+", ("estimate",)),
)
# A table audit (effects `<metric>/<dimension>/<category>`): per metric and dimension.
LL144_FIELDS = ("min_ratio", "min_ratio_ci_low", "min_ratio_ci_high", "min_ratio_flag_survives", "p_value")
_LL144_BLOCK = re.compile(r"ll144\.[^.]+\.[^.]+\.(" + "|".join(LL144_FIELDS) + ")")


def headline_names(metrics: Mapping[str, float], effects: Mapping[str, Iterable[str]]) -> list[str]:
    """The names of `metrics` logged as metrics, in order, at most MAX_METRICS: BASE, then each
    effect family's headline columns, or a table audit's LL144 blocks where no effect family is."""
    chosen = [name for name in BASE if name in metrics]
    found_effect = False
    for pattern, fields in EFFECT_FIELDS:
        matcher = re.compile(pattern)
        for effect in effects:
            if matcher.fullmatch(effect):
                found_effect = True
                chosen += [f"{effect}.{f}" for f in fields if f"{effect}.{f}" in metrics]
    if not found_effect:
        chosen += [name for name in metrics if _LL144_BLOCK.fullmatch(name)]
    return list(dict.fromkeys(chosen))[:MAX_METRICS]


# Metrics with a history (one step per period of a table, per look of a watch) that stay metrics,
# so the run page charts their trend: the lowest impact ratio per metric and dimension, the rows,
# a watch's alert. The others are rows of `metrics/steps.json`.
_HEADLINE_STEPS = re.compile(r"period\.[^.]+\.[^.]+\.min_ratio|period\.n_applicants|watch\.[^.]+")


def split_steps(
    steps: Sequence[tuple[int, int, Mapping[str, float]]], room: int
) -> tuple[list[tuple[int, int, dict[str, float]]], list[tuple[int, int, dict[str, float]]]]:
    """(steps logged as metrics, steps for the table): the headline step names while at most `room`
    names fit, in order of first appearance; all of them to the table when they do not."""
    names = list(dict.fromkeys(n for _, _, values in steps for n in values if _HEADLINE_STEPS.fullmatch(n)))
    kept = set(names) if len(names) <= room else set()
    top = [(step, stamp, {k: v for k, v in values.items() if k in kept}) for step, stamp, values in steps]
    rest = [(step, stamp, {k: v for k, v in values.items() if k not in kept}) for step, stamp, values in steps]
    return [s for s in top if s[2]], [s for s in rest if s[2]]


def split_name(name: str) -> tuple[str, str, str]:
    """A metric name as (group, row, field): `ll144.selection.race.black.ratio` -> ("ll144",
    "selection.race.black", "ratio"); `plan.n` -> ("plan", "", "n"); `n_failed` -> ("run", "", "n_failed")."""
    parts = name.split(".")
    if len(parts) == 1:
        return OWN_GROUP, "", name
    group, rest = parts[0], parts[1:]
    if len(rest) >= 3 and rest[-2] in COMPOUND_FIELDS:
        return group, ".".join(rest[:-2]), ".".join(rest[-2:])
    return group, ".".join(rest[:-1]), rest[-1]


def join_name(group: str, row: str, field: str) -> str:
    """The inverse of `split_name`."""
    if group == OWN_GROUP and not row:
        return field
    return ".".join(part for part in (group, row, field) if part)


def _frame(rows: Mapping[str, Mapping[str, float]]) -> Any:
    import pandas as pd

    table = pd.DataFrame([{ROW: row, **values} for row, values in rows.items()])
    return table.astype(object).where(table.notna(), None)  # missing cells are null in the JSON, not NaN


def tables_of(rest: Mapping[str, float]) -> dict[str, Any]:
    """Metrics that are not headline as MLflow tables, artifact file -> DataFrame (see the module)."""
    grouped: dict[str, dict[str, dict[str, float]]] = {}
    for name, value in rest.items():
        group, row, field = split_name(name)
        grouped.setdefault(group, {}).setdefault(row, {})[field] = float(value)
    return {f"{METRICS_FOLDER}/{group}.json": _frame(rows) for group, rows in sorted(grouped.items())}


def steps_table(steps: Sequence[tuple[int, int, Mapping[str, float]]]) -> Any:
    """Metrics with a history as one table: a row per step and name (step, timestamp, name, value)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"step": step, "timestamp": stamp, "name": name, "value": float(value)}
            for step, stamp, values in steps
            for name, value in values.items()
        ],
        columns=["step", "timestamp", "name", "value"],
    )


def in_effects_table(name: str, effects: Mapping[str, Iterable[str]]) -> bool:
    """Whether `name` is `<effect>.<column>` of a cell of the run's effects table."""
    for effect, columns in effects.items():
        if name.startswith(effect + ".") and name[len(effect) + 1 :] in columns:
            return True
    return False


def split(
    metrics: Mapping[str, float], effects: Mapping[str, Iterable[str]]
) -> tuple[dict[str, float], dict[str, Any]]:
    """(headline metrics, tables): `effects` maps each effect of the run's effects table to its
    columns; a number that is a cell of that table is not repeated in another. A run without an
    effects table (not a case's) logs its metrics as they are while they fit."""
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    if not effects and len(finite) <= MAX_METRICS:  # not a case's run (no effects table): all fit as they are
        return finite, {}
    names = headline_names(finite, effects)
    headline = {name: finite[name] for name in names}
    rest = {k: v for k, v in finite.items() if k not in headline and not in_effects_table(k, effects)}
    return headline, tables_of(rest)


def restore(tables: Mapping[str, Any], effects: Any = None) -> dict[str, float]:
    """A run's flat metrics from its `metrics/<group>.json` tables (artifact file -> DataFrame) and
    its effects table (`<effect>.<column>` of every number); the headline metrics are added by the caller."""
    out: dict[str, float] = {}
    for file, table in tables.items():
        if not (file.startswith(f"{METRICS_FOLDER}/") and file.endswith(".json")) or file == STEPS_TABLE:
            continue
        group = file[len(METRICS_FOLDER) + 1 : -len(".json")]
        for record in table.to_dict("records"):
            row = str(record.pop(ROW, "") or "")
            for field, value in record.items():
                number = _number(value)
                if number is not None:
                    out[join_name(group, row, str(field))] = number
    if effects is not None and len(effects):
        for record in effects.to_dict("records"):
            effect = record.pop("effect")
            gated = record.get("identified") is False  # as the case logs it: only what was measured beside it
            for column, value in record.items():
                number = _number(value)
                if number is not None and column != "identified" and not (gated and not column.startswith("intv_")):
                    out[f"{effect}.{column}"] = number
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(float(value)):
        return float(value)
    return None


def logged_metrics(client: Any, run: Any) -> dict[str, float]:
    """Every number a run logged, as flat metrics: its headline metrics, then its tables' cells
    (runs logged before the tables: their metrics alone)."""
    import json
    import tempfile
    from pathlib import Path

    import pandas as pd

    metrics = dict(run.data.metrics)
    run_id = run.info.run_id
    try:
        files = [f.path for f in client.list_artifacts(run_id, METRICS_FOLDER)]
        files += [f.path for f in client.list_artifacts(run_id) if f.path == "effects_table.json"]
    except Exception:  # noqa: BLE001 - an artifact store that cannot be listed: the metrics alone
        return metrics
    if not files:
        return metrics
    from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR

    tables: dict[str, Any] = {}
    shown = os.environ.get(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name)
    os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name] = "false"  # one bar per table would flood the console
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for file in files:
                try:
                    local = client.download_artifacts(run_id, file, tmp)
                    data = json.loads(Path(local).read_text())
                    tables[file] = pd.DataFrame(data["data"], columns=data["columns"])
                except Exception:  # noqa: BLE001 - a table that cannot be read: the others still count
                    continue
    finally:
        if shown is None:
            os.environ.pop(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name, None)
        else:
            os.environ[MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name] = shown
    effects = tables.pop("effects_table.json", None)
    return {**restore(tables, effects), **metrics}


def search_logged_runs(*args: Any, **kwargs: Any) -> Any:
    """`mlflow.search_runs` (same arguments, pandas output) with every number each run logged as a
    `metrics.<name>` column: its headline metrics and its tables' cells (`logged_metrics`), so a
    frame across runs holds what the run list leaves out (`screen.answered`, `ll144.*`, ...)."""
    import mlflow
    import pandas as pd

    runs = mlflow.search_runs(*args, **kwargs)
    if runs.empty:
        return runs
    client = mlflow.MlflowClient()
    logged = pd.DataFrame(
        [{f"metrics.{k}": v for k, v in logged_metrics(client, client.get_run(r)).items()} for r in runs["run_id"]],
        index=runs.index,
    )
    return pd.concat([runs.drop(columns=[c for c in logged.columns if c in runs]), logged], axis=1)
