"""popfair's installed version (`popfair.__version__`), logged on every run and printed in reports."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("popfair")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"
