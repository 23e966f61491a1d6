"""Ranking trials (config `population=ranking`): each trial shows k candidates for one job, one per
sex x race/ethnicity group (default 8: White, Black, Hispanic, Asian/Pacific Islander x female, male),
with the same structured profile (age, state, education, years of experience: one draw of the
PopResume population of the occupation, `population.popresume`) and names that signal the group.

Order: the trials of a job run through the rows of a balanced Latin square (Williams design), so
every group is shown in every position equally often and follows every other group equally often;
`n_trials` a multiple of k (2k for odd k) balances them exactly. `order: random` draws a seeded
permutation per trial instead (balanced in expectation only).

Names: first names from the 2020 Census first-name table (share of the group's race/ethnicity
>= `min_name_share` and of its sex >= 0.95), surnames from the 2010 Census surname table (share of
the race/ethnicity >= `min_name_share`); the `names_per_group` most common of each pool; a trial
never repeats a first name or surname. `middle_initial: true` adds a random middle initial (the
parser matches names with or without it).

Resumes: the candidates of a trial share one resume. Besides the profile, the drawn content (city,
phone, employers, titles, bullets, schools) is seeded by `resume_id` = the trial, so the k documents
differ only in the name and the email address made from it."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Boolean, Interval, ListOf, Options, Rules, validate
from popfair.core.errors import ConfigError, DataError
from popfair.core.types import Profiles, Roles
from popfair.data import data_file
from popfair.estimate.ranking.model import williams_square
from popfair.population.occupation import Occupation
from popfair.population.popresume import PopResumePopulation
from popfair.population.protected import ProtectedAttribute
from popfair.population.scm import keyed_streams, keyed_uniforms

RACE_COLUMNS = {"white": "pctwhite", "black": "pctblack", "hispanic": "pcthispanic", "api": "pctapi"}
DEFAULT_GROUPS = tuple(f"{race} {sex}" for race in RACE_COLUMNS for sex in ("female", "male"))
ORDERS = ("latin_square", "random")
GROUP = "group"  # column: "<race> <gender>" of the name a candidate carries
TRIAL = "trial_id"
POSITION = "position"  # 1-based place in the order the candidates are shown


@lru_cache(maxsize=8)
def name_pools(min_share: float, per_group: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """First names keyed '<race> <gender>' and surnames keyed by race, title-cased, most common first."""
    first = pd.read_parquet(data_file("names", "census_2020_first_names.parquet"))
    last = pd.read_parquet(data_file("names", "census_2010_surnames.parquet"))
    last = last[last["name"].str.fullmatch(r"[A-Z][A-Z'\-]+", na=False)]  # drops "ALL OTHER NAMES"
    first_pools, last_pools = {}, {}
    for race, column in RACE_COLUMNS.items():
        for sex in ("female", "male"):
            keep = (first[column] >= 100 * min_share) & (first[f"pct{sex}"] >= 95)
            top = first[keep].nlargest(per_group, "count")["name"].str.title()
            first_pools[f"{race} {sex}"] = top.to_numpy(dtype=object)
        top = last[last[column] >= 100 * min_share].nlargest(per_group, "count")["name"].str.title()
        last_pools[race] = top.to_numpy(dtype=object)
    for key, pool in [*first_pools.items(), *last_pools.items()]:
        if len(pool) < 2:
            raise DataError(f"population.min_name_share: only {len(pool)} names for {key}; lower the share")
    return first_pools, last_pools


class RankingTrials:
    """k candidates per trial, identical profiles, group-signalling names, counterbalanced order."""

    design = "ranking"  # popfair.design.ranking
    parameter_constraints: ClassVar[Rules] = {
        "n_trials": Interval(int, 1, 1_000_000),
        "groups": ListOf(Options(list(DEFAULT_GROUPS)), "'<race> <sex>' groups", non_empty=True),
        "order": Options(ORDERS),
        "min_name_share": Interval(float, 0.5, 1.0),
        "names_per_group": Interval(int, 2, 1000),
        "middle_initial": Boolean(),
    }

    def __init__(
        self,
        n_trials: int = 1000,
        groups: Sequence[str] = DEFAULT_GROUPS,
        order: str = "latin_square",
        min_name_share: float = 0.75,
        names_per_group: int = 20,
        middle_initial: bool = False,
        profiles: dict[str, Any] | None = None,
    ) -> None:
        groups = list(groups)
        validate(
            self.parameter_constraints,
            {
                "n_trials": n_trials,
                "groups": groups,
                "order": order,
                "min_name_share": min_name_share,
                "names_per_group": names_per_group,
                "middle_initial": middle_initial,
            },
        )
        if len(set(groups)) != len(groups) or len(groups) < 2:
            raise ConfigError(f"population.groups: need at least 2 distinct groups, got {groups}")
        self.n_trials, self.groups, self.order = n_trials, groups, order
        self.min_name_share, self.names_per_group, self.middle_initial = min_name_share, names_per_group, middle_initial
        # the structured profile each trial shares: one PopResume applicant (population.profiles: its settings)
        self.profiles = PopResumePopulation(**{"diagnostics": False, **dict(profiles or {}), "n": n_trials})

    @property
    def k(self) -> int:
        return len(self.groups)

    def orders(self, trials: np.ndarray, seed: int) -> np.ndarray:
        """(n_trials, k): the group index shown at each position of each trial (`trials`: their ids)."""
        if self.order == "random":
            return np.argsort(keyed_streams(trials, seed, "trial_order", self.k).T, axis=1)
        square = williams_square(self.k)
        return square[np.arange(self.n_trials) % len(square)]

    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        if not isinstance(occupation, Occupation):
            raise ConfigError(
                "occupation: the ranking design draws its profiles from an occupation's population "
                f"(occupation=nurse|teacher|software_developer|accountant|construction_laborer), got "
                f"{type(occupation).__name__}"
            )
        base = self.profiles.sample(occupation, protected, seed)
        # every draw is keyed by (trial id, seed): n trials are the first n of any larger n_trials
        k, n = self.k, self.n_trials
        trials = np.array([f"{occupation.key}-{t:06d}" for t in range(n)], dtype=object)
        orders = self.orders(trials, seed)
        group = np.array(self.groups, dtype=object)[orders.ravel()]
        race = np.array([g.split(" ")[0] for g in self.groups], dtype=object)[orders.ravel()]
        gender = np.array([g.split(" ")[1] for g in self.groups], dtype=object)[orders.ravel()]
        first_pools, last_pools = name_pools(self.min_name_share, self.names_per_group)
        first = _distinct_draws(group.reshape(n, k), first_pools, trials, seed, "first")
        last = _distinct_draws(race.reshape(n, k), last_pools, trials, seed, "last")
        trial = np.repeat(trials, k).astype(object)
        position = np.tile(np.arange(1, k + 1), n)
        if self.middle_initial:
            u = keyed_uniforms(trial + ":" + position.astype(str), seed, "middle_initial")
            initials = np.array(list("ABCDEFGHJKLMNPRSTW"), dtype=object)[np.minimum((u * 18).astype(int), 17)]
            first = first + " " + initials + "."
        shared = base.table.drop(columns=["applicant_id", "gender", "race", "first_name", "surname"], errors="ignore")
        shared = shared.loc[shared.index.repeat(k)].reset_index(drop=True)
        table = pd.DataFrame(
            {
                "applicant_id": trial + ":" + position.astype(str),
                "resume_id": trial,  # the candidates' resumes are drawn alike: only the names differ
                "job_id": occupation.key,
                TRIAL: trial,
                POSITION: position,
                GROUP: group,
                "race": race,
                "gender": gender,
                "first_name": first,
                "surname": last,
            }
        )
        table = pd.concat([table, shared.drop(columns=["job_id"], errors="ignore")], axis=1)
        notes = [note for note in base.notes if not note.startswith("population.table3")]
        if self.order == "latin_square" and n % len(williams_square(k)):
            notes.append(
                f"population.n_trials={n} is not a multiple of {len(williams_square(k))}: positions are "
                "balanced over whole Latin squares only"
            )
        roles = Roles(
            x=protected.name,
            x0=protected.x0,
            x1=protected.x1,
            z=(),
            b=("edu_level", "exp_year"),
            r=("first_name", "surname"),
        )
        return Profiles(
            table=table, roles=roles, jobs={occupation.key: occupation.job}, outcome="rank", notes=notes, tags=base.tags
        )


def _distinct_draws(
    keys: np.ndarray, pools: dict[str, np.ndarray], trials: np.ndarray, seed: int, stream: str
) -> np.ndarray:
    """One name per cell of `keys` (n, k) from the pool of its key, no name twice within a row: cells
    sharing a pool in a row get distinct names (consecutive pool names from a start keyed by
    (trial id, pool, seed), so a trial's names never depend on the other trials)."""
    n, k = keys.shape
    out = np.empty((n, k), dtype=object)
    for key, pool in pools.items():
        rows, cols = np.nonzero(keys == key)
        if not len(rows):
            continue
        # rank of each cell among the cells of its row with the same key (0, 1, ...): consecutive pool
        # names from a random start per row
        starts = np.r_[0, np.flatnonzero(np.diff(rows)) + 1]  # np.nonzero lists cells row by row
        first_of_row = np.repeat(starts, np.diff(np.r_[starts, len(rows)]))
        rank = np.arange(len(rows)) - first_of_row
        if rank.max() >= len(pool):
            raise DataError(f"population.names_per_group: {len(pool)} names for {key} cannot fill a trial")
        start = keyed_uniforms(trials[rows[first_of_row]], seed, f"{stream}|{key}")
        offset = np.minimum((start * len(pool)).astype(int), len(pool) - 1)
        out[rows, cols] = pool[(offset + rank) % len(pool)]
    return out.ravel()
