"""Table cases from the command line: the same LL144 tables from CSV, Parquet, Excel and PostgreSQL, equal
to a hand computation; a paired case's and a default case's logged tables read back give the case's
paired-gap and PSE figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from popfair.case.population import PopulationCase
from popfair.sweep.run_case import case_from_config
from popfair.track.headline import logged_metrics
from tests.conftest import compose_config, popfair_in_process
from tests.test_table_source import CELLS, COLUMNS, RACE, SEX, decisions, write

ROOT = Path(__file__).resolve().parents[1]
N_BOOTSTRAP = "estimator.n_bootstrap=200"


def popfair_cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, in_process: bool = False
) -> subprocess.CompletedProcess:
    """`python -m popfair ARGS` tracking into tmp_path: in a real process (exit statuses), or with
    in_process=True through tests.conftest.popfair_in_process (what a run logs; no interpreter start)."""
    args = (
        *args,
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"tracking.artifact_root={tmp_path}/artifacts",
        f"hydra.run.dir={tmp_path}/out",
    )
    if in_process:
        return popfair_in_process(*args, cwd=tmp_path, env={**os.environ, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "popfair", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def logged_table(tmp_path: Path) -> tuple[pd.DataFrame, mlflow.entities.Run]:
    """The LL144 table and the run the one table case in this MLflow store logged."""
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    path = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="impact_ratios/table.csv")
    return pd.read_csv(path, keep_default_na=False, na_values=[""]), run


def hand_ll144() -> pd.DataFrame:
    """Rates and impact ratios per sex, race and sex x race category, from CELLS by hand: unknown
    rows out of the rates, categories under 2% of all applicants out of the ratios."""
    cells = pd.DataFrame(
        [(SEX[s], RACE[r], n, k) for (s, r), (n, k) in CELLS.items()], columns=["sex", "race", "n", "selected"]
    )
    total = cells["n"].sum()
    blocks = []
    for dimension, keys in (("sex", ["sex"]), ("race", ["race"]), ("sex_race", ["sex", "race"])):
        known = cells[(cells[keys] != "unknown").all(axis=1)]
        block = known.groupby(keys)[["n", "selected"]].sum().reset_index()
        block["category"] = block[keys].agg("-".join, axis=1)
        block["rate"] = block["selected"] / block["n"]
        block["status"] = ["included" if n / total >= 0.02 else "excluded" for n in block["n"]]
        top = block.loc[block["status"] == "included", "rate"].max()
        block["impact_ratio"] = [
            r / top if s == "included" else float("nan") for r, s in zip(block["rate"], block["status"])
        ]
        block["dimension"] = dimension
        block["n_unknown"] = total - known["n"].sum()
        blocks.append(block[["dimension", "category", "n", "selected", "rate", "status", "impact_ratio", "n_unknown"]])
    return pd.concat(blocks, ignore_index=True)


def check_against_hand(table: pd.DataFrame) -> None:
    expected = hand_ll144()
    got = table[(table["metric"] == "selection") & (table["status"] != "unknown")]
    got = got.set_index(["dimension", "category"]).loc[list(zip(expected["dimension"], expected["category"]))]
    assert got["n_applicants"].tolist() == expected["n"].tolist()
    assert got["n_selected"].tolist() == expected["selected"].tolist()
    assert got["rate"].to_numpy() == pytest.approx(expected["rate"].to_numpy())
    assert got["status"].tolist() == expected["status"].tolist()
    assert got["impact_ratio"].to_numpy() == pytest.approx(expected["impact_ratio"].to_numpy(), nan_ok=True)
    unknown = table[table["status"] == "unknown"].set_index("dimension")["n_applicants"]
    assert unknown.to_dict() == expected.drop_duplicates("dimension").set_index("dimension")["n_unknown"].to_dict()
    assert unknown["sex_race"] == 50  # 20 of unknown sex + 30 of unknown race


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return decisions()


@pytest.fixture(scope="module")
def csv_tables(tmp_path_factory, table) -> dict[str, pd.DataFrame]:
    """CSV, Parquet and Excel runs of the command line on the same decisions; their logged LL144 tables."""
    out = {}
    for fmt, suffix in (("csv", "csv"), ("parquet", "parquet"), ("excel", "xlsx")):
        tmp = tmp_path_factory.mktemp(fmt)
        path = tmp / f"decisions.{suffix}"
        write(table, path, fmt)
        sheet = ["table.sheet=Decisions"] if fmt == "excel" else []
        done = popfair_cli(
            tmp, "experiment=table_audit", f"table.path={path}", *COLUMNS, *sheet, N_BOOTSTRAP, in_process=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out[fmt], run = logged_table(tmp)
        assert run.data.tags["table.sha256"] and logged_metrics(MlflowClient(), run)["table.rows_used"] == len(table)
        assert (
            run.data.tags["data_kind"] == "historical" and run.data.tags["table.source"] == path.name
        )  # no local path
    return out


@pytest.mark.parametrize("fmt", ["csv", "parquet", "excel"])
def test_command_line_ll144_tables_equal_the_hand_computation(csv_tables, fmt):
    check_against_hand(csv_tables[fmt])
    pd.testing.assert_frame_equal(csv_tables[fmt], csv_tables["csv"])  # CIs too: same counts, same seed


def test_command_line_on_a_postgres_table_gives_the_same_tables(tmp_path, table, pg_url, csv_tables):
    from sqlalchemy import create_engine

    from tests.pg_server import PASSWORD

    engine = create_engine(pg_url)
    table.to_sql("decisions", engine, index=False)
    engine.dispose()
    done = popfair_cli(
        tmp_path,
        "experiment=table_audit",
        f"table.url={pg_url}",
        "table.name=decisions",
        *COLUMNS,
        N_BOOTSTRAP,
        env={"PGPASSWORD": PASSWORD},
        in_process=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    logged, run = logged_table(tmp_path)
    check_against_hand(logged)
    pd.testing.assert_frame_equal(logged, csv_tables["csv"])
    assert run.data.tags["table.row_checksum"] and PASSWORD not in str(run.data.params) + str(run.data.tags)


def test_a_bad_input_exits_with_one_line_and_no_traceback(tmp_path):
    done = popfair_cli(
        tmp_path, "experiment=table_audit", f"table.path={tmp_path}/missing.csv", "table.columns.outcome=y"
    )
    output = done.stdout + done.stderr
    assert done.returncode == 2
    assert "Traceback" not in output and "table.path: no such file" in output


def _run_case(tmp_path: Path, overrides: list[str]):
    experiment = PopulationCase.from_config(compose_config(overrides, tmp_path=tmp_path))
    result = experiment.run()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    exported = tmp_path / "exported.parquet"  # the decisions table the run logged, as an auditor downloads it
    local = mlflow.artifacts.download_artifacts(run_id=result.run_id, artifact_path="scored.parquet")
    Path(local).rename(exported)
    return result, exported


def test_a_paired_case_exported_and_read_back_gives_its_paired_gap(tmp_path):
    result, exported = _run_case(
        tmp_path, ["experiment=paired_race", "screener=tfidf", "occupation.n_postings=60", N_BOOTSTRAP]
    )
    csv = tmp_path / "pairs.csv"
    pd.read_parquet(exported).to_csv(csv, index=False)
    case = case_from_config(
        compose_config(
            [
                "experiment=table_audit",
                "estimator=paired_gap",
                "protected_attr=race",
                f"table.path={csv}",
                "table.columns.outcome=y",
                "table.columns.race=race",
                "table.columns.sex=gender",
                "table.columns.pair_id=pair_key",
                "table.columns.posting_id=posting_id",
                N_BOOTSTRAP,
            ],
            tmp_path=tmp_path,
        )
    )
    again = case.run()
    pd.testing.assert_frame_equal(again.effects.table, result.effects.table)
    assert again.audit is not None  # the LL144 add-on beside the paired gap, from the same table


def test_a_default_case_exported_and_read_back_gives_its_pse_table(tmp_path):
    small = ["estimator.grid.max_depth=[2]", "estimator.grid.reg_lambda=[1]", "estimator.n_bootstrap=100"]
    result, exported = _run_case(tmp_path, ["population.n=400", "estimator=pse_dml", *small])  # DML on both sides
    roles = result.profiles.roles
    case = case_from_config(
        compose_config(
            [
                "experiment=table_audit",
                "estimator=pse_dml",
                f"table.path={exported}",
                "table.columns.outcome=y",
                "table.columns.sex=gender",
                "table.columns.race=race",
                f"table.columns.z=[{','.join(roles.z)}]",
                f"table.columns.b=[{','.join(roles.b)}]",
                f"table.columns.r=[{','.join(roles.r)}]",
                *small,
            ],
            tmp_path=tmp_path,
        )
    )
    again = case.run()
    pd.testing.assert_frame_equal(again.effects.table, result.effects.table)


def test_the_readme_table_command_runs_verbatim_from_the_repository_root(tmp_path):
    """README's table command, as printed, from a folder laid out as the repository root (its docs/ is the
    checkout's, so docs/data/sample_decisions.csv is the shipped file; what the run writes stays in tmp)."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "experiment=table_audit" in b)
    command = shlex.split(block.replace("\\\n", " "))
    assert command[:3] == ["python", "-m", "popfair"]
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    done = subprocess.run(
        [sys.executable, *command[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "applicants: 800" in done.stdout and "selection/sex/female" in done.stdout
