"""`popfair-data pums` end to end against Census-layout zips served from 127.0.0.1: filtering checked
against an independent filter, rerun from the manifest, resume after a killed download, and the
errors (404, corrupt zip, layout change, no space)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from popfair.population import fetch
from popfair.population.pums import load_pums

ROOT = Path(__file__).resolve().parents[1]


def census_csv(
    fips: int, year: int, rows: int, seed: int, state_column: str = "ST", drop: tuple[str, ...] = ()
) -> pd.DataFrame:
    """A person file in the Census layout (more columns than popfair keeps; OCCP blank when not working)."""
    rng = np.random.default_rng(seed)
    esr = rng.choice([1, 2, 3, 6, np.nan], rows, p=[0.55, 0.05, 0.05, 0.25, 0.10])
    frame = pd.DataFrame(
        {
            "RT": "P",
            "SERIALNO": [f"{year}HU{i:07d}" for i in range(rows)],
            "DIVISION": 9,
            "SPORDER": 1,
            "PUMA": 100 + rng.integers(0, 50, rows),
            "REGION": 4,
            state_column: fips,
            "ADJINC": 1019518,
            "PWGTP": rng.integers(1, 300, rows),
            "AGEP": rng.integers(0, 95, rows),
            "SEX": rng.integers(1, 3, rows),
            "RAC1P": rng.integers(1, 10, rows),
            "HISP": rng.choice([1, 1, 1, 2, 3, 24], rows),
            "SCHL": rng.integers(1, 25, rows),
            "ESR": esr,
            "OCCP": np.where(np.isin(esr, [1, 2, 3]), rng.choice([3255, 2310, 1021, 800, 6260, 4760], rows), np.nan),
            "WKHP": rng.integers(1, 60, rows),
        }
    )
    return frame.drop(columns=list(drop))


def census_zip(frame: pd.DataFrame, fips: int, stored: bool = False) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        archive.writestr(f"psam_p{fips:02d}.csv", frame.to_csv(index=False, float_format="%.0f"))
        archive.writestr("ACS2023_PUMS_README.pdf", b"%PDF-1.4 readme")
    return buffer.getvalue()


def expected_rows(frame: pd.DataFrame) -> pd.DataFrame:
    keep = frame["ESR"].isin([1, 2]) & frame["AGEP"].between(18, 44) & frame["OCCP"].notna()
    return frame[keep]


class Server:
    """Serves {path: bytes} with Range support; `delay` seconds per 16 KiB block while `throttle` is set."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.throttle = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Range")))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].split("=")[1].split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                for offset in range(start, len(body), 16384):
                    try:
                        self.wfile.write(body[offset : offset + 16384])
                    except (BrokenPipeError, ConnectionResetError):
                        return
                    if server.throttle:
                        time.sleep(0.05)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def run(server: Server, out: Path, *args: str) -> int:
    return fetch.main(["pums", "--year", "2023", "--base-url", server.url, "--out", str(out), *args])


def test_fetch_filters_verifies_writes_a_pums_path_file_and_reruns_from_cache(server, tmp_path, capsys):
    ca, tx = census_csv(6, 2023, 4000, 1), census_csv(48, 2023, 3000, 2, state_column="STATE")  # 2024 layout
    server.files["/2023/1-Year/csv_pca.zip"] = census_zip(ca, 6)
    server.files["/2023/1-Year/csv_ptx.zip"] = census_zip(tx, 48)
    assert run(server, tmp_path, "--states", "CA,TX") == 0
    output = tmp_path / "pums_2023_1yr_persons_employed_age18_44_ca_tx.csv.gz"
    written = pd.read_csv(output, dtype={"SERIALNO": str})
    truth = pd.concat([expected_rows(ca), expected_rows(tx.rename(columns={"STATE": "ST"}))])
    assert len(written) == len(truth) and written["PWGTP"].sum() == truth["PWGTP"].sum()
    assert sorted(written["SERIALNO"]) == sorted(truth["SERIALNO"]) and (written["YEAR"] == 2023).all()
    err = capsys.readouterr().err
    assert "csv_pca.zip" in err and "B/s" in err  # progress: bytes and rate (tqdm shows the ETA)
    assert not list((tmp_path / "2023").glob("*.zip"))  # zips removed once filtered
    manifest = (tmp_path / "2023" / "manifest.json").read_text()
    assert '"rows_read": 4000' in manifest and "zip_sha256" in manifest

    records, year = load_pums(str(output))  # what population.pums_path reads
    assert year == 2023 and len(records) == len(truth)

    seen = len(server.requests)
    assert run(server, tmp_path, "--states", "CA,TX") == 0  # a rerun reuses the manifest: no download
    assert len(server.requests) == seen and "done before" in capsys.readouterr().out


def test_a_kept_zip_that_changed_on_disk_is_downloaded_again(server, tmp_path, capsys):
    server.files["/2023/1-Year/csv_pca.zip"] = census_zip(census_csv(6, 2023, 800, 7), 6)
    assert run(server, tmp_path, "--states", "CA", "--keep-zips") == 0
    kept = tmp_path / "2023" / "csv_pca.zip"
    kept.write_bytes(kept.read_bytes()[:-10] + b"0123456789")  # damaged after the download
    assert run(server, tmp_path, "--states", "CA", "--keep-zips", "--occp", "3255") == 0  # new filter: refilter
    assert "sha256 differs" in capsys.readouterr().out and server.requests[-1][1] is None


def test_a_killed_download_resumes_with_a_range_request(server, tmp_path):
    frame = census_csv(6, 2023, 30_000, 3)
    body = census_zip(frame, 6, stored=True)  # ~1.9 MB: throttled, it takes seconds
    server.files["/2023/1-Year/csv_pca.zip"] = body
    server.throttle = True
    command = [
        sys.executable,
        "-m",
        "popfair.population.fetch",
        "pums",
        "--year",
        "2023",
        "--states",
        "CA",
        "--base-url",
        server.url,
        "--out",
        str(tmp_path),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    part = tmp_path / "2023" / "csv_pca.zip.part"
    deadline = time.time() + 60
    while time.time() < deadline and not (part.exists() and part.stat().st_size > 200_000):
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    done = part.stat().st_size
    assert 200_000 < done < len(body)
    server.throttle = False
    assert run(server, tmp_path, "--states", "CA") == 0
    assert server.requests[-1] == ("/2023/1-Year/csv_pca.zip", f"bytes={done}-")
    written = pd.read_csv(tmp_path / "pums_2023_1yr_persons_employed_age18_44_ca.csv.gz")
    assert len(written) == len(expected_rows(frame))


def test_404_names_the_file_and_the_likely_cause(server, tmp_path, capsys):
    assert run(server, tmp_path, "--states", "WY") == 2
    err = capsys.readouterr().err
    assert "csv_pwy.zip: HTTP 404 Not Found" in err and "not be released" in err


def test_corrupt_zip_is_deleted_and_reported(server, tmp_path, capsys):
    body = bytearray(census_zip(census_csv(6, 2023, 2000, 4), 6, stored=True))
    body[len(body) // 2] ^= 0xFF  # one flipped byte: CRC mismatch
    server.files["/2023/1-Year/csv_pca.zip"] = bytes(body)
    assert run(server, tmp_path, "--states", "CA") == 2
    assert "corrupt zip" in capsys.readouterr().err and not (tmp_path / "2023" / "csv_pca.zip").exists()
    server.files["/2023/1-Year/csv_pca.zip"] = b"<html>maintenance</html>"  # not a zip at all
    assert run(server, tmp_path, "--states", "CA") == 2
    assert "not a valid zip" in capsys.readouterr().err


def test_layout_change_names_the_missing_columns(server, tmp_path, capsys):
    server.files["/2023/1-Year/csv_pca.zip"] = census_zip(census_csv(6, 2023, 500, 5, drop=("OCCP", "ESR")), 6)
    assert run(server, tmp_path, "--states", "CA") == 2
    assert "layout change" in (err := capsys.readouterr().err) and "lacks columns ['OCCP', 'ESR']" in err


def test_no_space_is_reported_before_downloading(server, tmp_path, capsys, monkeypatch):
    server.files["/2023/1-Year/csv_pca.zip"] = census_zip(census_csv(6, 2023, 500, 6), 6)
    monkeypatch.setattr(fetch.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 10 << 20})())
    assert run(server, tmp_path, "--states", "CA") == 2
    assert "no space" in capsys.readouterr().err


def test_fetched_spec_resolves_or_says_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("POPFAIR_PUMS_DIR", str(tmp_path))
    with pytest.raises(fetch.FetchError, match="popfair-data pums --year 2023"):
        fetch.resolve_pums_path("fetched:2023")
    target = tmp_path / fetch.output_name(2023, fetch.all_states())
    target.write_text("x")
    assert fetch.resolve_pums_path("fetched:2023") == str(target)
    assert fetch.resolve_pums_path("/data/my.csv") == "/data/my.csv"


def test_replication_preset_reads_the_fetched_file_without_transport(server, tmp_path, monkeypatch):
    """population=popresume_2023 (pums_path fetched:2023) reads what the command writes: real CA/TX rows only.
    Three states stand in for the 51 (the fetched file is renamed to the all-states name)."""
    from hydra.utils import instantiate

    from popfair.population.occupation import Occupation
    from popfair.population.protected import ProtectedAttribute
    from tests.conftest import compose_config

    for fips, usps in ((6, "ca"), (48, "tx"), (36, "ny")):
        server.files[f"/2023/1-Year/csv_p{usps}.zip"] = census_zip(census_csv(fips, 2023, 3000, fips), fips)
    assert run(server, tmp_path, "--states", "CA,TX,NY", "--occp", "3255") == 0
    (tmp_path / "pums_2023_1yr_persons_employed_age18_44_ca_ny_tx.csv.gz").rename(
        tmp_path / fetch.output_name(2023, fetch.all_states())
    )
    monkeypatch.setenv("POPFAIR_PUMS_DIR", str(tmp_path))
    config = compose_config(["population=popresume_2023", "population.diagnostics=false"])
    assert config.population.pums_path == "fetched:2023"
    nurse = Occupation(
        key="nurse", title="Nurse", occp=3255, soc="29-1141", description="A nurse job description. " * 4
    )
    profiles = instantiate(config.population).sample(nurse, ProtectedAttribute("gender", "female", "male"), 0)
    table = profiles.table
    assert set(table["state"]) == {"CA", "TX", "NY"} and not table["transported"].any()
    assert (
        profiles.tags["population.source"].startswith("ACS PUMS 2023")
        and "3 states" in profiles.tags["population.source"]
    )
    assert profiles.tags["population.table3"].startswith("does not match")


def test_popfair_data_cache_reports_and_prunes_only_entries_no_run_read_lately(tmp_path, monkeypatch, capsys):
    """`popfair-data cache`: a summary by kind; --unused-days removes entries whose last read or write
    is older (a read marks an entry used), --clear removes every entry; the PUMS downloads, a user's
    own files and a write in progress are never touched."""
    from popfair.population.cache import disk_cached, disk_cached_frame

    root = tmp_path / "cache"
    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(root))
    disk_cached("model", [1], [sys.modules[__name__]], lambda: {"fitted": True})
    disk_cached_frame("sample", [1], [sys.modules[__name__]], lambda: pd.DataFrame({"a": [1, 2]}))
    disk_cached("stale", [1], [sys.modules[__name__]], lambda: "old code's entry")
    (root / "pums").mkdir()
    (root / "pums" / "p_ca.csv.gz").write_bytes(b"download")
    (root / "notes.txt").write_text("a user's file")
    (root / "tmpwrite.tmp").write_bytes(b"a write in progress")
    month_ago = time.time() - 30 * 86_400
    for path in root.glob("*-*"):
        os.utime(path, (month_ago, month_ago))
    # a run reads the model and the sample again: both are marked used, the stale entry is not
    assert disk_cached("model", [1], [sys.modules[__name__]], lambda: {"fitted": False}) == {"fitted": True}
    disk_cached_frame("sample", [1], [sys.modules[__name__]], lambda: pd.DataFrame({"a": [0]}))

    assert fetch.main(["cache"]) == 0
    summary = capsys.readouterr().out
    assert f"{root}: 3 entries" in summary and "model " in summary and "stale " in summary

    assert fetch.main(["cache", "--unused-days", "7", "--dry-run"]) == 0
    assert "would remove 1 entries" in capsys.readouterr().out and len(list(root.glob("stale-*"))) == 1
    assert fetch.main(["cache", "--unused-days", "7"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert not list(root.glob("stale-*")) and list(root.glob("model-*")) and list(root.glob("sample-*"))

    assert fetch.main(["cache", "--clear"]) == 0
    assert "removed 2 entries" in capsys.readouterr().out
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["notes.txt", "p_ca.csv.gz", "tmpwrite.tmp"]
    assert fetch.main(["cache", "--unused-days", "-1"]) == 2
    assert "--unused-days must be 0 or more" in capsys.readouterr().err
    monkeypatch.setenv("POPFAIR_CACHE_DIR", "off")
    assert fetch.main(["cache"]) == 0 and "the disk cache is off" in capsys.readouterr().out


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame({"id": ["a", "b"], "n": [1, 2], "x": [0.5, float("nan")]}),
        pd.DataFrame({"id": ["a", None], "flag": [True, False]}, index=pd.Index([7, 3])),
        pd.DataFrame({"text": ["résumé", ""], "when": pd.to_datetime(["2026-01-01", "2026-02-01"])}),
    ],
    ids=["numbers", "index-and-missing", "text-and-dates"],
)
def test_a_kept_frame_reads_back_equal_in_values_dtypes_and_index(tmp_path, monkeypatch, frame):
    """disk_cached_frame keeps a frame only if it reads back the same (`_same_frame`), and a later
    call returns that frame: the same labels, dtypes (object columns as objects), index and values."""
    from popfair.population.cache import _same_frame, disk_cached_frame

    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path))
    disk_cached_frame("frame", [1], [sys.modules[__name__]], lambda: frame)
    (kept,) = tmp_path.glob("frame-*.parquet")
    back = disk_cached_frame("frame", [1], [sys.modules[__name__]], lambda: pytest.fail("built again"))
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    assert kept.exists()
    # what the check refuses: another dtype, index type, label or value
    assert not _same_frame(frame.astype({frame.columns[0]: "string"}), frame)
    assert not _same_frame(frame.set_axis(frame.index.astype("float64")), frame)
    assert not _same_frame(frame.rename(columns={frame.columns[0]: "other"}), frame)
    changed = frame.copy()
    changed.iloc[0, 0] = "z"
    assert not _same_frame(changed, frame)


def test_a_frame_parquet_cannot_hold_exactly_is_not_kept(tmp_path, monkeypatch):
    from popfair.population.cache import disk_cached_frame

    monkeypatch.setenv("POPFAIR_CACHE_DIR", str(tmp_path))
    mixed = pd.DataFrame({"value": [1, "one"]})  # an object column of an int and a str: Parquet refuses it
    assert disk_cached_frame("mixed", [1], [sys.modules[__name__]], lambda: mixed) is mixed
    decimals = pd.DataFrame({"d": [1.5, 2.5]}, dtype="float32")  # Parquet keeps float32: kept
    disk_cached_frame("f32", [1], [sys.modules[__name__]], lambda: decimals)
    assert not list(tmp_path.glob("mixed-*")) and list(tmp_path.glob("f32-*"))
