"""Counterfactual worlds as a pipeline step: the population draws the worlds an estimator declared
(`popfair.core.types.WorldRequest`), so the pipeline renders and screens them with the factual
applicants (one plan, one response cache) and estimators stay functions of the scored table.

A population supports worlds by redrawing its applicants under interventions on X
(`CounterfactualPopulation.counterfactual`, PopResume's SCM with common random numbers)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

from popfair.core.errors import ConfigError
from popfair.core.types import WORLD, Profiles, WorldRequest
from popfair.population.base import Population
from popfair.population.occupation import Occupation
from popfair.population.protected import ProtectedAttribute
from popfair.population.scm import DRAW_TAG, IID_DRAW, keyed_uniforms


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


def sample_applicants(profiles: Profiles, request: WorldRequest) -> Profiles:
    """The applicants to intervene on: rows with X in {x0, x1}, `request.size` of them drawn without
    replacement, in their original order; all of them when n is None (and no fraction) or larger.
    A budget given as a fraction keeps at least MIN_PER_GROUP of each group (all of a smaller group):
    a small group's share of the sample would otherwise leave it too few to estimate within it (an
    explicit n is kept as given). Within a group the kept applicants are still a simple random
    sample (its first ones in the draw order).

    Nested: the n kept are the n with the smallest keyed uniform of (applicant_id, seed), so a
    larger `request.n` keeps every applicant a smaller one kept. When the population is itself a
    draw (`population.draw` tag: its rows are i.i.d. in draw order) they are its first n eligible
    rows instead, which also stays nested when population.n grows."""
    roles = profiles.roles
    rows = profiles.table[profiles.table[roles.x].isin([roles.x0, roles.x1])]
    n = request.size(len(rows))
    if n < len(rows):
        if profiles.tags.get(DRAW_TAG) == IID_DRAW:
            rank = np.arange(len(rows))
        else:
            u = keyed_uniforms(rows["applicant_id"], request.seed, "world_sample")
            rank = np.empty(len(rows), dtype=np.int64)
            rank[np.argsort(u, kind="stable")] = np.arange(len(rows))
        keep = rank < n
        group = rows[roles.x].to_numpy()
        for level in (roles.x0, roles.x1) if request.n is None else ():
            members = np.flatnonzero(group == level)
            first = members[np.argsort(rank[members], kind="stable")[:MIN_PER_GROUP]]
            keep[first] = True
        rows = rows[keep]
    return Profiles(table=rows, roles=roles, jobs=profiles.jobs, outcome=profiles.outcome)


def draw_worlds(population: CounterfactualPopulation, profiles: Profiles, request: WorldRequest) -> pd.DataFrame:
    """The sampled applicants in every world of `request`, world-major (all applicants of the first
    world, then the second, ...), with a `world` column; one seed for all worlds (common random
    numbers). Worlds that differ only in x_y share their B and R draws (the counterfactual contract
    sets only the X column to x_y), so four draws serve the five PSE worlds."""
    sampled = sample_applicants(profiles, request)
    roles = sampled.roles
    levels = (roles.x0, roles.x1)
    drawn: dict[tuple[int, int], pd.DataFrame] = {}
    tables = []
    for name, (x_y, x_b, x_r) in request.worlds.items():
        if (x_b, x_r) not in drawn:
            drawn[(x_b, x_r)] = population.counterfactual(sampled, levels[x_y], levels[x_b], levels[x_r], request.seed)
        tables.append(drawn[(x_b, x_r)].assign(**{roles.x: levels[x_y], WORLD: name}))
    return pd.concat(tables, ignore_index=True)
