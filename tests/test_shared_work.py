"""Work shared through claims (popfair.store.shared_work): every key is handed out once, buckets another
live process holds wait until it releases them, and a store whose claims fail is worked through."""

from __future__ import annotations

import hashlib
import threading

from popfair.store.blobs import MemoryBlobStore, open_blob_store
from popfair.store.shared_work import BUCKET_DIGITS, _claim_key, claimed_rounds

KEYS = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(60)]


def test_every_key_is_handed_out_once_and_a_held_bucket_last(tmp_path):
    store = open_blob_store(tmp_path, "shared_test")
    held = KEYS[0][:BUCKET_DIGITS]
    other = "other-host#1:1:00000000"  # alive as far as this host can tell: only its release frees it
    assert store.claim([_claim_key("scope", held)], other, 60) == {}
    threading.Timer(
        0.6, lambda: open_blob_store(tmp_path, "shared_test").release([_claim_key("scope", held)], other)
    ).start()
    rounds = list(claimed_rounds(store, "scope", KEYS, per_round=8))
    handed = [i for positions in rounds for i in positions]
    assert sorted(handed) == list(range(len(KEYS)))  # each once
    in_held = [i for i, key in enumerate(KEYS) if key.startswith(held)]
    assert rounds[-1] == in_held  # waited for, after everything else
    assert all(len(r) >= 8 or r is rounds[-1] or r is rounds[-2] for r in rounds)  # a round's worth at a time
    # the claims of this process were released round by round: a new owner can take every bucket
    assert store.claim([_claim_key("scope", key[:BUCKET_DIGITS]) for key in KEYS], "new:1:x", 60) == {}


def test_another_scope_does_not_wait(tmp_path):
    store = open_blob_store(tmp_path, "shared_test")
    store.claim([_claim_key("a", key[:BUCKET_DIGITS]) for key in KEYS], "other-host#1:1:00000000", 60)
    assert sorted(i for r in claimed_rounds(store, "b", KEYS, per_round=100) for i in r) == list(range(len(KEYS)))


def test_a_store_whose_claims_fail_is_worked_through_unclaimed(monkeypatch, caplog):
    import sqlite3

    store = MemoryBlobStore("shared_test_failing")

    def broken(*args):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store, "claim", broken)
    handed = [i for r in claimed_rounds(store, "scope", KEYS, per_round=8) for i in r]
    assert sorted(handed) == list(range(len(KEYS))) and "claims unusable" in caplog.text
