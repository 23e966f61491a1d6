"""A previous run's results for the power plan (`plan.from_run`): its logged metrics, read from the
MLflow store by run id, or from a folder holding the run's effects.csv (an MLflow artifact folder or
one downloaded with `mlflow artifacts download`)."""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import pandas as pd

from popfair.core.errors import ConfigError
from popfair.design.base import PreviousRun
from popfair.runtime.secrets import safe_url


def _folder_metrics(folder: Path) -> dict[str, float] | None:
    """`<effect>.<column>` of every number in the folder's effects.csv (as MLflow logs them), and
    n_rows from its scored.parquet; None when the folder holds no effects.csv."""
    for where in (folder, folder / "artifacts"):
        effects = where / "effects.csv"
        if effects.is_file():
            break
    else:
        return None
    table = pd.read_csv(effects, index_col=0)
    metrics: dict[str, float] = {}
    for effect, row in table.iterrows():
        for column, value in row.items():
            number = pd.to_numeric(value, errors="coerce")
            if pd.notna(number) and math.isfinite(float(number)):
                metrics[f"{effect}.{column}"] = float(number)
    scored = where / "scored.parquet"
    if scored.is_file():
        import pyarrow.parquet as pq

        metrics["n_rows"] = float(pq.ParquetFile(scored).metadata.num_rows)
    return metrics


@lru_cache(maxsize=16)
def previous_run(reference: str, tracking_uri: str | None) -> PreviousRun:
    """The run `reference` names: a folder holding effects.csv, else an MLflow run id in `tracking_uri`.
    ConfigError (one line) when it is neither."""
    path = Path(reference).expanduser()
    if path.is_dir():
        metrics = _folder_metrics(path)
        if metrics is None:
            raise ConfigError(f"plan.from_run: the folder {reference} holds no effects.csv (nor artifacts/effects.csv)")
        return PreviousRun(f"the run in {reference}", metrics)
    if tracking_uri is None:
        raise ConfigError(
            f"plan.from_run: {reference!r} is not a folder, and tracking is off (tracking=none): no MLflow store to look in"
        )
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    try:
        run = MlflowClient(tracking_uri).get_run(reference)  # its tables hold what is not a metric
    except MlflowException as exc:
        raise ConfigError(
            f"plan.from_run: no run {reference!r} in the MLflow store {safe_url(tracking_uri)} "
            f"({str(exc).splitlines()[0][:120]}); give a run id from `mlflow ui` or a run's artifact folder"
        ) from None
    from popfair.track.headline import logged_metrics

    client = MlflowClient(tracking_uri)
    return PreviousRun(f"MLflow run {reference[:12]}", logged_metrics(client, run))
