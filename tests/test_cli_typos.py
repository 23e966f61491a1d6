"""Typos on the command line: a group option, a key, a route that does not exist, and a `+key` that nothing
reads, each stopped with one line naming the closest option or key, for `popfair`, `popfair doctor` and
`popfair-export` (in process: the entry points' main functions, with sys.argv set); sub-command help."""

from __future__ import annotations

import sys

import pytest

from popfair.core.errors import ConfigError
from popfair.runtime.overrides import check_overrides
from popfair.runtime.paths import CONF_DIR


def _run(monkeypatch, capsys, main, argv: list[str]) -> tuple[int | None, str, str]:
    monkeypatch.setattr(sys, "argv", argv)
    code: int | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["screener=gpt4omini"], "screener=gpt4omini: no such option in group screener; did you mean gpt4o_mini?"),
        (["protected_attr=age"], "protected_attr=age: no such option in group protected_attr"),
        (["occupation=plumber"], "occupation=plumber: no such option in group occupation"),
        (["-m", "occupation=nurse,plumbr"], "occupation=plumbr: no such option"),
        (["popultion.n=100"], "popultion.n: no such config key; did you mean population.n?"),
        (["+popultion.n=100"], "+popultion.n: nothing reads popultion.n"),
        (["screener=gpt4o_mini", "screener.route=azure"], "screener.route=azure: no such route for gpt4o_mini"),
        (["-m", "screener=gpt4o_mini", "screener.route=openai,azur"], "screener.route=azur: no such route"),
        (["+screener.no_such_setting=1"], "+screener.no_such_setting: nothing reads"),
        (["table.path=a.csv"], "the table group is not selected here"),
        (
            ["table=default", "+table.columns.outcom=x"],
            "nothing reads table.columns.outcom, so the case would run as if it were not there; did you mean table.columns.outcome?",
        ),
        (["table=default", "table.columns.outcom=x"], "no such config key; did you mean table.columns.outcome?"),
        (["table=default", "+table.valus.race.w=white"], "+table.valus.race.w: nothing reads"),
        (["+screener.coefficients.first_name.Michael=4"], "belongs to screener=simulated or screener=simulated_paired"),
    ],
)
def test_typos_are_one_line_with_the_closest_name(args, expected):
    with pytest.raises(ConfigError) as caught:
        check_overrides(args, CONF_DIR)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_route_error_lists_the_routes():
    with pytest.raises(ConfigError, match=r"routes: auto, openrouter, openai"):
        check_overrides(["screener=gpt4o_mini", "screener.route=azure"], CONF_DIR)


@pytest.mark.parametrize(
    "args",
    [
        ["screener=gpt4o_mini", "occupation=teacher", "population.n=100", "screener.route=openai"],
        ["-m", "occupation=nurse,teacher", "seed=range(0,3)"],
        ["experiment=table_audit", "table.path=a.csv", "table.columns.outcome=hired"],
        ["+table=default", "table.path=a.csv"],
        ["screener=simulated", "~screener.coefficients", "+screener.coefficients={gender: {male: 4.0}}"],
        ["table=default", "+table.read_options.delim=;"],
        ["screener=gpt4o_mini", "+screener.routes.local={provider: openai_compatible, model: m}"],
        ["hydra/launcher=joblib", "hydra.sweep.dir=x", "+hydra.callbacks.popfair_sweep.report=false"],
        ["--cfg", "job", "estimator@outcome_audit=impact_ratio", "outcome_audit=null"],
        ["--config-dir", "/elsewhere", "whatever.key=1"],
        ["table=default", "+table.values.race.w=white", "+table.values.sex.x=female"],
        ["screener=simulated", "+screener.coefficients.first_name.Michael=4"],
        ["screener=simulated_ranker", "+screener.strengths.black female=0.2"],
        ["screener=http", "screener.url=http://127.0.0.1:1", "+screener.headers.X-Client=popfair"],
    ],
)
def test_valid_command_lines_pass(args):
    check_overrides(args, CONF_DIR)


@pytest.mark.parametrize(
    ("args", "hydra_gets"),
    [
        (["table=default", "table.values.race.w=white"], ["table=default", "++table.values.race.w=white"]),
        (
            ["screener=simulated", "screener.coefficients.first_name.Michael=4", "seed=1"],
            ["screener=simulated", "++screener.coefficients.first_name.Michael=4", "seed=1"],
        ),
        (["table=default", "table.values.race.latino=white"], ["table=default", "table.values.race.latino=white"]),
        (["table=default", "table.values.race={01: white}"], ["table=default", "++table.values.race={01: white}"]),
        (
            ["-m", "table=default", "table.values.race.w=white,black"],
            ["-m", "table=default", "++table.values.race.w=white,black"],
        ),
    ],
)
def test_a_new_key_of_an_open_mapping_without_plus_is_added(args, hydra_gets):
    """Hydra's struct mode refuses `table.values.race.w=white` ("Key 'w' is not in struct"); a key the user
    chooses goes to Hydra as `++` (add or set), and a key that exists is left as it is."""
    assert check_overrides(args, CONF_DIR) == hydra_gets


@pytest.mark.parametrize("plus", ["+", ""])
def test_a_category_value_added_on_the_command_line_maps_the_table(tmp_path, plus):
    """docs/tables.md's `+table.values.race.latinx=hispanic`, and the same without the +: the table's "w"
    maps as white (else the case stops naming 'w' as unmapped), in a real `python -m popfair`."""
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "t.csv").write_text("sex,race,hired\nf,w,1\nm,w,0\nf,black,1\nm,black,0\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "popfair",
            "experiment=table_audit",
            "table.path=t.csv",
            "table.columns.outcome=hired",
            "table.columns.sex=sex",
            "table.columns.race=race",
            "dry_run=true",
            f"{plus}table.values.race.w=white",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 rows read" in done.stdout and "no mapping covers" not in done.stderr


@pytest.mark.parametrize("plus", ["+", ""])
def test_a_coefficient_added_on_the_command_line_moves_the_scores(tmp_path, plus):
    """`+screener.coefficients.first_name.Michael=4`: the simulated screener reads any profile column its
    coefficients name, so a large coefficient for one first name raises the mean score."""
    from tests.conftest import popfair_in_process

    def gap(*extra: str) -> float:
        done = popfair_in_process(
            "screener=simulated",
            "population.n=200",
            "estimator=outcome_gap",
            "outcome_audit=null",
            "tracking=none",
            f"cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/out",
            *extra,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("gap "))
        return float(line.split()[-1])  # mean score of x1 (men)

    assert gap(f"{plus}screener.coefficients.first_name.Michael=400") > gap()


def test_popfair_entry_point_stops_a_typo_in_one_line(monkeypatch, capsys):
    from popfair.__main__ import main

    code, out, err = _run(monkeypatch, capsys, main, ["popfair", "popultion.n=100", "dry_run=true"])
    assert code == 2
    assert out == ""
    assert err.strip().splitlines() == [
        "popfair: popultion.n: no such config key; did you mean population.n? (run `popfair --cfg job` to list the keys)"
    ]


def test_plus_key_nothing_reads_is_refused_not_run(monkeypatch, capsys):
    """Hydra's advice `+popultion.n=100` used to run the full default case with the typo ignored."""
    from popfair.__main__ import main

    code, out, err = _run(monkeypatch, capsys, main, ["popfair", "+popultion.n=100", "dry_run=true"])
    assert code == 2
    assert "plan " not in out
    assert "nothing reads popultion.n" in err and "population.n" in err


def test_doctor_stops_a_typo_in_one_line(monkeypatch, capsys):
    from popfair.__main__ import main

    code, _, err = _run(monkeypatch, capsys, main, ["popfair", "doctor", "screener=gpt4omini"])
    assert code == 2
    assert err.strip().startswith("popfair doctor: screener=gpt4omini: no such option")
    assert len(err.strip().splitlines()) == 1


def test_export_stops_a_typo_in_one_line(monkeypatch, capsys):
    from popfair.case.export import main

    code, _, err = _run(monkeypatch, capsys, main, ["popfair-export", "screener=fle"])
    assert code == 2
    assert err.strip().startswith("popfair-export: screener=fle: no such option in group screener; did you mean file?")


def test_doctor_help_is_its_own(monkeypatch, capsys):
    from popfair.__main__ import main

    code, out, _ = _run(monkeypatch, capsys, main, ["popfair", "doctor", "--help"])
    assert code == 0
    assert out.startswith("popfair doctor [-m]")
    assert "pre-flight checks" in out
    assert "== Config groups ==" not in out and "Powered by Hydra" not in out


def test_export_help_is_its_own(monkeypatch, capsys):
    from popfair.case.export import main

    code, out, _ = _run(monkeypatch, capsys, main, ["popfair-export", "--help"])
    assert code == 0
    assert out.startswith("`popfair-export [group=option ...] screener=file screener.dir=DIR`")
    assert "screener: " in out and "gpt4o_mini" in out


def test_doctor_with_no_key_at_all_names_every_route_whose_key_would_do(tmp_path, monkeypatch):
    from popfair.case.compose import build_for_plan
    from popfair.screen.preflight import screener_checks
    from tests.conftest import compose_config

    for variable in ("OPENROUTER_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_config(["screener=gpt4o_mini"], tmp_path=tmp_path)
    screener = build_for_plan(cfg.screener, "screener", dry_run=True)
    key = {check.name: check for check in screener_checks(screener)}["key"]
    assert not key.ok
    assert key.fix == (
        "export OPENROUTER_API_KEY=... (screener.route=openrouter) or export OPENAI_API_KEY=... (screener.route=openai)"
    )


def test_doctor_key_line_reads_as_english(tmp_path, monkeypatch):
    from popfair.case.compose import build_for_plan
    from popfair.screen.preflight import screener_checks
    from tests.conftest import compose_config

    monkeypatch.setenv("OPENAI_API_KEY", "test-key-preflight-0123456789")
    cfg = compose_config(["screener=gpt4o_mini", "screener.route=openai"], tmp_path=tmp_path)
    key = {c.name: c for c in screener_checks(build_for_plan(cfg.screener, "screener", dry_run=True))}["key"]
    assert key.ok and key.detail.endswith("OPENAI_API_KEY is set")
    assert "needed set" not in key.detail


def test_a_sweep_with_a_typo_leaves_no_parent_run(monkeypatch, capsys, tmp_path):
    """`-m occupation=nurse,plumber` used to open the sweep's MLflow parent and leave it RUNNING."""
    import mlflow

    from popfair.__main__ import main

    monkeypatch.chdir(tmp_path)
    code, _, err = _run(
        monkeypatch,
        capsys,
        main,
        ["popfair", "-m", "occupation=nurse,plumber", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"],
    )
    assert code == 2 and "occupation=plumber: no such option" in err
    if (tmp_path / "mlflow.db").exists():
        mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
        runs = mlflow.search_runs(search_all_experiments=True)
        assert not len(runs) or "RUNNING" not in set(runs["status"])


def test_doctor_on_a_grid_prints_progress(monkeypatch, capsys, tmp_path):
    """`popfair doctor -m ...` used to print nothing until every case was checked (41 s on a grid)."""
    from popfair.__main__ import main

    monkeypatch.chdir(tmp_path)
    code, out, err = _run(
        monkeypatch,
        capsys,
        main,
        [
            "popfair",
            "doctor",
            "-m",
            "occupation=nurse,teacher,accountant",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
            f"cache_dir={tmp_path}/cache",
        ],
    )
    assert "popfair doctor: checking case 1 of 3" in err
    assert "popfair doctor: 3 cases checked in" in err
    assert "popfair doctor: sweep, 3 case(s)" in out
