"""The sweep report's provenance line and its one-row-per-case table (the parent run's `cases.json`)."""

from __future__ import annotations

import datetime as dt

import pandas as pd

from popfair.report import plots

CASE_KEYS = ["occupation", "protected_attr", "format", "model", "context", "variant"]


def provenance_line() -> str:
    """Which popfair wrote the report, from which commit, when (UTC)."""
    from popfair.runtime.version import __version__
    from popfair.track.mlflow_tracker import git_commit

    commit = git_commit()
    written = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"popfair {__version__}" + (f" (commit {commit[:12]})" if commit != "unknown" else "") + f", {written}."


def case_rows(pse: pd.DataFrame) -> pd.DataFrame:
    """One row per case (its run id, name, variant and unit) with every effect's estimate, CI and
    p-value as columns `<effect>.estimate` ...: the sweep parent's MLflow table, one frame to chart."""
    keys = [c for c in ("run_id", "case_name", *CASE_KEYS, "estimator", "unit") if c in pse]
    shown = pse.assign(**{c: pse[c].fillna("") for c in keys})
    shown = shown.assign(estimate=shown["estimate"].where(shown["identified"]))
    wide = shown.pivot_table(
        index=keys, columns="effect", values=["estimate", "ci_low", "ci_high", "p_value"], aggfunc="first", dropna=False
    )
    order = [e for e in plots.PSE_ORDER if e in set(pse["effect"])] + sorted(set(pse["effect"]) - set(plots.PSE_ORDER))
    columns = [(v, e) for e in order for v in ("estimate", "ci_low", "ci_high", "p_value") if (v, e) in wide.columns]
    wide = wide[columns]
    wide.columns = [f"{e}.{v}" for v, e in columns]
    return wide.reset_index().dropna(subset=[c for c in wide.columns if c.endswith(".estimate")], how="all")
