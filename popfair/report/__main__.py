"""`python -m popfair.report` / `popfair-report`: the comparison report of a sweep or experiment.

popfair-report --parent <sweep parent run id>            # one sweep
popfair-report --experiment popfair --out reports/all    # every case run of an experiment
popfair-report --latest-sweep                             # the most recent sweep
popfair-report --audit <run id> --out audit/             # one case's auditor's report (HTML, Markdown)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from popfair.core.errors import PopfairError
from popfair.runtime.entry import entry_point


def latest_sweep(tracking_uri: str, experiment_name: str) -> str:
    """Run id of the newest sweep parent run in the experiment."""
    from mlflow import MlflowClient

    from popfair.core.errors import DataError
    from popfair.report.runs import PARENT_TAG

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        raise DataError(f"no MLflow experiment {experiment_name!r} at {tracking_uri}")
    runs = client.search_runs(
        [experiment.experiment_id],
        f"tags.`{PARENT_TAG}` = 'parent'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise DataError(f"no sweep parent run in experiment {experiment_name!r} at {tracking_uri}")
    return runs[0].info.run_id


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="popfair-report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tracking-uri",
        default="sqlite:///mlruns/mlflow.db",
        help="MLflow tracking URI (sqlite store or http://host:port of mlflow server)",
    )
    parser.add_argument("--experiment", default="popfair", help="MLflow experiment name")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--parent", help="sweep parent run id: report that sweep's cases only")
    which.add_argument("--latest-sweep", action="store_true", help="report the newest sweep")
    which.add_argument(
        "--audit",
        metavar="RUN_ID",
        help="fetch one case's auditor's report (written for screener=http|file or audit_report=true)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default reports/<parent run id or experiment>)"
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to the sweep's parent run")
    args = parser.parse_args(argv)
    from popfair.estimate.inference import ALPHA

    if not ALPHA.is_satisfied_by(args.alpha):
        parser.error(f"--alpha must be {ALPHA}, got {args.alpha}")

    from popfair.report.sweep import write_report

    if args.audit:
        from popfair.report.audit import fetch_audit_report

        try:
            report = fetch_audit_report(
                args.tracking_uri, args.audit, args.out or Path("reports") / f"audit-{args.audit}"
            )
        except PopfairError as exc:
            print(f"popfair-report: {exc}", file=sys.stderr)
            return 2
        print(f"audit report: {report} (and report.md beside it)")
        return 0
    try:
        parent = latest_sweep(args.tracking_uri, args.experiment) if args.latest_sweep else args.parent
        out = args.out or Path("reports") / (parent or args.experiment)
        files = write_report(args.tracking_uri, args.experiment, out, parent_run_id=parent, alpha=args.alpha)
        if parent and not args.no_log:
            from mlflow import MlflowClient

            MlflowClient(args.tracking_uri).log_artifacts(parent, str(out), artifact_path="report")
    except PopfairError as exc:
        print(f"popfair-report: {exc}", file=sys.stderr)
        return 2
    print(f"report written: {files['report.html']} ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
