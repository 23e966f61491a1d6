"""Power lines agree: the dry run of a case with an offline screener measures a pilot of its own
applicants and worlds, and its MDE is close to what the run's SE then says it can detect."""

from __future__ import annotations

import re

from tests.conftest import popfair_in_process

CASE = ["population.n=3000", "seed=2"]


def _mde(text: str) -> float:
    found = re.search(r"\(TE ([0-9.e-]+),", text)
    assert found, text[-2000:]
    return float(found.group(1))


def test_the_dry_run_measures_a_pilot_and_agrees_with_the_run(tmp_path):
    dry = popfair_in_process(*CASE, "dry_run=true", f"cache_dir={tmp_path}/cache", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "a pilot of 200 of the case's own applicants in their five worlds, screened now by tfidf" in dry.stdout
    planned = _mde(dry.stdout)
    done = popfair_in_process(*CASE, "audit_report=false", f"cache_dir={tmp_path}/cache", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    se = float(re.search(r"^TE\s+\S+\s+(\S+)", done.stdout, re.M).group(1))
    reported = 2.8 * se
    assert reported / 2 <= planned <= 2 * reported, (planned, reported)
