"""The package's layering, checked on the source with ast: estimators are functions of the scored
table (no module in estimate/ imports the render, screen or population stages) and no two packages
of popfair import each other, directly or through others."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "popfair"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """popfair modules `path` imports at runtime (anywhere in the file, lazy imports included)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text())
    type_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in type_only:  # `if TYPE_CHECKING:` imports are for type checkers, not at runtime
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.update([base] + [f"{base}.{alias.name}" for alias in node.names])
    return {name for name in found if name == "popfair" or name.startswith("popfair.")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def _package(module: str) -> str:
    """popfair.estimate.pse -> popfair.estimate; top-level modules (popfair.experiment) stand alone."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_estimators_import_no_other_pipeline_stage():
    forbidden = ("popfair.render", "popfair.screen", "popfair.population")
    offending = {
        module: sorted(m for m in imported if m.startswith(forbidden))
        for module, imported in _graph().items()
        if module.startswith("popfair.estimate")
    }
    assert not {k: v for k, v in offending.items() if v}


def test_packages_import_each_other_without_a_cycle():
    packages: dict[str, set[str]] = {}
    for module, imported in _graph().items():
        packages.setdefault(_package(module), set()).update(
            _package(other) for other in imported if _package(other) not in (_package(module), "popfair")
        )
    try:
        list(TopologicalSorter(packages).static_order())
    except CycleError as exc:
        raise AssertionError(f"packages import each other in a cycle: {exc.args[1]}") from None
