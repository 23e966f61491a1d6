"""Paired correspondence-audit populations (config `population=paired`, set with its design by the
presets `experiment=paired_race` / `experiment=paired_gender`).

For each posting and each of `pairs_per_posting` pair_ids one profile is drawn from the profile bank
(education, employment history, age; see `profile_bank`). Candidates are that profile with a
race- and gender-coded name, so the members of a pair differ only in first_name and surname
(and the X column naming the group the name signals).

- race axis: each (posting, pair_id) gets a gender (50/50) and two candidates, Black and White:
  pair_key = "<posting_id>:<pair_id>". 6,006 postings x 4 -> 24,024 pairs, 48,048 rows.
- gender axis: each (posting, pair_id) is crossed into four conditions (Black-male, Black-female,
  White-male, White-female); pairs are male vs female within posting x pair_id x race:
  pair_key = "<posting_id>:<pair_id>:<race>". 6,006 x 4 x 2 = 48,048 pairs, 96,096 rows.

Names: first names uniform within the race x gender cell of the union of the configured lists
(Bertrand & Mullainathan 2004; Kline, Rose & Walters 2022, from their replication data, see
data/audit/SOURCES.md); surnames uniform within race from the KRW list (B&M published none).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Interval, ListOf, Options, Rules, validate
from popfair.core.errors import ConfigError
from popfair.core.types import Profiles, Roles
from popfair.design.paired.design import AXES, check_postings_and_axis
from popfair.population import postings as postings_module
from popfair.population import profile_bank, scm
from popfair.population.cache import disk_cached_frame, file_fingerprint
from popfair.population.postings import audit_data_path
from popfair.population.profile_bank import N_PROFILE_STREAMS, PROFILE_FIELDS, build_profiles, pick_by_group
from popfair.population.protected import ProtectedAttribute
from popfair.population.scm import keyed_streams
from popfair.store.blobs import content_key

NAME_LISTS = {
    "bertrand_mullainathan_2004": "names_bertrand_mullainathan_2004.csv",
    "kline_rose_walters_2022": "names_kline_rose_walters_2022.csv",
}
SURNAMES = "surnames_kline_rose_walters_2022.csv"
NAME_FIELDS = ("first_name", "surname")


def load_name_pools(lists: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """First names keyed 'race|gender' (union of the lists, deduplicated) and surnames keyed by race."""
    first = pd.concat(
        [pd.read_csv(audit_data_path(NAME_LISTS[name]))[["first_name", "race", "gender"]] for name in lists]
    ).drop_duplicates()
    first_pools = {
        f"{race}|{gender}": np.sort(group["first_name"].to_numpy(dtype=object))
        for (race, gender), group in first.groupby(["race", "gender"])
    }
    last = pd.read_csv(audit_data_path(SURNAMES))
    last_pools = {race: np.sort(group["last_name"].to_numpy(dtype=object)) for race, group in last.groupby("race")}
    return first_pools, last_pools


def keep_names(pool: np.ndarray, n: int, cell: str) -> np.ndarray:
    """`n` first names of a race x gender cell's pool (`population.names_per_cell`): a fixed choice,
    by a hash of each name, so that a smaller count keeps a subset of a larger one's names."""
    if n > len(pool):
        raise ConfigError(
            f"population.names_per_cell: the name lists hold {len(pool)} first names in cell {cell.replace('|', ' ')}, "
            f"fewer than {n}; set at most {len(pool)} (or null: all), or use the ranking design's Census pools "
            "(population.names_per_group) for larger ones"
        )
    digests = [hashlib.blake2b(str(name).encode(), digest_size=8).digest() for name in pool]
    return np.sort(pool[np.argsort(digests, kind="stable")[:n]])


# (postings' digest, pairs per posting, seed) -> the pairs' profiles: the race and gender axes of a
# panel draw the same profiles, a sweep's cases one after the other; the last few are kept
_PAIR_PROFILES: dict[tuple[str, int, int], pd.DataFrame] = {}
_PAIR_PROFILES_KEPT = 4


def pair_profiles(postings: pd.DataFrame, k: int, seed: int) -> pd.DataFrame:
    """One profile per (posting, pair_id), with the pair's gender (`pair_gender`), in posting order.
    Kept per process for the same postings (by content), k and seed: callers copy rows out of it
    (`_cross`), never change it."""
    key = (content_key(postings), k, seed)
    if key not in _PAIR_PROFILES:
        slots = postings.loc[postings.index.repeat(k)].reset_index(drop=True)
        slots["pair_id"] = np.tile(np.arange(k), len(postings))
        # every draw is keyed by (pair, seed): a posting's pairs never depend on how many postings
        # or pairs there are, so a smaller audit is the start of a larger one (nested samples)
        pair = (slots["posting_id"] + ":" + slots["pair_id"].astype(str)).to_numpy(dtype=object)
        u = keyed_streams(pair, seed, "pair_profile", N_PROFILE_STREAMS + 1)
        profiles = build_profiles(slots, u[:N_PROFILE_STREAMS])
        base = pd.concat([slots[["posting_id", "pair_id"]], profiles], axis=1)
        base["pair_gender"] = np.where(u[N_PROFILE_STREAMS] < 0.5, "female", "male")
        while len(_PAIR_PROFILES) >= _PAIR_PROFILES_KEPT:
            del _PAIR_PROFILES[next(iter(_PAIR_PROFILES))]
        _PAIR_PROFILES[key] = base
    return _PAIR_PROFILES[key]


class PairedAuditPopulation:
    """Identical-profile pairs for the paired callback audit on one axis (race or gender)."""

    design = "paired"  # popfair.design.paired.design

    parameter_constraints: ClassVar[Rules] = {
        "axis": Options(sorted(AXES)),
        "pairs_per_posting": Interval(int, 1, None),
        "names_per_cell": [None, Interval(int, 1, None)],
        "name_lists": ListOf(
            Options(sorted(NAME_LISTS)), f"names of lists ({', '.join(sorted(NAME_LISTS))})", non_empty=True
        ),
    }

    def __init__(
        self,
        axis: str = "race",
        pairs_per_posting: int = 4,
        name_lists: Sequence[str] = ("bertrand_mullainathan_2004", "kline_rose_walters_2022"),
        names_per_cell: int | None = None,
    ) -> None:
        validate(
            self.parameter_constraints,
            {
                "axis": axis,
                "pairs_per_posting": pairs_per_posting,
                "name_lists": name_lists,
                "names_per_cell": names_per_cell,
            },
        )
        name_lists = list(name_lists)
        self.axis, self.pairs_per_posting, self.name_lists = axis, pairs_per_posting, name_lists
        self.first_pools, self.last_pools = load_name_pools(name_lists)
        self.names_per_cell = names_per_cell
        if names_per_cell is not None:
            self.first_pools = {cell: keep_names(pool, names_per_cell, cell) for cell, pool in self.first_pools.items()}
        # the data files a sample is drawn from (names, and the profile bank's firms and states)
        files = [NAME_LISTS[name] for name in name_lists] + [SURNAMES, *profile_bank.DATA_FILES]
        self._data_files = [(file, file_fingerprint(audit_data_path(file))) for file in files]

    def sample(self, occupation: Any, protected: ProtectedAttribute, seed: int) -> Profiles:
        """All candidate rows for every posting of `occupation` (an EntryLevelPostings)."""
        check_postings_and_axis(occupation, protected, self.axis)
        x0, x1 = AXES[self.axis]
        conditions: list[tuple[str, str | None]]  # (race, gender); None = the pair's own gender
        if self.axis == "race":
            conditions = [("black", None), ("white", None)]
        else:
            conditions = [(r, g) for r in ("black", "white") for g in ("male", "female")]
        # kept on disk (popfair.population.cache): drawing the 48,048 or 96,096 candidates of the
        # 6,006 postings takes about a second, reading them back a tenth of that; the key holds
        # everything they are drawn from and the source of the modules that draw them
        table = disk_cached_frame(
            f"paired_{self.axis}",
            [content_key(occupation.postings), self.pairs_per_posting, seed, self._data_files, self.names_per_cell],
            [sys.modules[__name__], profile_bank, scm, postings_module],
            lambda: self._cross(pair_profiles(occupation.postings, self.pairs_per_posting, seed), conditions, seed),
        )
        roles = Roles(
            x=self.axis,
            x0=x0,
            x1=x1,
            z=("gender",) if self.axis == "race" else ("race",),
            b=("edu_level", "exp_year"),
            r=NAME_FIELDS,
        )
        notes = list(occupation.notes)
        return Profiles(table=table, roles=roles, jobs=occupation.jobs, outcome="callback", notes=notes)

    def _cross(self, base: pd.DataFrame, conditions: list[tuple[str, str | None]], seed: int) -> pd.DataFrame:
        """Stack one copy of the base profiles per (race, gender) condition and draw the names.

        gender None = the pair's own gender (race axis: both members share it)."""
        n, m = len(base), len(conditions)
        table = base.loc[np.tile(np.arange(n), m)].reset_index(drop=True)  # condition-major
        table["race"] = np.repeat([r for r, _ in conditions], n)
        gender = np.repeat(np.array([g or "" for _, g in conditions], dtype=object), n)
        table["gender"] = np.where(gender == "", table["pair_gender"].to_numpy(dtype=object), gender)
        cell = (table["race"] + "|" + table["gender"]).to_numpy(dtype=object)
        member = (
            table["posting_id"]
            + ":"
            + table["pair_id"].astype(str)
            + ":"
            + pd.Series(np.repeat(np.arange(m), n)).astype(str)
        ).to_numpy(dtype=object)
        u = keyed_streams(member, seed, "pair_name", 2)
        table["first_name"] = pick_by_group(cell, self.first_pools, u[0])
        table["surname"] = pick_by_group(table["race"].to_numpy(dtype=object), self.last_pools, u[1])
        # Order rows posting, pair_id, condition so the members of a pair sit next to each other.
        table["_condition"] = np.repeat(np.arange(m), n)
        table = table.sort_values(["posting_id", "pair_id", "_condition"], kind="stable").reset_index(drop=True)
        pair = table["posting_id"] + ":" + table["pair_id"].astype(str)
        table["pair_key"] = pair if self.axis == "race" else pair + ":" + table["race"]
        table["applicant_id"] = pair + ":" + table["race"] + ":" + table["gender"]
        table["job_id"] = table["posting_id"]
        front = ["applicant_id", "job_id", "posting_id", "pair_id", "pair_key", "race", "gender", *NAME_FIELDS]
        return table[front + list(PROFILE_FIELDS)]
