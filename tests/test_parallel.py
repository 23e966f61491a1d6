"""popfair.runtime.parallel.forked_call: work in a forked process beside the caller, results and errors back."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from popfair.core.errors import ConfigError, EstimationError
from popfair.runtime import parallel


def _pid_and_frame(n: int) -> tuple[int, pd.DataFrame]:
    return os.getpid(), pd.DataFrame({"x": range(n)})


class _Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickles, but cannot be rebuilt from args
        super().__init__(f"{a}+{b}")


def _raise(kind: str) -> None:
    if kind == "popfair":
        raise EstimationError("no effect to decompose")
    raise _Unpicklable(1, 2)


def test_forked_call_runs_in_another_process_and_returns_the_result(monkeypatch):
    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    wait = parallel.forked_call(_pid_and_frame, 3)
    pid, frame = wait()
    assert pid != os.getpid() and frame["x"].tolist() == [0, 1, 2]
    assert parallel._CALL is None


def test_forked_call_raises_the_workers_error_here(monkeypatch):
    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    with pytest.raises(EstimationError, match="no effect"):
        parallel.forked_call(_raise, "popfair")()
    with pytest.raises(RuntimeError, match=r"_Unpicklable: 1\+2"):
        parallel.forked_call(_raise, "other")()


def test_forked_call_with_one_cpu_runs_here_when_asked(monkeypatch):
    monkeypatch.setattr(parallel, "cpu_count", lambda: 1)
    wait = parallel.forked_call(_pid_and_frame, 1)
    assert wait()[0] == os.getpid()
    with pytest.raises(ConfigError):
        parallel.forked_call(lambda: (_ for _ in ()).throw(ConfigError("x")))()


def test_cold_name_tables_are_built_by_a_forked_worker(tmp_path, monkeypatch):
    from popfair.population import names

    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    names.surnames.cache_clear()
    names.first_names.cache_clear()
    try:
        wait = names.prefetch_names(2024)
        assert not names.surnames.cache_info().currsize  # built in the worker, not here
        wait()
        assert len(list(tmp_path.glob("surnames-*.pkl"))) == len(list(tmp_path.glob("first_names-*.pkl"))) == 1
        assert names.surnames().draw(["white"], [0.5]).shape == (1,)  # loaded from the worker's files
        assert names.first_names(2024).draw(["female"], [1990], [0.5]).shape == (1,)
        assert names.first_names.cache_info().misses == 1 and names.surnames.cache_info().misses == 1
        names.prefetch_names(2024)()  # on disk: nothing to do
        assert len(list(tmp_path.glob("*.pkl"))) == 2
    finally:
        names.surnames.cache_clear()
        names.first_names.cache_clear()


def test_frozen_heap_nests_and_survives_forks(monkeypatch):
    import gc

    monkeypatch.setattr(parallel, "cpu_count", lambda: 2)
    assert gc.get_freeze_count() == 0
    with parallel.frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        fresh = [[i] for i in range(10_000)]  # tracked objects a second gc.freeze() would take in
        with parallel.frozen_heap():
            # the inner block froze nothing new (frozen objects freed meanwhile may leave one by one)
            assert frozen * 0.99 < gc.get_freeze_count() <= frozen
        del fresh
        assert parallel.forked_call(_pid_and_frame, 1)()[0] != os.getpid()
        assert [start for start, _ in parallel.forked_spans(lambda a, b: b - a, 10, 2)] == [0, 2, 4, 6, 8]
        # the forks kept the outer freeze: an unfreeze would empty the permanent generation; frozen
        # objects whose last reference goes (a cache entry replaced) still leave it one by one
        assert gc.get_freeze_count() > frozen * 0.99
    assert gc.get_freeze_count() == 0


def test_forked_spans_without_workers_still_yields_span_by_span():
    # one CPU: spans of `chunk` in this process, so a caller storing each span keeps it through a kill
    spans = list(parallel.forked_spans(lambda a, b: list(range(a, b)), 10, 4, processes=1))
    assert spans == [(0, [0, 1, 2, 3]), (4, [4, 5, 6, 7]), (8, [8, 9])]
