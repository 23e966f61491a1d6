"""A sweep over table files (`-m table.path=a.csv,b.csv`): its runs are tagged with the table audit's
own choices (no screener, occupation or population), its report has a table-audit section with each
file's run and no PopResume pattern tally, and a report that fails makes the sweep exit non-zero.
In process: `popfair.__main__.main` with sys.argv set (Hydra's multirun, popfair's sweeper)."""

from __future__ import annotations

import sys

import mlflow
import pandas as pd

from tests.test_table_source import COLUMNS, decisions, write


def test_a_sweep_over_table_files_reports_each_file(tmp_path, monkeypatch, capsys):
    import popfair.report.sweep as sweep_report
    from popfair.__main__ import main

    table = decisions()
    write(table, tmp_path / "a.csv", "csv")
    write(table.sample(frac=0.5, random_state=1), tmp_path / "b.csv", "csv")
    real_report = sweep_report.write_report

    def failing_report(*args, **kwargs):
        raise ValueError("the report could not be drawn")

    monkeypatch.setattr(sweep_report, "write_report", failing_report)
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "popfair",
            "-m",
            "experiment=table_audit",
            f"table.path={tmp_path}/a.csv,{tmp_path}/b.csv",
            *[c for c in COLUMNS if not c.startswith("table.columns.date")],
            "estimator.n_bootstrap=200",
            f"tracking.uri={uri}",
            f"tracking.artifact_root={tmp_path}/artifacts",
            f"hydra.sweep.dir={tmp_path}/sweep",
        ],
    )
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr().out
    assert code == 1  # the report failed: the sweep does not exit 0
    assert "2 cases reported of 2, 0 failed" in out

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    parent = next(r for r in runs if r.data.tags.get("popfair.sweep") == "parent")
    assert "could not be drawn" in parent.data.tags["sweep.report_error"]
    cases = [r for r in runs if r.data.tags.get("popfair.sweep") != "parent"]
    assert len(cases) == 2
    for run in cases:
        tags = run.data.tags
        assert not {"choice.screener", "choice.occupation", "choice.population", "choice.renderer"} & set(tags)
        assert tags["choice.table"] == "default" and tags["choice.estimator"] == "impact_ratio"

    report = tmp_path / "report"
    real_report(uri, "popfair", report, parent_run_id=parent.info.run_id)
    assert not (report / "pattern_tally.csv").exists()
    assert not (report / "popresume_effects.csv").exists()
    audits = pd.read_csv(report / "table_audits.csv")
    assert audits["source"].str.contains("a.csv").any() and audits["source"].str.contains("b.csv").any()
    assert set(audits["run_id"]) == {r.info.run_id for r in cases}
    assert "Table audits" in (report / "report.md").read_text()
