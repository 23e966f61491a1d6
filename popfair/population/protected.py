"""The protected attribute X and its two contrasted levels (config group `protected_attr`)."""

from __future__ import annotations

from dataclasses import dataclass

from popfair.core.errors import require

# Values the profile columns take; positive effects favour x1, as in both papers.
LEVELS = {
    "gender": ("female", "male"),
    "race": ("black", "white", "hispanic", "api", "other"),
}


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
