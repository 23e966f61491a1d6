"""The table design (`experiment=table_audit`): decisions that already exist, nothing rendered or
screened. Its outcome is the table's decision column, and how a recorded value becomes y (binary,
label, score or rank) is its coding (`popfair.design.table.coding`); its estimators are those
registered for "table" (popfair.estimate.registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popfair.core.errors import ConfigError
from popfair.design.base import DesignBase


class TableDesign(DesignBase):
    name = "table"
    asks_screener = False

    def check_case(self, parts: Mapping[str, Any]) -> None:
        """The estimator takes recorded decisions (interventional effects need applicants to re-ask)."""
        if parts["estimator"].name not in self.estimators:
            raise ConfigError(
                f"estimator: {parts['estimator'].name} needs generated applicants; on a table choose one of "
                f"{list(self.estimators)}"
            )


DESIGN = TableDesign()
