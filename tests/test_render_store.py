"""Documents rendered once (popfair/render/store.py): a document read from the store is the fresh
render byte for byte; keys follow the renderer's settings and the fields it reads, never the case;
a killed render resumes without rendering again what it stored; a case gives the same effects, the
same documents and the same response-cache keys with and without the store; the server store
(PostgreSQL) shares documents between processes."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.core.types import WORLD
from popfair.render.base import render_all
from popfair.render.store import STORE_NAME, DocumentStore
from popfair.store.blobs import open_blob_store
from tests.conftest import compose_config
from tests.llm_stub import StubServer
from tests.screen_helpers import make_screener

ROOT = Path(__file__).resolve().parents[1]
N_KILL = 300  # pages the killed render is asked for (a few seconds of work on two cores)


def case(tmp_path: Path, *overrides: str):
    """(renderer, its resolved settings, profile rows, jobs) of a composed case."""
    cfg = compose_config(["population.n=60", "tracking=none", *overrides], tmp_path=tmp_path)
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.sample()
    return experiment.renderer, experiment.config["renderer"], profiles.table, profiles.jobs


def counted(renderer):
    """The renderer with a counter of its render calls (an instance attribute: same class, same keys)."""
    calls = []
    render = renderer.render

    def render_and_count(profile, job):
        calls.append(profile["applicant_id"])
        return render(profile, job)

    renderer.render = render_and_count
    return calls


def same(documents, expected) -> bool:
    """Equal in every field, the profile row and the file bytes included."""
    return len(documents) == len(expected) and all(
        d == e and d.profile == e.profile and d.image_png == e.image_png and d.pdf == e.pdf
        for d, e in zip(documents, expected)
    )


@pytest.mark.parametrize("renderer", ["text", "image", "pdf"])
def test_stored_documents_are_the_fresh_render_byte_for_byte(renderer, tmp_path):
    renderer_, settings, table, jobs = case(tmp_path, f"renderer={renderer}")
    fresh = render_all(renderer_, table, jobs, progress=False, processes=1)
    store = DocumentStore.open(tmp_path / "store", renderer_, settings)
    calls = counted(renderer_)
    first = render_all(renderer_, table, jobs, progress=False, processes=1, store=store)
    assert len(calls) == len(table) and store.blobs.count() == len(table)
    again = render_all(renderer_, table, jobs, progress=False, processes=1, store=store)
    assert len(calls) == len(table)  # nothing rendered the second time
    assert same(first, fresh) and same(again, fresh)
    assert all(d.kind == {"text": "text", "image": "image", "pdf": "pdf"}[renderer] for d in again)


def test_photo_pages_are_stored_and_keyed_by_the_photos(tmp_path):
    photos = every_cell_photos(tmp_path / "photos")
    renderer, settings, table, jobs = case(tmp_path, "renderer=image_photo", f"renderer.photos_dir={photos}")
    store = DocumentStore.open(tmp_path / "store", renderer, settings)
    fresh = render_all(renderer, table, jobs, progress=False, processes=1)
    render_all(renderer, table, jobs, progress=False, processes=1, store=store)
    assert same(render_all(renderer, table, jobs, progress=False, processes=1, store=store), fresh)
    # another photo for a cell: every key changes (the pages would differ)
    first_photo = photos / "p0.png"
    first_photo.write_bytes(first_photo.read_bytes() + b"\0")
    moved = DocumentStore(store.blobs, renderer, settings)
    assert not set(moved.keys(_rows(table))) & set(store.keys(_rows(table)))


def every_cell_photos(folder: Path) -> Path:
    """One flat-colour 'photo' for each (gender, race, age band) cell."""
    from PIL import Image

    from popfair.render.photos import GENDERS, RACES

    folder.mkdir()
    rows = ["gender,race,age_band,file"]
    for i, (gender, race, band) in enumerate((g, r, b) for g in GENDERS for r in RACES for b in ("18-29", "30-44")):
        Image.new("RGB", (60, 72), (40 + 9 * i, 90, 200 - 7 * i)).save(folder / f"p{i}.png")
        rows.append(f"{gender},{race},{band},p{i}.png")
    (folder / "manifest.csv").write_text("\n".join(rows) + "\n")
    return folder


def _rows(table: pd.DataFrame):
    from popfair.render.base import profile_records

    return profile_records(table)


def test_keys_follow_the_settings_and_the_fields_read_never_the_case(tmp_path):
    renderer, settings, table, _ = case(tmp_path, "renderer=text")
    store = DocumentStore.open(tmp_path / "store", renderer, settings)
    keys = store.keys(_rows(table))
    assert len(set(keys)) == len(table)  # distinct applicants, distinct documents
    # columns the text renderer does not read (the protected attributes, weights, any case column)
    unread = table.assign(gender="other", race="other", weight=7.0, case="race")
    assert store.keys(_rows(unread)) == keys
    # a field it reads, and a setting, change the key
    changed = table.assign(edu_level=table["edu_level"].where(table["edu_level"] != "bachelor", "master"))
    differs = [a != b for a, b in zip(store.keys(_rows(changed)), keys)]
    assert differs == list(table["edu_level"] == "bachelor")
    other_seed = DocumentStore(store.blobs, renderer, {**settings, "seed": 1})
    assert not set(other_seed.keys(_rows(table))) & set(keys)


def test_rows_that_differ_only_in_unread_fields_are_rendered_once(tmp_path):
    renderer, settings, table, jobs = case(tmp_path, "renderer=text")
    store = DocumentStore.open(tmp_path / "store", renderer, settings)
    # each applicant twice, the copy with the other gender: same document, own profile row
    doubled = pd.concat([table, table.assign(gender=table["gender"].map({"female": "male", "male": "female"}))])
    calls = counted(renderer)
    documents = render_all(renderer, doubled, jobs, progress=False, processes=1, store=store)
    assert len(calls) == len(table)
    renderer.__dict__.pop("render")
    assert same(documents, render_all(renderer, doubled, jobs, progress=False, processes=1))


def test_a_killed_render_resumes_without_rendering_again_what_it_stored(tmp_path, caplog):
    cache = tmp_path / "cache"
    script = (
        "import sys; from tests.conftest import compose_config; from popfair.case.population import PopulationCase\n"
        "from popfair.render.base import render_all\n"
        f"cfg = compose_config(['population.n={N_KILL}', 'tracking=none', 'renderer=image', 'cache_dir={cache}'])\n"
        "e = PopulationCase.from_config(cfg); p = e.sample()\n"
        "print('rendering', flush=True)\n"
        "render_all(e.renderer, p.table, p.jobs, progress=False, store=e.documents)\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its forked render workers die with it
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == b"rendering"
        stored = 0
        deadline = time.monotonic() + 120
        while stored < 32 and time.monotonic() < deadline:
            time.sleep(0.05)
            if (cache / f"{STORE_NAME}.sqlite").exists():
                with open_blob_store(cache, STORE_NAME) as blobs:
                    stored = blobs.count()
        os.killpg(worker.pid, signal.SIGKILL)
    finally:
        worker.wait()
    with open_blob_store(cache, STORE_NAME) as blobs:
        kept = blobs.count()
    assert 32 <= kept < N_KILL, "kill the render halfway"

    cfg = compose_config([f"population.n={N_KILL}", "tracking=none", "renderer=image", f"cache_dir={cache}"])
    experiment = PopulationCase.from_config(cfg)
    profiles = experiment.sample()
    assert experiment.documents is not None
    with caplog.at_level(logging.INFO, logger="popfair"):
        resumed = render_all(
            experiment.renderer, profiles.table, profiles.jobs, progress=False, store=experiment.documents
        )
    found = re.search(r"render: (\d+) of (\d+) documents from the document store", caplog.text)
    assert found and (int(found[1]), int(found[2])) == (kept, N_KILL)
    assert experiment.documents.blobs.count() == N_KILL
    stored_part = set(experiment.documents.blobs.get_many(experiment.documents.keys(_rows(profiles.table))))
    assert len(stored_part) == N_KILL
    # the resumed pages equal a fresh render, those read back and those rendered after the kill alike
    fresh = render_all(experiment.renderer, profiles.table.iloc[::25], profiles.jobs, progress=False, processes=1)
    assert same(resumed[::25], fresh)


def test_a_case_gives_the_same_effects_and_documents_with_and_without_the_store(tmp_path):
    overrides = ["population.n=120", "renderer=image", "screener=simulated", "estimator=outcome_gap", "tracking=none"]
    without = PopulationCase.from_config(compose_config([*overrides, "document_store=false"], tmp_path=tmp_path))
    assert without.documents is None
    expected = without.run()
    for attribute in ("gender", "race"):  # the race case reads every page the gender case stored
        experiment = PopulationCase.from_config(
            compose_config([*overrides, f"protected_attr={attribute}"], tmp_path=tmp_path)
        )
        calls = counted(experiment.renderer)
        result = experiment.run()
        if attribute == "race":
            assert calls == []
            reference = PopulationCase.from_config(
                compose_config([*overrides, "protected_attr=race", "document_store=false"], tmp_path=tmp_path)
            ).run()
        else:
            reference = expected
        pd.testing.assert_frame_equal(result.effects.table, reference.effects.table)
        pd.testing.assert_frame_equal(result.scored, reference.scored)
        assert result.samples == reference.samples  # the logged sample pages, byte for byte


def test_response_cache_keys_are_the_same_for_stored_documents(tmp_path, monkeypatch):
    renderer, settings, table, jobs = case(tmp_path, "renderer=image")
    table = table.head(12)
    fresh = render_all(renderer, table, jobs, progress=False, processes=1)
    store = DocumentStore.open(tmp_path / "store", renderer, settings)
    render_all(renderer, table, jobs, progress=False, processes=1, store=store)
    stored = render_all(renderer, table, jobs, progress=False, processes=1, store=store)
    with StubServer() as stub:
        screener = make_screener("openai", stub.url, tmp_path / "responses", monkeypatch)
        first = screener.screen(jobs, fresh, "score")
        answered = dict(stub.state.answered)
        again = screener.screen(jobs, stored, "score")
        assert stub.state.answered == answered  # every stored page's request was already answered
        assert all(r.cached for r in again) and [r.value for r in again] == [r.value for r in first]


def test_server_store_shares_documents_between_processes(pg_url, tmp_path):
    renderer, settings, table, jobs = case(tmp_path, "renderer=image")
    table = table.head(20)
    writer = DocumentStore.open(pg_url, renderer, settings)
    assert writer.location.startswith("postgresql") and "pg-test-secret" not in writer.location
    fresh = render_all(renderer, table, jobs, progress=False, processes=1, store=writer)
    script = (
        "import sys; from tests.conftest import compose_config; from popfair.case.population import PopulationCase\n"
        "from popfair.render.base import profile_records; from popfair.render.store import DocumentStore\n"
        "e = PopulationCase.from_config(compose_config(['population.n=60', 'tracking=none', 'renderer=image']))\n"
        "store = DocumentStore.open(sys.argv[1], e.renderer, e.config['renderer'])\n"
        "found = store.blobs.get_many(store.keys(profile_records(e.sample().table.head(20))))\n"
        "print(len(found), sum(len(v) for v in found.values()))\n"
    )
    reader = subprocess.run(
        [sys.executable, "-c", script, pg_url],
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    count, size = map(int, reader.stdout.split())
    assert count == len(table) and size > sum(len(d.image_png) for d in fresh)  # every page, PNG and text
    calls = counted(renderer)
    again = render_all(
        renderer, table, jobs, progress=False, processes=1, store=DocumentStore.open(pg_url, renderer, settings)
    )
    assert calls == [] and same(again, fresh)


def test_blob_store_keeps_the_first_blob_of_a_key_and_reads_in_bulk(tmp_path):
    with open_blob_store(tmp_path, "things") as blobs:
        blobs.put_many([(f"k{i}", bytes([i % 256]) * i) for i in range(2000)])  # over one query's key limit
        blobs.put_many([("k5", b"other")])
        found = blobs.get_many([f"k{i}" for i in range(2500)])
        assert len(found) == 2000 and found["k5"] == b"\x05" * 5 and found["k1999"] == bytes([1999 % 256]) * 1999
        assert blobs.count() == 2000
    with pytest.raises(ValueError):
        open_blob_store(tmp_path, "no such; name")


def test_document_store_setting_is_checked():
    cfg = compose_config(["document_store=sometimes", "tracking=none"])
    with pytest.raises(ConfigError, match="document_store"):
        PopulationCase.from_config(cfg)


def test_counterfactual_worlds_render_through_the_store(tmp_path):
    cfg = compose_config(["population.n=40", "estimator=interventional", "tracking=none"], tmp_path=tmp_path)
    experiment = PopulationCase.from_config(cfg)
    assert experiment.documents is not None
    profiles = experiment.sample()
    assert profiles.worlds is not None and len(profiles.worlds)
    rows = profiles.rows().drop(columns=WORLD)
    fresh = render_all(experiment.renderer, rows, profiles.jobs, progress=False, processes=1)
    store = experiment.documents
    assert same(render_all(experiment.renderer, rows, profiles.jobs, progress=False, processes=1, store=store), fresh)
    assert same(render_all(experiment.renderer, rows, profiles.jobs, progress=False, processes=1, store=store), fresh)


def test_a_store_that_cannot_be_opened_or_written_only_costs_the_reuse(tmp_path, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="popfair"):
        experiment = PopulationCase.from_config(compose_config(["tracking=none", f"cache_dir={blocker}/cache"]))
    assert experiment.documents is None and "document store off" in caplog.text
    renderer, settings, table, jobs = case(tmp_path, "renderer=text")
    fresh = render_all(renderer, table, jobs, progress=False, processes=1)
    store = DocumentStore.open(tmp_path / "store", renderer, settings)
    store.blobs.close()  # the database goes away mid-run: reads and writes fail
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="popfair"):
        documents = render_all(renderer, table, jobs, progress=False, processes=1, store=store)
    assert same(documents, fresh)
    assert "cannot read" in caplog.text and caplog.text.count("cannot store documents") == 1


N_SHARED = 160  # pages two processes render at once


def test_processes_rendering_the_same_pages_at_once_split_them(tmp_path):
    """Two cases of a parallel sweep (or two cluster workers on a server cache) that need the same
    pages at the same time render each page once between them, and both get every page."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    script = (
        "import hashlib, sys, time\n"
        "from pathlib import Path\n"
        "from tests.conftest import compose_config; from popfair.case.population import PopulationCase\n"
        "import popfair.render.base as base\n"
        "base.ROUND_DOCUMENTS = 16  # small rounds (16 pages: the workers' spans are made small too) interleave\n"
        f"cfg = compose_config(['population.n={N_SHARED}', 'tracking=none', 'renderer=image', 'cache_dir={cache}'])\n"
        "e = PopulationCase.from_config(cfg); p = e.sample()\n"
        "e.renderer.rows_per_process = 8\n"
        "calls = []; render = e.renderer.render\n"
        "e.renderer.render = lambda row, job: calls.append(1) or render(row, job)\n"
        f"while not Path({str(go)!r}).exists(): time.sleep(0.01)\n"
        "docs = base.render_all(e.renderer, p.table, p.jobs, progress=False, processes=1, store=e.documents)\n"
        "print(len(calls), len(docs), hashlib.sha256(b''.join(d.image_png for d in docs)).hexdigest())\n"
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    time.sleep(1.0)  # both are importing and sampling; the file starts them together
    go.touch()
    outputs = [worker.communicate(timeout=300)[0].split() for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    rendered = [int(out[0]) for out in outputs]
    assert sum(rendered) == N_SHARED and min(rendered) > 0  # every page once, by one or the other
    assert [int(out[1]) for out in outputs] == [N_SHARED, N_SHARED]
    assert outputs[0][2] == outputs[1][2]  # the same pages, byte for byte
    renderer, _, table, jobs = case(tmp_path, "renderer=image", f"population.n={N_SHARED}")
    fresh = render_all(renderer, table, jobs, progress=False, processes=1)
    assert hashlib.sha256(b"".join(d.image_png for d in fresh)).hexdigest().encode() == outputs[0][2]


@pytest.mark.parametrize("backend", ["folder", "memory", "server"])
def test_claims_hold_against_live_owners_and_pass_from_dead_or_expired_ones(backend, tmp_path, request):
    from popfair.store.owners import HOST_ID, new_owner

    location = {"folder": tmp_path, "memory": None}.get(backend) or request.getfixturevalue("pg_url")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    me, elsewhere = new_owner(), "other-host#1234:1:00000000"
    dead_here = f"{HOST_ID}:{int(ended.stdout)}:0000dead"
    with open_blob_store(location, "claims_test") as store:
        assert store.claim(["a"], me, 60) == {} and store.claim(["a"], me, 60) == {}  # held, then renewed
        assert store.claim(["a", "x"], elsewhere, 60) == {"a": me}  # a live lease holds; x is free
        store.release(["a"], elsewhere)  # not the holder: nothing happens
        assert store.claim(["a"], elsewhere, 60) == {"a": me}
        store.release(["a"], me)
        assert store.claim(["a"], elsewhere, 60) == {}  # free again
        assert store.claim(["b"], dead_here, 60) == {} and store.claim(["b", "a"], me, 60) == {"a": elsewhere}
        assert store.claim(["c"], elsewhere, -1) == {} and store.claim(["c"], me, 60) == {}  # expired lease
        assert store.claim(["d"], elsewhere, 60) == {} and store.claim(["d"], me, 60) == {"d": elsewhere}
