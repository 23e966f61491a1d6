"""Watch mode (table.watch=true) on a CSV file that grows and on a PostgreSQL table that grows: each look
reads only the rows added since the last one (every row once), and the alert fires at the batch where
the anytime-valid interval, computed independently from the rows in order with ville, first crosses
the four-fifths line. Bad inputs are one line, leave the state as it was, and lose no row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from popfair.core.errors import ConfigError, DataError
from popfair.sweep.run_case import case_from_config
from tests.conftest import compose_config

BATCH = 300
QUICK = ["tracking=none", "audit_report=false", "estimator.n_bootstrap=100"]
COLUMNS = [
    "table.columns.outcome=hired",
    "table.columns.race=race",
    "table.columns.applicant_id=id",
    "table.columns.date=decided",
    "table.period=quarter",
]


def batches(seed: int = 11, n_batches: int = 6) -> list[pd.DataFrame]:
    """Two batches in 2024-Q1 with equal rates, then Q2 batches where Black applicants' rate falls to 0.15."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n_batches):
        q2 = b >= 2
        race = rng.choice(["White", "Black"], BATCH)
        rate = np.where(q2 & (race == "Black"), 0.15, 0.45)
        out.append(
            pd.DataFrame(
                {
                    "id": np.arange(b * BATCH, (b + 1) * BATCH) + 1,
                    "race": race,
                    "decided": f"2024-{4 + b % 3 if q2 else 1 + b:02d}-10",
                    "hired": (rng.random(BATCH) < rate).astype(int),
                }
            )
        )
    return out


def expected_alert_batch(parts: list[pd.DataFrame], alpha: float = 0.05, line: float = 0.8) -> int:
    """The first batch (1-based) after which some quarter's Black or White impact ratio has an
    anytime-valid upper end below `line`: ville's beta-binomial CS of each rate (alpha / 2 each, fed
    the rows in order), the ratio's upper end min(1, U_g / max_h L_h)."""
    import ville

    for k in range(1, len(parts) + 1):
        rows = pd.concat(parts[:k])
        quarter = pd.to_datetime(rows["decided"]).dt.quarter
        for _, window in rows.groupby(quarter):
            bounds = {}
            for race, group in window.groupby("race"):
                cs = ville.BernoulliCS(alpha=alpha / 2, intersect=False)
                cs.update(group["hired"].to_numpy(float))
                bounds[race] = cs.interval()
            top_low = max(low for low, _ in bounds.values())
            if any(min(1.0, high / top_low) < line for _, high in bounds.values()):
                return k
    return 0


_COMPOSED: dict[tuple[str, ...], object] = {}


def look(tmp_path, *overrides: str):
    """One look, in this process (each distinct command line composed once: a look is the same command again)."""
    key = (str(tmp_path), *overrides)
    if key not in _COMPOSED:
        _COMPOSED[key] = compose_config(["experiment=table_audit", *COLUMNS, *QUICK, *overrides], tmp_path=tmp_path)
    case = case_from_config(_COMPOSED[key])
    case.report_dir = tmp_path
    return case.run()


def test_counts_from_the_library_equal_its_confidence_sequence_fed_units():
    import ville

    from popfair.estimate.sequential.counts import count_interval

    for selected, n in [(0, 40), (40, 40), (13, 100), (401, 1000)]:
        cs = ville.BernoulliCS(alpha=0.025, intersect=False)
        cs.update(np.r_[np.ones(selected), np.zeros(n - selected)])
        got = count_interval(selected, n, alpha=0.025)
        assert (got.low, got.high) == pytest.approx(cs.interval(), abs=1e-12)


def test_a_growing_csv_is_read_once_and_alerts_at_the_right_batch(tmp_path):
    from tests.test_table_case import popfair_cli

    parts = batches()
    expected = expected_alert_batch(parts)
    assert expected >= 4  # not the first batch of the drop quarter: the interval needs the rows
    path, state_path = tmp_path / "decisions.csv", tmp_path / "state.json"
    where = [f"table.path={path}", f"table.watch_state={state_path}", "table.watch=true"]
    alerts, every_look = [], []
    for k, part in enumerate(parts[:-1], start=1):
        text = part.to_csv(index=False, header=k == 1, lineterminator="\n")
        if k == 3:  # the writer is in the middle of a line: it waits for the next look
            cut = len(text) - 6
            with path.open("a") as out:
                out.write(text[:cut])
            partial = look(tmp_path, *where).watch
            assert partial.rows_read == BATCH - 1
            every_look.append(partial.alert)
            with path.open("a") as out:
                out.write(text[cut:])
            result = look(tmp_path, *where)
            assert result.watch.rows_read == 1
            alerts.append(result.watch.alert)
            every_look.append(result.watch.alert)
            continue
        with path.open("a") as out:
            out.write(text)
        result = look(tmp_path, *where)
        assert result.watch.rows_read == BATCH
        alerts.append(result.watch.alert)
        every_look.append(result.watch.alert)
    assert alerts == [k >= expected for k in range(1, len(parts))]
    state = json.loads(state_path.read_text())
    counted = pd.DataFrame(state["counts"]).groupby("race")[["n", "selected"]].sum()
    rows = pd.concat(parts[:-1])
    hand = rows.assign(race=rows["race"].str.lower()).groupby("race")["hired"].agg(["size", "sum"])
    assert counted["n"].to_dict() == hand["size"].to_dict()  # every row counted once
    assert counted["selected"].to_dict() == hand["sum"].to_dict()
    assert state["offset"] == path.stat().st_size
    # the command line: the last batch, a line for the scheduler, exit 3, the MLflow tag
    with path.open("a") as out:
        out.write(parts[-1].to_csv(index=False, header=False, lineterminator="\n"))
    done = popfair_cli(
        tmp_path, "experiment=table_audit", *COLUMNS, *where, "estimator.n_bootstrap=100", in_process=True
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert (
        f"popfair watch: look {len(parts) + 1}," in done.stdout
        and "ALERT (exit 3): 2024-Q2 race/ethnicity: Black" in done.stdout
    )
    assert f"(first crossed at look {expected + 1})" in done.stdout  # batch 3 took two looks
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.data.tags["watch.alert"] == "true" and run.data.metrics["watch.rows_new"] == BATCH
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "watch.alert")
    assert [(m.step, int(m.value)) for m in sorted(history, key=lambda m: m.step)] == list(
        enumerate([*every_look, True], start=1)
    )
    report = mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/audit_report/report.md")
    assert "## Watch: the rows added since the last look" in report and "The alert fired" in report
    again = popfair_cli(tmp_path, "experiment=table_audit", *COLUMNS, *where, in_process=True)
    assert again.returncode == 3 and "popfair watch: no rows added since look" in again.stdout
    assert len(mlflow.search_runs(search_all_experiments=True, output_format="list")) == 1  # nothing new logged


def test_a_growing_postgres_table_is_read_once_and_alerts_at_the_right_batch(tmp_path, pg_url):
    from sqlalchemy import create_engine, text

    parts = batches(seed=4, n_batches=5)
    expected = expected_alert_batch(parts)
    assert expected >= 3
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE decisions (id integer PRIMARY KEY, race text, decided date, hired integer)"))
    where = [
        f"table.url={pg_url}",
        "table.name=decisions",
        "table.watch=true",
        "table.watch_column=id",
        f"table.watch_state={tmp_path}/pg.json",
    ]
    alerts = []
    for k, part in enumerate(parts, start=1):
        part.assign(decided=pd.to_datetime(part["decided"]).dt.date).to_sql(
            "decisions", engine, if_exists="append", index=False
        )
        result = look(tmp_path, *where)
        assert result.watch.rows_read == BATCH  # only the new rows
        alerts.append(result.watch.alert)
        state = json.loads((tmp_path / "pg.json").read_text())
        assert state["watermark"] == k * BATCH
    engine.dispose()
    assert alerts == [k >= expected for k in range(1, len(parts) + 1)]
    counted = pd.DataFrame(state["counts"])["n"].sum()
    assert counted == len(parts) * BATCH
    idle = look(tmp_path, *where)
    assert idle.watch.rows_read == 0 and idle.watch.alert and idle.run_id is None


def test_bad_watch_inputs_are_one_line_and_lose_nothing(tmp_path):
    parts = batches(n_batches=2)
    path, state_path = tmp_path / "d.csv", tmp_path / "state.json"
    parts[0].to_csv(path, index=False)
    where = [f"table.path={path}", f"table.watch_state={state_path}", "table.watch=true"]
    look(tmp_path, *where)
    kept = state_path.read_bytes()

    # a new row with a value no mapping covers: the look stops, the watermark stays, the row is read once mapped
    martian = parts[1].assign(race=np.where(np.arange(BATCH) == 0, "Martian", parts[1]["race"]))
    martian.to_csv(path, mode="a", header=False, index=False)
    with pytest.raises(ConfigError, match=r"^table.values.race: no mapping covers 'Martian' \(1 rows\)") as err:
        look(tmp_path, *where)
    assert "\n" not in str(err.value) and state_path.read_bytes() == kept
    mapped = look(tmp_path, *where, "+table.values.race.martian=other")
    assert mapped.watch.rows_read == BATCH
    kept = state_path.read_bytes()

    with pytest.raises(
        DataError,
        match=r"^table.watch_state: .* was made by a watch with other table settings \(changed: \['period'\]\)",
    ):
        look(tmp_path, *where, "table.period=month", "+table.values.race.martian=other")
    text = path.read_text()
    path.write_text(text.replace("White", "white", 1))  # an edit in the part already read
    with pytest.raises(DataError, match=r"^table.path: the first [\d,]+ bytes of .* \(the rows already read\) changed"):
        look(tmp_path, *where, "+table.values.race.martian=other")
    path.write_text(text[:100])
    with pytest.raises(DataError, match=r"^table.path: .* is shorter \(100 bytes\) than the [\d,]+ bytes already read"):
        look(tmp_path, *where, "+table.values.race.martian=other")
    assert state_path.read_bytes() == kept
    state_path.write_text("{not json")
    with pytest.raises(
        DataError, match=r"^table.watch_state: .* is not a popfair watch state \(JSONDecodeError"
    ) as err:
        look(tmp_path, *where)
    assert "\n" not in str(err.value) and state_path.read_text() == "{not json"

    cases = [
        (
            [f"table.path={tmp_path}/d.parquet", "table.watch=true"],
            r"^table.watch: reads the rows appended to an uncompressed CSV",
        ),
        (
            ["table.url=sqlite:///x.db", "table.name=t", "table.watch=true"],
            r"^table.watch_column: table.watch on a database needs",
        ),
        ([f"table.path={path}", "table.watch_state=s.json"], r"^table.watch_state: is used only with table.watch=true"),
        (
            [f"table.path={path}", "table.period=weekly"],
            r"^table.period: must be one of \['month', 'quarter', 'year'\]",
        ),
    ]
    for overrides, pattern in cases:
        with pytest.raises(ConfigError, match=pattern):
            look(tmp_path, *overrides)
    with pytest.raises(ConfigError, match=r"^table.watch: watches impact ratios; use estimator=impact_ratio"):
        look(tmp_path, *where, "estimator=outcome_gap")
