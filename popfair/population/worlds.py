"""Counterfactual worlds as a pipeline step: the population draws the worlds an estimator declared
(`popfair.core.types.WorldRequest`), so the pipeline renders and screens them with the factual
applicants (one plan, one response cache) and estimators stay functions of the scored table.

A population supports worlds by redrawing its applicants under interventions on X
(`CounterfactualPopulation.counterfactual`, PopResume's SCM with common random numbers)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import WORLD, Profiles, WorldRequest, redraw_world
from popfair.population.base import Population
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute
from popfair.population.scm import keyed_uniforms


@runtime_checkable
class CounterfactualPopulation(Protocol):
    """A population that can redraw its applicants under interventions on X (PopResume)."""

    def counterfactual(self, profiles: Profiles, x_y: str, x_b: str, x_r: str, seed: int) -> pd.DataFrame:
        """`profiles.table`'s applicants, in order, with B drawn under X = x_b, R under X = x_r and the
        X column set to x_y, all noise fixed by `seed` (the same seed gives common random numbers)."""
        ...


def check_request(population: Population, request: WorldRequest | None, key: str = "estimator") -> None:
    """ConfigError before any work when the estimator declares worlds the population cannot draw."""
    if request is not None and not isinstance(population, CounterfactualPopulation):
        raise ConfigError(
            f"{key}: needs counterfactual worlds (the interventional estimator), which only a "
            f"population with counterfactual draws provides (population=popresume); "
            f"{type(population).__name__} has none"
        )


def sample(
    population: Population,
    occupation: Occupation,
    protected: ProtectedAttribute,
    seed: int,
    request: WorldRequest | None = None,
) -> Profiles:
    """The population stage: applicants, plus the worlds `request` asks for (in `Profiles.worlds`)."""
    profiles = population.sample(occupation, protected, seed)
    if request is not None:
        check_request(population, request)
        profiles.worlds = draw_worlds(population, profiles, request)  # type: ignore[arg-type]
    return profiles


MIN_PER_GROUP = 20  # per group at least (all of a smaller one): the design estimates within groups, and its
# working model needs 20 applicants of a group (estimate/pse/design_based.MIN_MODEL_ROWS)
REDRAW_SHARE = 0.1  # the redraw subsample: this share of each group's sample, at least `WorldRequest.redraw`


def _ranks(rows: pd.DataFrame, seed: int) -> np.ndarray:
    """Each row's place in the keyed order of the world sample: the rank of its keyed uniform of
    (applicant_id, seed). The same order in every population kind (every record once, or
    `population.n` weighted draws), so the sample follows `estimator.seed` and is nested."""
    u = keyed_uniforms(rows["applicant_id"], seed, "world_sample")
    rank = np.empty(len(rows), dtype=np.int64)
    rank[np.argsort(u, kind="stable")] = np.arange(len(rows))
    return rank


def sample_applicants(profiles: Profiles, request: WorldRequest) -> Profiles:
    """The applicants to intervene on: rows with X in {x0, x1}, `request.size` of them drawn without
    replacement, in their original order; all of them when n is None (and no fraction) or larger.
    A budget given as a fraction keeps at least MIN_PER_GROUP of each group (all of a smaller group):
    a small group's share of the sample would otherwise leave it too few to estimate within it (an
    explicit n is kept as given). Within a group the kept applicants are still a simple random
    sample (its first ones in the keyed order).

    Nested: the n kept are the n with the smallest keyed uniform of (applicant_id, seed), so a
    larger `request.n` keeps every applicant a smaller one kept, and another seed draws another
    sample, in every population kind (`population.n` draws included)."""
    roles = profiles.roles
    rows = profiles.table[profiles.table[roles.x].isin([roles.x0, roles.x1])]
    n = request.size(len(rows))
    if n < len(rows):
        rank = _ranks(rows, request.seed)
        keep = rank < n
        group = rows[roles.x].to_numpy()
        for level in (roles.x0, roles.x1) if request.n is None else ():
            members = np.flatnonzero(group == level)
            first = members[np.argsort(rank[members], kind="stable")[:MIN_PER_GROUP]]
            keep[first] = True
        rows = rows[keep]
    return Profiles(table=rows, roles=roles, jobs=profiles.jobs, outcome=profiles.outcome)


def redraw_sizes(sampled: dict[str, int], minimum: int) -> dict[str, int]:
    """Per group, how many of its sampled applicants get the second set of worlds: REDRAW_SHARE of
    them, at least `minimum`, at most all of them."""
    return {g: min(n, max(minimum, math.ceil(REDRAW_SHARE * n))) for g, n in sampled.items()}


def redraw_applicants(sampled: Profiles, request: WorldRequest) -> Profiles:
    """The redraw subsample of the sampled applicants: per group its first `redraw_sizes` in the
    world sample's keyed order, so it is itself a simple random sample of the group, nested in the
    sample and growing with it."""
    roles, rows = sampled.roles, sampled.table
    rank = _ranks(rows, request.seed)
    group = rows[roles.x].astype(str).to_numpy()
    levels = [str(roles.x0), str(roles.x1)]
    sizes = redraw_sizes({g: int((group == g).sum()) for g in levels}, request.redraw)
    keep = np.zeros(len(rows), bool)
    for level in levels:
        members = np.flatnonzero(group == level)
        keep[members[np.argsort(rank[members], kind="stable")[: sizes[level]]]] = True
    return Profiles(table=rows[keep], roles=roles, jobs=sampled.jobs, outcome=sampled.outcome)


def redraw_seed(seed: int) -> int:
    """The seed of the second, independent set of worlds: a hash of `seed`, so it is no other run's
    `estimator.seed` in practice."""
    return int(keyed_uniforms(np.array(["redraw"]), seed, "redraw_seed")[0] * 2**31)


def draw_worlds(population: CounterfactualPopulation, profiles: Profiles, request: WorldRequest) -> pd.DataFrame:
    """The sampled applicants in every world of `request`, world-major (all applicants of the first
    world, then the second, ...), with a `world` column; one seed for all worlds (common random
    numbers). Worlds that differ only in x_y share their B and R draws (the counterfactual contract
    sets only the X column to x_y), so four draws serve the five PSE worlds. With `request.redraw`,
    then the redraw subsample (`redraw_applicants`) in every world again, drawn with another seed
    (`redraw_seed`), named `redraw_world(name)`."""
    sampled = sample_applicants(profiles, request)
    tables = _worlds(population, sampled, request.worlds, request.seed)
    if request.redraw:
        again = _worlds(population, redraw_applicants(sampled, request), request.worlds, redraw_seed(request.seed))
        tables += [table.assign(**{WORLD: table[WORLD].map(redraw_world)}) for table in again]
    return pd.concat(tables, ignore_index=True)


def _worlds(
    population: CounterfactualPopulation, sampled: Profiles, worlds: Mapping[str, tuple[int, int, int]], seed: int
) -> list[pd.DataFrame]:
    roles = sampled.roles
    levels = (roles.x0, roles.x1)
    drawn: dict[tuple[int, int], pd.DataFrame] = {}
    tables = []
    for name, (x_y, x_b, x_r) in worlds.items():
        if (x_b, x_r) not in drawn:
            drawn[(x_b, x_r)] = population.counterfactual(sampled, levels[x_y], levels[x_b], levels[x_r], seed)
        tables.append(drawn[(x_b, x_r)].assign(**{roles.x: levels[x_y], WORLD: name}))
    return tables
