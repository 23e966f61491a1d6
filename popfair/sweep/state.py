"""The files a sweep and its cases share (see popfair.sweep): sweep info and per-case records."""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SWEEP_FILE = "popfair_sweep.json"
CASES_DIR = "cases"
ENV_SWEEP_DIR = "POPFAIR_SWEEP_DIR"  # set by the sweep callback, inherited by local workers
ENV_PARENT_RUN_ID = "POPFAIR_PARENT_RUN_ID"  # idem: the MLflow parent run of the sweep


@dataclass
class SweepInfo:
    """What every case of a sweep needs to know about the sweep it belongs to."""

    sweep_dir: str
    parent_run_id: str | None
    tracking_uri: str | None
    varying: dict[str, list[str]]  # override key -> the values it takes across the sweep
    expected_cases: int | None  # None when the sweeper is not Hydra's basic grid sweeper
    dry_run: bool = False

    def write(self) -> Path:
        path = Path(self.sweep_dir) / SWEEP_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def read(cls, sweep_dir: str | Path) -> SweepInfo | None:
        path = Path(sweep_dir) / SWEEP_FILE
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))


@dataclass
class CaseRecord:
    """How one case of a sweep ended: status `finished`, `failed` or `planned` (dry run)."""

    job: int
    overrides: list[str]
    status: str
    case_name: str | None = None
    run_id: str | None = None
    error: str | None = None
    error_type: str | None = None
    seconds: float = 0.0
    plan: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)

    def write(self, sweep_dir: str | Path) -> Path:
        folder = Path(sweep_dir) / CASES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.job:05d}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, default=str))
        os.replace(tmp, path)  # atomic: the callback never reads half a record
        return path


def read_case_records(sweep_dir: str | Path) -> list[CaseRecord]:
    """All case records of a sweep, ordered by job number."""
    folder = Path(sweep_dir) / CASES_DIR
    if not folder.is_dir():
        return []
    return [CaseRecord(**json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def sweep_grid(overrides: Iterable[str], sweeper_params: dict[str, Any] | None) -> tuple[dict[str, list[str]], int]:
    """The values each override key takes across a basic-sweeper grid and the number of cases.

    Mirrors hydra's BasicSweeper: `hydra.sweeper.params` first, command-line overrides after them
    (a later value for the same key replaces an earlier one); the cases are the Cartesian product."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = [f"{k}={v}" for k, v in (sweeper_params or {}).items()] + list(overrides)
    values: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides(args):
        key = override.get_key_element()
        if override.is_sweep_override():
            values[key] = list(override.sweep_string_iterator())
        else:
            values[key] = [override.get_value_element_as_str()]
    count = math.prod(len(v) for v in values.values()) if values else 1
    return values, count


def varying_tags(job_overrides: Iterable[str], varying: dict[str, list[str]]) -> dict[str, str]:
    """`sweep.<key>` tags for the overrides of one case whose key varies across the sweep."""
    tags = {}
    for override in job_overrides:
        key, value = _key_and_value(override)
        if len(varying.get(key, [])) > 1:
            tags[f"sweep.{key.lstrip('+~')}"] = value
    return tags


def key_and_value(override: str) -> tuple[str, str]:
    """One override's key and value as Hydra parses them (`population.n=2000` -> population.n, 2000)."""
    return _key_and_value(override)


@functools.lru_cache(maxsize=4096)
def _key_and_value(override: str) -> tuple[str, str]:
    """One override's key and value as Hydra parses them, parsed once per process: a sweep's cases
    share most of their overrides (`occupation=nurse` in 24 cases of the PopResume grid)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (parsed,) = OverridesParser.create().parse_overrides([override])
    return parsed.get_key_element(), parsed.get_value_element_as_str()
