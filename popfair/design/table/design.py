"""The table design (`experiment=table_audit`): decisions that already exist, nothing rendered or
screened. Its outcome is the table's decision column, and how a recorded value becomes y (binary,
label, score or rank) is its coding (`popfair.design.table.coding`); its estimators are those
registered for "table" (popfair.estimate.registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popfair.design.base import DesignBase, PowerLine, check_estimator
from popfair.design.table import planning


class TableDesign(DesignBase):
    name = "table"
    asks_screener = False
    power_line: PowerLine | None = staticmethod(planning.table_power)
    power_imports: tuple[str, ...] = planning.POWER_IMPORTS

    def check_case(self, parts: Mapping[str, Any]) -> None:
        """The estimator takes recorded decisions (interventional effects need applicants to re-ask)."""
        check_estimator(self, parts["estimator"], why="it needs generated applicants to re-ask")


DESIGN = TableDesign()
