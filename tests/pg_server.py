"""A real PostgreSQL server on 127.0.0.1 for tests and benchmarks (never a mock).

Binaries come from the `pgserver` wheel (PyPI ships a full PostgreSQL inside it), else from a
Debian `postgresql` install. The server asks for a password over TCP (scram-sha-256), so the tests
show that the cache takes its credentials from the environment (PGPASSWORD), not from the URL.
PostgreSQL refuses to run as root: as root, the server runs as a system user made for it."""

from __future__ import annotations

import glob
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

USER, PASSWORD, DATABASE = "popfair", "pg-test-secret", "popfair"


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from pgserver._commands import POSTGRES_BIN_PATH
        return Path(POSTGRES_BIN_PATH)
    except ImportError:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
        if not found:
            raise RuntimeError("no PostgreSQL binaries: pip install pgserver (or apt-get install postgresql)") from None
        return Path(found[-1]).parent


def _reachable_by_others(path: Path) -> bool:
    """Every folder above `path` lets other users through (o+x)."""
    return all(parent.stat().st_mode & 0o001 for parent in path.parents)


def _bin_dir_for(user: str | None) -> Path:
    """The binaries, copied (once) to /tmp when the server's user could not reach them where they
    are installed, e.g. a virtualenv inside root's 0700 home."""
    bin_dir = _bin_dir()
    if user is None or _reachable_by_others(bin_dir):
        return bin_dir
    digest = hashlib.sha256(str(bin_dir).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"popfair-pginstall-{digest}"
    # the wheel's binaries find their libraries at $ORIGIN/../../../pgserver.libs: keep that layout
    install, libs = bin_dir.parent, bin_dir.parents[2] / "pgserver.libs"
    if not (copy / "pgserver" / "pginstall" / "bin" / "postgres").exists():
        staging = Path(tempfile.mkdtemp(prefix="popfair-pginstall-"))  # copy, then rename: atomic
        shutil.copytree(install, staging / "tree" / "pgserver" / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, staging / "tree" / "pgserver.libs", symlinks=True)
        for folder in [staging / "tree", *(staging / "tree").rglob("*")]:
            if folder.is_dir():
                folder.chmod(0o755)
        try:
            os.rename(staging / "tree", copy)
        except OSError:  # another process made the same copy first
            pass
        shutil.rmtree(staging, ignore_errors=True)
    return copy / "pgserver" / "pginstall" / "bin"


def _system_user() -> str | None:
    """None when not root; else a non-root account to run the server (created if missing)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "popfairpg"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "popfairpg"], check=True)
    return "popfairpg"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    process: subprocess.Popen
    port: int
    data_dir: Path
    databases: int = 0

    @property
    def url(self) -> str:
        """SQLAlchemy URL without the password (the cache reads it from PGPASSWORD)."""
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def new_database(self) -> str:
        """A fresh empty database; returns its URL (each test gets its own cache)."""
        import psycopg

        self.databases += 1
        name = f"{DATABASE}_{self.databases}"
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # "fast" shutdown: does not wait for clients to leave
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_postgres(timeout_s: float = 60.0) -> PostgresServer:
    """initdb into a fresh folder, start `postgres` on 127.0.0.1, create the popfair database."""
    import psycopg

    user = _system_user()
    bin_dir = _bin_dir_for(user)
    data_dir = Path(tempfile.mkdtemp(prefix="popfair-pg-"))
    pwfile = data_dir.parent / f"{data_dir.name}.pw"
    pwfile.write_text(PASSWORD + "\n")
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
        os.chown(pwfile, entry.pw_uid, entry.pw_gid)
    try:
        subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir / "db"),
                "-U",
                USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "--encoding=UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            user=user,
        )
    finally:
        pwfile.unlink()
    port = free_port()
    log = open(data_dir / "server.log", "wb")  # noqa: SIM115 (the server writes it for its lifetime)
    process = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(data_dir / "db"),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-k",
            str(data_dir),
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        user=user,
    )
    server = PostgresServer(process, port, data_dir)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with psycopg.connect(
                host="127.0.0.1",
                port=port,
                user=USER,
                password=PASSWORD,
                dbname="postgres",
                autocommit=True,
                connect_timeout=2,
            ) as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            return server
        except psycopg.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"PostgreSQL did not start: {(data_dir / 'server.log').read_text()[-2000:]}"
                ) from None
            time.sleep(0.2)
