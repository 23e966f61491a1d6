"""The DML nuisances worth keeping, content-addressed (`popfair.store.blobs`) beside the response cache.

The propensity models P(X|Z), P(X|R,Z), P(X|B,R,Z) do not involve Y: every screener that scores
the same applicants (the 12 screener cells of an (occupation, attribute) in the paper's grid) needs
the same ones. Their tuned hyperparameters and their cross-fitted predictions (per fold assignment)
are kept under a key of the encoded role columns and the role names, the seed, the grid and every
learner setting, and the versions of the libraries that compute them; the predictions' key adds
the folds and the fold assignment. The outcome chain's hyperparameters are kept too, under a key
that adds Y (a rerun of the same case reuses them); its fits stay per case. A reused value is the
same bytes the fit gives, so cached and uncached estimates are identical. The outcome chain's
cross-fitted predictions on the held-out rows are kept under the same key plus the folds, the
fold assignment and its hyperparameters: a rerun of the same case refits nothing.

Location: ``<cache_dir>/nuisances.sqlite`` (the estimator's `cache_dir`, by default the run's
response cache folder), or table ``nuisances`` of the estimator's `cache_url` database (the server
cache of a sweep over machines; it wins); neither keeps them in this process's
memory."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from popfair.core.types import Roles
from popfair.estimate.pse.nuisances.models import OUTCOME, PROPENSITIES, PROPENSITY, nuisance_names, xgb_params
from popfair.store.blobs import (
    NUISANCES,
    BlobStore,
    MemoryBlobStore,
    content_key,
    installed_versions,
    open_blob_store,
    pack_arrays,
    unpack_arrays,
)

if TYPE_CHECKING:
    from popfair.estimate.pse.nuisances.encoding import NumericRoles
    from popfair.estimate.pse.settings import PseSettings

STORE_NAME = NUISANCES  # popfair.store.blobs.BLOB_STORES
# Bump when what a key stands for changes (the search, the fits, the layout of an entry).
SCHEMA = "pse-nuisances-v3"
LIBRARIES = ("xgboost", "numpy", "scikit-learn", "popfair")


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a cached nuisance depends on."""
    return installed_versions(*LIBRARIES)


@dataclass(frozen=True)
class NuisanceCache:
    """The cache entries of one encoded: `tuning(family)` and `propensities(folds, split)`, each
    None until stored."""

    store: BlobStore
    keys: dict[str, str]  # family -> key of its tuning entry

    @classmethod
    @contextmanager
    def open(
        cls, encoded: NumericRoles, roles: Roles, settings: PseSettings, location: str | Path | None
    ) -> Iterator[NuisanceCache]:
        learner = {
            "schema": SCHEMA,
            "libraries": library_versions(),
            "grid": asdict(settings.grid),
            "early_stopping": settings.early_stopping,
            "prune_lambda_at": settings.lambda_rung(),
            "seed": settings.seed,
            "validation_fraction": settings.validation_fraction,
            "max_categories": settings.max_categories,
            "classifier": xgb_params("classifier", 0, 0.0, settings),
            "regressor": xgb_params("regressor", 0, 0.0, settings),
        }
        data: list[Any] = [roles.as_dict()] + [encoded.blocks[name] for name in "brxz"]
        keys = {
            PROPENSITY: content_key(PROPENSITY, learner, *data),
            OUTCOME: content_key(OUTCOME, learner, *data, encoded.y),
        }
        with open_blob_store(location, STORE_NAME) as store:
            yield cls(store, keys)

    def _get(self, key: str) -> bytes | None:
        return self.store.get_many([key]).get(key)

    def tuning(self, family: str) -> dict[str, dict[str, float]] | None:
        """The family's chosen hyperparameters (with validation loss), or None."""
        blob = self._get(self.keys[family])
        params = None if blob is None else json.loads(blob)
        return params if params is not None and set(params) == set(nuisance_names((family,))) else None

    def store_tuning(self, family: str, params: dict[str, dict[str, float]]) -> None:
        self.store.put_many([(self.keys[family], json.dumps(params).encode())])

    def _predictions_key(self, folds: int, split: int) -> str:
        return content_key("propensity-predictions", self.keys[PROPENSITY], folds, split)

    def propensities(self, folds: int, split: int) -> np.ndarray | None:
        """Cross-fitted P(X = x1 | .) of fold assignment `split`, one row per PROPENSITIES model
        (each row's entry predicted by the model fit without that row's fold), or None."""
        blob = self._get(self._predictions_key(folds, split))
        raw = None if blob is None else unpack_arrays(blob).get("raw")
        return raw if raw is not None and raw.shape[0] == len(PROPENSITIES) else None

    def store_propensities(self, folds: int, split: int, raw: np.ndarray) -> None:
        self.store.put_many([(self._predictions_key(folds, split), pack_arrays({"raw": raw}))])

    def _outcomes_key(self, folds: int, split: int, params: Mapping[str, Any]) -> str:
        chosen = {name: params[name] for name in nuisance_names((OUTCOME,))}
        return content_key("outcome-predictions", self.keys[OUTCOME], folds, split, chosen)

    def outcomes(self, folds: int, split: int, params: Mapping[str, Any]) -> dict[str, np.ndarray] | None:
        """Cross-fitted outcome-chain predictions of fold assignment `split` on the held-out rows
        (name -> one value per row, from the chain fit without that row's fold), or None. Keyed
        with Y and the chain's hyperparameters: a rerun of the same case reads them."""
        blob = self._get(self._outcomes_key(folds, split, params))
        return None if blob is None else unpack_arrays(blob)

    def store_outcomes(self, folds: int, split: int, params: Mapping[str, Any], rows: dict[str, np.ndarray]) -> None:
        self.store.put_many([(self._outcomes_key(folds, split, params), pack_arrays(rows))])


def clear_memory_cache() -> None:
    """Forget the nuisances kept in memory (estimates with cache_dir=None); stores on disk stay."""
    MemoryBlobStore.clear(STORE_NAME)
