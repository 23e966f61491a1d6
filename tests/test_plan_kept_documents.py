"""A plan's rendered documents kept in popfair's disk cache (popfair.sweep.plan._kept_render): a later
plan of the same rows and renderer reads them instead of rendering, and plans the same."""

from __future__ import annotations

import os

import pytest

import popfair.render.base as render_base
import popfair.sweep.plan as plan
from popfair.case.population import PopulationCase
from popfair.runtime.parallel import cpu_count
from tests.conftest import compose_config


@pytest.fixture
def fresh_process(monkeypatch, tmp_path):
    """A disk cache of this test's own, and the plan's in-process memos empty (a new process)."""
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "disk"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _forget()
    yield tmp_path / "disk"
    _forget()


def _forget() -> None:
    plan.default_planner().clear()


TEXT = ("population.n=300", "population.diagnostics=false")  # PopResume applicants as text resumes
JSON = ("experiment=paired_race", "occupation.n_postings=20")  # paired candidates as JSON profiles


def _case(tmp_path, *extra: str) -> PopulationCase:
    overrides = [
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"cache_dir={tmp_path}/responses",
        "tracking=none",
        *(extra or TEXT),
    ]
    return PopulationCase.from_config(compose_config(overrides), dry_run=True)


def _planned(experiment: PopulationCase) -> tuple[plan.CasePlan, list]:
    """A case planned as a new process plans it: its plan and the documents it planned."""
    _forget()
    planned = plan.plan_case(experiment)
    plan.finish_writes()  # the rendered set is kept by a forked worker
    ((documents, _),) = plan.default_planner().documents.values()
    return planned, documents


def _refuse_to_render(monkeypatch) -> None:
    def refused(*args, **kwargs):
        raise AssertionError("rendered again: the kept documents were not read")

    monkeypatch.setattr(render_base, "_render_table", refused)


@pytest.mark.parametrize("extra", [TEXT, JSON], ids=["text", "json"])
def test_a_later_plan_reads_the_kept_documents_and_plans_the_same(fresh_process, tmp_path, monkeypatch, extra):
    first_plan, first = _planned(_case(tmp_path, *extra))  # rendered
    kept = sorted(fresh_process.glob("plan_documents-*.parquet"))
    assert len(kept) == 1

    with monkeypatch.context() as patched:
        _refuse_to_render(patched)
        again_plan, again = _planned(_case(tmp_path, *extra))  # read back
    assert again_plan == first_plan
    assert again == first  # applicant, job, kind and text, in order
    assert [d.kind for d in again] == [d.kind for d in first]
    assert all(d.profile is None and d.image_png is None for d in again)  # a plan reads no profile row


def test_other_rows_or_renderer_settings_render_again_and_off_renders_always(fresh_process, tmp_path, monkeypatch):
    _planned(_case(tmp_path))
    for other in ([*TEXT, "seed=1"], [*TEXT, "renderer.n_skills=3"]):
        _forget()
        with monkeypatch.context() as patched:
            _refuse_to_render(patched)
            with pytest.raises(AssertionError, match="rendered again"):
                plan.plan_case(_case(tmp_path, *other))
    _forget()
    monkeypatch.setenv("POPFAIR_CACHE_DIR", "off")
    with monkeypatch.context() as patched:
        _refuse_to_render(patched)
        with pytest.raises(AssertionError, match="rendered again"):
            plan.plan_case(_case(tmp_path))


def test_a_damaged_entry_is_rendered_again_and_replaced(fresh_process, tmp_path):
    before = _planned(_case(tmp_path))[0]
    (entry,) = fresh_process.glob("plan_documents-*.parquet")
    entry.write_bytes(b"not parquet")
    assert _planned(_case(tmp_path))[0] == before
    assert entry.read_bytes()[:4] == b"PAR1"


def test_page_renderers_and_a_users_own_renderer_are_not_kept(fresh_process, tmp_path):
    class OwnTextRenderer:  # a user's renderer: its source is not popfair's, so its documents are not kept
        kind = "text"

    assert plan._kept_render(OwnTextRenderer(), "key", {}) is plan._rendered_here  # type: ignore[arg-type]
    image = _case(tmp_path, *TEXT, "renderer=image")
    assert plan._kept_render(image.renderer, "key", {}) is plan._rendered_here
    assert plan._kept_render(_case(tmp_path).renderer, "key", {}) is not plan._rendered_here


@pytest.mark.skipif(cpu_count() < 2, reason="with one CPU the set is kept in this process, at exit")
def test_rendered_documents_are_kept_by_a_forked_worker_while_the_plan_goes_on(fresh_process, tmp_path, monkeypatch):
    writers = tmp_path / "writers.txt"
    real = plan.keep_frame

    def recording(path, frame):
        with writers.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return real(path, frame)

    monkeypatch.setattr(plan, "keep_frame", recording)
    _planned(_case(tmp_path))
    (writer,) = writers.read_text().split()
    assert int(writer) != os.getpid()
    assert len(list(fresh_process.glob("plan_documents-*.parquet"))) == 1


def test_at_most_a_few_sets_are_being_kept_at_once_and_all_are_written(fresh_process):
    from popfair.core.types import Document

    fresh_process.mkdir(parents=True)
    for i in range(plan._PENDING_WRITES + 3):
        documents = [Document(f"a{i}", "job", "text", f"resume {i}")]
        plan._keep_later(fresh_process / f"plan_documents-{i:024x}.parquet", documents)
        assert len(plan._WRITES) <= plan._PENDING_WRITES
    plan.finish_writes()
    assert not plan._WRITES
    assert len(list(fresh_process.glob("plan_documents-*.parquet"))) == plan._PENDING_WRITES + 3
