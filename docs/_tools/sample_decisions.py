"""Writes docs/data/sample_decisions.csv, the small table docs/tables.md audits (synthetic, no real person).

``python docs/_tools/sample_decisions.py`` rewrites it byte for byte (fixed seed; tests/test_docs.py
checks the committed file is this script's output). 800 applicants to 40 requisitions of an invented
employer, with the columns and labels an applicant-tracking export has: ``applicant_id``,
``requisition_id``, ``gender`` (Female/Male, some "Prefer not to say"), ``ethnicity`` (EEO-1 labels,
some "Declined"), ``applied`` (a date in 2024) and ``advanced`` (Yes/No). Whether an applicant
advanced is drawn with a requisition-specific rate, lowered by 30% for women and by 35% for Black
applicants, so the audit has something to find.
"""

from __future__ import annotations

import csv
import sys
from datetime import date, timedelta
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "data" / "sample_decisions.csv"
SEED = 20240501
N, REQUISITIONS = 800, 40
GENDERS = (["Female", "Male", "Prefer not to say"], [0.48, 0.49, 0.03])
ETHNICITIES = (
    ["White", "Black or African American", "Hispanic or Latino", "Asian", "Two or More Races", "Declined"],
    [0.52, 0.16, 0.17, 0.09, 0.03, 0.03],
)
PENALTY = {"Female": 0.70, "Black or African American": 0.65}  # rate multipliers: what the audit should find


def rows(seed: int = SEED) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.25, 0.55, size=REQUISITIONS)  # each requisition's own selection rate
    out = []
    for i in range(N):
        requisition = int(rng.integers(REQUISITIONS))
        gender = str(rng.choice(GENDERS[0], p=GENDERS[1]))
        ethnicity = str(rng.choice(ETHNICITIES[0], p=ETHNICITIES[1]))
        rate = base[requisition] * PENALTY.get(gender, 1.0) * PENALTY.get(ethnicity, 1.0)
        applied = date(2024, 1, 2) + timedelta(days=int(rng.integers(0, 330)))
        out.append(
            {
                "applicant_id": f"A{i + 1:04d}",
                "requisition_id": f"REQ-{requisition + 101}",
                "gender": gender,
                "ethnicity": ethnicity,
                "applied": applied.isoformat(),
                "advanced": "Yes" if rng.random() < rate else "No",
            }
        )
    return out


def write(path: Path = OUT) -> None:
    table = rows()
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    print(f"wrote {OUT}")
