"""What every case adds to its MLflow run for the run page (popfair.report.run_page): the description,
the effects as a table artifact, the "not identified" tags, and the population or table as the run's
dataset input with its digest. Shared by generated cases (`PopulationCase`) and table cases (`TableCase`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popfair.core.types import Effects, Profiles
from popfair.population.base import population_name
from popfair.report.run_page import DESCRIPTION_TAG, effects_records, not_identified_tags, run_description, unit_tag
from popfair.runtime.version import __version__
from popfair.track.mlflow_tracker import DatasetInput, RunLogger, frame_digest, git_commit

EFFECTS_TABLE = "effects_table.json"  # the MLflow table artifact of the effects
DIGEST_CHARS = 16  # of the sha256 in the dataset's digest (MLflow keeps at most 36); its profile has all 64
SCHEMA_ROWS = 200  # rows sent for the dataset's schema (the profile counts them all)


def provenance() -> dict[str, str]:
    """popfair's version and, in a git checkout, the commit (reports and the run page carry both)."""
    commit = git_commit()
    return {"popfair": __version__, **({"commit": commit[:12]} if commit and commit != "unknown" else {})}


def page_tags(
    title: str,
    effects: Effects,
    facts: Mapping[str, str],
    *,
    ratios: Any = None,
    notes: list[str] | tuple[str, ...] = (),
    power: Any = None,
) -> dict[str, str]:
    """The run page's tags: its description, `<effect>.identified` and `not_identified`, and `unit`."""
    shown = {**facts, **provenance()}
    description = run_description(title, effects, facts=shown, ratios=ratios, notes=notes, power=power)
    return {DESCRIPTION_TAG: description, **not_identified_tags(effects), **unit_tag(effects)}


def generated_page_tags(experiment: Any, result: Any) -> dict[str, str]:
    """`page_tags` of a generated case (popfair.case.population.PopulationCase) and its RunResult."""
    from popfair.report.audit import impact_ratios_of

    population = population_name(experiment.population)
    return page_tags(
        experiment.mlflow_name,
        result.effects,
        {
            "applicants": f"{result.n_rows:,}",
            "failed screens": f"{result.n_failed:,}",
            "estimator": experiment.estimator.name,
            "population": f"{population} (seed {experiment.seed})",
        },
        ratios=impact_ratios_of(result.audit) or impact_ratios_of(result.effects),
        notes=result.notes,
        power=result.power,
    )


def log_effects_table(run: RunLogger, effects: Effects) -> None:
    if len(effects.table):
        run.table(EFFECTS_TABLE, effects_records(effects))


def population_dataset(profiles: Profiles, name: str, seed: int) -> DatasetInput:
    """The applicants a generated case drew, as its dataset input: digest over their rows."""
    table = profiles.table
    digest = frame_digest(table)
    return DatasetInput(
        name=f"{name} (seed {seed})",
        digest=digest[:DIGEST_CHARS],
        sample=table.head(SCHEMA_ROWS),
        source={"popfair.population": name, "seed": str(seed), **profiles.tags},
        profile={"num_rows": len(table), "num_columns": table.shape[1], "sha256": digest},
        context="population",
    )


def table_dataset(source: Any, shown_as: str, sample: Any) -> DatasetInput:
    """A table case's source as its dataset input: the file's name (never its path) or the database's
    table or query, digest from the file's sha256 or the rows' checksum."""
    fingerprint = {str(k): str(v) for k, v in source.fingerprint.items() if v}
    full = next(iter(fingerprint.values()), "") or frame_digest(sample)
    return DatasetInput(
        name=shown_as,
        digest=full[:DIGEST_CHARS],
        sample=sample.head(SCHEMA_ROWS),
        source={"popfair.table": shown_as, "format": str(source.format), "kind": str(source.kind), **fingerprint},
        profile={"num_rows": int(source.rows_used), "rows_read": int(source.rows_read), **fingerprint},
        context="table",
    )
