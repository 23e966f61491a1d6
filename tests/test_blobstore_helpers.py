"""Helpers of the content-addressed store (popfair.store.blobs) for computed results: keys follow
content, arrays round-trip to the bit, the memory store for callers without a cache folder, and a
writer killed mid-commit never leaves a partial blob."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pandas as pd

from popfair.store.blobs import MemoryBlobStore, content_key, open_blob_store, pack_arrays, unpack_arrays


def test_keys_follow_content_and_framing():
    array = np.arange(6, dtype=np.float32)
    assert content_key("a", array) == content_key("a", array.copy())
    assert content_key("a", array) != content_key("a", array.astype(np.float64))  # dtype counts
    assert content_key("a", array) != content_key("a", array.reshape(2, 3))  # shape counts
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key({"seed": 0, "grid": [1, 2]}) == content_key({"grid": [1, 2], "seed": 0})
    frame = pd.DataFrame({"age": [30, 41], "edu": ["high", "low"]})
    changed = frame.copy()
    changed.loc[1, "edu"] = "medium"
    assert content_key(frame) != content_key(changed)
    assert content_key(frame) != content_key(frame.rename(columns={"age": "years"}))


def test_arrays_round_trip_to_the_bit():
    raw = np.random.default_rng(0).random((3, 50)).astype(np.float32)
    back = unpack_arrays(pack_arrays({"raw": raw, "folds": np.arange(50)}))
    assert back["raw"].dtype == np.float32 and back["raw"].tobytes() == raw.tobytes()
    assert back["folds"].tolist() == list(range(50))


def test_memory_stores_of_one_name_share_their_blobs():
    MemoryBlobStore.clear("t")
    with MemoryBlobStore("t") as store:
        store.put_many([("k", b"v")])
        store.put_many([("k", b"other")])  # a key keeps its first blob, as on disk
    assert MemoryBlobStore("t").get_many(["k", "absent"]) == {"k": b"v"}
    MemoryBlobStore.clear("t")
    assert MemoryBlobStore("t").count() == 0


def _write_forever(folder: str, ready) -> None:
    with open_blob_store(folder, "t") as store:
        ready.set()
        i = 0
        while True:
            store.put_many([(f"key{i}", bytes([i % 256]) * 4_000_000)])
            i += 1


def test_a_writer_killed_mid_commit_leaves_whole_blobs_only(tmp_path):
    context = multiprocessing.get_context("fork")
    for delay in (0.05, 0.2, 0.5):
        ready = context.Event()
        writer = context.Process(target=_write_forever, args=(str(tmp_path), ready))
        writer.start()
        assert ready.wait(60)
        time.sleep(delay)
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
    with open_blob_store(tmp_path, "t") as store:
        keys = [f"key{i}" for i in range(10_000)]
        found = store.get_many(keys)
        assert found  # the writer committed some before it was killed
        for key, blob in found.items():
            assert blob == bytes([int(key[3:]) % 256]) * 4_000_000
