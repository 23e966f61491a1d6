"""Structural screener with known effects: ground truth for demos, tests and estimator checks.

    index    = intercept + sum_c coef_c[level of c] (categorical) + sum_c slope_c * value of c (numeric)
    score    = clip(index + noise_sd * N(0, 1), 0, 100)
    callback = 1 with probability expit((index - callback_threshold) / callback_scale)

Coefficients are read from each document's structured profile (`Document.profile`), so direct
(gender, race), proxy (name/surname typicality, region) and qualification (edu_group, exp_year)
effects are set in config. Both random parts are deterministic functions of (job id, document text)
and `seed`: the same document for the same job always gets the same answer, as from a cached
model call.
`expected()` gives E[Y | profile] exactly, so true causal effects can be computed by averaging it
over counterfactual profile tables."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from popfair.core.constraints import Constraint, Interval, ParameterError, validate
from popfair.core.errors import DataError
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.population.protected import LEVELS
from popfair.screen.base import Screener, one_answer_per_prompt

log = logging.getLogger("popfair")

SCORE_RANGE = (0.0, 100.0)


NUMBER = Interval(float, None, None)  # a finite number


class Coefficients(Constraint):
    """null or {column: {level: coef} | slope | null}; errors name the column and level."""

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            self.check("coefficients", value)
        except ParameterError:
            return False
        return True

    def check(self, name: str, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, Mapping):
            raise ParameterError(name, f"must map profile columns to {{level: coef}} or a slope, got {value!r}")
        for column, spec in value.items():
            key = f"{name}.{column}"
            if spec is None:  # `screener.coefficients.<column>=null` switches that effect off
                continue
            if not isinstance(spec, Mapping):
                if not NUMBER.is_satisfied_by(spec):
                    raise ParameterError(key, f"must be a numeric slope or a {{level: coef}} mapping, got {spec!r}")
                continue
            if not spec:
                raise ParameterError(key, "an empty {level: coef} mapping has no effect; remove it")
            for level, coef in spec.items():
                if not NUMBER.is_satisfied_by(coef):
                    raise ParameterError(f"{key}.{level}", f"must be a finite number, got {coef!r}")
            if column in LEVELS:  # gender and race levels are known before any profile is seen
                unknown = sorted({str(level) for level in spec} - set(LEVELS[column]))
                if unknown:
                    raise ParameterError(key, f"unknown level(s) {unknown}; {column} takes {list(LEVELS[column])}")


class SimulatedScreener(Screener):
    """A screener whose discrimination is whatever its coefficients say (see module docstring).

    coefficients: {column: {level: coef}} for a categorical profile column (unlisted levels add 0)
    or {column: slope} for a numeric one; null switches a column's effect off. Columns are checked against each document's profile at
    screen time; levels of gender and race are checked against their known values at build time."""

    costs_nothing = True  # offline and free to ask: the dry run pilots it (popfair.case.pilot)

    parameter_constraints = {
        "intercept": NUMBER,
        "coefficients": Coefficients(),
        "noise_sd": Interval(float, 0, None),
        "callback_threshold": NUMBER,
        "callback_scale": Interval(float, 0, None, closed="neither"),
        "seed": Interval(int, None, None),
    }

    def __init__(
        self,
        name: str = "simulated",
        intercept: float = 50.0,
        coefficients: Mapping[str, Any] | None = None,
        noise_sd: float = 10.0,
        callback_threshold: float = 50.0,
        callback_scale: float = 5.0,
        seed: int = 0,
        samples: int = 1,
    ) -> None:
        one_answer_per_prompt(name, samples, "draws its noise once per document (a hash of job, text and seed)")
        validate(
            self.parameter_constraints,
            {
                "intercept": intercept,
                "coefficients": coefficients,
                "noise_sd": noise_sd,
                "callback_threshold": callback_threshold,
                "callback_scale": callback_scale,
                "seed": seed,
            },
        )
        self.name = name
        self.intercept = float(intercept)
        self.noise_sd = float(noise_sd)
        self.callback_threshold = float(callback_threshold)
        self.callback_scale = float(callback_scale)
        self.seed = seed
        self.categorical, self.numeric = _split_coefficients(coefficients or {})
        self.reads = frozenset(self.columns)  # what its score depends on (the estimand's structural check)

    @property
    def columns(self) -> list[str]:
        """Profile columns the screener reads."""
        return [*self.categorical, *self.numeric]

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    def linear_index(self, table: pd.DataFrame) -> np.ndarray:
        """intercept + categorical coefficients + numeric slopes, one value per row (no noise)."""
        missing = [c for c in self.columns if c not in table.columns]
        if missing:
            raise DataError(
                f"screener {self.name}: profile has no column(s) {missing} named in "
                f"screener.coefficients; available columns: {sorted(map(str, table.columns))}"
            )
        index = np.full(len(table), self.intercept)
        for column, levels in self.categorical.items():
            values = table[column].astype(str)
            absent = sorted(set(levels) - set(values.unique()))
            if absent:
                log.warning(
                    "screener %s: level(s) %s of %r never occur in %d profiles (typo?)",
                    self.name,
                    absent,
                    column,
                    len(table),
                )
            index += values.map(levels).fillna(0.0).to_numpy(dtype=float)
        for column, slope in self.numeric.items():
            values = pd.to_numeric(table[column], errors="coerce")
            bad = table[column][values.isna()]
            if len(bad):
                raise DataError(
                    f"screener {self.name}: column {column!r} has a numeric slope in "
                    f"screener.coefficients but non-numeric or missing values, e.g. "
                    f"{bad.iloc[0]!r} ({len(bad)} rows); give it {{level: coef}} instead"
                )
            index += slope * values.to_numpy(dtype=float)
        return index

    def expected(self, table: pd.DataFrame, outcome: Outcome = "score") -> np.ndarray:
        """E[Y | profile] for each row: the exact mean of the clipped normal score (equal to the
        clipped index when noise_sd = 0), or the callback probability. Average it over a
        counterfactual profile table to get a true causal effect."""
        index = self.linear_index(table)
        if outcome == "callback":
            return special.expit((index - self.callback_threshold) / self.callback_scale)
        if outcome != "score":
            raise ValueError(f"outcome must be 'score' or 'callback', got {outcome!r}")
        low, high = SCORE_RANGE
        if self.noise_sd == 0:
            return np.clip(index, low, high)
        a = (low - index) / self.noise_sd
        b = (high - index) / self.noise_sd
        inside = stats.norm.cdf(b) - stats.norm.cdf(a)
        return (
            low * stats.norm.cdf(a)
            + high * stats.norm.sf(b)
            + index * inside
            + self.noise_sd * (stats.norm.pdf(a) - stats.norm.pdf(b))
        )

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """Score or callback for each document from its profile. `raw` keeps the latent score
        before clipping (score) or the callback probability (callback)."""
        index = self.linear_index(profile_table(documents, self.columns, self.name))
        texts = pd.Series([f"{d.job_id}\x1f{d.text}" for d in documents], dtype=object)
        if outcome == "callback":
            latent = special.expit((index - self.callback_threshold) / self.callback_scale)
            values = (self.uniforms(texts, "callback") < latent).astype(float)
        else:
            latent = index + special.ndtri(self.uniforms(texts, "score")) * self.noise_sd
            values = np.clip(latent, *SCORE_RANGE)
        return [
            ScreenResult(applicant_id=d.applicant_id, raw=f"{x:.6g}", value=float(v))
            for d, x, v in zip(documents, latent, values)
        ]

    def uniforms(self, texts: pd.Series, stream: str) -> np.ndarray:
        return hash_uniforms(texts, self.seed, stream)


def hash_uniforms(keys: pd.Series, seed: int, stream: str) -> np.ndarray:
    """U(0,1) draws that are a deterministic hash of each key (text or integer), the seed and the
    stream name (vectorised SipHash via pandas); never exactly 0 or 1."""
    key = hashlib.blake2b(f"popfair-simulated/{seed}/{stream}".encode(), digest_size=8).hexdigest()
    hashed = pd.util.hash_pandas_object(keys, index=False, hash_key=key).to_numpy(dtype=np.uint64)
    return ((hashed >> np.uint64(11)).astype(np.float64) + 0.5) / float(2**53)


def profile_table(documents: Sequence[Document], columns: Sequence[str], screener: str) -> pd.DataFrame:
    """The given columns of the documents' profile rows (structural screeners only)."""
    lacking = [d.applicant_id for d in documents if d.profile is None]
    if lacking:
        raise DataError(
            f"screener {screener}: {len(lacking)} document(s) carry no profile "
            f"(e.g. applicant {lacking[0]!r}); a structural screener reads "
            "Document.profile, which the renderer must attach"
        )
    table: dict[str, list[Any]] = {}
    for column in columns:
        try:
            table[column] = [d.profile[column] for d in documents]  # type: ignore[index]
        except KeyError:
            without = next(d for d in documents if column not in d.profile)  # type: ignore[operator]
            raise DataError(
                f"screener {screener}: profile has no column {column!r} named in "
                f"screener.coefficients (e.g. applicant {without.applicant_id!r}); "
                f"available columns: {sorted(map(str, without.profile or {}))}"
            ) from None
    return pd.DataFrame(table, index=pd.RangeIndex(len(documents)))


def _split_coefficients(coefficients: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Checked coefficients as categorical {column: {level: coef}} and numeric {column: slope} parts."""
    categorical = {
        str(c): {str(level): float(coef) for level, coef in spec.items()}
        for c, spec in coefficients.items()
        if isinstance(spec, Mapping)
    }
    numeric = {
        str(c): float(spec) for c, spec in coefficients.items() if spec is not None and not isinstance(spec, Mapping)
    }
    return categorical, numeric
