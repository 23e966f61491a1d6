"""The counterfactual design's world budget: what n applicants' worlds can detect, and the n an effect needs.

The combined estimator's variance (`popfair.estimate.pse.design.design_based`) comes from the world sample
of n of the N applicants, with the finite population correction; for the effects on the N
applicants averaged over the worlds' redraws (`inference=applicants`, the default) the redraw noise
R_e / N adds to it, which does not shrink with n; for these worlds only (`inference=worlds`) it
does not; under the population model (`inference=superpopulation`) a fixed part F_e, the spread
between the N applicants, adds instead:

    applicants:       SE_e(n)^2 = W_e (1/n - 1/N) + R_e / N
    worlds:           SE_e(n)^2 = W_e (1/n - 1/N)
    superpopulation:  SE_e(n)^2 = W_e / n + F_e
    MDE_e(n) = (z_{1 - alpha/2} + z_power) * SE_e(n)   (a z test)

W_e, F_e and R_e come from a previous counterfactual run (`plan.from_run`: its
`counterfactual.var_world.<e>`, `counterfactual.var_fixed.<e>` and `counterfactual.var_redraw.<e>`
metrics), else from its SE at its n (all of it counted as the sample's), else from an assumed score
SD sigma (`plan.sd`, default 25 points): one applicant's five world scores uncorrelated, so an
effect with coefficients c has W_e = sigma^2 * |c|^2 (TE, NDE, NIE: 2 sigma^2; BIE, RIE: sigma^2),
F_e = 0, and R_e = W_e (a redraw moves an answer at most as much as another applicant would).
Scores of the same applicant in different worlds are in practice strongly correlated and the
working model explains part of what is left, so this default overstates the MDE; a pilot's run
states it.

The n an effect needs is the smallest n with MDE_e(n) <= effect; the budget that detects it for every
effect is the largest of those. For these worlds every effect is reached by n = N at the latest
(the full design); averaged over the redraws, or under the population model, an effect that the
part that does not shrink with n (R_e / N, F_e) alone cannot reach has no such n.

The redraw subsample (`popfair.population.worlds.redraw_sizes`: a tenth of each group's sample, at
least `estimator.redraw`) is screened in the worlds a second time: the plan counts its calls."""

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
) -> tuple[dict[str, float], dict[str, float], str, dict[str, float]]:
    """Per effect (W_e, F_e) of the module docstring, the assumption in words, and per effect R_e.
    `scale`: the screener's own score scale (`sd`, `source`: design.base.ScoreScale), used when no
    pilot's SD (plan.sd) and no previous run say more."""
    if previous is not None:
        world = {e: previous.get(f"{METRIC}.var_world.{e}") for e in EFFECTS}
        fixed = {e: previous.get(f"{METRIC}.var_fixed.{e}") for e in EFFECTS}
        if all(v is not None for v in world.values()) and all(v is not None for v in fixed.values()):
            n_prev = previous.get(f"{METRIC}.n") or 0
            redraw = {e: previous.get(f"{METRIC}.var_redraw.{e}") for e in EFFECTS}
            measured = all(v is not None for v in redraw.values())
            return (
                {e: float(v or 0.0) for e, v in world.items()},
                {e: float(v or 0.0) for e, v in fixed.items()},
                f"the variance of {previous.source}'s combined estimate (world sample n = {n_prev:,.0f}) "
                "split into its world-sample part, scaled by n_prev / n, and its factual part, kept"
                + ("; its redraw noise, kept" if measured else "; redraw noise as large as the world sample's"),
                {e: float((redraw[e] if measured else world[e]) or 0.0) for e in EFFECTS},
            )
        sampled = previous.get(f"{METRIC}.n", "intv.n")
        ses = {e: previous.get(f"{e}.se") for e in EFFECTS}
        if sampled and all(v is not None for v in ses.values()):
            scaled = {e: float(se or 0.0) ** 2 * sampled for e, se in ses.items()}
            return (
                scaled,
                dict.fromkeys(EFFECTS, 0.0),
                f"the standard errors of {previous.source} (world sample n = {sampled:,.0f}) scaled by sqrt(n_prev / n)",
                dict(scaled),
            )
    if settings.sd is not None:
        sd, source = float(settings.sd), "plan.sd, a pilot's"
    elif scale is not None:
        sd, source = float(scale.sd), str(scale.source)
    else:
        sd, source = DEFAULT_SCORE_SD, "default; set plan.sd or plan.from_run"
    norms = dict(zip(EFFECTS, np.square(CONTRASTS).sum(axis=1)))
    assumed = {e: sd**2 * float(norms[e]) for e in EFFECTS}
    return (
        assumed,
        dict.fromkeys(EFFECTS, 0.0),
        f"a score SD of {sd:.3g} points ({source}) and one applicant's world scores uncorrelated, a redraw "
        "of its worlds moving them as much (usually they are strongly correlated, and the MDE smaller)",
        dict(assumed),
    )


def _z(settings: PowerSettings) -> float:
    return float(ls.norm_ppf(1 - settings.alpha / 2) + ls.norm_ppf(settings.power))


def variance(
    n: int, eligible: int, world: float, fixed: float, inference: str = "applicants", redraw: float = 0.0
) -> float:
    """One effect's variance with n of `eligible` applicants' worlds (module docstring)."""
    n = max(n, 1)
    if inference == "superpopulation":
        return world / n + fixed
    sampled = world * max(1 / n - 1 / max(eligible, n), 0.0)
    return sampled + (redraw / max(eligible, 1) if inference == "applicants" else 0.0)


def mde(
    n: int,
    eligible: int,
    world: float,
    fixed: float,
    settings: PowerSettings,
    inference: str = "applicants",
    redraw: float = 0.0,
) -> float:
    """MDE of one effect with n of `eligible` applicants' worlds."""
    return _z(settings) * math.sqrt(variance(n, eligible, world, fixed, inference, redraw))


def n_needed(
    effect: float,
    eligible: int,
    world: float,
    fixed: float,
    settings: PowerSettings,
    inference: str = "applicants",
    redraw: float = 0.0,
) -> int | None:
    """Smallest world sample whose MDE is at most `effect` (None: not even all applicants reach it)."""
    room = (effect / _z(settings)) ** 2
    if inference != "superpopulation":  # W (1/n - 1/N) + R / N <= room
        if inference == "applicants":
            room -= redraw / max(eligible, 1)
            if room <= 0:
                return None
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
    inference: str = "applicants",
) -> tuple[int, str]:
    """The world sample that detects `effect` for every effect (capped at all `eligible` applicants),
    and a sentence saying so."""
    world, fixed, assumed, redraw = variance_parts(settings, previous, scale)
    needs = {e: n_needed(effect, eligible, world[e], fixed[e], settings, inference, redraw[e]) for e in EFFECTS}
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
    inference: str = "applicants",
    redrawn: int = 0,
) -> PowerPlan:
    """The power line of the counterfactual design at a world sample of n applicants: the MDE of
    each effect (`extra`: plan.mde.<effect>, plan.n_needed.<effect>, plan.mde_floor.<effect>: the
    redraw noise's part, which no n removes), the largest as `mde`, and with plan.effect the budget
    that detects it for every effect. `redrawn`: the applicants whose worlds are drawn a second time
    (plan.redraw_n: at most about 2 calls each on text resumes, counted in the plan's calls)."""
    world, fixed, assumed, redraw = variance_parts(settings, previous, scale)
    mdes = {e: mde(n, eligible, world[e], fixed[e], settings, inference, redraw[e]) for e in EFFECTS}
    extra: dict[str, float] = {f"mde.{e}": v for e, v in mdes.items()}
    extra["world_n"] = float(n)
    extra["world_eligible"] = float(eligible)
    if inference == "applicants":
        extra.update({f"mde_floor.{e}": _z(settings) * math.sqrt(redraw[e] / max(eligible, 1)) for e in EFFECTS})
        extra["redraw_n"] = float(redrawn)
    needed = None
    if settings.effect is not None:
        needs = {
            e: n_needed(settings.effect, eligible, world[e], fixed[e], settings, inference, redraw[e]) for e in EFFECTS
        }
        extra.update({f"n_needed.{e}": float(v) for e, v in needs.items() if v is not None})
        if all(v is not None for v in needs.values()):
            needed = max(int(v or 0) for v in needs.values())
    detail = ", ".join(f"{e} {v:.3g}" for e, v in mdes.items()) + " points"  # 3 digits: TF-IDF MDEs are 0.02
    assumptions = (
        assumed,
        f"{n:,} of {eligible:,} applicants' five worlds screened (a simple random sample), combined with "
        "every applicant's factual answer",
        {
            "applicants": f"the effects on the applicants drawn, averaged over the worlds' redraws (finite population "
            f"correction, plus the redraw noise, which no n removes: MDE at least "
            f"{max(extra.get(f'mde_floor.{e}', 0.0) for e in EFFECTS):.2f} points); the redraw noise measured on "
            f"a second set of worlds for {redrawn:,} of the sampled applicants (at most about {2 * redrawn:,} calls "
            "on text resumes, in the plan's calls; a redraw that shows the same document is answered once)",
            "worlds": "the effects on the applicants drawn in these worlds only (finite population correction)",
            "superpopulation": "the effects under the population model (superpopulation variance)",
        }[inference],
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
