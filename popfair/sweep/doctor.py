"""`popfair doctor [overrides]`: the pre-flight checks (popfair/sweep/preflight.py) of the case or sweep the
overrides compose, as a table of checks with what to fix; exit status 0 only when every check passes.

`popfair doctor ARGS` is `python -m popfair check=true ARGS`: Hydra composes exactly what the run
would (experiment presets, -m grids, hydra.sweeper.params, the launcher), then nothing runs. In a
sweep the sweeper composes every case and calls `before_sweep`, which is also the gate every real
sweep passes before its first case: a failure there stops the sweep with the fix (the pip command,
the variable to export, or the override that leaves the failing cases out), and a dry run prints the
same failures as warnings and plans on."""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Sequence

from omegaconf import DictConfig

from popfair.sweep.preflight import Finding, Preflight, drop_cells, format_findings

log = logging.getLogger("popfair")


def _passing_cases(failures: Sequence[Finding], preflight: Preflight) -> str:
    """A line naming one override that runs just the cases passing every check, when several checks
    failed and such an override exists (each failure's own line names the one leaving out its cases)."""
    failed = {job for finding in failures for job in finding.jobs}
    if len(failures) < 2:
        return ""
    return "".join(
        f"\n  to run the {len(preflight.cases) - len(failed)} cases that pass every check: {override}"
        for override in drop_cells(failed, preflight.cases)[:1]
    )


def _report(preflight: Preflight, *, title: str) -> int:
    """Print every check; 0 when all passed, else 1."""
    findings = preflight.findings()
    failed = [f for f in findings if not f.check.ok]
    cases = len(preflight.cases)
    print(f"popfair doctor: {title}, {cases} case(s), {len(findings)} checks, {len(failed)} failed")
    print(format_findings(findings, preflight.cases, everything=True) + _passing_cases(failed, preflight))
    print("all checks passed" if not failed else f"{len(failed)} check(s) failed: see fix: above")
    return 1 if failed else 0


def doctor_case(cfg: DictConfig) -> int:
    """`popfair doctor` for one case (no -m): its checks, printed; the exit status."""
    from hydra.core.hydra_config import HydraConfig

    preflight = Preflight(probe=True)
    preflight.add_case(0, cfg, HydraConfig.get())
    return _report(preflight, title="one case")


class _Progress:
    """A grid's checks take seconds per distinct component: a line on standard error at the first case,
    then every PROGRESS_EVERY_S seconds, and when done, so a long check does not look hung."""

    PROGRESS_EVERY_S = 2.0

    def __init__(self, total: int, program: str) -> None:
        self.total, self.program = total, program
        self.start = self.last = time.perf_counter()
        self.shown = False

    def step(self, index: int) -> None:
        now = time.perf_counter()
        if self.total > 1 and (index == 0 or now - self.last >= self.PROGRESS_EVERY_S):
            print(
                f"{self.program}: checking case {index + 1} of {self.total} ({now - self.start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
            self.last, self.shown = now, True

    def done(self) -> None:
        if self.shown:
            print(
                f"{self.program}: {self.total} cases checked in {time.perf_counter() - self.start:.1f} s",
                file=sys.stderr,
                flush=True,
            )


def before_sweep(master: DictConfig, configs: Sequence[DictConfig], first_job: int) -> None:
    """Called by the sweeper with every composed case of a batch, before any of them is launched.
    check=true: print every check and exit. dry_run=true: print the failures as warnings. Otherwise a
    failure stops the sweep: the failures and their fixes, the parent run closed FAILED, exit 1."""
    start = time.perf_counter()
    doctor = bool(master.get("check", False))
    preflight = Preflight(whole_case=doctor or not master.get("dry_run", False), probe=doctor)
    progress = _Progress(len(configs), "popfair doctor" if doctor else "popfair pre-flight")
    for offset, config in enumerate(configs):
        progress.step(offset)
        preflight.add_case(first_job + offset, config)
    progress.done()
    log.info("popfair pre-flight: %d cases checked in %.1f s", len(configs), time.perf_counter() - start)
    if doctor:
        raise SystemExit(_report(preflight, title="sweep"))
    failures = preflight.failures()
    if not failures:
        return
    cases = sorted({job for finding in failures for job in finding.jobs})
    table = format_findings(failures, preflight.cases, everything=False) + _passing_cases(failures, preflight)
    if master.get("dry_run", False):
        print(
            f"popfair pre-flight: {len(cases)} of {len(configs)} cases would fail; a real run of this sweep "
            f"stops here with:\n{table}",
            flush=True,
        )
        return
    print(
        f"popfair pre-flight: {len(cases)} of {len(configs)} cases cannot run; the sweep stops before its "
        f"first case (nothing was run, nothing paid):\n{table}",
        flush=True,
    )
    from popfair.sweep.callbacks import abandon_parent

    abandon_parent(master, f"pre-flight: {len(failures)} problem(s) in {len(cases)} case(s)")
    print("popfair: fix the above (or leave those cases out) and run the sweep again", file=sys.stderr)
    raise SystemExit(1)


def doctor_help() -> str:
    """`popfair doctor --help`: what the command does and how it is called (not the main help)."""
    return (
        "popfair doctor [-m] [group=option ...] [key=value ...]\n\n"
        "The pre-flight checks of the case (or, with -m, the sweep) the same arguments would run with\n"
        "`popfair`: extras installed, API keys set, model and tracking server reachable, config settings\n"
        "valid, and the cost of what would be sent. Prints one line per check with the fix, and exits 0\n"
        "only when every check passes. Nothing is screened, paid for or logged.\n\n"
        "  popfair doctor screener=gpt4o_mini occupation=teacher\n"
        "  popfair doctor -m experiment=popresume_grid\n\n"
        "`popfair --help` lists the config groups and their options."
    )


def command_line(args: Sequence[str]) -> list[str]:
    """The `python -m popfair` arguments `popfair doctor ARGS` stands for: check mode, and Hydra's own
    output (run or sweep folder, .hydra/, log file) kept out of the user's folder. Appended after the
    user's arguments: Hydra's flags (-m, --cfg) must come before the overrides."""
    scratch = f"{tempfile.gettempdir()}/popfair-doctor"
    return [*args, "check=true", "hydra.output_subdir=null", f"hydra.run.dir={scratch}", f"hydra.sweep.dir={scratch}"]
