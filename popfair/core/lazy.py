"""Lazy re-exports: a package names its public API without importing it, so `import popfair`
(and `popfair --help`) stays fast; each name is imported on first use (PEP 562)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def export_source(spec: str, name: str) -> tuple[str, str]:
    """(defining module, name there) of an export: "module", or "module:name" where the public name
    is not the defining one (a public name kept when its class was renamed)."""
    module, _, defined = spec.partition(":")
    return module, defined or name


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level `__getattr__` and `__dir__` for `package`, exporting name -> defining module
    (`export_source`)."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        spec = exports.get(name)
        if spec is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, defined = export_source(spec, name)
        value = getattr(import_module(module), defined)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
