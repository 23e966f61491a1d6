"""The DML nuisances worth keeping, content-addressed (`popfair.store`) beside the response cache.

The propensity models P(X|Z), P(X|R,Z), P(X|B,R,Z) do not involve Y: every screener that scores
the same applicants (the 12 screener cells of an (occupation, attribute) in the paper's grid) needs
the same ones. Their tuned hyperparameters and their cross-fitted predictions (per fold assignment)
are kept under a key of the encoded role columns and the role names, the seed, the grid and every
learner setting, and the versions of the libraries that compute them; the predictions' key adds
the folds and the fold assignment. The outcome chain's hyperparameters are kept too, under a key
that adds Y (a rerun of the same case reuses them); its fits stay per case. A reused value is the
same bytes the fit gives, so cached and uncached estimates are identical.

Location: ``<cache_dir>/nuisances/`` (the estimator's `cache_dir`, by default the run's response
cache folder); ``cache_dir=None`` keeps them in this process's memory."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from popfair.estimate.nuisances import OUTCOME, PROPENSITIES, PROPENSITY, nuisance_names, xgb_params
from popfair.store import BlobStore, clear_memory, content_key
from popfair.types import Roles

if TYPE_CHECKING:
    from popfair.estimate.dml import PseSettings, _Design

NAMESPACE = "nuisances"
# Bump when what a key stands for changes (the search, the fits, the layout of an entry).
SCHEMA = "pse-nuisances-v2"
LIBRARIES = ("xgboost", "numpy", "scikit-learn", "popfair")


@functools.cache
def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a cached nuisance depends on."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "absent"
    return found


@dataclass(frozen=True)
class NuisanceCache:
    """The cache entries of one design: `tuning(family)` and `propensities(split)`, each None until stored."""

    store: BlobStore
    keys: dict[str, str]  # family -> key of its tuning entry

    @classmethod
    def open(cls, design: _Design, roles: Roles, settings: PseSettings, cache_dir: str | Path | None) -> NuisanceCache:
        learner = {
            "schema": SCHEMA,
            "libraries": library_versions(),
            "grid": asdict(settings.grid),
            "validation_fraction": settings.validation_fraction,
            "max_categories": settings.max_categories,
            "classifier": xgb_params("classifier", 0, 0.0, settings),
            "regressor": xgb_params("regressor", 0, 0.0, settings),
        }
        data: list[Any] = [roles.as_dict()] + [design.blocks[name] for name in "brxz"]
        propensity = content_key(PROPENSITY, learner, *data)
        return cls(
            BlobStore(cache_dir, NAMESPACE),
            {PROPENSITY: propensity, OUTCOME: content_key(OUTCOME, learner, *data, design.y)},
        )

    def tuning(self, family: str) -> dict[str, dict[str, float]] | None:
        """The family's chosen hyperparameters (with validation loss), or None."""
        params = self.store.get_json(self.keys[family])
        return params if params is not None and set(params) == set(nuisance_names((family,))) else None

    def store_tuning(self, family: str, params: dict[str, dict[str, float]]) -> None:
        self.store.put_json(self.keys[family], params)

    def _predictions_key(self, folds: int, split: int) -> str:
        return content_key("propensity-predictions", self.keys[PROPENSITY], folds, split)

    def propensities(self, folds: int, split: int) -> np.ndarray | None:
        """Cross-fitted P(X = x1 | .) of fold assignment `split`, one row per PROPENSITIES model
        (each row's entry predicted by the model fit without that row's fold), or None."""
        arrays = self.store.get_arrays(self._predictions_key(folds, split))
        if arrays is None or arrays["raw"].shape[0] != len(PROPENSITIES):
            return None
        return arrays["raw"]

    def store_propensities(self, folds: int, split: int, raw: np.ndarray) -> None:
        self.store.put_arrays(self._predictions_key(folds, split), {"raw": raw})


def clear_memory_cache() -> None:
    """Forget the nuisances kept in memory (estimates with cache_dir=None); files on disk stay."""
    clear_memory(NAMESPACE)
