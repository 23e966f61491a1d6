"""The content-addressed store (popfair.store): keys follow content, a writer killed mid-write never
leaves a half entry that reads as data, a damaged file is a miss, and an unwritable folder only
costs the reuse."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import numpy as np
import pandas as pd

from popfair.store import BlobStore, clear_memory, content_key


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


def test_entries_round_trip_on_disk_and_in_memory(tmp_path):
    for store in (BlobStore(tmp_path, "t"), BlobStore(None, "t")):
        key = content_key("x")
        assert store.get(key) is None
        store.put(key, b"\x00payload")
        assert store.get(key) == b"\x00payload"
        store.put_json(content_key("j"), {"mu3": {"max_depth": 2}})
        assert store.get_json(content_key("j")) == {"mu3": {"max_depth": 2}}
        raw = np.random.default_rng(0).random((3, 50)).astype(np.float32)
        store.put_arrays(content_key("a"), {"raw": raw})
        back = store.get_arrays(content_key("a"))
        assert back is not None and back["raw"].dtype == np.float32 and back["raw"].tobytes() == raw.tobytes()
    clear_memory("t")
    assert BlobStore(None, "t").get(content_key("x")) is None
    assert BlobStore(tmp_path, "t").get(content_key("x")) == b"\x00payload"  # disk entries outlive memory


def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path):
    store = BlobStore(tmp_path, "t")
    key = content_key("doc")
    store.put(key, b"x" * 10_000)
    path = store.path(key)
    assert path is not None
    path.write_bytes(path.read_bytes()[:5000])  # torn
    assert store.get(key) is None and not path.exists()
    store.put(key, b"x" * 10_000)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # one flipped bit
    path.write_bytes(bytes(data))
    assert store.get(key) is None


def _write_forever(root: str, key: str, ready) -> None:
    store = BlobStore(root, "t")
    payloads = [bytes([i]) * 8_000_000 for i in range(2)]
    ready.set()
    i = 0
    while True:
        store.put(key, payloads[i % 2])
        i += 1


def test_a_writer_killed_mid_write_leaves_a_whole_entry_or_none(tmp_path):
    key = content_key("big")
    context = multiprocessing.get_context("fork")
    for delay in (0.0, 0.05, 0.13, 0.3):
        ready = context.Event()
        writer = context.Process(target=_write_forever, args=(str(tmp_path), key, ready))
        writer.start()
        assert ready.wait(30)
        time.sleep(delay)
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
        got = BlobStore(tmp_path, "t").get(key)
        assert got is None or got in (bytes([0]) * 8_000_000, bytes([1]) * 8_000_000)
    # a later write replaces whatever a killed writer left, and is read back whole
    BlobStore(tmp_path, "t").put(key, b"done")
    assert BlobStore(tmp_path, "t").get(key) == b"done"


def test_an_unwritable_folder_only_loses_the_reuse(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    store = BlobStore(blocked, "t")
    store.put(content_key("x"), b"value")  # no error: the caller keeps its value
    assert store.get(content_key("x")) is None
