"""Audits of decisions that already exist: a table (CSV, Parquet, Excel, JSON lines, or a database table
or query) as the source of a case, mapped to popfair's columns and categories (`experiment=table_audit`).

settings (the `table` config group) -> source (DuckDB relation of the mapped columns) -> mapped (coded
outcome, mapped categories, row problems; counts for LL144, the row frame for other estimators) -> case
(estimator, MLflow run). Public names are imported on first use (`popfair._lazy`)."""

from __future__ import annotations

from popfair._lazy import lazy_exports

_EXPORTS = {
    "TableCase": "popfair.table.case",
    "TableRunResult": "popfair.table.case",
    "TableSettings": "popfair.table.settings",
    "MappedTable": "popfair.table.mapped",
    "TableCounts": "popfair.table.mapped",
    "TableSource": "popfair.table.mapped",
    "open_source": "popfair.table.source",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
