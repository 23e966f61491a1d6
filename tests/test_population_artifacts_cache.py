"""The population's diagnostic artifacts are kept on disk under a digest of all they read: a rerun
reads the same artifacts, and another draw of the profiles is not served another's."""

from __future__ import annotations

import pandas as pd

from popfair.core.types import Plot
from popfair.population import diagnostics
from popfair.population.occupation import Occupation
from popfair.population.popresume import PopResumePopulation
from popfair.population.protected import ProtectedAttribute

NURSE = Occupation(
    key="nurse",
    title="nurse",
    occp=3255,
    soc="",
    description="A real job description long enough to pass validation for this test.",
)
GENDER = ProtectedAttribute("gender", "female", "male")


def same(left: object, right: object) -> bool:
    if isinstance(left, pd.DataFrame):
        pd.testing.assert_frame_equal(left, right)
        return True
    if isinstance(left, Plot):
        return same(left.table, right.table) and left.kind == right.kind and left.title == right.title
    return left == right


def test_artifacts_are_read_back_equal_and_keyed_on_the_profiles(tmp_path, monkeypatch):
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path))
    population = PopResumePopulation(n=600)
    profiles = population.sample(NURSE, GENDER, seed=0)
    model = population.model(NURSE.occp)
    stored = sorted(tmp_path.glob("population_artifacts-*.pkl"))
    assert len(stored) == 1  # the sample kept its artifacts
    computed = diagnostics.population_artifacts(profiles.table, model, NURSE)
    calls = []
    monkeypatch.setattr(diagnostics, "population_artifacts", lambda *a: calls.append(a) or {})
    read = diagnostics.cached_population_artifacts(profiles.table, model, NURSE)
    assert not calls and set(read) == set(computed) == set(profiles.artifacts)
    assert all(same(computed[name], read[name]) for name in computed)
    other = population.sample(NURSE, GENDER, seed=1).table
    assert diagnostics.cached_population_artifacts(other, model, NURSE) == {} and len(calls) == 1
