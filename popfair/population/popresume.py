"""PopResume population: applicants drawn from ACS PUMS microdata of one occupation, as an explicit SCM.

Structural causal model (per occupation J; every U_* is one Uniform(0,1) per applicant):

    gender, race, age        <- the PUMS record (Z and X; never intervened on except X itself)
    state     = F^-1(U_state | gender, race, age group)                 smoothed PUMS conditional
    edu_level = F^-1(U_edu   | gender, race, age group, region(state))  smoothed PUMS conditional
    exp_year  = F^-1(U_exp   | gender, race, age, edu_level)  round(TruncNormal(f, sigma, [0, age-18])), P2
    first_name= F^-1(U_first | gender, birth year)        SSA counts, P3
    surname   = F^-1(U_sur   | race)                      Census 2010 count x race share, P4

Factual rows keep each record's own state and education (the real joint of P1) and draw experience
and names forward with keyed uniforms U = hash(applicant_id, seed, variable). A counterfactual
abducts every U from the factual row (uniform on the interval of CDF values that reproduces it,
noise keyed by applicant and seed: common random numbers) and re-evaluates the equations with X
changed; at the applicant's own X it returns the factual row exactly. Conditionals back off
hierarchically (finest cell -> coarser cells -> occupation marginal) so every counterfactual cell
has a proper distribution. The state and education conditionals are fitted on the population the
factual rows are (every record once, or PWGTP-weighted for `population.n` draws:
`OccupationModel.conditionals`), so each group's worlds reproduce its factual rows. Grouped columns
(paper C.4) are functions of the raw ones.

Below high school (SCHL 1-15): the paper's resumes have seven levels starting at HS/GED, so the
default `below_hs: drop` drops these records and says how many in the notes; `below_hs: hs_ged` keeps
them as HS/GED.

California and Texas: the bundled 2024 extract lacks them; by default (`ca_tx: transport`) they are
put back by transporting donor-state records (popfair.population.transport). A user's `pums_path`
(e.g. the national file from `popfair-data pums`) is used as is: it never transports.
Experience: NLSY97 microdata by sex, race, age and education (`experience_source: nlsy97`), or the
PSID cell tables without race (`psid_cells`); see popfair.population.experience.

Every run says which population it used (tag `population.source`) and whether its applicant count
matches the paper's Table 3 (tag `population.table3`); the bundled data do not reproduce Table 3."""

from __future__ import annotations

import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from popfair.core.constraints import Boolean, Interval, ListOf, Options, Rules, validate
from popfair.core.constraints import Path as FilePath
from popfair.core.errors import ConfigError, DataError, require
from popfair.core.types import Profiles, Roles
from popfair.data import data_file
from popfair.population import experience, pums, scm, transport
from popfair.population.base import GroupsColumns, LogsDiagnostics, copy_without_diagnostics
from popfair.population.cache import disk_cached, disk_cached_frame, file_fingerprint, frame_digest
from popfair.population.experience import (
    EXPERIENCE_SOURCES,
    age_group,
    experience_model_for,
    source_digest,
)
from popfair.population.fetch import resolve_pums_path
from popfair.population.names import (
    first_names,
    first_names_key,
    name_groupings,
    prefetch_names,
    surnames,
    surnames_key,
)
from popfair.population.occupation import Occupation
from popfair.population.occupation_model import OccupationModel, fit_conditionals
from popfair.population.protected import INTERVENABLE, LEVELS, RACE_GROUPS, ProtectedAttribute, select_races
from popfair.population.pums import (
    BELOW_HS_POLICIES,
    BUNDLED_NOTE,
    BUNDLED_PUMS,
    EDU_GROUP,
    bundled_survey_year,
    decode_education,
    decode_race,
    decode_sex,
    load_pums,
    occupation_records,
    region_of,
    state_table,
)
from popfair.population.scm import DRAW_TAG, IID_DRAW, keyed_choice, keyed_uniforms

MAX_N = 1_000_000  # beyond this a resample is a typo, not a study
MAX_RESAMPLE_FACTOR = 20  # n above this many times the occupation's records only duplicates records


@lru_cache(maxsize=32)
def occupation_model(
    pums_path: str | None,
    occp: int,
    below_hs: str,
    ca_tx: str = "transport",
    transport_donors: str = "all",
    experience_source: str = "nlsy97",
) -> OccupationModel:
    """Decode one occupation's PUMS records, put CA/TX back (bundled extract only) and fit its conditionals.
    Cached in-process and on disk, keyed by every input file's fingerprint, the arguments and this code."""
    # ca_tx as the key applies it (a user's file is never transported): the fit is what the key describes
    parts, modules, ca_tx = _occupation_key(pums_path, occp, below_hs, ca_tx, transport_donors, experience_source)
    return disk_cached(
        f"occupation_{occp}",
        parts,
        modules,
        lambda: _fit_occupation(pums_path, occp, below_hs, ca_tx, transport_donors, experience_source),
    )


def _occupation_key(
    pums_path: str | None, occp: int, below_hs: str, ca_tx: str, transport_donors: str, experience_source: str
) -> tuple[list[Any], list[Any], str]:
    """What an occupation model is built from: the input files' fingerprints, the arguments, and the
    modules whose source builds it (its disk cache's key, and part of a drawn table's); and the CA/TX
    policy applied (a user's PUMS file is used as it is: never transported)."""
    source = Path(pums_path) if pums_path else data_file(*BUNDLED_PUMS)
    if not source.exists():
        raise DataError(f"population.pums_path: file not found: {source}")
    ca_tx = "omit" if pums_path else ca_tx
    parts: list[Any] = [
        file_fingerprint(source),
        occp,
        below_hs,
        ca_tx,
        transport_donors,
        experience_source,
        source_digest(experience_source),
    ]
    if ca_tx == "transport":
        parts += [file_fingerprint(data_file(*transport.CELLS_FILE)), file_fingerprint(data_file(*transport.OEWS_FILE))]
    return (
        parts,
        [sys.modules[__name__], sys.modules[OccupationModel.__module__], pums, scm, experience, transport],
        ca_tx,
    )


def _fit_occupation(
    pums_path: str | None, occp: int, below_hs: str, ca_tx: str, transport_donors: str, experience_source: str
) -> OccupationModel:
    pums, survey_year = load_pums(pums_path)
    raw = occupation_records(pums, occp)
    edu = decode_education(raw["SCHL"], below_hs)
    states = state_table().reindex(raw["ST"])
    if states["usps"].isna().any():
        bad = sorted(raw.loc[states["usps"].isna().to_numpy(), "ST"].unique().tolist())
        raise DataError(f"PUMS records with unknown state FIPS codes {bad[:5]}")
    if states["census_region"].isna().any():  # Puerto Rico: its own survey, no Census region (an R variable)
        raise DataError(
            f"population.pums_path: {int(states['census_region'].isna().sum())} records from Puerto Rico "
            "(ST 72) have no Census region; keep the 50 states + DC (as `popfair-data pums` does)"
        )
    records = pd.DataFrame(
        {
            "gender": decode_sex(raw["SEX"]),
            "race": decode_race(raw["RAC1P"], raw["HISP"]),
            "age": raw["AGEP"].to_numpy(),
            "state": states["usps"].to_numpy(dtype=object),
            "region": states["census_region"].to_numpy(dtype=object),
            "edu_level": edu.to_numpy(dtype=object),
            "weight": raw["PWGTP"].to_numpy(),
            "rac1p": raw["RAC1P"].to_numpy(),
            "transported": False,
            "donor_state": "",
        }
    )
    keep = edu.notna().to_numpy()
    dropped = int((~keep).sum())
    records = records[keep].reset_index(drop=True)
    if records.empty:
        raise DataError(f"OCCP {occp}: no records left after the below-HS policy {below_hs!r}")
    records["age_group"] = age_group(records["age"])
    moved = None
    if ca_tx == "transport":
        moved = transport.transport_ca_tx(records, occp, below_hs, transport_donors)
        records = pd.concat([records, moved.rows], ignore_index=True)
    source = (
        f"ACS PUMS {survey_year} 1-year bundled extract (48 states + DC)"
        + (
            f" + CA/TX transported from {transport_donors} donors (density ratio, OEWS May 2025 shares)"
            if moved is not None
            else ", CA and TX omitted"
        )
        if pums_path is None
        else f"ACS PUMS {survey_year} from population.pums_path={pums_path} ({records['state'].nunique()} states)"
    )
    state, education = fit_conditionals(records, records["weight"].to_numpy(float))
    state_by_row, education_by_row = fit_conditionals(records, np.ones(len(records)))
    experience = experience_model_for(
        experience_source, records["gender"], records["race"], records["age"], records["edu_level"], records["weight"]
    )
    return OccupationModel(
        records,
        survey_year,
        dropped,
        state,
        education,
        state_by_row,
        education_by_row,
        experience,
        source,
        None if moved is None else moved.summary,
    )


def add_groupings(table: pd.DataFrame, survey_year: int) -> pd.DataFrame:
    """Add the C.4 grouped columns (edu_group, name typicalities, surname typicality; region exists)."""
    grouped = name_groupings(table["first_name"], table["surname"], survey_year)
    return table.assign(edu_group=table["edu_level"].map(EDU_GROUP).to_numpy(dtype=object), **grouped)


class PopResumePopulation(GroupsColumns, LogsDiagnostics):
    """Every PUMS record of the occupation (default) or `n` draws weighted by PWGTP, with experience
    and names drawn from the SCM in the module docstring. It declares its grouped role columns
    (`GroupsColumns`) and draws counterfactual worlds (popfair.population.worlds)."""

    design = "population"  # popfair.design.population: one resume per prompt, a 0-100 score
    # The SFM roles' grouped columns (paper C.4) and the raw column each groups: the resume shows the
    # raw one, so whatever a screener reads from it beyond its group is not in the model's mediator
    # (popfair.estimate.pse.estimand). Role columns not listed here are the values the resume shows.
    grouped_from: ClassVar[dict[str, str]] = {
        "edu_group": "edu_level",
        "name_gender_typicality": "first_name",
        "name_age_typicality": "first_name",
        "surname_race_typicality": "surname",
        "region": "state",
    }

    parameter_constraints: ClassVar[Rules] = {
        "n": [None, Interval(int, 1, MAX_N)],  # null: every record
        "pums_path": [None, FilePath()],
        "below_hs": Options(BELOW_HS_POLICIES),
        "diagnostics": Boolean(),
        "ca_tx": Options(transport.CA_TX_POLICIES),
        "transport_donors": Options(transport.DONOR_POLICIES),
        "experience_source": Options(EXPERIENCE_SOURCES),
        "exclude_races": ListOf(Options(RACE_GROUPS), f"ACS race groups ({', '.join(RACE_GROUPS)})"),
    }

    def __init__(
        self,
        n: int | None = None,
        pums_path: str | None = None,
        below_hs: str = "drop",
        diagnostics: bool = True,
        ca_tx: str = "transport",
        transport_donors: str = "all",
        experience_source: str = "nlsy97",
        exclude_races: tuple[str, ...] = (),  # ACS race groups left out of the applicants (RACE_GROUPS)
    ) -> None:
        validate(
            self.parameter_constraints,
            {
                "n": n,
                "pums_path": pums_path,
                "below_hs": below_hs,
                "diagnostics": diagnostics,
                "ca_tx": ca_tx,
                "transport_donors": transport_donors,
                "experience_source": experience_source,
                "exclude_races": list(exclude_races),
            },
        )
        self.n = n
        self.pums_path = pums_path
        self.ca_tx = ca_tx
        self.transport_donors = transport_donors
        self.experience_source = experience_source
        self.exclude_races = tuple(exclude_races)
        self.below_hs = below_hs
        self.diagnostics = diagnostics
        self.timings: dict[str, float] = {}  # seconds per stage of the last sample()

    def model(self, occp: int) -> OccupationModel:
        return occupation_model(*self._model_args(occp))

    def _model_args(self, occp: int) -> tuple[str | None, int, str, str, str, str]:
        """What `occupation_model` is called with (and a drawn table's key is built from)."""
        pums_path = resolve_pums_path(self.pums_path) if self.pums_path else None
        return pums_path, int(occp), self.below_hs, self.ca_tx, self.transport_donors, self.experience_source

    def without_diagnostics(self) -> PopResumePopulation:
        """The same applicants drawn without their diagnostics (`LogsDiagnostics`): a copy, this one kept."""
        return copy_without_diagnostics(self)

    def sample(self, occupation: Occupation, protected: ProtectedAttribute, seed: int) -> Profiles:
        clock = _Clock()
        # cold name tables are built by a forked worker beside the occupation model's fit
        names_ready = prefetch_names(None if self.pums_path else bundled_survey_year())
        model = self.model(occupation.occp)
        clock.lap("pums_and_fit")
        if self.n is not None and self.n > MAX_RESAMPLE_FACTOR * len(model.records):
            raise ConfigError(
                f"population.n: {self.n} is more than {MAX_RESAMPLE_FACTOR}x the {len(model.records)} PUMS "
                f"records of OCCP {occupation.occp}; a resample that large only repeats records. Use at "
                f"most {MAX_RESAMPLE_FACTOR * len(model.records)} or null for all records."
            )
        # kept on disk as Parquet (population.cache.disk_cached_frame): drawing a nurse table takes
        # about 0.2 s, reading it back a fraction; keyed by all the model is built from, the name
        # tables' inputs, n, seed and the occupation, and the source of the modules that draw it
        parts, modules, _ = _occupation_key(*self._model_args(occupation.occp))
        names = [first_names_key(model.survey_year), surnames_key()]
        table = disk_cached_frame(
            f"popresume_{occupation.occp}",
            [*parts, [key for key, _ in names], self.n, seed, occupation.key],
            list(dict.fromkeys([*modules, *(m for _, mods in names for m in mods)])),  # in a fixed order
            lambda: self._draw_table(model, occupation, seed, names_ready, clock),
        )
        table, race_notes = select_races(table, protected, self.exclude_races)  # AIAN, other race, ... left out
        clock.lap("table")
        notes = [f"population.source: {model.source}", *race_notes]
        if model.transport is not None:
            notes += [transport.transport_note(row) for row in model.transport.to_dict("records")]
        elif self.pums_path is None:
            notes.append(BUNDLED_NOTE)
        table3 = pums.table3_label(occupation.occp, len(table), model.survey_year, self.n)
        notes.append(f"population.table3: {table3}")
        if model.dropped_below_hs:
            notes.append(
                f"{model.dropped_below_hs} PUMS records of OCCP {occupation.occp} below high school "
                "dropped (population.below_hs=drop: not one of the seven resume education levels)"
            )
        artifacts: dict[str, Any] = {}
        if self.diagnostics:
            from popfair.population.diagnostics import cached_population_artifacts

            artifacts = cached_population_artifacts(table, model, occupation)
        clock.lap("diagnostics")
        self.timings = clock.laps
        return Profiles(
            table=table,
            roles=roles_for(protected),
            jobs={occupation.key: occupation.job},
            notes=notes,
            artifacts=artifacts,
            tags={
                "population.source": model.source,
                "population.table3": table3,
                **({DRAW_TAG: IID_DRAW} if self.n is not None else {}),
            },
        )

    def _draw_table(
        self, model: OccupationModel, occupation: Occupation, seed: int, names_ready: Any, clock: _Clock
    ) -> pd.DataFrame:
        """The applicants of `sample`: records (all, or n keyed draws), experience, names, groupings."""
        records = model.records
        if self.n is not None:
            # applicant i's record is keyed by (its id, seed), in draw order: a sample of n is the
            # first n of any larger sample (growing population.n re-draws and re-pays for nothing)
            drawn = pd.Series([f"{occupation.key}-{i:06d}" for i in range(self.n)], dtype=object)
            pick = keyed_choice(keyed_uniforms(drawn, seed, "record"), records["weight"].to_numpy(dtype=float))
            records = records.iloc[pick].reset_index(drop=True).assign(weight=1)  # self-weighting
        ids = pd.Series([f"{occupation.key}-{i:06d}" for i in range(len(records))], dtype=object)
        table = pd.DataFrame(
            {
                "applicant_id": ids,
                "job_id": occupation.key,
                "gender": records["gender"],
                "race": records["race"],
                "age": records["age"],
                "birth_year": model.survey_year - records["age"],
                "state": records["state"],
                "region": records["region"],
                "edu_level": records["edu_level"],
                "weight": records["weight"],
                "rac1p": records["rac1p"],
                "transported": records["transported"],
                "donor_state": records["donor_state"],
            }
        )
        clock.lap("records")
        table["exp_year"] = model.experience.draw(
            table["gender"], table["race"], table["age"], table["edu_level"], keyed_uniforms(ids, seed, "exp_year")
        )
        clock.lap("experience")
        names_ready()
        table["first_name"] = first_names(model.survey_year).draw(
            table["gender"], table["birth_year"], keyed_uniforms(ids, seed, "first_name")
        )
        table["surname"] = surnames().draw(table["race"], keyed_uniforms(ids, seed, "surname"))
        clock.lap("names")
        table = add_groupings(table, model.survey_year)
        clock.lap("groupings")
        return table

    def counterfactual(self, profiles: Profiles, x_y: str, x_b: str, x_r: str, seed: int) -> pd.DataFrame:
        """The same applicants under interventions on X (common random numbers).

        Z and all noise stay fixed; X is set to x_y; R (first_name, surname, state, region and their
        groupings) is drawn as under X=x_r; B (edu_level, edu_group, exp_year) as under X=x_b and R=R_{x_r}.
        With x_y = x_b = x_r equal to an applicant's own X, the row equals the factual row.
        `seed` keys the abducted noise: use one seed for all the worlds that one estimate compares."""
        x = profiles.roles.x
        require(x in INTERVENABLE, "counterfactual.x", f"{x!r}: counterfactual worlds set one of {INTERVENABLE}")
        for name, level in (("x_y", x_y), ("x_b", x_b), ("x_r", x_r)):
            require(
                level in LEVELS[x],
                f"counterfactual.{name}",
                f"{level!r} is not a level of {x}; choose one of {list(LEVELS[x])}",
            )
        table = profiles.table
        needed = "applicant_id job_id gender race age birth_year state edu_level exp_year first_name surname"
        missing = [c for c in needed.split() if c not in table.columns]
        if missing:
            raise DataError(f"counterfactual: profile table lacks columns {missing}")
        occps = {}
        for job_id in pd.unique(table["job_id"]):
            job = profiles.jobs.get(job_id)
            if job is None or "occp" not in job.attributes:
                raise DataError(f"counterfactual: job {job_id!r} has no OCCP code in profiles.jobs")
            occps[job_id] = int(job.attributes["occp"])

        def draw() -> pd.DataFrame:
            groups = table.groupby("job_id", sort=False)
            drawn = [self._counterfactual_rows(r, self.model(occps[j]), x, x_y, x_b, x_r, seed) for j, r in groups]
            return pd.concat(drawn).loc[table.index]

        # kept on disk as a drawn table is (a rerun, every screener of a sweep: 0.3 s of the default case); keyed
        # by the rows, intervention and seed, the models' and name tables' inputs and the drawing modules' source
        keys = [_occupation_key(*self._model_args(occp))[:2] for occp in sorted(set(occps.values()))]
        keys += [first_names_key(year) for year in sorted({self.model(o).survey_year for o in occps.values()})]
        keys.append(surnames_key())
        # the population the rows are (every record once, or weighted draws) picks the conditionals
        parts = [frame_digest(table), occps, x, x_y, x_b, x_r, seed, self.n is not None, [key for key, _ in keys]]
        modules = [sys.modules[OccupationModel.__module__], *(module for _, used in keys for module in used)]
        return disk_cached_frame("worlds_popresume", parts, list(dict.fromkeys(modules)), draw)  # in a fixed order

    def _counterfactual_rows(
        self, rows: pd.DataFrame, model: OccupationModel, x: str, x_y: str, x_b: str, x_r: str, seed: int
    ) -> pd.DataFrame:
        ids = rows["applicant_id"]
        # the conditionals of the population the factual rows are: weighted draws, or every record once
        state_model, education_model = model.conditionals(weighted=self.n is not None)
        factual = rows.assign(age_group=age_group(rows["age"]), region=region_of(rows["state"]))
        first, last = first_names(model.survey_year), surnames()
        # abduction: the noise of every endogenous variable, consistent with the factual row
        u_state = state_model.abduct(factual, keyed_uniforms(ids, seed, "cf_state"))
        u_edu = education_model.abduct(factual, keyed_uniforms(ids, seed, "cf_edu_level"))
        u_exp = model.experience.abduct(
            factual["gender"],
            factual["race"],
            factual["age"],
            factual["edu_level"],
            factual["exp_year"],
            keyed_uniforms(ids, seed, "cf_exp_year"),
        )
        u_first = first.abduct(
            factual["gender"], factual["birth_year"], factual["first_name"], keyed_uniforms(ids, seed, "cf_first_name")
        )
        u_last = last.abduct(factual["race"], factual["surname"], keyed_uniforms(ids, seed, "cf_surname"))
        # R under X = x_r
        world_r = factual.assign(**{x: x_r})
        state = state_model.draw(world_r, u_state)
        out = rows.assign(
            state=state,
            region=region_of(state),
            first_name=first.draw(world_r["gender"], world_r["birth_year"], u_first),
            surname=last.draw(world_r["race"], u_last),
        )
        # B under X = x_b and R = R_{x_r}
        world_b = factual.assign(**{x: x_b}, state=out["state"], region=out["region"])
        edu = education_model.draw(world_b, u_edu)
        out["edu_level"] = edu
        out["exp_year"] = model.experience.draw(world_b["gender"], world_b["race"], world_b["age"], edu, u_exp)
        out[x] = x_y
        grouped = add_groupings(out[["first_name", "surname", "edu_level"]], model.survey_year)
        for column in grouped.columns.drop(["first_name", "surname", "edu_level"]):
            out[column] = grouped[column]
        return out


def roles_for(protected: ProtectedAttribute) -> Roles:
    """SFM roles on the grouped columns (paper C.4): the other demographic attribute and age are Z."""
    other = "race" if protected.name == "gender" else "gender"
    return Roles(
        x=protected.name,
        x0=protected.x0,
        x1=protected.x1,
        z=(other, "age"),
        b=("edu_group", "exp_year"),
        r=("name_gender_typicality", "name_age_typicality", "surname_race_typicality", "region"),
    )


class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now
