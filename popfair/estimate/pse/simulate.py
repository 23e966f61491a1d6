"""A simulated standard fairness model with known path-specific effects.

Validates the PSE estimator (tests, coverage study, benchmark). Columns mimic PopResume's roles for
X = gender: Z = (race, age), B = (edu_group, exp_year), R = (name_gender_typicality,
name_age_typicality, surname_race_typicality, region). Every variable is a deterministic function
of its parents and its own noise, so counterfactuals Y_{x_y, B_{x_b, R_{x_r}}, R_{x_r}} are computed
exactly by re-evaluating the structural equations with the same noise (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.estimate.pse.sfm import CONTRASTS, EFFECTS, TARGETS

RACES = np.array(["black", "white", "hispanic", "api", "other"])
RACE_SHARES = np.array([0.13, 0.58, 0.17, 0.08, 0.04])
EDU = np.array(["low", "medium", "high"])
REGIONS = np.array(["Northeast", "Midwest", "South", "West"])
GENDER_TYPICALITY = np.array(["female", "neutral", "male"])
AGE_TYPICALITY = np.array(["young", "mid", "old", "neutral"])
SURNAME_RACE = np.array(["black", "white", "asian", "neutral"])


@dataclass(frozen=True)
class SimulatedSFM:
    """Structural equations with tunable path strengths (0 switches a path off).

    direct: effect of X = male on the score not through B or R (points; logit/10 for callbacks).
    x_to_b: shift of the education latent and of experience years for X = male.
    x_to_r: strength of the dependence of the name's gender typicality and region on X.
    r_to_y: weight of the proxies in the score.  outcome: "score" (0-100) or "callback" (0/1)."""

    direct: float = 3.0
    x_to_b: float = 0.6
    x_to_r: float = 1.0
    r_to_y: float = 1.0
    b_to_y: float = 1.0
    noise_sd: float = 8.0
    outcome: str = "score"
    x0: str = "female"
    x1: str = "male"

    roles = {
        "x": "gender",
        "z": ("race", "age"),
        "b": ("edu_group", "exp_year"),
        "r": ("name_gender_typicality", "name_age_typicality", "surname_race_typicality", "region"),
    }

    @property
    def role_kwargs(self) -> dict[str, object]:
        """The SFM roles as `estimate_pse` keyword arguments (x, x0, x1, z, b, r, y) for a `sample`."""
        return {
            "x": self.roles["x"],
            "x0": self.x0,
            "x1": self.x1,
            "z": self.roles["z"],
            "b": self.roles["b"],
            "r": self.roles["r"],
            "y": "y",
        }

    def sample(self, n: int, seed: int) -> pd.DataFrame:
        """n factual applicants: raw columns as PopResume stores them (strings and integers), y."""
        noise = self._noise(n, seed)
        x = self._x(noise)
        r = self._r(x, noise)
        b = self._b(x, r, noise)
        y = self._y(x, b, r, noise, draw=True)
        frame = pd.DataFrame(
            {
                "applicant_id": np.arange(n),
                "gender": np.where(x == 1, self.x1, self.x0),
                "race": RACES[noise["race"]],
                "age": noise["age"],
                "edu_group": EDU[b["edu"]],
                "exp_year": b["exp"],
                "name_gender_typicality": GENDER_TYPICALITY[r["ngt"]],
                "name_age_typicality": AGE_TYPICALITY[r["nat"]],
                "surname_race_typicality": SURNAME_RACE[r["srt"]],
                "region": REGIONS[r["region"]],
                "y": y,
            }
        )
        return frame

    def truth(self, n: int = 400_000, seed: int = 12345, swapped: bool = False) -> pd.Series:
        """True TE, NDE, NIE, BIE, RIE by simulating the five counterfactual means on n draws
        (common random numbers); `swapped` gives the effects of x0 relative to x1 instead."""
        noise = self._noise(n, seed)
        means = []
        for levels in TARGETS.values():
            x_y, x_b, x_r = (1 - c for c in levels) if swapped else levels
            r = self._r(np.full(n, x_r), noise)
            b = self._b(np.full(n, x_b), r, noise)
            means.append(self._y(np.full(n, x_y), b, r, noise, draw=False).mean())
        return pd.Series(CONTRASTS @ np.array(means), index=list(EFFECTS))

    # structural equations ---------------------------------------------------------------------

    @staticmethod
    def _noise(n: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {
            "race": rng.choice(len(RACES), size=n, p=RACE_SHARES),
            "age": rng.integers(18, 45, size=n),
            **{k: rng.random(n) for k in ("x", "ngt", "nat", "srt", "region", "edu", "y_cb")},
            "exp": rng.normal(size=n),
            "y": rng.normal(size=n),
        }

    @staticmethod
    def _x(noise: dict[str, np.ndarray]) -> np.ndarray:
        race, age = noise["race"], noise["age"]
        logit = -0.6 + 0.4 * (race == 1) - 0.3 * (race == 0) + 0.03 * (age - 30)
        return (noise["x"] < 1 / (1 + np.exp(-logit))).astype(int)

    def _r(self, x: np.ndarray, noise: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        race, age = noise["race"], noise["age"]
        s = self.x_to_r
        # name gender typicality: female / neutral / male-typical, tilted towards X's own gender
        p_male = 0.3 + 0.4 * s * (x - 0.5)
        p_female = 0.3 - 0.4 * s * (x - 0.5)
        ngt = _categorical(noise["ngt"], np.column_stack([p_female, 1 - p_male - p_female, p_male]))
        young = np.clip(0.2 + 0.02 * (30 - age), 0.05, 0.6)
        old = np.clip(0.2 - 0.02 * (30 - age), 0.05, 0.6)
        nat = _categorical(noise["nat"], np.column_stack([young, np.full_like(young, 0.3), old, 1 - young - old - 0.3]))
        p_black = np.where(race == 0, 0.45, 0.03)
        p_white = np.where(race == 1, 0.55, 0.15)
        p_asian = np.where(race == 3, 0.5, 0.02)
        srt = _categorical(noise["srt"], np.column_stack([p_black, p_white, p_asian, 1 - p_black - p_white - p_asian]))
        south = 0.3 + 0.1 * (race == 0) + 0.1 * s * (x - 0.5)
        black = 0.05 * (race == 0)
        region = _categorical(
            noise["region"], np.column_stack([np.full_like(south, 0.2), 0.65 - south - black, south, 0.15 + black])
        )
        return {"ngt": ngt, "nat": nat, "srt": srt, "region": region}

    def _b(self, x: np.ndarray, r: dict[str, np.ndarray], noise: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        race, age = noise["race"], noise["age"]
        latent = (
            -0.4 * self.x_to_b * x
            + 0.3 * (race == 3)
            - 0.2 * (race == 0)
            + 0.02 * (age - 30)
            + 0.25 * (r["region"] == 0)
            - 0.15 * (r["region"] == 2)
        )
        u = np.log(noise["edu"] / (1 - noise["edu"]))  # logistic noise
        edu = np.digitize(latent + u, [-0.8, 1.2])
        exp = np.clip(
            np.round(0.45 * (age - 22) - 0.6 * edu + 2.0 * self.x_to_b * x + 1.5 * noise["exp"]), 0, None
        ).astype(int)
        return {"edu": edu, "exp": exp}

    def _y(
        self,
        x: np.ndarray,
        b: dict[str, np.ndarray],
        r: dict[str, np.ndarray],
        noise: dict[str, np.ndarray],
        draw: bool,
    ) -> np.ndarray:
        race, age = noise["race"], noise["age"]
        index = (
            48
            + self.direct * x
            + self.b_to_y * (6.0 * b["edu"] + 0.9 * b["exp"])
            + self.r_to_y
            * (
                3.0 * (r["ngt"] == 2)
                - 2.0 * (r["ngt"] == 0)
                - 2.5 * (r["srt"] == 0)
                + 2.0 * (r["region"] == 0)
                - 1.5 * (r["region"] == 2)
                - 1.0 * (r["nat"] == 2)
            )
            + 1.5 * (race == 1)
            - 0.1 * (age - 30)
        )
        if self.outcome == "score":
            return np.clip(np.round(index + self.noise_sd * noise["y"], 1), 0, 100)
        p = 1 / (1 + np.exp(-(index - 60) / 10))
        return (noise["y_cb"] < p).astype(float) if draw else p


def _categorical(u: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw per row: level index whose cumulative probability first exceeds u."""
    cum = np.cumsum(probs, axis=1)
    return np.minimum((u[:, None] >= cum).sum(axis=1), probs.shape[1] - 1)
