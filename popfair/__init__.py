"""popfair: declarative audits of automated resume screeners for race and gender discrimination."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("popfair")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

from popfair.experiment import Experiment, RunResult  # noqa: E402

__all__ = ["Experiment", "RunResult", "__version__"]
