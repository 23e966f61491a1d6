"""California and Texas put back into the bundled 2024 extract by transport (the extract lacks them).

For a target state T (CA, TX) and one occupation:
1. Donors: the occupation's records from the donor states: all 48 states + DC (default), or T's own
   Census region. Held out, ten large states rebuilt this way from the other states are closer to
   their real records with all states as donors (mean total variation distance of the race shares
   0.068 vs 0.078 for same-region donors, education 0.069 vs 0.077; 0.155 for region donors without
   reweighting; benchmarks/transport_validation.py): the demographic reweighting already carries
   what is regional about a state's workers, and a larger pool has less noise.
2. Density ratio. On demographic cells d = sex x age group x race x education level, r_T(d) =
   p_T(d) / p_donors(d), both the weighted shares of the *whole* 18-44 population (bundled file 9:
   every state's persons by demographics). Occupation and employment are unknown for CA/TX persons,
   so the transport assumption is that P(employed in the occupation | d) is the same in T as in the
   donors; the employment rate given d then cancels from the ratio. Sparse cells are shrunk toward
   their (sex, age group, race) parent with KAPPA pseudo-records. On a discrete support the cell
   share ratio is the exact density ratio.
3. Calibration. T gets n_T = s_T / (1 - s_CA - s_TX) * n rows, where n is the occupation's record
   count in the 48 states + DC and s_T its OEWS May 2025 employment share (bundled file 4), so T's
   share of the applicants (rows, and weights) equals its OEWS share.
4. Draw. n_T donor records by systematic PPS sampling with probability ~ PWGTP * r_T(d), over the
   records ordered by cell (implicitly stratified, so the weighted composition is reproduced to
   within one record per cell). A transported row keeps the donor's demographics and education,
   takes state T (and its region), weight W_T / n_T, `transported=True` and `donor_state`.

Only an approximation of the real CA/TX records (the national PUMS file, `popfair-data pums`, has
them): labelled as such in the run notes and in `population_transport.csv`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from popfair.core.errors import DataError
from popfair.data import data_file
from popfair.population.experience import age_group
from popfair.population.pums import (
    decode_education,
    decode_race,
    decode_sex,
    state_table,
)

CELLS_FILE = ("population", "acs_pums_2024_1yr_age18_44_demographic_cells_by_state.csv.gz")
OEWS_FILE = ("population", "bls_oews_may2025_state_employment_target_soc.csv")
TARGETS = ("CA", "TX")
CA_TX_POLICIES = ("transport", "omit")
DONOR_POLICIES = ("region", "all")
KAPPA = 20.0  # pseudo-records pulling a sparse cell's ratio toward its parent cell's
CELL = ["gender", "age_group", "race", "edu_level"]
PARENT = ["gender", "age_group", "race"]
AGE_GROUP_START = (18, 25, 30, 35, 40)  # the experience module's AGE_GROUPS
# OCCP -> the OEWS SOC series whose state employment gives the occupation's state shares. Teachers:
# BLS publishes no state series for 25-2020, so its detailed codes are summed (25-2023, middle-school
# career/technical, is not released for CA: 0.8% of the national 25-2020 total).
OCCP_SOC = {
    3255: ("29-1141",),
    2310: ("25-2021", "25-2022", "25-2023"),
    1021: ("15-1252",),
    800: ("13-2011",),
    6260: ("47-2061",),
}
NATIONAL_SOC = {2310: "25-2020"}


@dataclass(frozen=True)
class Transported:
    """Rows added for CA and TX and one summary row per target state."""

    rows: pd.DataFrame
    summary: pd.DataFrame


@lru_cache(maxsize=1)
def oews_employment() -> pd.DataFrame:
    """OEWS May 2025 employment by state FIPS (00 = national) and SOC; unreleased values are NaN."""
    table = pd.read_csv(data_file(*OEWS_FILE), dtype={"state_fips": str, "employment": str})
    table["employment"] = pd.to_numeric(table["employment"], errors="coerce")
    return table[["state_fips", "soc_code", "employment"]]


def oews_share(occp: int, usps: str) -> float:
    """State `usps`'s share of national OEWS employment in the occupation's SOC."""
    if occp not in OCCP_SOC:
        raise DataError(
            f"population.ca_tx=transport: OCCP {occp} has no OEWS series to calibrate CA/TX to "
            f"(available for {sorted(OCCP_SOC)}); set population.ca_tx=omit for this occupation"
        )
    fips = f"{int(state_table().reset_index().set_index('usps').loc[usps, 'fips']):02d}"
    table = oews_employment()
    state = table[(table["state_fips"] == fips) & table["soc_code"].isin(OCCP_SOC[occp])]["employment"].sum()
    national_soc = NATIONAL_SOC.get(occp, OCCP_SOC[occp][0])
    national = table[(table["state_fips"] == "00") & (table["soc_code"] == national_soc)]["employment"]
    return float(state / national.iloc[0])


@lru_cache(maxsize=4)
def population_cells(below_hs: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every state's 18-44 persons as (weight, records) tables: rows CELL, columns USPS state codes."""
    raw = pd.read_csv(
        data_file(*CELLS_FILE), usecols=["ST", "SEX", "AGEP", "RAC1P", "HISPANIC", "SCHL", "n_records", "weight"]
    )
    # aggregate on the numeric codes first (single-year ages -> bands), then decode the ~10x fewer rows
    raw["AGEP"] = np.asarray(AGE_GROUP_START)[np.digitize(raw["AGEP"], AGE_GROUP_START) - 1]
    raw = raw.groupby(["ST", "SEX", "AGEP", "RAC1P", "HISPANIC", "SCHL"], as_index=False)[["n_records", "weight"]].sum()
    edu = decode_education(raw["SCHL"], below_hs)  # SCHL 15 stands for 1-15 (below high school)
    raw = raw[edu.notna().to_numpy()]
    edu = edu.dropna()
    cells = pd.DataFrame(
        {
            "usps": state_table()["usps"].reindex(raw["ST"]).to_numpy(dtype=object),
            "gender": decode_sex(raw["SEX"]),
            "age_group": age_group(raw["AGEP"]),
            "race": decode_race(raw["RAC1P"], raw["HISPANIC"] + 1),
            "edu_level": edu.to_numpy(dtype=object),
            "n": raw["n_records"].to_numpy(float),
            "weight": raw["weight"].to_numpy(float),
        }
    )
    wide = cells.pivot_table(index=CELL, columns="usps", values=["weight", "n"], aggfunc="sum", fill_value=0.0)
    return wide["weight"], wide["n"]


def donor_states(target: str, policy: str, present: set[str]) -> list[str]:
    """Donor states for `target`: its Census region without it (policy 'region') or every other state
    (never CA or TX, which have no occupation records in the bundled extract)."""
    states = state_table().set_index("usps")
    pool = (
        states.index
        if policy == "all"
        else states.index[states["census_region"] == states.loc[target, "census_region"]]
    )
    return sorted(s for s in pool if s in present and s not in TARGETS and s != target)


def density_ratio(weight: pd.DataFrame, records: pd.DataFrame, target: str, donors: list[str]) -> pd.Series:
    """r(d) = p_target(d) / p_donors(d) over CELL, shrunk toward the PARENT cell's ratio (population_cells)."""
    don_present = weight[donors].sum(axis=1) > 0
    weight, records = weight[don_present], records[don_present]  # cells no donor person is in: no ratio
    tgt, don = weight[target], weight[donors].sum(axis=1)
    n_donor = records[donors].sum(axis=1)
    fine = (tgt / tgt.sum()) / (don / don.sum())
    tgt_parent, don_parent = tgt.groupby(level=PARENT).sum(), don.groupby(level=PARENT).sum()
    parent = ((tgt_parent / tgt.sum()) / (don_parent / don.sum())).reindex(fine.index.droplevel("edu_level"))
    shrunk = (n_donor.to_numpy() * fine.to_numpy() + KAPPA * parent.to_numpy()) / (n_donor.to_numpy() + KAPPA)
    return pd.Series(shrunk, index=fine.index)


def systematic_sample(probabilities: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of n systematic PPS draws (a record may repeat when n * p_i > 1)."""
    cumulative = np.cumsum(probabilities / probabilities.sum()) * n
    points = rng.uniform() + np.arange(n)
    return np.minimum(np.searchsorted(cumulative, points, side="right"), len(probabilities) - 1)


def ess(weights: np.ndarray) -> float:
    """Kish effective sample size of weighted donor records."""
    return float(weights.sum() ** 2 / (weights**2).sum())


def transport_state(
    records: pd.DataFrame, target: str, pool_states: list[str], n_target: int, below_hs: str, seed: list[int]
) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """(n_target donor rows drawn for `target`, the donor pool's transport weights, the pool).

    The rows keep their donor state; the caller relabels them. Used for CA/TX and, in
    benchmarks/transport_validation.py, for held-out states whose real records are known."""
    weight_cells, record_cells = population_cells(below_hs)
    pool = records[records["state"].isin(pool_states)].sort_values(CELL + ["age"], kind="stable")
    ratio = density_ratio(weight_cells, record_cells, target, pool_states)
    weights = (
        pool["weight"].to_numpy(float) * ratio.reindex(pd.MultiIndex.from_frame(pool[CELL])).fillna(0.0).to_numpy()
    )
    if weights.sum() <= 0:
        raise DataError(f"transport to {target}: no donor records with a positive density ratio")
    pick = systematic_sample(weights, n_target, np.random.default_rng(seed))
    return pool.iloc[pick].reset_index(drop=True), weights, pool


def transport_ca_tx(records: pd.DataFrame, occp: int, below_hs: str, donors: str) -> Transported:
    """CA and TX rows for one occupation (columns of `records`, plus transported and donor_state)."""
    present = set(records["state"].unique())
    if present & set(TARGETS):
        raise DataError(
            "population.ca_tx=transport: the PUMS records already contain CA or TX; transport is "
            "only for the bundled 48-state extract"
        )
    shares = {t: oews_share(occp, t) for t in TARGETS}
    total = len(records) / (1 - sum(shares.values()))
    total_weight = records["weight"].sum() / (1 - sum(shares.values()))
    regions = state_table().set_index("usps")["census_region"]
    parts, summary = [], []
    for i, target in enumerate(TARGETS):
        pool_states = donor_states(target, donors, present)
        n_target = round(shares[target] * total)
        rows, weights, pool = transport_state(records, target, pool_states, n_target, below_hs, [occp, i, 13])
        rows = rows.assign(
            donor_state=rows["state"],
            state=target,
            region=regions[target],
            weight=shares[target] * total_weight / n_target,
            transported=True,
        )
        parts.append(rows)
        hisp = lambda frame, w: float(np.average(frame["race"] == "hispanic", weights=w))
        summary.append(
            {
                "target": target,
                "oews_share": shares[target],
                "rows": n_target,
                "row_share": n_target / total,
                "donor_policy": donors,
                "donor_states": " ".join(pool_states),
                "donor_records": len(pool),
                "donor_ess": ess(weights),
                "hispanic_share_donors": hisp(pool, pool["weight"]),
                "hispanic_share_transported": hisp(rows, rows["weight"]),
            }
        )
    return Transported(rows=pd.concat(parts, ignore_index=True), summary=pd.DataFrame(summary))


def transport_note(row: dict[str, Any]) -> str:
    """The note a transported state's rows carry (one row of `OccupationModel.transport`)."""
    return (
        f"{row['target']} transported (approximation; the national PUMS has the real records): {row['rows']} rows "
        f"= {100 * row['row_share']:.1f}% of applicants (OEWS May 2025 share {100 * row['oews_share']:.1f}%), "
        f"drawn from {row['donor_records']} records of {row['donor_policy']} donor states [{row['donor_states']}] "
        f"reweighted by the {row['target']}/donor density ratio of sex x age group x race x education "
        f"(effective n {row['donor_ess']:.0f}; Hispanic share {100 * row['hispanic_share_donors']:.1f}% in donors "
        f"-> {100 * row['hispanic_share_transported']:.1f}% transported; donors chosen by a held-out-state check, "
        "benchmarks/transport_validation.py)"
    )
