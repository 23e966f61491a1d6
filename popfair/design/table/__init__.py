"""The table design: audits of decisions that already exist, a table (CSV, Parquet, Excel, JSON lines,
or a database table or query) mapped to popfair's columns and categories (`experiment=table_audit`).

settings (the `table` config group) -> source (DuckDB relation of the mapped columns) -> mapped (coded
outcome, mapped categories, row problems; counts for LL144, the row frame for other estimators). The
case that runs the estimators on it is `popfair.case.table.TableCase`. Public names are imported on
first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "TableSettings": "popfair.design.table.settings",
    "MappedTable": "popfair.design.table.mapped",
    "TableCounts": "popfair.design.table.mapped",
    "TableSource": "popfair.design.table.mapped",
    "open_source": "popfair.design.table.source",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
