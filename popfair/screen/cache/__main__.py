"""Copy a response cache between backends, e.g. a local SQLite cache into the server cache of a
cluster sweep, and back:

    python -m popfair.screen.cache copy .popfair_cache postgresql+psycopg://me@db.internal/popfair
    python -m popfair.screen.cache copy postgresql+psycopg://me@db.internal/popfair ./cache_copy
    python -m popfair.screen.cache count .popfair_cache

Answers and provider batch ids are copied; rows already in the target are kept (a copy can be rerun,
or merge two caches). Passwords come from the environment (PGPASSWORD / ~/.pgpass), never the URL."""

from __future__ import annotations

import argparse
import sys

from popfair.entry import entry_point
from popfair.errors import ConfigError
from popfair.screen.cache import TABLES, open_cache


def copy(source: str, target: str) -> dict[str, tuple[int, int]]:
    """Copy every answer and batch record; returns {table: (rows read, rows new in target)}."""
    counts: dict[str, tuple[int, int]] = {}
    with open_cache(source) as src, open_cache(target) as dst:
        for table in TABLES:
            read = new = 0
            for rows in src.rows(table):
                read += len(rows)
                new += dst.insert_rows(table, rows)
            counts[table] = (read, new)
    return counts


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m popfair.screen.cache", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    copy_cmd = commands.add_parser("copy", help="copy answers and batch ids from SOURCE into TARGET")
    copy_cmd.add_argument("source", help="cache folder (SQLite) or database URL")
    copy_cmd.add_argument("target", help="cache folder (SQLite) or database URL")
    count_cmd = commands.add_parser("count", help="number of answers in a cache")
    count_cmd.add_argument("cache", help="cache folder (SQLite) or database URL")
    args = parser.parse_args(argv)
    try:
        if args.command == "copy":
            for table, (read, new) in copy(args.source, args.target).items():
                print(f"{table}: {read} rows read, {new} new in target, {read - new} already there")
        else:
            with open_cache(args.cache) as cache:
                print(cache.count())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
