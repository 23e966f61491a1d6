"""Copy a response cache between backends, e.g. a local SQLite cache into the server cache of a
cluster sweep, and back:

    python -m popfair.store copy .popfair_cache postgresql+psycopg://me@db.internal/popfair
    python -m popfair.store copy postgresql+psycopg://me@db.internal/popfair ./cache_copy
    python -m popfair.store count .popfair_cache

Answers and provider batch ids are copied, and so are the blob stores kept beside them: rendered
documents, DML nuisances, text embeddings, tfidf scores and hf_local's generations
(`documents.sqlite`, `nuisances.sqlite`, `embeddings.sqlite`, `tfidf_scores.sqlite`,
`generations.sqlite` in a folder; tables of those names in a database). Rows already in the target
are kept (a copy can be rerun, or merge two caches). Passwords come from the environment
(PGPASSWORD / ~/.pgpass), never the URL."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from popfair.core.errors import ConfigError
from popfair.runtime.entry import entry_point
from popfair.store.blobs import BLOB_STORES, is_url, open_blob_store
from popfair.store.responses import TABLES, open_cache


def copy(source: str, target: str) -> dict[str, tuple[int, int]]:
    """Copy every answer and batch record, then every blob store the source has; returns
    {table or store: (rows read, rows new in target)}."""
    counts: dict[str, tuple[int, int]] = {}
    with open_cache(source) as src, open_cache(target) as dst:
        for table in TABLES:
            read = new = 0
            for rows in src.rows(table):
                read += len(rows)
                new += dst.insert_rows(table, rows)
            counts[table] = (read, new)
    for name in BLOB_STORES:
        if not is_url(source) and not (Path(source) / f"{name}.sqlite").is_file():
            continue  # a folder without this store: nothing to copy, and no empty file made
        with open_blob_store(source, name) as src_blobs, open_blob_store(target, name) as dst_blobs:
            before, read = dst_blobs.count(), 0
            for items in src_blobs.items():
                read += len(items)
                dst_blobs.put_many(items)
            counts[name] = (read, dst_blobs.count() - before)
    return counts


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m popfair.store", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    copy_cmd = commands.add_parser(
        "copy",
        help="copy answers, batch ids, documents, nuisances, embeddings, tfidf scores and hf_local generations from SOURCE into TARGET",
    )
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
