"""A table as the source of a case: every format and database gives the same mapped counts, equal to a
hand count; every bad input is a one-line error naming its config key (popfair/design/table/)."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from popfair.case.table import TableCase
from popfair.core.errors import ConfigError, DataError
from popfair.sweep.run_case import case_from_config
from tests.conftest import compose_config

# (sex, race) -> (applicants, selected): known selection rates per category. "" sex and "Prefer not
# to say" race are unknown; NHPI is 1.2% of the table (under LL144's 2%).
CELLS = {
    ("F", "White"): (300, 150),
    ("F", "Black or African American"): (200, 70),
    ("F", "Hispanic or Latino"): (150, 60),
    ("F", "Asian"): (100, 45),
    ("F", "Native Hawaiian or Other Pacific Islander"): (12, 3),
    ("Male", "White"): (310, 186),
    ("Male", "Black or African American"): (190, 76),
    ("Male", "Hispanic or Latino"): (160, 72),
    ("Male", "Asian"): (90, 36),
    ("Male", "Native Hawaiian or Other Pacific Islander"): (12, 4),
    ("", "White"): (20, 8),
    ("Male", "Prefer not to say"): (30, 12),
}
SEX = {"F": "female", "Male": "male", "": "unknown"}
RACE = {
    "White": "white",
    "Black or African American": "black",
    "Hispanic or Latino": "hispanic",
    "Asian": "asian",
    "Native Hawaiian or Other Pacific Islander": "nhpi",
    "Prefer not to say": "unknown",
}
COLUMNS = [
    "table.columns.outcome=Decision",
    "table.columns.sex=Sex",
    "table.columns.race=Race_Ethnicity",
    "table.columns.applicant_id=Applicant",
    "table.columns.cluster=Requisition",
    "table.columns.date=Decided",
]


def decisions(seed: int = 0) -> pd.DataFrame:
    """The CELLS as applicant rows in shuffled order, spread over 40 requisitions and 2024's dates."""
    rng = np.random.default_rng(seed)
    rows = []
    for (sex, race), (n, selected) in CELLS.items():
        outcome = ["Yes"] * selected + ["No"] * (n - selected)
        rows += [(sex, race, o) for o in outcome]
    table = pd.DataFrame(rows, columns=["Sex", "Race_Ethnicity", "Decision"]).sample(frac=1, random_state=seed)
    table.insert(0, "Applicant", [f"A{i:05d}" for i in range(len(table))])
    table["Requisition"] = rng.integers(0, 40, len(table)).astype(str)
    table["Requisition"] = "R" + table["Requisition"]
    table["Decided"] = pd.to_datetime("2024-01-01") + pd.to_timedelta(rng.integers(0, 366, len(table)), unit="D")
    table["Decided"] = table["Decided"].dt.strftime("%Y-%m-%d")
    table["Unused"] = rng.normal(size=len(table))
    return table.reset_index(drop=True)


def hand_counts(table: pd.DataFrame) -> pd.DataFrame:
    """cluster x sex x race: applicants and selected, counted by pandas from the raw labels."""
    frame = pd.DataFrame(
        {
            "cluster": table["Requisition"],
            "sex": table["Sex"].map(SEX),
            "race": table["Race_Ethnicity"].map(RACE),
            "selection": (table["Decision"] == "Yes").astype(int),
        }
    )
    out = frame.groupby(["cluster", "sex", "race"]).agg(n=("selection", "size"), selection=("selection", "sum"))
    return out.reset_index().sort_values(["cluster", "sex", "race"]).reset_index(drop=True)


def table_case(tmp_path, overrides: list[str]) -> TableCase:
    case = case_from_config(compose_config(["experiment=table_audit", *overrides], tmp_path=tmp_path))
    assert isinstance(case, TableCase)
    case.report_dir = tmp_path
    return case


def mapped_counts(tmp_path, overrides: list[str]) -> tuple[pd.DataFrame, TableCase, object]:
    case = table_case(tmp_path, overrides)
    mapped = case.read()
    try:
        counts = mapped.counts()
    finally:
        mapped.source.close()
    frame = (
        counts.counts.astype({"sex": str, "race": str}).sort_values(["cluster", "sex", "race"]).reset_index(drop=True)
    )
    return frame[["cluster", "sex", "race", "n", "selection"]], case, counts


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return decisions()


def write(table: pd.DataFrame, path, fmt: str) -> None:
    if fmt == "csv":
        table.to_csv(path, index=False)
    elif fmt == "parquet":
        table.to_parquet(path, index=False)
    elif fmt == "excel":
        with pd.ExcelWriter(path) as writer:
            pd.DataFrame({"note": ["cover sheet"]}).to_excel(writer, sheet_name="About", index=False)
            table.to_excel(writer, sheet_name="Decisions", index=False)
    else:
        table.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize(
    "fmt,suffix,extra",
    [
        ("csv", "csv", []),
        ("parquet", "parquet", []),
        ("excel", "xlsx", ["table.sheet=Decisions"]),
        ("jsonl", "jsonl", []),
    ],
)
def test_each_file_format_gives_the_hand_counted_cells(tmp_path, table, fmt, suffix, extra):
    path = tmp_path / f"decisions.{suffix}"
    write(table, path, fmt)
    counts, _, result = mapped_counts(tmp_path, [f"table.path={path}", *COLUMNS, *extra])
    pd.testing.assert_frame_equal(counts, hand_counts(table), check_dtype=False)
    record = result.source  # type: ignore[attr-defined]
    assert record.rows_read == record.rows_used == len(table) and record.rows_dropped == 0
    assert (record.date_min, record.date_max) == (table["Decided"].min(), table["Decided"].max())
    import hashlib

    assert record.fingerprint["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert record.kind == "historical" and str(path.resolve()) in record.description


def test_sqlite_table_and_query_give_the_hand_counted_cells(tmp_path, table):
    db = tmp_path / "decisions.db"
    with sqlite3.connect(db) as conn:
        table.to_sql("decisions", conn, index=False)
    url = f"table.url=sqlite:///{db}"
    by_name, _, result = mapped_counts(tmp_path, [url, "table.name=decisions", *COLUMNS])
    pd.testing.assert_frame_equal(by_name, hand_counts(table), check_dtype=False)
    by_query, _, again = mapped_counts(
        tmp_path, [url, "table.query=\"SELECT * FROM decisions WHERE Decided >= '2024-07-01'\"", *COLUMNS]
    )
    later = table[table["Decided"] >= "2024-07-01"]
    pd.testing.assert_frame_equal(by_query, hand_counts(later), check_dtype=False)
    with pytest.raises(
        ConfigError, match=r"^table.name: no table 'decision' in sqlite:///.*; closest: \['decisions'\]"
    ):
        table_case(tmp_path, [url, "table.name=decision", *COLUMNS]).read()
    assert result.source.fingerprint["row_checksum_rows"] == str(len(table))  # type: ignore[attr-defined]
    assert again.source.fingerprint["row_checksum"] != result.source.fingerprint["row_checksum"]  # type: ignore[attr-defined]


def test_postgres_table_gives_the_hand_counted_cells_with_the_password_from_the_environment(tmp_path, table, pg_url):
    from sqlalchemy import create_engine

    from tests.pg_server import PASSWORD

    engine = create_engine(pg_url)
    table.to_sql("decisions", engine, index=False)
    engine.dispose()
    counts, case, result = mapped_counts(tmp_path, [f"table.url={pg_url}", "table.name=decisions", *COLUMNS])
    pd.testing.assert_frame_equal(counts, hand_counts(table), check_dtype=False)
    assert PASSWORD not in result.source.description  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"^table.url: .* holds a password; remove it and set PGPASSWORD"):
        table_case(
            tmp_path,
            [f"table.url={pg_url.replace('popfair@', 'popfair:' + PASSWORD + '@')}", "table.name=decisions", *COLUMNS],
        ).read()
    failing = table_case(tmp_path, [f"table.url={pg_url}", "table.query='SELECT nonexistent FROM decisions'", *COLUMNS])
    with pytest.raises(
        DataError, match=r'^table.query: the database refused it .*column "nonexistent" does not exist'
    ) as err:
        failing.read()
    assert PASSWORD not in str(err.value) and "\n" not in str(err.value)
    empty = table_case(tmp_path, [f"table.url={pg_url}", "table.query='SELECT * FROM decisions WHERE false'", *COLUMNS])
    with pytest.raises(DataError, match=r"^table.query: .*query: SELECT \* FROM decisions WHERE false has no rows"):
        empty.read()


def test_filters_are_counted_before_and_after(tmp_path, table):
    path = tmp_path / "d.parquet"
    write(table, path, "parquet")
    counts, _, result = mapped_counts(
        tmp_path, [f"table.path={path}", *COLUMNS, "table.date_from=2024-03-01", "table.where='Unused > 0'"]
    )
    kept = table[(table["Decided"] >= "2024-03-01") & (table["Unused"] > 0)]
    pd.testing.assert_frame_equal(counts, hand_counts(kept), check_dtype=False)
    record = result.source  # type: ignore[attr-defined]
    assert (record.rows_read, record.rows_after_filters, record.rows_used) == (len(table), len(kept), len(kept))


def test_scores_count_above_the_median_and_ranks_within_k(tmp_path):
    rng = np.random.default_rng(3)
    n = 1001
    frame = pd.DataFrame(
        {"sex": rng.choice(["female", "male"], n), "score": rng.integers(0, 101, n), "rank": rng.integers(1, 9, n)}
    )
    path = tmp_path / "scores.csv"
    frame.to_csv(path, index=False)
    case = table_case(tmp_path, [f"table.path={path}", "table.columns.outcome=score", "table.columns.sex=sex"])
    mapped = case.read()
    result = mapped.counts()
    mapped.source.close()
    median = frame["score"].median()
    assert result.outcome == "score" and result.thresholds["scoring_median"] == median
    expected = frame.assign(above=frame["score"] > median).groupby("sex")["above"].sum()
    assert result.counts.set_index("sex")["scoring_median"].to_dict() == expected.to_dict()
    ranked = table_case(
        tmp_path,
        [
            f"table.path={path}",
            "table.columns.outcome=rank",
            "table.columns.sex=sex",
            "table.outcome.kind=rank",
            "table.outcome.k=2",
        ],
    ).read()
    got = ranked.counts().counts.set_index("sex")["selection"]
    ranked.source.close()
    assert got.to_dict() == frame.assign(top=frame["rank"] <= 2).groupby("sex")["top"].sum().to_dict()


# ---- bad input: one line naming the config key ---------------------------------------------------


@pytest.fixture
def csv_path(tmp_path, table):
    path = tmp_path / "decisions.csv"
    write(table, path, "csv")
    return path


@pytest.mark.parametrize(
    "overrides,error,pattern",
    [
        (["table.path=/no/such/file.csv"], ConfigError, r"^table.path: no such file '/no/such/file.csv'"),
        (["table.columns.sex=sex"], ConfigError, r"^table.columns.sex: no column 'sex' in .*; closest: \['Sex'\]"),
        (["table.columns.z=[Race_Ethnicity,Educaton]"], ConfigError, r"^table.columns.z\[1\]: no column 'Educaton'"),
        (
            ["table.columns.outcome=Race_Ethnicity"],
            ConfigError,
            r"^table.columns.outcome: column 'Race_Ethnicity' holds 'white'",
        ),
        (
            ["table.where='Unused > 99'"],
            ConfigError,
            r"^table.where: no rows left after the filters \(Unused > 99\); 1,574 rows read",
        ),
        (["table.where='Unsed > 0'"], DataError, r'^table.where: .*Referenced column "Unsed" not found'),
        (["table.date_from=2024-13-01"], ConfigError, r"^table.date_from: '2024-13-01' is not a date"),
        (
            ["+table.values.race.Latinx=hispnic"],
            ConfigError,
            r"^table.values.race.Latinx: 'hispnic' is not a popfair race category.*did you mean hispanic",
        ),
        (["table.format=parquet"], DataError, r"^table.path: cannot read .* as parquet"),
        (["table.columns.race=Applicant"], ConfigError, r"^table.columns.race: column 'Applicant' has 1,574 distinct"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(tmp_path, csv_path, overrides, error, pattern):
    with pytest.raises(error, match=pattern) as err:
        table_case(tmp_path, [f"table.path={csv_path}", *COLUMNS, *overrides]).read()
    assert "\n" not in str(err.value)


def test_unmapped_values_are_named_with_their_counts_never_dropped(tmp_path, table):
    odd = table.copy()
    odd.loc[:6, "Race_Ethnicity"] = "Latinx"
    odd.loc[7:8, "Race_Ethnicity"] = "Martian"
    path = tmp_path / "odd.csv"
    odd.to_csv(path, index=False)
    with pytest.raises(
        ConfigError, match=r"^table.values.race: no mapping covers 'Latinx' \(7 rows\), 'Martian' \(2 rows\)"
    ):
        table_case(tmp_path, [f"table.path={path}", *COLUMNS]).read()
    counts, _, result = mapped_counts(
        tmp_path, [f"table.path={path}", *COLUMNS, "table.unmapped=unknown", "+table.values.race.Latinx=hispanic"]
    )
    assert counts["n"].sum() == len(odd)
    assert counts.loc[counts["race"] == "unknown", "n"].sum() == 2 + 30
    assert "Martian" in " ".join(result.source.notes)  # type: ignore[attr-defined]


def test_a_category_column_with_no_known_value_is_named(tmp_path, table):
    blank = table.assign(Race_Ethnicity="")
    path = tmp_path / "blank.parquet"
    blank.to_parquet(path)
    with pytest.raises(
        ConfigError, match=r"^table.columns.race: no row of column 'Race_Ethnicity' has a known race \(all 1,574"
    ):
        table_case(tmp_path, [f"table.path={path}", *COLUMNS]).read()


def test_a_contrast_level_with_no_rows_is_named(tmp_path, table):
    no_black = table[table["Race_Ethnicity"] != "Black or African American"]
    path = tmp_path / "no_black.csv"
    no_black.to_csv(path, index=False)
    case = table_case(tmp_path, [f"table.path={path}", *COLUMNS, "estimator=outcome_gap", "protected_attr=race"])
    with pytest.raises(ConfigError, match=r"^protected_attr.x0: no row of the table has race='black' after mapping"):
        case.run()


def test_row_problems_go_to_table_report_and_are_counted_when_dropped(tmp_path, table):
    bad = table.copy()
    bad.loc[3, "Decision"] = "Maybe"
    bad.loc[5, "Decision"] = None
    bad.loc[10, "Applicant"] = bad.loc[11, "Applicant"]  # same id, and (below) a different outcome
    bad.loc[10, "Decision"], bad.loc[11, "Decision"] = "Yes", "No"
    bad.loc[20, "Requisition"] = None
    path = tmp_path / "bad.csv"
    bad.to_csv(path, index=False)
    with pytest.raises(
        DataError, match=r"^table.bad_rows: 5 rows have problems .* listed in .*table_report.csv"
    ) as err:
        table_case(tmp_path, [f"table.path={path}", *COLUMNS]).read()
    assert "\n" not in str(err.value)
    report = pd.read_csv(tmp_path / "table_report.csv")
    assert sorted(report["source_row"]) == [4, 6, 11, 12, 21]  # 1 = the first data row
    assert set(report.loc[report["source_row"] == 4, "value"]) == {"Maybe"}
    counts, _, result = mapped_counts(tmp_path, [f"table.path={path}", *COLUMNS, "table.bad_rows=drop"])
    assert counts["n"].sum() == len(bad) - 5 and result.source.rows_dropped == 5  # type: ignore[attr-defined]


def test_exact_duplicate_ids_keep_one_row(tmp_path, table):
    doubled = pd.concat([table, table.iloc[:3]], ignore_index=True)
    path = tmp_path / "doubled.parquet"
    doubled.to_parquet(path)
    with pytest.raises(DataError, match=r"3 duplicate applicant id, same values \(one kept\)"):
        table_case(tmp_path, [f"table.path={path}", *COLUMNS]).read()
    counts, _, _ = mapped_counts(tmp_path, [f"table.path={path}", *COLUMNS, "table.bad_rows=drop"])
    pd.testing.assert_frame_equal(counts, hand_counts(table), check_dtype=False)


def test_source_and_estimator_errors_at_build(tmp_path, csv_path):
    with pytest.raises(ConfigError, match=r"^table.path: set exactly one source"):
        table_case(tmp_path, [*COLUMNS])
    with pytest.raises(ConfigError, match=r"^table.columns.outcome: is required"):
        table_case(tmp_path, [f"table.path={csv_path}"])
    with pytest.raises(
        ConfigError,
        match=r"^estimator: 'interventional' does not apply to the table design \(it needs generated applicants",
    ):
        table_case(tmp_path, [f"table.path={csv_path}", *COLUMNS, "estimator=interventional"])
    with pytest.raises(ConfigError, match=r"^table.sheet: no sheet 'Decisons'"):
        path = csv_path.with_suffix(".xlsx")
        write(pd.read_csv(csv_path), path, "excel")
        table_case(tmp_path, [f"table.path={path}", *COLUMNS, "table.sheet=Decisons"]).read()


def test_a_table_with_sex_only_gives_the_sex_table(tmp_path, csv_path):
    case = table_case(
        tmp_path,
        [f"table.path={csv_path}", "table.columns.outcome=Decision", "table.columns.sex=Sex", "tracking=none"],
    )
    result = case.run()
    sex = result.ratios.included().query("dimension == 'sex'").set_index("category")
    female = [cell for cell in CELLS if SEX[cell[0]] == "female"]
    male = [cell for cell in CELLS if SEX[cell[0]] == "male"]
    rate = {
        name: sum(CELLS[c][1] for c in cells) / sum(CELLS[c][0] for c in cells)
        for name, cells in (("female", female), ("male", male))
    }
    assert sex["rate"].to_dict() == pytest.approx(rate)
    assert sex.loc["female", "impact_ratio"] == pytest.approx(rate["female"] / rate["male"])
    assert result.ratios.n_unknown()["sex"] == 20
