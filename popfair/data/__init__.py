"""Bundled public data (see SOURCES.md in each folder) and the one way to locate it."""

from __future__ import annotations

from pathlib import Path

from popfair.core.errors import DataError

DATA_DIR = Path(__file__).resolve().parent


def data_file(*parts: str) -> Path:
    """Path of a bundled data file; a clear DataError if the package was installed without it."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        raise DataError(
            f"bundled data file missing: {path}. Reinstall popfair (pip install -e .) so its data files are present."
        )
    return path
