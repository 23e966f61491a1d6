"""Does the CA/TX transport reproduce a state's real workers? A held-out check that chooses the donors.

For large states whose records the bundled extract does have, the occupation's records of that state
are hidden, the state is rebuilt by the same transport as CA and TX (density ratio of the state's
18-44 demographics to the donors', systematic PPS draw of as many rows as it really has), and the
rebuilt composition (race, education level, sex x race) is compared with the real records: total
variation distance (TVD, 0 = identical) of the weighted shares, for donors = same Census region and
donors = all other states, plus the naive baseline "donor records without reweighting".

    python benchmarks/transport_validation.py [--states FL NY IL WA AZ GA NC PA] [--occupations nurse ...]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")

from popfair.population.popresume import PopResumePopulation  # noqa: E402
from popfair.population.transport import donor_states, transport_state  # noqa: E402

OCCP = {"nurse": 3255, "teacher": 2310, "software_developer": 1021, "accountant": 800, "construction_laborer": 6260}


def tvd(a: pd.DataFrame, b: pd.DataFrame, column: str | list[str]) -> float:
    key = a[column].astype(str).agg("|".join, axis=1) if isinstance(column, list) else a[column]
    key_b = b[column].astype(str).agg("|".join, axis=1) if isinstance(column, list) else b[column]
    pa = a["weight"].groupby(key).sum() / a["weight"].sum()
    pb = b["weight"].groupby(key_b).sum() / b["weight"].sum()
    return float(0.5 * pa.subtract(pb, fill_value=0).abs().sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", nargs="+", default=["FL", "NY", "IL", "WA", "AZ", "GA", "NC", "PA", "NJ", "CO"])
    parser.add_argument("--occupations", nargs="+", default=list(OCCP))
    args = parser.parse_args()
    population = PopResumePopulation(ca_tx="omit", diagnostics=False)
    rows = []
    for key in args.occupations:
        records = population.model(OCCP[key]).records
        present = set(records["state"])
        for state in args.states:
            real = records[records["state"] == state]
            others = records[records["state"] != state]
            row = {"occupation": key, "state": state, "records": len(real)}
            for policy in ("region", "all"):
                pool_states = donor_states(state, policy, present - {state})
                rebuilt, _, pool = transport_state(others, state, pool_states, len(real), "drop", [0])
                rebuilt = rebuilt.assign(weight=1.0)
                for column in ("race", "edu_level"):
                    row[f"{policy}_{column}"] = tvd(rebuilt, real, column)
                row[f"{policy}_sex_race"] = tvd(rebuilt, real, ["gender", "race"])
                if policy == "region":
                    row["unweighted_region_race"] = tvd(pool, real, "race")
            rows.append(row)
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print("total variation distance between the rebuilt and the real state (weighted shares; lower is better)")
    print(table.round(3).to_string(index=False))
    means = table.drop(columns=["occupation", "state", "records"]).mean()
    print("\nmean over states and occupations:")
    print(means.round(3).to_string())
    for column in ("race", "edu_level", "sex_race"):
        better = float(np.mean(table[f"region_{column}"] <= table[f"all_{column}"]))
        print(f"{column}: region donors at least as close as all-state donors in {100 * better:.0f}% of cases")


if __name__ == "__main__":
    main()
