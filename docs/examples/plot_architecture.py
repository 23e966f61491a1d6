"""
How popfair's packages depend on each other
===========================================

Drawn from the source at every build of this site (``popfair.runtime.architecture`` reads every
import with ``ast``: module level, inside functions, type-only and lazy ones), so it cannot go stale.
Each row is one layer, lowest at the bottom; each box is a folder of ``popfair/``; an arrow runs
from a folder to one it imports. Every arrow points down, or sideways within a layer:
``tests/test_architecture.py`` fails on any import up a layer and on any cycle between modules.
"""

# %%
from pathlib import Path

import matplotlib.pyplot as plt

import popfair
from popfair.runtime.architecture import LAYERS, import_graph, layer_of

root = Path(popfair.__file__).parent
graph = import_graph(root)


def folder(module: str) -> str:
    """The folder a module lives in: popfair.design.table.mapped -> popfair.design.table."""
    parts = module.split(".")
    while len(parts) > 2 and not (root.parent / Path(*parts)).is_dir():
        parts.pop()
    return ".".join(parts)


edges = {
    (folder(a), folder(b))
    for a, imported in graph.items()
    for b in imported
    if folder(a) != folder(b)
}
folders = sorted({folder(m) for m in graph})
rows = {layer: [f for f in folders if layer_of(f) == layer] for layer, _ in LAYERS}
rows = {layer: members for layer, members in rows.items() if members}

fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1), layout="constrained")
where = {}
for level, (layer, members) in enumerate(rows.items()):
    ax.text(-0.02, level, layer, ha="right", va="center", fontsize=10, fontweight="bold")
    for i, name in enumerate(members):
        x = (i + 1) / (len(members) + 1) + (0.06 if level % 2 else -0.06) / len(members)
        where[name] = (x, level)
        label = name.removeprefix("popfair.") if name != "popfair" else "popfair (API)"
        box = {"boxstyle": "round,pad=0.3", "facecolor": "#e8eef7", "edgecolor": "#4a6fa5"}
        ax.text(x, level, label, ha="center", va="center", fontsize=9, bbox=box)
for source, target in sorted(edges):
    if source in where and target in where:
        (x0, y0), (x1, y1) = where[source], where[target]
        arrow = {
            "arrowstyle": "->",
            "color": "#4a6fa5",
            "alpha": 0.25,
            "lw": 0.7,
            "shrinkA": 9,
            "shrinkB": 9,
        }
        arrow["connectionstyle"] = f"arc3,rad={0.25 if abs(y0 - y1) > 1 else 0.05}"
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=arrow)
ax.set_xlim(-0.12, 1.02)
ax.set_ylim(-0.6, len(rows) - 0.4)
ax.axis("off")
ax.set_title(
    f"{len(graph)} modules in {len(folders)} folders, {sum(map(len, graph.values()))} imports",
    fontsize=10,
)
fig
