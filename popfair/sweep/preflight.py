"""Pre-flight checks: what would stop a case or a sweep, found before anything runs.

Every sweep runs the cheap checks over all its cases before case 1 (PopfairSweeper), and a dry-run
plan prints them as warnings; `popfair doctor` (popfair/sweep/doctor.py) runs them, and one request
per model endpoint that generates nothing, and prints every check. Each distinct thing (a screener config, a cache, a
tracking store) is checked once, however many cases share it.

The cheap checks: every case is built as it will run (a bad config value, an API key not set, an
optional extra not installed, a photo folder missing: the errors the case itself would raise), the
response cache and the MLflow store are writable or reachable, there is disk space for the plan, and
the launcher's requirements hold (a launcher spreading cases over machines needs a server cache and a
tracking server)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from popfair.core.errors import MissingSecretError, PopfairError, require
from popfair.core.types import Check
from popfair.runtime.secrets import safe_url
from popfair.sweep.storage import (  # noqa: F401 - check_cache: the sweep's and doctor's check too
    check_cache,
    nearest_existing,
    tracking_problems,
    tracking_store_folder,
)

log = logging.getLogger("popfair")

# Rough disk use of one case, per applicant row: the scored table and response cache for text
# documents; with image renderers, the rendered pages kept in the document store as well.
BYTES_PER_ROW = {"text": 4_000, "image": 250_000}
BYTES_PER_CASE = 5_000_000  # run artifacts: figures, samples, config, effects


@dataclass
class Finding:
    """A check's result and the jobs (case numbers of the sweep) it concerns."""

    subject: str
    check: Check
    jobs: list[int] = field(default_factory=list)


def _fix_from_message(message: str) -> str | None:
    """The command an error message already names (pip install ..., export VAR=...), if any."""
    found = re.search(r"pip install '[^']+'|export [A-Za-z_][A-Za-z0-9_]*=\.\.\.", message)
    return found.group(0) if found else None


def _error_check(exc: BaseException) -> Check:
    """The failed check a build error stands for."""
    message = " ".join((str(exc) or repr(exc)).split())  # one line (driver errors span several)
    if isinstance(exc, MissingSecretError):
        name = "key"
    elif "optional extra" in message:
        name = "extra"
    else:
        name = "config"
    if not isinstance(exc, PopfairError):
        message = f"{type(exc).__name__}: {message}"
    return Check(name, False, message, _fix_from_message(message))


def _unresolved_key(node: Any) -> str:
    """A memo key for a node whose interpolations do not resolve (building it says why)."""
    return json.dumps(OmegaConf.to_container(node, resolve=False), sort_keys=True, default=repr)


def task_config(config: DictConfig) -> DictConfig:
    """The config a case's task sees: the composed config without Hydra's own node."""
    if "hydra" not in config:
        return config
    return OmegaConf.masked_copy(config, [str(key) for key in config if key != "hydra"])


class Preflight:
    """Checks over the composed configs of one case or of every case of a sweep.

    `add_case(job, config)` for each case (the full composed config, with its `hydra` node in a
    sweep), then `findings()`. `whole_case=False` (dry runs, whose cases build themselves next) leaves
    out the build of each whole case and checks only the parts a dry run builds without their key,
    extra or files. `probe=True` (popfair doctor) also sends each screener's endpoint one request that
    generates nothing."""

    def __init__(self, *, whole_case: bool = True, probe: bool = False) -> None:
        self.whole_case, self.probe = whole_case, probe
        self.cases: dict[int, list[str]] = {}  # job -> its overrides
        self._found: dict[tuple[str, bool, str, str], Finding] = {}
        self._memo: dict[tuple[str, str], list[tuple[str, Check]]] = {}  # (what, resolved key) -> results
        self._disk: dict[str, int] = defaultdict(int)  # folder -> bytes the cases will write there

    # --- collecting -------------------------------------------------------------------------------
    def _add(self, job: int, subject: str, check: Check) -> None:
        if not check.ok and self._known(job, check.detail):  # one cause met again through another part
            return
        # a failure met through several subjects (the same missing extra) is one finding
        key = (check.name, check.ok, check.detail, subject if check.ok else "")
        finding = self._found.setdefault(key, Finding(subject, check))
        if job not in finding.jobs:
            finding.jobs.append(job)

    def _once(self, job: int, what: str, key: str, subject: str, run: Callable[[], list[tuple[str, Check]]]) -> None:
        """Run a check once per distinct (what, key); every case sharing it is listed on its results.
        What it raises is its failed check, about `subject`."""
        memo = (what, key)
        if memo not in self._memo:
            try:
                self._memo[memo] = run()
            except Exception as exc:  # noqa: BLE001 - a check that breaks is a failed check, not a crash
                self._memo[memo] = [(subject, _error_check(exc))]
        for subject, check in self._memo[memo]:
            self._add(job, subject, check)

    def add_case(self, job: int, config: DictConfig, hydra: Any = None) -> None:
        """Check one case: `config` as composed for a sweep's case (with its `hydra` node), or a single
        run's task config with `hydra` its Hydra config. Each distinct component or store is checked once."""
        from popfair.sweep.in_process import task_of

        hydra = hydra if hydra is not None else config.get("hydra")
        self.cases[job] = [str(o) for o in hydra.overrides.task] if hydra is not None else []
        choices = hydra.runtime.choices if hydra is not None else {}
        task = task_of(config) or task_config(config)  # a dry run planned in process shares the case's view
        cache_ok = self._check_stores(job, task)  # first: a case that cannot open its cache says so once
        self._check_components(job, task, choices, cache_ok)
        if "hydra" in config:  # a sweep's case: the launcher is part of the plan
            self._check_launcher(job, config)

    def _check_components(self, job: int, task: DictConfig, choices: Any, cache_ok: bool) -> None:
        from popfair.case.compose import PLANNING_RELAXATIONS, build, keep_for_plan, resolved
        from popfair.case.population import PopulationCase
        from popfair.sweep.in_process import resolved_of

        # one resolved copy: the memo keys and the case's build (a dry run resolves just the parts,
        # unless its cases are planned in this process: then the case's own resolved copy)
        values = resolved(task) if self.whole_case else resolved_of(task)
        # the parts a dry run builds without their external resource, built as the run builds them
        for group in PLANNING_RELAXATIONS:
            node = task.get(group)
            if node is None:
                continue
            subject = f"{group}={choices.get(group) or node.get('name') or node.get('_target_')}"
            own = values[group] if values is not None else resolved(node)

            def built(node: DictConfig = node, group: str = group, own: Any = own, subject: str = subject) -> Any:
                error = None
                try:  # raises what the case would raise: a key, an extra, a file
                    keep_for_plan(node, group, own, build(node, group, values=own))  # built once: the plan's too
                except Exception as exc:  # noqa: BLE001 - the case would stop on it
                    error = exc
                checks = self._screener_checks(node, own, subject, cache_ok) if group == "screener" else []
                if any(check.name == "key" and not check.ok for _, check in checks):
                    return checks
                if error is not None:
                    return [*checks, (subject, _error_check(error))]
                return [(subject, Check("build", True, "builds as the run builds it (keys, extras, files)")), *checks]

            key = json.dumps(own, sort_keys=True, default=repr) if own is not None else _unresolved_key(node)
            self._once(job, group, key, subject, built)
        if not self.whole_case:
            return
        try:
            experiment = PopulationCase.from_config(task, dry_run=True, values=values)
        except Exception as exc:  # noqa: BLE001 - whatever would stop the case
            self._add(job, "case", _error_check(exc))
        else:
            self._add(job, "case", Check("config", True, "every config group builds"))
            if self.probe:  # popfair doctor: what the case can detect (it draws the case's sample)
                self._check_power(job, experiment, values)
                self._check_price(job, experiment)

    def _check_price(self, job: int, experiment: Any) -> None:
        """An estimator that says what it costs (pse_paper's iterations and minutes): its line."""
        from popfair.estimate.base import PricesItself

        if isinstance(experiment.estimator, PricesItself):
            rows = len(experiment.sample().table)
            self._add(job, "case", Check("cost", True, experiment.estimator.price(rows)))

    def _check_power(self, job: int, experiment: Any, values: Any) -> None:
        """The case's power line (popfair.case.power_plan), once per distinct sample and plan."""
        keys = ("population", "occupation", "protected_attr", "seed", "plan")
        key = json.dumps({k: (values or {}).get(k) for k in keys}, sort_keys=True, default=repr)

        def power() -> list[tuple[str, Check]]:
            design = experiment.design.name if experiment.design is not None else "population"
            from popfair.case.pilot import piloted_power
            from popfair.design.base import ScoreScale

            scale = ScoreScale.of_range(*experiment.screener.score_range)  # no scores before the run
            sample = experiment.sample()
            plan = piloted_power(experiment, sample).plan(design, sample, scale, experiment.estimator)
            if plan is None:
                return [("case", Check("power", True, "no power line (plan.enabled=false)"))]
            return [
                ("case", Check("power", True, plan.line().removeprefix("power: ").replace("\n    ", "\n" + " " * 24)))
            ]

        self._once(job, "power", f"{key}|{experiment.design and experiment.design.name}", "case", power)

    def _screener_checks(self, node: DictConfig, values: Any, subject: str, cache_ok: bool) -> list[tuple[str, Check]]:
        """The screening side's checks of the screener built as a dry run builds it (its route, key and
        SDK; with `probe`, one request to its endpoint that generates nothing): popfair.screen.preflight.
        Its checks name their screener and route, which becomes the row's subject. A screener opens its
        response cache when built: with the cache already reported broken, it is built on a scratch
        cache, so its own checks still run."""
        from popfair.case.compose import build_for_plan
        from popfair.screen.preflight import probe_endpoint, screener_checks

        with tempfile.TemporaryDirectory(prefix="popfair-preflight-") as scratch:
            if not cache_ok and isinstance(values, dict) and {"cache_dir", "cache_url"} <= set(values):
                values = {**values, "cache_dir": scratch, "cache_url": None}
                node = OmegaConf.create(values)
            screener = build_for_plan(node, "screener", dry_run=True, values=values)
            checks = screener_checks(screener) + (probe_endpoint(screener) if self.probe else [])
        rows = []
        for check in checks:
            own, sep, rest = check.detail.partition(": ")
            named = sep and own.startswith(f"screener {screener.name}")
            rows.append((own if named else subject, replace(check, detail=rest) if named else check))
        return rows

    def _check_stores(self, job: int, task: DictConfig) -> bool:
        """The cache, tracking store and disk of one case; whether its response cache opens."""
        cache = task.get("cache_url") or task.get("cache_dir")
        if cache:
            shown = f"cache {safe_url(str(cache))}"
            self._once(job, "cache", str(cache), shown, lambda: [(shown, check_cache(str(cache)))])
        tracking = task.get("tracking") or {}
        if tracking.get("enabled", False):
            uri = str(tracking.get("uri"))
            root = tracking.get("artifact_root")
            self._once(
                job,
                "tracking",
                f"{uri} {root}",
                f"tracking {uri}",
                lambda: [(f"tracking {uri}", check_tracking(uri, root))],
            )
        rows = int(OmegaConf.select(task, "population.n", default=0) or 0)
        kind = "image" if str(OmegaConf.select(task, "renderer.kind", default="text")).startswith("image") else "text"
        need = BYTES_PER_CASE + rows * BYTES_PER_ROW[kind]
        folders = {str(task.get("cache_dir") or ".")} if not task.get("cache_url") else set()
        if tracking.get("enabled", False) and tracking.get("artifact_root"):
            folders.add(str(tracking["artifact_root"]))
        for folder in folders or {"."}:
            self._disk[folder] += need // max(1, len(folders))
        return not cache or all(check.ok for _, check in self._memo[("cache", str(cache))])

    def _check_launcher(self, job: int, config: DictConfig) -> None:
        from popfair.core.errors import ConfigError

        launcher = str(config.hydra.launcher.get("_target_", "")).rsplit(".", 1)[-1]
        try:
            check_shared_services(config)
        except ConfigError as exc:
            self._add(job, f"launcher {launcher}", Check("launcher", False, str(exc)))
        else:
            self._add(job, f"launcher {launcher}", Check("launcher", True, "its shared services are set"))

    def _known(self, job: int, detail: str) -> bool:
        """A failure of this case already found whose message holds `detail` (the case's build raised
        what a part's own check already reported)."""
        return any(not f.check.ok and job in f.jobs and detail in f.check.detail for f in self._found.values())

    # --- results ----------------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Every check with the jobs it concerns: failures first, then in the order found."""
        jobs = sorted(self.cases)
        by_device: dict[int, list[str]] = defaultdict(list)  # one check per file system
        for folder in self._disk:
            by_device[os.stat(nearest_existing(Path(folder))).st_dev].append(folder)
        for folders in by_device.values():
            check = check_disk(folders[0], sum(self._disk[f] for f in folders), len(jobs))
            self._found[(check.name, check.ok, check.detail, "")] = Finding(f"disk {', '.join(folders)}", check, jobs)
        found = list(self._found.values())
        return [f for f in found if not f.check.ok] + [f for f in found if f.check.ok]

    def failures(self) -> list[Finding]:
        return [f for f in self.findings() if not f.check.ok]


# --- single checks ----------------------------------------------------------------------------------
def check_shared_services(config: DictConfig) -> None:
    """A launcher that spreads cases over machines (SLURM, a Ray cluster) needs the services every
    machine can reach: a server response cache (a SQLite cache on NFS risks locks and corruption, and
    per-node caches pay twice) and an MLflow tracking server (one parent run for all the cases)."""
    launcher = str(config.hydra.launcher.get("_target_", ""))
    ray_address = OmegaConf.select(config, "hydra.launcher.ray.init.address")
    spread = launcher.endswith(("SlurmLauncher", "RayAWSLauncher")) or (
        launcher.endswith("RayLauncher") and ray_address not in (None, "", "local")
    )
    if not spread or config.get("dry_run", False):
        return
    name = launcher.rsplit(".", 1)[-1]
    require(
        bool(config.get("cache_url")),
        "cache_url",
        f"hydra/launcher runs cases on several machines ({name}): set cache_url="
        "postgresql+psycopg://user@host:5432/db so that no answer is paid twice (a SQLite cache_dir "
        "on a shared file system is unsafe)",
    )
    tracking = config.get("tracking") or {}
    require(
        not tracking.get("enabled", True) or str(tracking.get("uri", "")).startswith(("http://", "https://")),
        "tracking.uri",
        f"hydra/launcher runs cases on several machines ({name}): point it at an "
        "`mlflow server` (http://host:port) that every node can reach",
    )


def check_tracking(uri: str, artifact_root: str | None) -> Check:
    """The MLflow store can be written (a SQLite file's folder or a file store, and the artifact
    folder) or the tracking server answers (its /health, then an authenticated experiments search
    with MLflow's usual credential variables). Other database stores are left to MLflow. A failure
    names its own key: the store (`tracking.uri`) or the artifact folder (`tracking.artifact_root`)."""
    problems = tracking_problems(uri, artifact_root)
    if problems:
        problem = problems[0]
        detail = problem.detail if problem.key == "tracking.uri" else f"{problem.key}={problem.value}: {problem.detail}"
        return Check("tracking", False, detail, problem.fix)
    if uri.startswith(("http://", "https://")):
        return Check("tracking", True, "reachable")
    if tracking_store_folder(uri) is not None:
        return Check("tracking", True, "writable")
    return Check("tracking", True, f"a {uri.partition('://')[0]} database store: left to MLflow")


def check_disk(folder: str, need: int, cases: int) -> Check:
    """Free space where the cases write (cache, artifacts) against a rough estimate of what they write."""
    free = shutil.disk_usage(nearest_existing(Path(folder))).free
    text = f"{_gib(free)} free; the {cases} case(s) write about {_gib(need)} here"
    if free < need:
        return Check("disk", False, text, "free some space, or point cache_dir / tracking.artifact_root elsewhere")
    return Check("disk", True, text)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**28 else f"{n / 2**20:.0f} MiB"


# --- sweeps -----------------------------------------------------------------------------------------
def split_cells(failed: Iterable[int], cases: dict[int, list[str]]) -> list[tuple[str, list[str], list[str]]]:
    """(key, values only failed cases take, the other values) for each key that varies across the
    sweep where every case with one of the first values failed and those are all the failed cases.
    `cases`: job -> overrides."""
    failed = set(failed)
    by_key: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for job, overrides in cases.items():
        for override in overrides:
            key, _, value = override.partition("=")
            by_key[key][value].add(job)
    cells = []
    for key, values in by_key.items():
        if len(values) < 2:
            continue
        bad = [v for v, jobs in values.items() if jobs <= failed]
        if not bad or set().union(*(values[v] for v in bad)) != failed:
            continue
        keep = [v for v in values if v not in bad]
        if keep:
            cells.append((key, bad, keep))
    return cells


def drop_cells(failed: Iterable[int], cases: dict[int, list[str]]) -> list[str]:
    """Overrides that leave out exactly the failed cases: for a key that varies across the sweep, the
    values the passing cases take (split_cells)."""
    return [f"{key}={','.join(keep)}" for key, _, keep in split_cells(failed, cases)]


def leave_out_fixes(failed: Iterable[int], cases: dict[int, list[str]]) -> list[str]:
    """The fix lines naming the failing cases' values and the override that runs the others."""
    return [
        f"leave these cases out ({key}={','.join(bad)}): run {key}={','.join(keep)}"
        for key, bad, keep in split_cells(failed, cases)
    ]


def format_findings(findings: Sequence[Finding], cases: dict[int, list[str]], *, everything: bool) -> str:
    """The table of checks: status, check, how many cases, what was found and the fix. With
    `everything` False only the failures (what a sweep prints before it stops)."""
    total = len(cases)
    shown = [f for f in findings if everything or not f.check.ok]
    lines = []
    width = 14 if total > 1 else 0  # the "how many cases" column, for sweeps
    for finding in shown:
        check = finding.check
        status = "ok" if check.ok else "FAIL"
        where = f"{len(finding.jobs)}/{total} cases" if total > 1 else ""
        lines.append(f"  {status:<4}  {check.name:<9} {where:<{width}}{finding.subject}: {check.detail}")
        if not check.ok:
            fixes = [check.fix] if check.fix else []
            if total > 1 and len(finding.jobs) < total:
                fixes += leave_out_fixes(finding.jobs, cases)
            lines += [
                f"  {'':<4}  {'':<9} {'':<{width}}{'fix:' if i == 0 else 'or: '} {fix}" for i, fix in enumerate(fixes)
            ]
    return "\n".join(lines)
