"""The population stage: who the applicants are, and the counterfactual worlds an estimator declares.

Public names are imported on first use (`popfair.core.lazy`)."""

from __future__ import annotations

from popfair.core.lazy import lazy_exports

_EXPORTS = {
    "Population": "popfair.population.base",
    "PopResumePopulation": "popfair.population.popresume",
    "Occupation": "popfair.population.occupation",
    "ProtectedAttribute": "popfair.population.protected",
    "CounterfactualPopulation": "popfair.population.worlds",
    "draw_worlds": "popfair.population.worlds",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
