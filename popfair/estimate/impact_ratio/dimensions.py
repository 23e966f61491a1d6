"""How the (sex x race) count cells add up to each dimension of an impact-ratio table (sex, race, their
intersection), and why a dimension with fewer than two categories in the ratios compares nothing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from popfair.estimate.impact_ratio.settings import UNKNOWN, ImpactRatioSettings


@dataclass(frozen=True)
class Dimension:
    categories: list[str]  # known categories, then UNKNOWN last
    matrix: np.ndarray  # cells x categories, 0/1


def dimension_maps(sex_levels: list[str], race_levels: list[str]) -> dict[str, Dimension]:
    """How the (sex incl. unknown) x (race incl. unknown) cells add up to each dimension's categories."""
    n_sex, n_race = len(sex_levels), len(race_levels)
    s, r = np.divmod(np.arange((n_sex + 1) * (n_race + 1)), n_race + 1)
    known = (s < n_sex) & (r < n_race)
    columns = {
        "sex": (sex_levels, s),
        "race": (race_levels, r),
        "sex_race": (
            [f"{a}-{b}" for a in sex_levels for b in race_levels],
            np.where(known, s * n_race + r, n_sex * n_race),
        ),
    }
    out = {}
    for dim, (levels, column) in columns.items():
        matrix = np.zeros((len(s), len(levels) + 1))
        matrix[np.arange(len(s)), column] = 1.0
        out[dim] = Dimension(categories=[*levels, UNKNOWN], matrix=matrix)
    return out


def not_compared(
    dimension: str, categories: list[str], seen: np.ndarray, included: np.ndarray, min_share: float
) -> str:
    """Why a dimension with fewer than two categories in the ratios compares nothing, in words."""
    known = np.arange(len(categories)) < len(categories) - 1
    names = [c for c, k, i in zip(categories, known, included) if k and i]
    left_out = [c for c, k, s, i in zip(categories, known, seen, included) if k and s and not i]
    of = {"sex": "sex", "race": "race", "sex_race": "sex and race"}[dimension]
    if not left_out:
        return f"every applicant of known {of} is {names[0]}" if names else f"no applicant's {of} is known"
    small = f"{', '.join(left_out)} left out as under {min_share:.0%} of the sample"
    return (
        f"{names[0]} is the only {of} category in the ratios ({small})"
        if names
        else f"no {of} category is in the ratios ({small})"
    )


def cells(
    sex: pd.Series, race: pd.Series, settings: ImpactRatioSettings
) -> tuple[np.ndarray, int, dict[str, Dimension]]:
    """Each row's sex x race cell (the last level of each: unknown), the number of cells, and the
    dimensions' maps from cells to categories."""
    sex_codes, sex_levels = category_codes(sex, settings.unknown_labels)
    race_codes, race_levels = category_codes(race, settings.unknown_labels)
    n_race = len(race_levels) + 1  # last slot = unknown
    cell = np.where(sex_codes < 0, len(sex_levels), sex_codes) * n_race + np.where(
        race_codes < 0, len(race_levels), race_codes
    )
    return cell, (len(sex_levels) + 1) * n_race, dimension_maps(sex_levels, race_levels)


def category_codes(column: pd.Series, unknown_labels: tuple[str, ...]) -> tuple[np.ndarray, list[str]]:
    """Integer codes of the known categories (sorted), -1 for unknown (NaN or an unknown label)."""
    rows, values = pd.factorize(column)  # millions of count rows, a few values: the string work on those
    text = pd.Series(values, dtype=object).astype("string").str.strip()
    unknown = (text.isna() | text.str.lower().isin([u.strip().lower() for u in unknown_labels])).to_numpy(bool)
    levels = sorted(text[~unknown].unique().tolist())
    codes = pd.Categorical(text.where(~unknown), categories=levels).codes.astype(np.int64)
    return np.append(codes, -1)[rows], levels  # rows = -1: NaN, unknown
