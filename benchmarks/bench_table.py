"""Table cases at scale: a decisions table of 10 million applicants in 200,000 requisitions, audited from
Parquet and from CSV (full LL144 tables: sex, race/ethnicity, intersection, 2,000 cluster-bootstrap
replicates and the permutation test), and a 1-million-row PostgreSQL table (a real server on 127.0.0.1
from the pgserver wheel).

Targets (issue 23): Parquet 10M rows <= 20 s and <= 2 GB peak RSS; CSV of the same; PostgreSQL 1M rows
<= 15 s. Each audit runs in a fresh process (`--one`), as `python -m popfair experiment=table_audit ...`
would, and reports its wall time (reading, mapping, counts, inference; Python start-up and imports
excluded, printed separately), the CPU seconds of those stages (all threads: on a busy
machine the wall time is mostly waiting) and its peak resident memory. The tables are generated once per run by
DuckDB (deterministic hashes, so every run audits the same data).

Run from the repository root: python benchmarks/bench_table.py [--rows 10000000] [--clusters 200000]
[--pg-rows 1000000] [--skip-parquet] [--skip-csv] [--skip-pg]"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COLUMNS = [
    "table.columns.outcome=selected",
    "table.columns.sex=sex",
    "table.columns.race=race",
    "table.columns.cluster=requisition",
    "table.columns.applicant_id=applicant_id",
]
TARGETS = {"parquet": (20.0, 2048.0), "csv": (20.0, 2048.0), "postgres": (15.0, 2048.0)}


def generate(path: Path, rows: int, clusters: int) -> None:
    """Applicants with sex (2% blank), race (5 groups, 1% 'Declined'), requisition, and a selection that
    is lower for women and for Black applicants (so the tables have something to find)."""
    import duckdb

    fmt = "parquet" if path.suffix == ".parquet" else "csv"
    u = "(hash(i, {k}) % 1000000) / 1000000.0"
    sex = f"CASE WHEN {u.format(k=1)} < 0.02 THEN '' WHEN {u.format(k=1)} < 0.51 THEN 'F' ELSE 'M' END"
    race = (
        f"CASE WHEN {u.format(k=2)} < 0.01 THEN 'Declined' WHEN {u.format(k=2)} < 0.45 THEN 'White' "
        f"WHEN {u.format(k=2)} < 0.65 THEN 'Black or African American' WHEN {u.format(k=2)} < 0.85 "
        f"THEN 'Hispanic or Latino' WHEN {u.format(k=2)} < 0.985 THEN 'Asian' ELSE 'Two or More Races' END"
    )
    con = duckdb.connect()
    con.execute(
        f"""COPY (
          SELECT i AS applicant_id, 'R' || (i % {clusters}) AS requisition, sex, race,
                 CAST({u.format(k=3)} < 0.30 - 0.03 * (sex = 'F')::INT - 0.04 * (race LIKE 'Black%')::INT AS INTEGER)
                   AS selected
          FROM (SELECT i, {sex} AS sex, {race} AS race FROM range({rows}) t(i))
        ) TO '{path}' (FORMAT {fmt})"""
    )
    con.close()


def one(args: list[str]) -> None:
    """Audit one table in this process; print a JSON line with the seconds and peak RSS."""
    os.environ.setdefault("DATAFRAME_FRAMEWORK", "pandas")
    start_process = time.perf_counter()
    from popfair.sweep.run_case import case_from_config
    from tests.conftest import compose_config

    case = case_from_config(compose_config(["experiment=table_audit", "tracking=none", "audit_report=false", *args]))
    imported = time.perf_counter() - start_process
    start, cpu = time.perf_counter(), time.process_time()
    result = case.run()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_s": cpu,
                "startup_s": imported,
                "peak_mb": peak_mb,
                "rows": result.source.rows_used,
                "clusters": int(result.counts.counts["cluster"].nunique()) if result.counts is not None else 0,
                "timings": result.timings,
            }
        )
    )


def measure(name: str, args: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--one", *args], capture_output=True, text=True, cwd=ROOT, env=os.environ.copy()
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    limit_s, limit_mb = TARGETS[name]
    verdict = "ok" if figures["seconds"] <= limit_s and figures["peak_mb"] <= limit_mb else "OVER TARGET"
    stages = " | ".join(f"{k} {v:.1f}s" for k, v in figures["timings"].items())
    print(
        f"{name:9s} {figures['rows']:>11,} rows {figures['clusters']:>8,} clusters: {figures['seconds']:6.1f} s "
        f"({figures['cpu_s']:.1f} CPU s) "
        f"(target <= {limit_s:g} s), peak RSS {figures['peak_mb']:,.0f} MB (target <= {limit_mb:,.0f} MB) "
        f"[{stages}; start-up {figures['startup_s']:.1f} s] {verdict}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return figures


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2:])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--clusters", type=int, default=200_000)
    parser.add_argument("--pg-rows", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--skip-parquet", action="store_true")
    parser.add_argument("--skip-csv", action="store_true")
    parser.add_argument("--skip-pg", action="store_true")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at start", flush=True)
    common = [*COLUMNS, f"estimator.n_bootstrap={args.bootstrap}"]
    with tempfile.TemporaryDirectory(prefix="bench-table-") as tmp:
        if not args.skip_parquet:
            parquet = Path(tmp) / "decisions.parquet"
            start = time.perf_counter()
            generate(parquet, args.rows, args.clusters)
            print(
                f"generated {parquet.name}: {parquet.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - start:.1f} s"
            )
            measure("parquet", [f"table.path={parquet}", *common])
        if not args.skip_csv:
            csv = Path(tmp) / "decisions.csv"
            generate(csv, args.rows, args.clusters)
            print(f"generated {csv.name}: {csv.stat().st_size / 1e6:,.0f} MB")
            measure("csv", [f"table.path={csv}", *common])
        if not args.skip_pg:
            postgres(Path(tmp), args, common)


def postgres(tmp: Path, args: argparse.Namespace, common: list[str]) -> None:
    import psycopg

    from tests.pg_server import PASSWORD, USER, start_postgres

    csv = tmp / "pg.csv"
    generate(csv, args.pg_rows, max(1, args.clusters * args.pg_rows // args.rows))
    server = start_postgres()
    try:
        url = server.new_database()
        dbname = url.rsplit("/", 1)[1]
        with psycopg.connect(host="127.0.0.1", port=server.port, user=USER, password=PASSWORD, dbname=dbname) as conn:
            conn.execute(
                "CREATE TABLE decisions (applicant_id BIGINT, requisition TEXT, sex TEXT, race TEXT, selected INTEGER)"
            )
            with conn.cursor().copy("COPY decisions FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
                copy.write(csv.read_bytes())
        os.environ["PGPASSWORD"] = PASSWORD
        measure("postgres", [f"table.url={url}", "table.name=decisions", *common])
    finally:
        server.stop()


if __name__ == "__main__":
    main()
