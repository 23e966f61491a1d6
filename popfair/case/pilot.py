"""A pilot for the power line of a screener that costs nothing to ask.

Before any answer, a dry run (and `popfair doctor`) can only assume a score SD (a quarter of the
screener's declared range: 25 points on 0-100) and one applicant's world scores uncorrelated. For
the default case that overstated the counterfactual design's MDE about 300-fold: TF-IDF scores
spread over a few hundredths of a point, and an applicant's five world scores move together. An
offline screener (TF-IDF, embedding, simulated) costs nothing, so the plan screens a small pilot of
the case's own applicants in their own counterfactual worlds (beside every factual applicant, so a
matcher fitted on what it screens scores on the run's scale) and measures both: the SE of each
effect's per-applicant contrast over the pilot, which the world budget scales to the planned n
(`popfair.estimate.pse.design.budget.variance_parts`, as a previous run's SEs). The plan says it did so.
A paid screener keeps `plan.sd` / `plan.from_run` and says what it assumed."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.types import FACTUAL, WORLD
from popfair.design.base import PreviousRun

log = logging.getLogger("popfair")

PILOT_APPLICANTS = 200


def measures_pilot(experiment: Any) -> bool:
    """Whether the case's plan measures its own pilot: an offline screener, no pilot SD (plan.sd) or
    previous run (plan.from_run) given, and worlds drawn (the counterfactual design)."""
    power = experiment.power
    return (
        experiment.screener.costs_nothing
        and power.settings.enabled
        and power.settings.sd is None
        and power.previous is None
    )


def piloted_power(experiment: Any, profiles: Any) -> Any:
    """The case's power settings, with an offline screener's pilot of its own applicants and worlds as
    the previous run the plan scales: the dry run, `popfair doctor` and the run then state their MDE
    on the same score scale and world correlation."""
    found = pilot_run(experiment, profiles)
    return experiment.power if found is None else dataclasses.replace(experiment.power, previous=found)


def run_power(experiment: Any, metrics: dict[str, float]) -> Any:
    """The power settings a run states its line with: where its dry run measured a pilot
    (`measures_pilot`) and the run measured its own world variance, the run itself as the previous
    run, so the run's MDE stands on the run's own variance; else the case's settings."""
    from popfair.estimate.pse.design.budget import METRIC

    if measures_pilot(experiment) and f"{METRIC}.var_world.TE" in metrics:
        return dataclasses.replace(experiment.power, previous=PreviousRun("this run", dict(metrics)))
    return experiment.power


def pilot_run(experiment: Any, profiles: Any, n: int = PILOT_APPLICANTS) -> PreviousRun | None:
    """The pilot as a previous run: `counterfactual.n` and each effect's `<effect>.se` (the SD of its
    per-applicant contrast over the pilot / sqrt(n)); None where no pilot applies or it fails."""
    if not measures_pilot(experiment) or profiles.worlds is None or profiles.outcome != "score":
        return None
    try:
        return _pilot(experiment, profiles, n)
    except Exception as exc:  # noqa: BLE001 - the plan falls back to its stated assumption
        log.warning("power pilot skipped: %s: %s", type(exc).__name__, exc)
        return None


def _pilot(experiment: Any, profiles: Any, n: int) -> PreviousRun | None:
    from popfair.estimate.pse.design.interventional import paired_effects
    from popfair.estimate.pse.sfm import TARGETS

    worlds = profiles.worlds
    chosen = pd.unique(worlds["applicant_id"])[:n]
    # every factual applicant is screened with the pilot's worlds: a matcher fitted on what it screens
    # (TF-IDF's document frequencies) then scores on the run's own scale, not a 200-applicant corpus's
    pilot = dataclasses.replace(
        profiles, worlds=worlds[worlds["applicant_id"].isin(set(chosen))].reset_index(drop=True)
    )
    shown = experiment.prompts(pilot, progress=False)
    results = experiment.screener.screen(pilot.jobs, shown.prompts, pilot.outcome)
    scored = experiment.design.scored(pilot, shown.rows, shown.documents, shown.prompts, results)
    rows = scored[scored[WORLD] != FACTUAL]
    outcomes = (
        rows.pivot_table(index="applicant_id", columns=WORLD, values="y", aggfunc="first")
        .reindex(columns=list(TARGETS))
        .dropna()
        .astype(float)
    )
    if len(outcomes) < 10:
        return None
    effects, _ = paired_effects(outcomes.to_numpy())
    metrics = {"counterfactual.n": float(len(outcomes))}
    metrics.update({f"{effect}.se": float(se) for effect, se in effects["se"].items() if np.isfinite(se)})
    factual = scored.loc[scored[WORLD] == FACTUAL, "y"].astype(float)
    name = experiment.screener.name
    source = (
        f"a pilot of {len(outcomes)} of the case's own applicants in their five worlds, screened now by {name} "
        f"(offline, free; scores SD {factual.std():.3g})"
    )
    return PreviousRun(source, metrics)
