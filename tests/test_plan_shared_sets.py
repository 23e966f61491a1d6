"""What the cases of a dry-run sweep share (popfair.sweep.plan.Planner, issue 62): a page with a
headshot is priced from its sample's text layout set, rendered once for every format; the gender and
race sets of an occupation hold their common factual documents once; and a prompt table tells
prompts apart without joining every user message. Sharing changes no figure: each case prices as a
planner of its own prices it."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

import popfair.render.base as render_base
import popfair.sweep.plan as plan
from popfair.case.population import PopulationCase
from popfair.core.types import Document
from popfair.screen.prompts import IMAGE_PLACEHOLDER, PromptSet, PromptTable
from tests.conftest import compose_config
from tests.screen_helpers import JOBS, documents, png

SMALL = ["population.n=300", "population.diagnostics=false", "tracking=none"]
FIGURES = ("documents", "calls", "input_tokens", "output_tokens", "cost_usd", "estimator_documents")


def _case(tmp_path, renderer: str, attribute: str) -> PopulationCase:
    screener = "gpt4o_mini" if renderer == "text" else "gpt4o"
    overrides = [f"renderer={renderer}", f"screener={screener}", f"protected_attr={attribute}"]
    overrides += ["screener.route=openai", f"cache_dir={tmp_path}/responses"]
    return PopulationCase.from_config(compose_config([*overrides, *SMALL]), dry_run=True)


@pytest.fixture
def own_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path / "disk"))
    plan.default_planner().clear()
    yield
    plan.finish_writes()
    plan.default_planner().clear()


def test_a_sweeps_formats_and_attributes_share_their_documents_and_price_as_alone(
    tmp_path, monkeypatch, own_disk_cache
):
    renders = []
    render_table = render_base._render_table

    def counted(*args, **kwargs):
        renders.append(1)
        return render_table(*args, **kwargs)

    monkeypatch.setattr(render_base, "_render_table", counted)
    cells = [(f, a) for f in ("text", "image", "image_photo") for a in ("gender", "race")]
    planner = plan.Planner()
    assert gc.get_freeze_count() == 0
    planned = {cell: planner.price(_case(tmp_path, *cell)) for cell in cells}
    assert len(renders) == 2  # one text layout per sample (gender, race), for all three formats
    assert gc.get_freeze_count() == 0  # its sets were left out of the cases' collections, and no longer

    for cell in cells:  # each case priced by a planner of its own: the same figures
        alone = plan.Planner().price(_case(tmp_path, *cell))
        assert [getattr(alone, f) for f in FIGURES] == [getattr(planned[cell], f) for f in FIGURES], cell

    sets = {key: documents for key, (documents, _) in planner.documents.items()}
    assert len(sets) == 4  # two text layouts, two headshot-marked sets
    marked = [docs for docs in sets.values() if "\n[photo: " in docs[0].text]
    layouts = [docs for docs in sets.values() if "\n[photo: " not in docs[0].text]
    assert len(marked) == len(layouts) == 2
    for docs in marked:  # a marked page is its layout's text and the attributes the headshot shows
        layout = next(lay for lay in layouts if len(lay) == len(docs) and lay[0].applicant_id == docs[0].applicant_id)
        assert all(
            m.text.startswith(d.text + "\n[photo: ") and m.applicant_id == d.applicant_id for m, d in zip(docs, layout)
        )
    # the race set's factual applicants are the gender set's: one object each
    gender, race = sorted(layouts, key=len, reverse=True)
    by_text = {d.text: d for d in gender}
    common = [d for d in race if d.text in by_text]
    assert len(common) >= 300 and all(d is by_text[d.text] for d in common)


def test_a_prompt_table_counts_prompts_as_their_joined_messages_would():
    prompts = PromptSet()
    twin = {"twin": replace(JOBS["nurse"], job_id="twin")}  # another id, the same posting: the same prompts
    docs = documents(300, duplicates=20)
    docs += [Document(f"t{i}", "twin", "text", d.text) for i, d in enumerate(docs[:40]) if d.job_id == "nurse"]
    docs += [Document("p1", "nurse", "image", "", png(1)), Document("p2", "nurse", "image", "", png(1))]
    docs += [Document("p3", "nurse", "image", "", png(2)), Document("p4", "nurse", "image", "", None)]
    docs += [Document("p5", "nurse", "text", IMAGE_PLACEHOLDER)]  # as a page without its PNG reads
    jobs = {**JOBS, **twin}
    table = PromptTable.of(prompts, "score", jobs, docs)
    joined = [prompts.users("score", jobs, [d])[0] for d in docs]
    images = [d.image_png if d.kind == "image" else None for d in docs]
    distinct = set(zip(joined, images))
    assert len(table.users) == len(distinct) == 300 + 2 + 1
    assert set(zip(table.users, table.images)) == distinct
    assert list(table.user_chars) == [len(user) for user in table.users]
    users = list(table.users)  # read by position too (the templates' groups one after another)
    assert [table.users[i] for i in range(len(users))] == users and table.users[-1] == users[-1]
    assert table.users[1:4] == users[1:4] and table.has_images
