"""The paired design: what the screener is asked (a one-word yes/no callback), how the reply is read,
which estimators apply, and the checks tying the case's groups to the design.

Reply rule: the first occurrence of "yes" or "no" (the callback paper's rule; popfair matches whole
words in any case); anything else is a recorded parse failure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from popfair.core.errors import ConfigError
from popfair.core.types import Outcome
from popfair.design.base import OnePromptPerDocument, PowerLine, check_estimator
from popfair.design.paired import planning
from popfair.design.sequential import SequentialRules
from popfair.population.postings import EntryLevelPostings

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
AXES = {"race": ("black", "white"), "gender": ("female", "male")}  # axis -> (x0, x1)


class PairedDesign(OnePromptPerDocument):
    name = "paired"
    outcome: Outcome = "callback"
    prompt_files: Mapping[str, str] = {"system": "callback_system.txt", "user": "callback_user.txt"}
    power_line: PowerLine | None = staticmethod(planning.paired_power)
    power_imports: tuple[str, ...] = planning.POWER_IMPORTS
    sequential: SequentialRules | None = planning.PairedLooks()

    def parse_reply(self, raw: str) -> tuple[float | None, str | None]:
        match = _YES_NO.search(raw)
        if match is None:
            return None, "unparseable answer: no 'yes' or 'no' in the reply"
        return (1.0 if match.group(1).lower() == "yes" else 0.0), None

    def check_case(self, parts: Mapping[str, Any]) -> None:
        check_postings_and_axis(parts["occupation"], parts["protected_attr"], parts["population"].axis)
        check_estimator(self, parts["estimator"])


def check_postings_and_axis(occupation: Any, protected: Any, axis: str) -> None:
    """The paired design needs a set of postings and the protected attribute of its own axis."""
    if not isinstance(occupation, EntryLevelPostings):
        raise ConfigError(
            f"population: the paired audit needs occupation=entry_level_postings "
            f"(a set of postings), got {type(occupation).__name__}; "
            f"experiment=paired_{axis} sets the whole design"
        )
    x0, x1 = AXES[axis]
    if (protected.name, protected.x0, protected.x1) != (axis, x0, x1):
        raise ConfigError(
            f"protected_attr: population=paired_{axis} contrasts {axis} "
            f"(x0={x0}, x1={x1}); set protected_attr={axis}, got "
            f"{protected.name} (x0={protected.x0}, x1={protected.x1}); experiment=paired_{axis} "
            "sets the whole design"
        )


DESIGN = PairedDesign()
