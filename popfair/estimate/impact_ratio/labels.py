"""How impact-ratio categories, dimensions and metrics are named in tables, reports and MLflow metric
keys: shared by the estimator, its tables over time, the table watch and the LL144 report."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from popfair.core.race_coding import LL144_DISPLAY
from popfair.estimate.impact_ratio.settings import UNKNOWN

DIMENSION_TITLES = {"sex": "Sex", "race": "Race/Ethnicity", "sex_race": "Intersectional (sex x race)"}

# Display labels for the published-summary layout; other values are shown as they are.
DISPLAY = {
    "female": "Female",
    "male": "Male",
    "black": "Black or African American",
    "white": "White",
    "hispanic": "Hispanic or Latino",
    "api": "Asian or Pacific Islander",
    "other": "Other race",
    UNKNOWN: "Unknown",
    **LL144_DISPLAY,
}


def category_label(category: str) -> str:
    """A category as published summaries name it (`female-black` -> `Female / Black or African American`)."""
    return " / ".join(DISPLAY.get(part, part) for part in str(category).split("-"))


def metric_key(category: str) -> str:
    """MLflow metric names allow letters, digits, _ - . / and space; replace anything else."""
    return re.sub(r"[^\w\-/ ]", "_", str(category)).replace(".", "_")


def metric_description(metric: str) -> str:
    """What a metric's rate is, in words."""
    if metric == "selection":
        return "selection rate (share called back)"
    if metric == "scoring_median":
        return "LL144 scoring rate (share scoring above the sample's median)"
    if metric.startswith("top_"):
        return "share in the top of the score distribution (ties at the cutoff included)"
    return "share scoring at or above the absolute threshold"


def markdown_table(frame: pd.DataFrame) -> str:
    """A frame as a Markdown table, with missing numbers left blank."""
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if (isinstance(v, float) and not np.isfinite(v)) else str(v) for v in row) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])
