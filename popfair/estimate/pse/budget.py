"""The counterfactual design's world budget: what n applicants' worlds can detect, and the n an effect needs.

The combined estimator's variance (`popfair.estimate.pse.design_based`) comes from the world sample
of n of the N applicants. For the effects over the N applicants drawn (`inference=finite`, the
default) it carries the finite population correction; under the population model
(`inference=superpopulation`) a fixed part F_e, the spread between the N applicants, adds to it:

    finite:           SE_e(n)^2 = W_e (1/n - 1/N)
    superpopulation:  SE_e(n)^2 = W_e / n + F_e
    MDE_e(n) = (z_{1 - alpha/2} + z_power) * SE_e(n)   (a z test)
 W_e and F_e come from a previous counterfactual run (`plan.from_run`: its
`counterfactual.var_world.<e>` and `counterfactual.var_fixed.<e>` metrics), else from its SE at its n
(all of it counted as the sample's), else from an assumed score SD sigma (`plan.sd`, default 25
points): one applicant's five world scores uncorrelated, so an effect with coefficients c has
W_e = sigma^2 * |c|^2 (TE, NDE, NIE: 2 sigma^2; BIE, RIE: sigma^2) and F_e = 0. Scores of the same
applicant in different worlds are in practice strongly correlated and the working model explains
part of what is left, so this default overstates the MDE; a pilot's run states it.

The n an effect needs is the smallest n with MDE_e(n) <= effect; the budget that detects it for every
effect is the largest of those. Over the N applicants every effect is reached by n = N at the latest
(the full design); under the population model an effect the fixed part alone cannot reach has no
such n."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from popfair.estimate import light_stats as ls
from popfair.estimate.power import DEFAULT_SCORE_SD, PowerPlan, PowerSettings
from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS

METRIC = "counterfactual"  # MLflow metric prefix of the design's own figures


class Previous(Protocol):
    """A previous run's logged metrics (popfair.design.base.PreviousRun)."""

    source: str
    metrics: Mapping[str, float]

    def get(self, *names: str) -> float | None: ...


def variance_parts(
    settings: PowerSettings, previous: Previous | None, scale: Any = None
) -> tuple[dict[str, float], dict[str, float], str]:
    """Per effect (W_e, F_e) of the module docstring, and the assumption in words. `scale`: the
    screener's own score scale (`sd`, `source`: design.base.ScoreScale), used when no pilot's SD
    (plan.sd) and no previous run say more."""
    if previous is not None:
        world = {e: previous.get(f"{METRIC}.var_world.{e}") for e in EFFECTS}
        fixed = {e: previous.get(f"{METRIC}.var_fixed.{e}") for e in EFFECTS}
        if all(v is not None for v in world.values()) and all(v is not None for v in fixed.values()):
            n_prev = previous.get(f"{METRIC}.n") or 0
            return (
                {e: float(v or 0.0) for e, v in world.items()},
                {e: float(v or 0.0) for e, v in fixed.items()},
                f"the variance of {previous.source}'s combined estimate (world sample n = {n_prev:,.0f}) "
                "split into its world-sample part, scaled by n_prev / n, and its factual part, kept",
            )
        sampled = previous.get(f"{METRIC}.n", "intv.n")
        ses = {e: previous.get(f"{e}.se") for e in EFFECTS}
        if sampled and all(v is not None for v in ses.values()):
            return (
                {e: float(se or 0.0) ** 2 * sampled for e, se in ses.items()},
                dict.fromkeys(EFFECTS, 0.0),
                f"the standard errors of {previous.source} (world sample n = {sampled:,.0f}) scaled by sqrt(n_prev / n)",
            )
    if settings.sd is not None:
        sd, source = float(settings.sd), "plan.sd, a pilot's"
    elif scale is not None:
        sd, source = float(scale.sd), str(scale.source)
    else:
        sd, source = DEFAULT_SCORE_SD, "default; set plan.sd or plan.from_run"
    norms = dict(zip(EFFECTS, np.square(CONTRASTS).sum(axis=1)))
    return (
        {e: sd**2 * float(norms[e]) for e in EFFECTS},
        dict.fromkeys(EFFECTS, 0.0),
        f"a score SD of {sd:.3g} points ({source}) and one applicant's world scores uncorrelated "
        "(usually they are strongly correlated, and the MDE smaller)",
    )


def _z(settings: PowerSettings) -> float:
    return float(ls.norm_ppf(1 - settings.alpha / 2) + ls.norm_ppf(settings.power))


def variance(n: int, eligible: int, world: float, fixed: float, finite: bool) -> float:
    """One effect's variance with n of `eligible` applicants' worlds (module docstring)."""
    n = max(n, 1)
    if finite:
        return world * max(1 / n - 1 / max(eligible, n), 0.0)
    return world / n + fixed


def mde(n: int, eligible: int, world: float, fixed: float, settings: PowerSettings, finite: bool = True) -> float:
    """MDE of one effect with n of `eligible` applicants' worlds."""
    return _z(settings) * math.sqrt(variance(n, eligible, world, fixed, finite))


def n_needed(
    effect: float, eligible: int, world: float, fixed: float, settings: PowerSettings, finite: bool = True
) -> int | None:
    """Smallest world sample whose MDE is at most `effect` (None: not even all applicants reach it)."""
    room = (effect / _z(settings)) ** 2
    if finite:  # W (1/n - 1/N) <= room
        n = math.ceil(1 / (room / world + 1 / eligible)) if world > 0 else 2
        return max(2, min(int(n), eligible))
    room -= fixed
    if room <= 0:
        return None
    return max(2, int(math.ceil(world / room)))


def budget_for(
    effect: float,
    eligible: int,
    settings: PowerSettings,
    previous: Previous | None,
    scale: Any = None,
    finite: bool = True,
) -> tuple[int, str]:
    """The world sample that detects `effect` for every effect (capped at all `eligible` applicants),
    and a sentence saying so."""
    world, fixed, assumed = variance_parts(settings, previous, scale)
    needs = {e: n_needed(effect, eligible, world[e], fixed[e], settings, finite) for e in EFFECTS}
    if any(v is None or v > eligible for v in needs.values()):
        short = [e for e, v in needs.items() if v is None or v > eligible]
        return eligible, (
            f"a target MDE of {effect:g} points needs more than all {eligible:,} applicants for "
            f"{', '.join(short)} (assuming {assumed}): every applicant's worlds are screened"
        )
    n = max(int(v or 0) for v in needs.values())
    return n, f"a target MDE of {effect:g} points for every effect needs {n:,} applicants' worlds (assuming {assumed})"


def world_plan(
    n: int,
    eligible: int,
    settings: PowerSettings,
    previous: Previous | None,
    scale: Any = None,
    finite: bool = True,
) -> PowerPlan:
    """The power line of the counterfactual design at a world sample of n applicants: the MDE of
    each effect (`extra`: plan.mde.<effect>, plan.n_needed.<effect>), the largest as `mde`, and with
    plan.effect the budget that detects it for every effect."""
    world, fixed, assumed = variance_parts(settings, previous, scale)
    mdes = {e: mde(n, eligible, world[e], fixed[e], settings, finite) for e in EFFECTS}
    extra: dict[str, float] = {f"mde.{e}": v for e, v in mdes.items()}
    extra["world_n"] = float(n)
    extra["world_eligible"] = float(eligible)
    needed = None
    if settings.effect is not None:
        needs = {e: n_needed(settings.effect, eligible, world[e], fixed[e], settings, finite) for e in EFFECTS}
        extra.update({f"n_needed.{e}": float(v) for e, v in needs.items() if v is not None})
        if all(v is not None for v in needs.values()):
            needed = max(int(v or 0) for v in needs.values())
    detail = ", ".join(f"{e} {v:.3g}" for e, v in mdes.items()) + " points"  # 3 digits: TF-IDF MDEs are 0.02
    assumptions = (
        assumed,
        f"{n:,} of {eligible:,} applicants' five worlds screened (a simple random sample), combined with "
        "every applicant's factual answer",
        "the effects over the applicants drawn (finite population correction)"
        if finite
        else "the effects under the population model (superpopulation variance)",
    )
    return PowerPlan(
        "path-specific effect (counterfactual design; each effect's MDE in brackets)",
        "points",
        "applicants (world sample)",
        n,
        settings.alpha,
        settings.power,
        max(mdes.values()),
        "z test on the combined estimator's standard error",
        assumptions,
        settings.effect,
        needed,
        extra,
        detail,
    )
