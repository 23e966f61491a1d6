"""The protected attribute X and its two contrasted levels (config group `protected_attr`), and the
race groups a population may leave out (`select_races`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from popfair.core.errors import DataError, require
from popfair.core.race_coding import LL144_DISPLAY, LL144_FROM_RAC1P

WHITE_NONWHITE = "race_white_nonwhite"
# Values the profile columns take; positive effects favour x1, as in both papers.
LEVELS = {
    "gender": ("female", "male"),
    "race": ("black", "white", "hispanic", "api", "other"),
    # The PopResume authors' contrast (their IPUMS RACE coding, without Hispanic origin): White (ACS
    # RAC1P 1, Hispanic Whites included) against every other group pooled; AIAN and "some other race"
    # have no level (the authors drop them), so a population with this X leaves them out.
    WHITE_NONWHITE: ("nonwhite", "white"),
}
WHITE_NONWHITE_OF = {
    "white": "white",
    "black": "nonwhite",
    "asian": "nonwhite",
    "nhpi": "nonwhite",
    "two_or_more": "nonwhite",
}
RACE_GROUPS = tuple(dict.fromkeys(LL144_FROM_RAC1P.values()))  # what population.exclude_races may name
INTERVENABLE = ("gender", "race")  # attributes whose counterfactual worlds the SCM can draw


@dataclass(frozen=True)
class ProtectedAttribute:
    name: str
    x0: str
    x1: str

    def __post_init__(self) -> None:
        require(
            self.name in LEVELS,
            "protected_attr.name",
            f"unknown attribute {self.name!r}; choose one of {sorted(LEVELS)}",
        )
        allowed = LEVELS[self.name]
        for key, level in (("x0", self.x0), ("x1", self.x1)):
            require(
                level in allowed,
                f"protected_attr.{key}",
                f"{level!r} is not a level of {self.name}; choose one of {list(allowed)}",
            )
        require(self.x0 != self.x1, "protected_attr", "x0 and x1 must differ")


def select_races(
    table: pd.DataFrame, protected: ProtectedAttribute, exclude: Sequence[str]
) -> tuple[pd.DataFrame, list[str]]:
    """The applicants left after dropping the ACS race groups `exclude` (names of RACE_GROUPS, from the
    raw RAC1P code) and, for X = race_white_nonwhite, the groups it has no level for; that column is
    added. Returns the table and a note that counts what was left out (empty when nothing was)."""
    if not exclude and protected.name != WHITE_NONWHITE:
        return table, []
    if "rac1p" not in table.columns:
        raise DataError("population: excluding race groups needs the raw ACS race code column 'rac1p'")
    group = pd.to_numeric(table["rac1p"], errors="coerce").map(LL144_FROM_RAC1P)
    drop = group.isin(list(exclude)) | group.isna()
    if protected.name == WHITE_NONWHITE:
        coded = group.map(WHITE_NONWHITE_OF)
        drop |= coded.isna()
        table = table.assign(**{WHITE_NONWHITE: coded})
    counts = group[drop].fillna("unknown").value_counts()
    kept = table.loc[~drop]
    if not drop.any():
        return kept, []
    said = ", ".join(f"{n} {LL144_DISPLAY.get(g, g)}" for g, n in counts.items())
    why = f"population.exclude_races={list(exclude)}" if exclude else ""
    if protected.name == WHITE_NONWHITE:
        why += (
            "; " if why else ""
        ) + f"protected_attr={WHITE_NONWHITE} has no level for them (White vs non-White pooled)"
    return kept, [f"{int(drop.sum())} applicants excluded ({said}) of {len(table)}: {why}; {len(kept)} remain"]
