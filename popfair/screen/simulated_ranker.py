"""Simulated ranker: the ranking design's offline twin, with known Plackett-Luce group strengths and
position effects (config `screener=simulated_ranker`).

Each candidate's utility is strengths[group] + position_bonus[shown position] + a standard Gumbel
draw, and the reply ranks the candidates by utility: a Plackett-Luce ranking whose log-worths are
strength + position bonus (the exploded logit's true coefficients). The draws are a deterministic
hash of (job id, prompt text) and `seed`: the same prompt always gets the same reply, as from a
cached model call. The reply is a numbered list of names, which the design's parser reads like a
model's; `refusal_rate` of the trials answer a refusal instead (a recorded failure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Interval, ParameterError, validate
from popfair.core.errors import DataError
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.screen.base import Screener, one_answer_per_prompt
from popfair.screen.simulated import hash_uniforms

REFUSAL = "I'm sorry, but I can't rank candidates against each other."


class SimulatedRanker(Screener):
    """Ranks each trial's candidates by Plackett-Luce with log-worth strengths[group] +
    position_bonus[position] (positions 1-based; unlisted groups and positions add 0)."""

    answers_rankings = True
    parameter_constraints: ClassVar[dict[str, Any]] = {
        "refusal_rate": Interval(float, 0, 1),
        "seed": Interval(int, None, None),
    }

    def __init__(
        self,
        name: str = "simulated_ranker",
        strengths: Mapping[str, float] | None = None,
        position_bonus: Mapping[Any, float] | None = None,
        refusal_rate: float = 0.0,
        seed: int = 0,
        samples: int = 1,
    ) -> None:
        one_answer_per_prompt(
            name, samples, "ranks by fixed strengths (the ranking design reads one ranking per prompt)"
        )
        validate(self.parameter_constraints, {"refusal_rate": refusal_rate, "seed": seed})
        self.name, self.refusal_rate, self.seed = name, float(refusal_rate), seed
        self.strengths = {str(g): _number(f"screener.strengths.{g}", v) for g, v in (strengths or {}).items()}
        self.position_bonus: dict[int, float] = {}
        for position, value in (position_bonus or {}).items():
            if not str(position).isdigit() or int(position) < 1:
                raise ParameterError("screener.position_bonus", f"keys are positions 1, 2, ...; got {position!r}")
            self.position_bonus[int(position)] = _number(f"screener.position_bonus.{position}", value)

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        if outcome != "rank":
            raise DataError(f"screener {self.name}: ranks candidates; the case asks {outcome!r} (use a ranking design)")
        lacking = [d.applicant_id for d in documents if not d.profile or "names" not in d.profile]
        if lacking:
            raise DataError(
                f"screener {self.name}: prompt {lacking[0]!r} carries no candidate list (not a ranking trial)"
            )
        keys = pd.Series([f"{d.job_id}\x1f{d.text}" for d in documents], dtype=object)
        trial_key = (hash_uniforms(keys, self.seed, "trial") * 2**52).astype(np.int64)
        refuse = hash_uniforms(keys, self.seed, "refusal") < self.refusal_rate
        results = []
        for d, key, refused in zip(documents, trial_key, refuse):
            if refused:
                results.append(ScreenResult(applicant_id=d.applicant_id, raw=REFUSAL, value=None))
                continue
            names, groups = d.profile["names"], d.profile["groups"]  # type: ignore[index]
            k = len(names)
            u = hash_uniforms(pd.Series(key * 64 + np.arange(k)), self.seed, "gumbel")
            utility = np.array(
                [self.strengths.get(g, 0.0) + self.position_bonus.get(i + 1, 0.0) for i, g in enumerate(groups)]
            ) - np.log(-np.log(u))
            order = np.argsort(-utility, kind="stable")
            raw = "\n".join(f"{place + 1}. {names[i]}" for place, i in enumerate(order))
            results.append(ScreenResult(applicant_id=d.applicant_id, raw=raw, value=None))
        return results


def _number(key: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(key, f"must be a number (a log-worth), got {value!r}") from None
    if not np.isfinite(number):
        raise ParameterError(key, f"must be finite, got {value!r}")
    return number
