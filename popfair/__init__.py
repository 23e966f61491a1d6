"""popfair: declarative audits of automated resume screeners for race and gender discrimination."""
from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:
    __version__ = version("popfair")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

# Public names, imported on first use: `import popfair` (and `popfair --help`) then stays light
# instead of pulling pandas, MLflow and the whole pipeline.
_LAZY = {"Experiment": "popfair.experiment", "RunResult": "popfair.experiment"}

if TYPE_CHECKING:
    from popfair.experiment import Experiment, RunResult

__all__ = ["Experiment", "RunResult", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'popfair' has no attribute {name!r}")
