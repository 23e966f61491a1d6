"""`popfair-data pums`: fetch the Census Bureau's ACS 1-year PUMS person files for a population
(`popfair-data cache` shows or prunes popfair's disk cache: `CACHE_HELP`).

For each state (all 50 + DC, or --states) it downloads `{base}/{year}/1-Year/csv_p{st}.zip`, resuming
a partial download with an HTTP Range request, with a progress bar (bytes, rate, ETA); checks the
zip (CRC of every member while streaming it), the columns (a missing one is a layout change), that
the rows are that state's; streams the person CSV through the project's filters (employed ESR 1/2,
AGEP 18-44, OCCP present; optionally --occp codes) and keeps the columns `population.pums_path` reads.
Each finished state is recorded in `manifest.json` (zip sha256 and size, rows read and kept), so a
rerun skips it; the zips are deleted once filtered unless --keep-zips. The states are then written as
one gzip CSV; `population.pums_path` takes its path, or `fetched:<year>` for the all-states file.

Layout: <out>/<year>/{csv_p<st>.zip[.part], p_<st>.csv.gz, manifest.json} and
<out>/pums_<year>_1yr_persons_employed_age18_44_<states>.csv.gz. <out> defaults to
$POPFAIR_PUMS_DIR, else <popfair cache dir>/pums."""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from tenacity import (
    retry,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)
from tqdm import tqdm

from popfair.core.errors import DataError
from popfair.population.cache import cache_dir
from popfair.population.pums import AGE_RANGE, state_table
from popfair.runtime.entry import entry_point

if TYPE_CHECKING:
    import requests

CENSUS_PUMS = "https://www2.census.gov/programs-surveys/acs/data/pums"
# Columns kept; the state is ST (2023 and before) or STATE (2024 on) in the Census files.
KEEP = ("SERIALNO", "ST", "OCCP", "ESR", "SEX", "AGEP", "RAC1P", "HISP", "SCHL", "PWGTP")
CHUNK_ROWS = 200_000
DOWNLOAD_BLOCK = 1 << 16
SPACE_MARGIN = 64 << 20  # keep this much free beyond what a download needs
FILTER_VERSION = 1  # bump when the filter changes, so cached state files are rebuilt


class FetchError(DataError):
    """A download, verification or filtering problem, worded for the user."""


class _Transient(Exception):
    """A connection problem or 5xx answer worth retrying."""


class _Corrupt(Exception):
    """The zip cannot be read: deleted and reported as a FetchError by the caller."""


@dataclass(frozen=True)
class Request:
    year: int
    states: tuple[str, ...]  # USPS codes
    out: Path
    base_url: str = CENSUS_PUMS
    occp: tuple[int, ...] = ()  # empty: every occupation
    keep_zips: bool = False

    @property
    def year_dir(self) -> Path:
        return self.out / str(self.year)

    @property
    def signature(self) -> dict[str, Any]:
        return {"filter_version": FILTER_VERSION, "occp": list(self.occp), "ages": list(AGE_RANGE)}


def pums_dir() -> Path:
    """Default folder for fetched files: $POPFAIR_PUMS_DIR, else <cache dir>/pums."""
    if os.environ.get("POPFAIR_PUMS_DIR"):
        return Path(os.environ["POPFAIR_PUMS_DIR"])
    return (cache_dir() or Path.home() / ".cache" / "popfair") / "pums"


def output_name(year: int, states: tuple[str, ...]) -> str:
    label = "all_states_dc" if set(states) == set(all_states()) else "_".join(sorted(states)).lower()
    return f"pums_{year}_1yr_persons_employed_age18_44_{label}.csv.gz"


def all_states() -> tuple[str, ...]:
    """The 50 states + DC of the ACS national PUMS (Puerto Rico has its own survey file and no Census region)."""
    table = state_table()
    return tuple(table.loc[table["census_region"].notna(), "usps"])


def resolve_pums_path(spec: str) -> str:
    """`fetched:<year>` -> the all-states file `popfair-data pums --year <year>` writes; other specs as is."""
    if not spec.startswith("fetched:"):
        return spec
    year = spec.split(":", 1)[1]
    if not year.isdigit():
        raise FetchError(f"population.pums_path={spec!r}: expected fetched:<year>, e.g. fetched:2023")
    path = pums_dir() / output_name(int(year), all_states())
    if not path.exists():
        raise FetchError(
            f"population.pums_path={spec}: no fetched file at {path}. Run `popfair-data pums "
            f"--year {year}` first (or set POPFAIR_PUMS_DIR to where you fetched it)."
        )
    return str(path)


# ---------------------------------------------------------------- download


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed + SPACE_MARGIN:
        raise FetchError(
            f"no space: {folder} has {free / 2**20:.0f} MiB free, the download needs "
            f"{(needed + SPACE_MARGIN) / 2**20:.0f} MiB (with a {SPACE_MARGIN >> 20} MiB margin); "
            "free some space or pass --out on another disk"
        )


@retry(
    retry=retry_if_exception_type(_Transient),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=0.5, max=8),
    reraise=True,
)
def _open(url: str, offset: int) -> requests.Response:
    import requests  # here: a case that fetches nothing starts without it

    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        response = requests.get(url, headers=headers, stream=True, timeout=60)
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise _Transient(f"{url}: {exc}") from exc
    if response.status_code >= 500:
        response.close()
        raise _Transient(f"{url}: HTTP {response.status_code}")
    return response


def download(url: str, target: Path, year: int, usps: str) -> Path:
    """Download url to target, resuming target.part; returns target. Clear FetchErrors for 404 and space."""
    import requests  # here: a case that fetches nothing starts without it (a tenth of a second)

    if target.exists():
        return target
    part = target.with_name(target.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    try:
        response = _open(url, offset)
    except _Transient as exc:
        raise FetchError(f"download failed after retries: {exc}") from exc
    with response:
        if response.status_code == 404:
            raise FetchError(
                f"{url}: HTTP 404 Not Found. There is no ACS {year} 1-year PUMS person file for {usps} "
                "at this address: the year may not be released yet (1-year files appear each autumn; "
                "2020 has no standard 1-year release) or --base-url is wrong."
            )
        if response.status_code == 416 and offset:  # the part file is already complete
            part.replace(target)
            return target
        if response.status_code not in (200, 206):
            raise FetchError(f"{url}: HTTP {response.status_code} {response.reason}")
        if response.status_code == 200:
            offset = 0  # server ignored the Range: start over
        size = int(response.headers.get("Content-Length", 0))
        total = offset + size if size else None
        _check_space(target.parent, size)
        mode = "ab" if offset else "wb"
        try:
            with (
                part.open(mode) as handle,
                tqdm(
                    total=total,
                    initial=offset,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=target.name,
                    file=sys.stderr,
                    mininterval=0.5,
                ) as bar,
            ):
                for block in response.iter_content(DOWNLOAD_BLOCK):
                    handle.write(block)
                    bar.update(len(block))
        except requests.RequestException as exc:
            raise FetchError(f"{url}: connection lost at {part.stat().st_size} bytes ({exc}); rerun to resume") from exc
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise FetchError(
                    f"no space left on device writing {part}; free some space and rerun "
                    "(the download resumes where it stopped)"
                ) from exc
            raise
    if total is not None and part.stat().st_size != total:
        raise FetchError(f"{url}: got {part.stat().st_size} of {total} bytes; rerun to resume")
    part.replace(target)
    return target


# ---------------------------------------------------------------- verify and filter


def _member(archive: zipfile.ZipFile, zip_path: Path) -> str:
    names = [n for n in archive.namelist() if n.lower().startswith("psam_p") and n.lower().endswith(".csv")]
    if len(names) != 1:
        raise FetchError(
            f"layout change: {zip_path} should hold one psam_p<fips>.csv person file, it holds {archive.namelist()}"
        )
    return names[0]


def _chunks(zip_path: Path, occp: tuple[int, ...]) -> Iterator[tuple[pd.DataFrame, int]]:
    """(filtered chunk, rows read) over the zip's person CSV; FetchError on a corrupt zip or missing column."""
    try:
        archive = zipfile.ZipFile(zip_path)
    except zipfile.BadZipFile as exc:
        raise _Corrupt(f"{zip_path} is not a valid zip ({exc})") from exc
    with archive:
        member = _member(archive, zip_path)
        try:
            with archive.open(member) as handle:
                header = pd.read_csv(handle, nrows=0).columns
            columns = {c.upper(): c for c in header}
            if "ST" not in columns and "STATE" in columns:
                columns["ST"] = columns["STATE"]
            missing = [c for c in KEEP if c not in columns]
            if missing:
                raise FetchError(
                    f"layout change: {zip_path}:{member} lacks columns {missing} (has "
                    f"{len(header)} columns); popfair needs {list(KEEP)}"
                )
            with archive.open(member) as handle:
                reader = pd.read_csv(
                    handle, usecols=[columns[c] for c in KEEP], chunksize=CHUNK_ROWS, dtype={columns["SERIALNO"]: str}
                )
                for chunk in reader:
                    chunk.columns = [c.upper() for c in chunk.columns]
                    chunk = chunk.rename(columns={"STATE": "ST"})
                    rows = len(chunk)
                    keep = chunk["ESR"].isin([1, 2]) & chunk["AGEP"].between(*AGE_RANGE) & chunk["OCCP"].notna()
                    if occp:
                        keep &= chunk["OCCP"].isin(occp)
                    yield chunk.loc[keep, list(KEEP)], rows
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise _Corrupt(f"{zip_path}: {exc}") from exc


def filter_state(request: Request, usps: str, zip_path: Path) -> dict[str, Any]:
    """Stream one state's zip through the filters into p_<st>.csv.gz; returns its manifest entry."""
    fips = int(state_table().reset_index().set_index("usps").loc[usps, "fips"])
    target = request.year_dir / f"p_{usps.lower()}.csv.gz"
    parts, rows_read, years = [], 0, set()
    try:
        for chunk, rows in _chunks(zip_path, request.occp):
            rows_read += rows
            if len(chunk):
                wrong = chunk.loc[chunk["ST"] != fips, "ST"].unique()
                if len(wrong):
                    raise FetchError(
                        f"{zip_path}: rows of state FIPS {sorted(wrong.tolist())[:5]} in the file "
                        f"for {usps} ({fips}); the file is not what its name says"
                    )
                years |= set(chunk["SERIALNO"].str[:4])
            parts.append(chunk)
    except _Corrupt as exc:
        zip_path.unlink(missing_ok=True)
        raise FetchError(f"corrupt zip: {exc}. The file was deleted; rerun to download it again.") from exc
    if rows_read == 0:
        raise FetchError(f"{zip_path}: the person file has no rows")
    if years and years != {str(request.year)}:
        raise FetchError(f"{zip_path}: SERIALNO years {sorted(years)} do not match --year {request.year}")
    kept = pd.concat(parts, ignore_index=True)
    kept.insert(0, "YEAR", request.year)
    _atomic_csv(kept, target)
    return {
        "usps": usps,
        "zip_bytes": zip_path.stat().st_size,
        "zip_sha256": _sha256(zip_path),
        "rows_read": rows_read,
        "rows_kept": len(kept),
        "weight_kept": int(kept["PWGTP"].sum()),
        "file": target.name,
        **request.signature,
    }


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _atomic_csv(frame: pd.DataFrame, target: Path) -> None:
    descriptor, name = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(descriptor)
    try:
        frame.to_csv(name, index=False, compression={"method": "gzip", "compresslevel": 6})
        os.replace(name, target)
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise FetchError(f"no space left on device writing {target}; free some space and rerun") from exc
        raise


# ---------------------------------------------------------------- the command


def _manifest(request: Request) -> dict[str, Any]:
    path = request.year_dir / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save_manifest(request: Request, manifest: dict[str, Any]) -> None:
    path = request.year_dir / "manifest.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, path)


def fetch(request: Request, log: Any = print) -> Path:
    """Fetch, verify and filter every requested state; write and return the combined file."""
    request.year_dir.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(request)
    start = time.perf_counter()
    for i, usps in enumerate(request.states, 1):
        entry = manifest.get(usps)
        cached = request.year_dir / f"p_{usps.lower()}.csv.gz"
        if entry and cached.exists() and {k: entry.get(k) for k in request.signature} == request.signature:
            log(f"[{i}/{len(request.states)}] {usps}: done before ({entry['rows_kept']} of {entry['rows_read']} rows)")
            continue
        name = f"csv_p{usps.lower()}.zip"
        kept = request.year_dir / name
        if kept.exists() and entry and entry.get("zip_sha256") and _sha256(kept) != entry["zip_sha256"]:
            log(f"{kept}: sha256 differs from the one recorded when it was downloaded; downloading it again")
            kept.unlink()
        zip_path = download(
            f"{request.base_url.rstrip('/')}/{request.year}/1-Year/{name}", request.year_dir / name, request.year, usps
        )
        manifest[usps] = filter_state(request, usps, zip_path)
        _save_manifest(request, manifest)
        if not request.keep_zips:
            zip_path.unlink(missing_ok=True)
        log(
            f"[{i}/{len(request.states)}] {usps}: {manifest[usps]['rows_kept']} of {manifest[usps]['rows_read']} "
            f"person rows kept ({time.perf_counter() - start:.0f} s so far)"
        )
    frames = [pd.read_csv(request.year_dir / manifest[s]["file"], dtype={"SERIALNO": str}) for s in request.states]
    combined = pd.concat(frames, ignore_index=True)
    expected = sum(manifest[s]["rows_kept"] for s in request.states)
    if len(combined) != expected:
        raise FetchError(
            f"state files hold {len(combined)} rows, the manifest says {expected}; delete {request.year_dir} and rerun"
        )
    target = request.out / output_name(request.year, request.states)
    _atomic_csv(combined, target)
    log(
        f"wrote {target}: {len(combined)} employed persons aged 18-44 in {len(request.states)} states "
        f"(weights {combined['PWGTP'].sum():,}); use population.pums_path={target}"
        + (f" or population.pums_path=fetched:{request.year}" if set(request.states) == set(all_states()) else "")
    )
    return target


def _states(text: str) -> tuple[str, ...]:
    if text.lower() == "all":
        return all_states()
    wanted = tuple(s.strip().upper() for s in text.split(",") if s.strip())
    unknown = [s for s in wanted if s not in all_states()]
    if unknown:
        raise FetchError(
            f"--states: unknown USPS codes {unknown}; use two-letter codes of the 50 states and DC "
            "such as CA,TX, or 'all' (Puerto Rico's PRCS file is not supported)"
        )
    return wanted


@entry_point
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="popfair-data", description="Fetch public data for popfair populations.")
    commands = parser.add_subparsers(dest="command", required=True)
    pums = commands.add_parser(
        "pums",
        help="ACS 1-year PUMS person files -> a file for population.pums_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pums.add_argument("--year", type=int, required=True, help="ACS survey year, e.g. 2023 (the paper's)")
    pums.add_argument("--states", default="all", help="comma-separated USPS codes, or 'all' (50 states + DC)")
    pums.add_argument("--occp", default="", help="comma-separated OCCP codes to keep (default: every occupation)")
    pums.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output and cache folder (default: $POPFAIR_PUMS_DIR or <cache dir>/pums)",
    )
    pums.add_argument(
        "--base-url",
        default=os.environ.get("POPFAIR_PUMS_BASE_URL", CENSUS_PUMS),
        help="where the Census PUMS tree lives (env POPFAIR_PUMS_BASE_URL)",
    )
    pums.add_argument("--keep-zips", action="store_true", help="keep the downloaded zips after filtering")
    cache = commands.add_parser(
        "cache",
        help="what popfair's disk cache holds; remove entries no run has read lately",
        description=CACHE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = cache.add_mutually_exclusive_group()
    which.add_argument("--unused-days", type=float, metavar="DAYS", help="remove entries no run read for DAYS days")
    which.add_argument("--clear", action="store_true", help="remove every entry")
    cache.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    args = parser.parse_args(argv)
    if args.command == "cache":
        return cache_command(args.unused_days, args.clear, args.dry_run)
    try:
        occp = tuple(int(c) for c in args.occp.split(",") if c.strip())
    except ValueError:
        parser.error(f"--occp: expected comma-separated integer OCCP codes, got {args.occp!r}")
    try:
        request = Request(
            year=args.year,
            states=_states(args.states),
            out=args.out or pums_dir(),
            base_url=args.base_url,
            occp=occp,
            keep_zips=args.keep_zips,
        )
        fetch(request)
    except FetchError as exc:
        print(f"popfair-data: error: {exc}", file=sys.stderr)
        return 2
    return 0


CACHE_HELP = """popfair's disk cache ($POPFAIR_CACHE_DIR, else ~/.cache/popfair)
keeps what takes seconds to build and milliseconds to read: fitted
occupation models, name tables, drawn samples, a dry run's
rendered documents, kept figures. Each entry's key includes the
source of the code that builds it, so an upgrade or an edit leaves
the old entries behind; nothing else removes them. Without options
this prints what the cache holds. A run that needs a removed entry
builds it again. The PUMS downloads (pums/) are never touched."""  # wrapped to fit the CLI reference's code block at 1280 px


def cache_command(unused_days: float | None, clear: bool, dry_run: bool) -> int:
    """`popfair-data cache`: a summary of the disk cache, or the entries removed."""
    from popfair.population.cache import cache_dir, cache_entries, prune

    root = cache_dir()
    if root is None:
        print("popfair-data: the disk cache is off (POPFAIR_CACHE_DIR=off)")
        return 0
    if unused_days is not None and unused_days < 0:
        print(f"popfair-data: error: --unused-days must be 0 or more, got {unused_days}", file=sys.stderr)
        return 2
    if unused_days is None and not clear:
        entries = cache_entries(root)
        kinds: dict[str, list[int]] = {}
        for path, stat in entries:
            kinds.setdefault(path.name.rsplit("-", 1)[0], []).append(stat.st_size)
        print(f"{root}: {len(entries)} entries, {sum(sum(s) for s in kinds.values()) / 1e6:.1f} MB")
        for kind, sizes in sorted(kinds.items(), key=lambda item: -sum(item[1])):
            print(f"  {kind:40s} {len(sizes):5d} entries {sum(sizes) / 1e6:9.1f} MB")
        if entries:
            days = (time.time() - entries[0][1].st_mtime) / 86_400
            print(f"least recently used: {days:.1f} days ago (popfair-data cache --unused-days N removes older ones)")
        return 0
    removed = prune(None if clear else unused_days, root, dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for path, _ in removed if dry_run else ():
        print(f"  {path.name}")
    print(f"{root}: {verb} {len(removed)} entries, {sum(size for _, size in removed) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
