"""The response cache behind one interface: SQLite (a folder) and PostgreSQL (a real server on
127.0.0.1) store, claim and copy alike; server credentials come only from the environment."""

from __future__ import annotations

import logging
import time

import pytest

from popfair.core.errors import ConfigError
from popfair.store.__main__ import main as cache_cli
from popfair.store.blobs import open_blob_store
from popfair.store.responses import CachedAnswer, SqliteCache, open_cache
from popfair.store.responses.server import ServerCache
from tests.pg_server import PASSWORD

ANSWER = CachedAnswer("85", 85.0, None, 10, 1, 0.001, 0.2, 1.0)


@pytest.fixture(params=["sqlite", "postgres"])
def cache(request, tmp_path):
    location = request.getfixturevalue("pg_url") if request.param == "postgres" else str(tmp_path / "cache")
    with open_cache(location) as opened:
        yield opened


def test_open_cache_picks_the_backend_from_the_location(tmp_path, pg_url):
    with open_cache(tmp_path) as local, open_cache(pg_url) as server:
        assert isinstance(local, SqliteCache) and isinstance(server, ServerCache)
        assert server.location == pg_url


def test_answers_and_batches_round_trip(cache):
    cache.put("k1", "openai", "m", ANSWER)
    cache.put("k1", "openai", "m", ANSWER)  # a repeat overwrites, never duplicates
    unparseable = CachedAnswer("maybe", None, "no number", 9, 2, 0.002, 0.1, 2.0)
    cache.put("k2", "openai", "m", unparseable)
    assert cache.get_many(["k1", "k2", "missing", "k1"]) == {"k1": ANSWER, "k2": unparseable}
    assert cache.get_replies(["k2", "missing", "k1"]) == {
        "k1": ("85", 85.0, None, 10, 1),
        "k2": ("maybe", None, "no number", 9, 2),
    }
    assert cache.count() == 2
    cache.add_batch("b1", "openai", "https://x/v1", "m", "score", ["k3", "k4"])
    (batch,) = cache.open_batches("openai", "https://x/v1", "m")
    assert (batch.batch_id, batch.status, batch.keys) == ("b1", "submitted", ["k3", "k4"])
    assert cache.open_batches("openai", "https://x/v1", "other-model") == []
    cache.finish_batch("b1", "completed")
    assert cache.open_batches("openai", "https://x/v1", "m") == []


def test_claims_are_exclusive_expire_and_end_with_the_answer(cache):
    mine, taken = cache.claim(["k1", "k2", "k3"], "A", 30.0)
    assert sorted(mine) == ["k1", "k2", "k3"] and taken == 0
    assert cache.claim(["k1", "k2", "k3", "k4"], "B", 30.0) == (["k4"], 0)  # A holds the others
    assert sorted(cache.claim(["k1", "k2"], "A", 30.0)[0]) == ["k1", "k2"]  # re-claiming renews
    cache.put("k1", "openai", "m", ANSWER)  # answered: its claim is gone for good
    assert cache.claim(["k1"], "B", 30.0) == ([], 0)
    cache.release("A", ["k2"])  # an API failure: others may ask
    assert cache.claim(["k2"], "B", 30.0) == (["k2"], 0)
    cache.claim(["k3"], "A", 0.2)  # A stops renewing (dies)
    assert cache.claim(["k3"], "B", 30.0) == ([], 0)
    time.sleep(0.3)
    assert cache.claim(["k3"], "B", 30.0) == (["k3"], 1)  # taken over once the lease ran out
    cache.release("B")
    assert sorted(cache.claim(["k2", "k3", "k4"], "C", 30.0)[0]) == ["k2", "k3", "k4"]


def test_answers_stored_together_commit_together_and_end_their_claims(cache):
    assert sorted(cache.claim(["g1", "g2"], "A", 30.0)[0]) == ["g1", "g2"]
    other = CachedAnswer("12", 12.0, None, 5, 1, 0.0005, 0.1, 3.0)
    cache.put_many([("g2", "openai", "m", other), ("g1", "openai", "m", ANSWER)])
    assert cache.get_many(["g1", "g2"]) == {"g1": ANSWER, "g2": other}
    assert cache.claim(["g1", "g2"], "B", 30.0) == ([], 0)  # answered: nobody claims them again


def test_claims_of_a_dead_process_on_this_host_are_taken_over_at_once_other_hosts_keep_the_lease(cache):
    import asyncio
    import subprocess
    import sys

    from popfair.store.claims import CacheThread, ClaimBroker
    from popfair.store.owners import HOST_ID

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # a process of this host that no longer runs
    dead_here, alive_elsewhere = f"{HOST_ID}:{ended.pid}:0000dead", f"other-host#1234:{ended.pid}:00000000"
    assert cache.claim(["d1", "d2"], dead_here, 3600.0)[0] and cache.claim(["o1"], alive_elsewhere, 3600.0)[0]
    assert cache.claim_owners(["d1", "d2", "o1", "free"]) == {"d1": dead_here, "d2": dead_here, "o1": alive_elsewhere}

    async def hand_out() -> tuple[list, ClaimBroker]:
        db = CacheThread(cache)
        broker = ClaimBroker(db, ["d1", "d2", "o1", "free"], str, lease_s=30.0, poll_s=0.05, chunk=8)
        try:
            return [await broker.next() for _ in range(3)], broker
        finally:
            db.close()

    handed, broker = asyncio.run(hand_out())
    # the dead owner's calls come at once (an hour-long lease notwithstanding); o1 stays another host's
    assert sorted(call for call, elsewhere in handed if elsewhere is None) == ["d1", "d2", "free"]
    assert broker.taken_over == 2 and list(broker.waiting) == ["o1"]
    assert cache.claim_owners(["o1"]) == {"o1": alive_elsewhere}


def test_server_cache_takes_the_password_only_from_the_environment(pg_url, monkeypatch, caplog):
    with_password = pg_url.replace("popfair@", "popfair:hunter2-secret@")
    with pytest.raises(ConfigError, match="cache_url.*PGPASSWORD") as error:
        open_cache(with_password)
    assert "hunter2-secret" not in str(error.value) and "***" in str(error.value)
    monkeypatch.delenv("PGPASSWORD")
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    with pytest.raises(ConfigError, match="cache_url: cannot open the response cache"):
        open_cache(pg_url)
    with pytest.raises(ConfigError, match="only postgresql"):
        open_cache("mysql://me@127.0.0.1/db")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    with caplog.at_level(logging.DEBUG), open_cache(pg_url) as cache:
        cache.put("k", "openai", "m", ANSWER)
    assert pg_url in caplog.text and PASSWORD not in caplog.text  # where it went, never the secret


def test_copy_moves_a_cache_to_the_server_and_back(tmp_path, pg_url, capsys):
    with open_cache(tmp_path / "a") as source:
        for i in range(25):
            source.put(f"k{i}", "openai", "m", CachedAnswer(str(i), float(i), None, i, 1, 0.001 * i, 0.2, 1.0 + i))
        source.add_batch("b1", "anthropic", "https://y", "m", "callback", ["k1"])
        expected = sorted(row for rows in source.rows("responses") for row in rows)
    pages = [(f"{i:04d}", bytes([i % 256]) * (i + 1)) for i in range(1_100)]  # copied 500 at a time
    with open_blob_store(tmp_path / "a", "documents") as documents:
        documents.put_many(pages)
    assert cache_cli(["copy", str(tmp_path / "a"), pg_url]) == 0
    out = capsys.readouterr().out
    assert "responses: 25 rows read, 25 new" in out and "documents: 1100 rows read, 1100 new" in out
    assert "nuisances" not in out  # the folder has no such store: none is made
    assert cache_cli(["copy", str(tmp_path / "a"), pg_url]) == 0  # rerun: nothing new, nothing doubled
    assert "responses: 25 rows read, 0 new in target, 25 already there" in capsys.readouterr().out
    assert cache_cli(["copy", pg_url, str(tmp_path / "b")]) == 0
    assert "responses: 25 rows read, 25 new" in capsys.readouterr().out
    with open_cache(tmp_path / "b") as back:
        assert sorted(row for rows in back.rows("responses") for row in rows) == expected
        assert [b.batch_id for b in back.open_batches("anthropic", "https://y", "m")] == ["b1"]
    with open_blob_store(tmp_path / "b", "documents") as copied:
        assert [pair for chunk in copied.items() for pair in chunk] == pages
    assert cache_cli(["count", pg_url]) == 0 and capsys.readouterr().out.strip() == "25"
    assert cache_cli(["copy", str(tmp_path / "a"), "postgresql+psycopg://u:pw@127.0.0.1:1/x"]) == 2
    assert "PGPASSWORD" in capsys.readouterr().err


def _open_and_count(location: str) -> int:
    with open_cache(location) as cache:
        return cache.count()


def test_workers_opening_a_fresh_server_cache_at_once_all_succeed(pg_url):
    """A sweep's workers create the tables of a new database concurrently (serialised by a lock)."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(4) as pool:
        assert list(pool.map(_open_and_count, [pg_url] * 4)) == [0, 0, 0, 0]
