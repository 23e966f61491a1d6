"""popfair's declared layers and its import graph, read from the source with ast (no import runs):
the architecture test enforces them and the docs draw the dependency picture from them."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

# Lowest first. A module may import its own layer and the layers below it, never one above.
# The stages are layers of their own, in the order a case runs them, except that estimators are
# functions of the scored table and sit below the designs and screeners that produce it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("popfair.core", "popfair.data")),
    ("runtime", ("popfair.runtime",)),
    ("store", ("popfair.store",)),
    ("population", ("popfair.population",)),
    ("render", ("popfair.render",)),
    ("estimate", ("popfair.estimate",)),
    ("design", ("popfair.design",)),
    ("screen", ("popfair.screen",)),
    ("track", ("popfair.track",)),
    ("report", ("popfair.report",)),
    ("case", ("popfair.case",)),
    ("sweep", ("popfair.sweep",)),
    ("entry", ("popfair", "popfair.__main__")),
)


def layer_of(module: str) -> str | None:
    """The layer a module belongs to (its longest declared package prefix)."""
    best: tuple[int, str] | None = None
    for layer, packages in LAYERS:
        for package in packages:
            if (module == package or module.startswith(package + ".")) and (best is None or len(package) > best[0]):
                best = (len(package), layer)
    return best[1] if best else None


def _rank(module: str) -> int:
    layer = layer_of(module)
    return next(i for i, (name, _) in enumerate(LAYERS) if name == layer)


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name `path` imports, wherever the import sits (type-only and lazy ones too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "import_module":
            names.update(_module_strings(node.args))  # import_module("popfair....")
        elif isinstance(node, ast.Dict):
            names.update(_module_strings(node.values))  # lazy-export tables and registries: name -> module
    return names


def _module_strings(nodes: Iterable[ast.AST | None]) -> set[str]:
    return {
        n.value
        for n in nodes
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("popfair.")
    }


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the popfair modules it imports (package roots of a dotted name are not counted:
    Python imports `popfair.x` on the way to `popfair.x.y`, but those are lazy and import nothing)."""
    paths = {_module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found = set()
        for name in _imported_names(path, module):
            while name and name not in paths:  # popfair.x.y.Name -> popfair.x.y
                name = name.rpartition(".")[0]
            if name and name != module and name != module.rpartition(".")[0]:
                found.add(name)
        graph[module] = found
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer."""
    return sorted(
        (module, other)
        for module, imported in graph.items()
        for other in imported
        if layer_of(module) and layer_of(other) and _rank(other) > _rank(module)
    )


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def private_imports(root: Path) -> list[tuple[str, str, str]]:
    """(importer, module, name) for every `from popfair.x import _name` where `_name` is private to
    another module: what two modules share should have a public name in the module that owns it."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(root, path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            if not base.startswith("popfair") or base == module:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((module, base, alias.name))
    return found
