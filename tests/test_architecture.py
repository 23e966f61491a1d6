"""The package's layering, checked on the source with ast (docs/concepts/architecture.md).

Every import counts: module level, inside functions, under `if TYPE_CHECKING:`, relative ones and
`import_module("popfair....")` strings of lazy exports. No module imports a module of a higher layer,
and no two modules import each other, directly or through others."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

from popfair.runtime.architecture import LAYERS, import_graph, layer_of, module_cycles, private_imports, upward_imports

PACKAGE = Path(__file__).resolve().parents[1] / "popfair"


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(PACKAGE)


def test_every_module_has_a_layer(graph):
    assert not [m for m in graph if layer_of(m) is None], "declare the layer of new top-level packages"


def test_no_import_reaches_up_a_layer(graph):
    found = upward_imports(graph)
    assert not found, "\n".join(f"{a} ({layer_of(a)}) imports {b} ({layer_of(b)})" for a, b in found)


def test_no_module_cycle(graph):
    cycles = module_cycles(graph)
    assert not cycles, "modules import each other: " + "; ".join(" -> ".join(c) for c in cycles)


def test_estimators_import_no_other_pipeline_stage(graph):
    forbidden = ("popfair.render", "popfair.screen", "popfair.population")
    offending = {m: sorted(i for i in imported if i.startswith(forbidden)) for m, imported in graph.items()}
    assert not {m: v for m, v in offending.items() if v and m.startswith("popfair.estimate")}


def test_type_only_function_level_and_relative_imports_count(tmp_path):
    """The checker is not fooled by the ways imports hide (a planted upward import of each kind)."""
    pkg = tmp_path / "popfair"
    (pkg / "core").mkdir(parents=True)
    (pkg / "report").mkdir()
    for init in (pkg / "__init__.py", pkg / "core" / "__init__.py", pkg / "report" / "__init__.py"):
        init.write_text("")
    (pkg / "report" / "sweep.py").write_text("X = 1\n")
    hidden = {
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from popfair.report.sweep import X\n",
        "lazy.py": "def f():\n    import popfair.report.sweep\n",
        "relative.py": "from ..report import sweep\n",
        "named.py": "from importlib import import_module\nimport_module('popfair.report.sweep')\n",
    }
    for name, source in hidden.items():
        (pkg / "core" / name).write_text(source)
    found = {a for a, _ in upward_imports(import_graph(pkg))}
    assert found == {f"popfair.core.{name[:-3]}" for name in hidden}


def test_layers_are_documented():
    page = (PACKAGE.parent / "docs" / "concepts" / "architecture.md").read_text()
    for layer, packages in LAYERS:
        assert f"**{layer}**" in page, layer
        for package in packages:
            assert f"`{package}`" in page, package


def test_at_most_four_loose_modules_at_the_top():
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(loose) <= 4, loose


def test_estimators_live_in_their_family_folders():
    """estimate/ keeps one folder per family (pse, impact_ratio, sequential, ranking, gap); only what
    they all share sits at its top, in at most 6 modules."""
    top = sorted(p.name for p in (PACKAGE / "estimate").glob("*.py"))
    assert len(top) <= 6, top
    families = {p.name for p in (PACKAGE / "estimate").iterdir() if (p / "__init__.py").exists()}
    assert {"pse", "impact_ratio", "sequential", "ranking", "gap"} <= families, families


# The PSE family's own floors: its top (what every estimator of the family shares) imports none of the
# ways of estimating; the designs and the authors' estimator stand beside DML-UCA, not on it, except
# the counterfactual design, which runs DML-UCA beside itself (estimator.compare).
PSE = "popfair.estimate.pse"
PSE_MAY_IMPORT = {
    "top": {"top"},
    "nuisances": {"top", "nuisances"},
    "dml": {"top", "nuisances", "dml"},
    "paper": {"top", "nuisances", "paper"},
    "design": {"top", "design", "dml"},
}


def _pse_room(module: str) -> str | None:
    if not module.startswith(PSE + "."):
        return None
    part = module[len(PSE) + 1 :].split(".")
    return part[0] if len(part) > 1 or part[0] in PSE_MAY_IMPORT else "top"


def test_the_pse_family_keeps_its_floors(graph):
    assert {_pse_room(m) for m in graph} - {None} == set(PSE_MAY_IMPORT), "a new room of estimate/pse: place it"
    wrong = sorted(
        (a, b)
        for a, imported in graph.items()
        if (room := _pse_room(a))
        for b in imported
        if (other := _pse_room(b)) and other not in PSE_MAY_IMPORT[room]
    )
    assert not wrong, wrong


def test_at_most_five_imports_of_another_modules_private_name():
    found = private_imports(PACKAGE)
    assert len(found) <= 5, found


def test_private_imports_are_counted_wherever_they_sit(tmp_path):
    pkg = tmp_path / "popfair"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "owner.py").write_text("def _secret():\n    return 1\n")
    (pkg / "a" / "user.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from popfair.a.owner import _secret\n"
        "def f():\n    from .owner import _secret as s\n    return s()\n"
    )
    (pkg / "a" / "fine.py").write_text("from popfair.a.owner import __doc__\n")
    assert private_imports(pkg) == [("popfair.a.user", "popfair.a.owner", "_secret")] * 2


def test_no_file_over_500_lines():
    long = {
        str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long, long


def test_every_module_says_what_it_owns():
    missing = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if "data" not in p.relative_to(PACKAGE).parts[:1] and not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not missing, missing


def unmentioned_definitions(package: Path) -> list[str]:
    """Top-level functions and classes of `package` whose name appears nowhere else in the project
    (code, tests, benchmarks, configs, docs) and that no decorator registers."""
    project = package.parent
    sources = [project / name for name in ("README.md", "pyproject.toml")]
    for folder in ("popfair", "tests", "benchmarks", "conf", "docs", "hydra_plugins"):
        sources += [
            p
            for p in (project / folder).rglob("*")
            if p.suffix in {".py", ".yaml", ".md", ".rst", ".toml"} and "_build" not in p.parts
        ]
    words = Counter(
        w for p in sources if p.is_file() for w in re.findall(r"[A-Za-z_]\w*", p.read_text(errors="ignore"))
    )
    found = []
    for path in package.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if words[node.name] <= 1 and not node.decorator_list:  # its own `def` is the one mention
                    found.append(f"{path.relative_to(package)}:{node.lineno} {node.name}")
    return found


def test_at_most_five_definitions_that_nothing_mentions(tmp_path):
    unmentioned = unmentioned_definitions(PACKAGE)
    assert len(unmentioned) <= 5, unmentioned
    # the check finds a planted orphan, and counts a name used anywhere else as mentioned
    (tmp_path / "popfair").mkdir()
    (tmp_path / "popfair" / "m.py").write_text("def orphan():\n    pass\n\n\ndef used():\n    pass\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("from popfair.m import used\n")
    assert unmentioned_definitions(tmp_path / "popfair") == ["m.py:1 orphan"]


def test_abilities_are_declared_not_probed():
    """Components declare their optional abilities (a class attribute with its default, or a
    runtime-checkable protocol); `getattr(` / `hasattr(` are left for objects popfair does not own
    (third-party configs and exceptions, CPython internals) and a few generic helpers. Issue 60 brought
    them from 98 to under 50: a new probe of popfair's own objects should be a declared ability."""
    probes = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(re.findall(r"\b(?:getattr|hasattr)\(", p.read_text())))
    }
    assert sum(probes.values()) <= 50, sorted(probes.items(), key=lambda kv: -kv[1])
