"""A stopped case must not look finished: the progress bar of a case stopped by a refused connection or
a rejected key (401) stays below 100% and ends saying how many rows were not sent (real SDK, real
server on 127.0.0.1)."""

from __future__ import annotations

import pytest

from popfair.core.errors import ScreeningStopped
from tests.screen_helpers import JOBS, documents, make_screener
from tests.test_screen_failfast import SHIPPED, StatusServer, closed_port_url

ROWS = 500


def _last_bar(stderr: str) -> str:
    bars = [part for line in stderr.splitlines() for part in line.split("\r") if "row" in part]
    assert bars, stderr
    return bars[-1]


@pytest.mark.parametrize("where", ["closed port", "401"])
def test_the_bar_of_a_stopped_case_does_not_reach_100(where, tmp_path, monkeypatch, capsys):
    pytest.importorskip("openai")
    engine = {**SHIPPED, "progress": True}
    if where == "401":
        with StatusServer(401) as server:
            screener = make_screener("openai", server.url, tmp_path, monkeypatch, engine=engine)
            with pytest.raises(ScreeningStopped):
                screener.screen(JOBS, documents(ROWS), "score")
    else:
        screener = make_screener("openai", closed_port_url(), tmp_path, monkeypatch, engine=engine)
        with pytest.raises(ScreeningStopped):
            screener.screen(JOBS, documents(ROWS), "score")
    bar = _last_bar(capsys.readouterr().err)
    assert "100%" not in bar and f"{ROWS}/{ROWS}" not in bar, bar
    assert "STOPPED:" in bar and "not sent" in bar, bar
