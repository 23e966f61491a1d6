"""Table audits an auditor can sign: exact duplicate rows (no applicant id to tell them apart) are
counted aloud, stopped on or dropped by table.dedupe, never counted silently; an outcome holding 1..k
once per cluster (a rank) is not guessed to be a higher-is-better score. Real DuckDB reads of CSV files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from popfair.case.table import TableCase
from popfair.core.errors import ConfigError, DataError
from tests.conftest import compose_config

BASE = ["experiment=table_audit", "table.columns.sex=sex", "table.columns.race=race"]


def _decisions(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "sex": rng.choice(["Male", "Female"], n),
            "race": rng.choice(["White", "Black", "Asian", "Hispanic"], n),
            "score": rng.normal(50, 10, n).round(3),
            "hired": rng.integers(0, 2, n),
            "posting": np.repeat(np.arange(n // 8), 8),
        }
    )


def _case(tmp_path, table: pd.DataFrame, *overrides: str) -> TableCase:
    path = tmp_path / "decisions.csv"
    table.to_csv(path, index=False)
    cfg = compose_config([*BASE, f"table.path={path}", *overrides], tmp_path=tmp_path)
    return TableCase.from_config(cfg, dry_run=True)


def _with_copies(table: pd.DataFrame, copies: int) -> pd.DataFrame:
    return pd.concat([table, table.iloc[:copies]], ignore_index=True)


def test_exact_duplicates_are_warned_about_with_their_count(tmp_path, caplog):
    case = _case(tmp_path, _with_copies(_decisions(), 200), "table.columns.outcome=hired")
    mapped = case.read()
    try:
        assert mapped.record.rows_used == 600  # counted, as before, but aloud
        assert any("200 of 600 rows are exact copies" in note for note in mapped.notes)
    finally:
        mapped.source.close()
    assert "200 of 600 rows are exact copies" in caplog.text


def test_dedupe_error_stops_and_drop_keeps_one_of_each(tmp_path):
    table = _with_copies(_decisions(), 200)
    with pytest.raises(DataError, match=r"table.dedupe: 200 of 600 rows are exact copies"):
        _case(tmp_path, table, "table.columns.outcome=hired", "table.dedupe=error").check()
    line = _case(tmp_path, table, "table.columns.outcome=hired", "table.dedupe=drop").check()
    assert "400 used" in line


def test_no_note_without_duplicates_or_with_an_applicant_id(tmp_path):
    case = _case(tmp_path, _decisions(), "table.columns.outcome=hired")
    mapped = case.read()
    try:
        assert not any("exact copies" in note for note in mapped.notes)
    finally:
        mapped.source.close()


def test_a_rank_column_is_not_guessed_to_be_a_score(tmp_path):
    table = _decisions()
    table["rank"] = table.groupby("posting").cumcount() + 1  # 1..8 in each posting
    with pytest.raises(
        ConfigError, match=r"1\.\.k once each in each of its 50 clusters \(posting\).*table.outcome.kind=rank"
    ):
        _case(tmp_path, table, "table.columns.outcome=rank", "table.columns.cluster=posting").check()
    line = _case(
        tmp_path,
        table,
        "table.columns.outcome=rank",
        "table.columns.cluster=posting",
        "table.outcome.kind=rank",
        "table.outcome.k=2",
    ).check()
    assert "outcome rank" in line


def test_a_real_score_is_still_a_score(tmp_path):
    line = _case(tmp_path, _decisions(), "table.columns.outcome=score", "table.columns.cluster=posting").check()
    assert "outcome score" in line
