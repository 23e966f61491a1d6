"""
The paths of the standard fairness model
========================================

The population audit splits the effect of the protected attribute X (gender or race) on the
screener's decision Y along the paths of the standard fairness model (PopResume, section 3):

- **Z**, confounders (the other demographic attribute, age): associated with X, not caused by it;
- **B**, business-necessity mediators (education, experience): qualifications X may shift;
- **R**, redlining proxies (first name, surname, state): what reveals X without being X;
- **Y**, the decision.

X -> Y is the direct path (NDE); X -> B -> Y the business-necessity path (BIE); X -> R -> Y and
X -> R -> B -> Y the proxy paths (RIE). The diagram below is drawn from the edge list in this
example; the table after it switches each path of popfair's simulated model
(``popfair.estimate.pse.simulate.SimulatedSFM``) off in turn and computes the true effects, which shows
which effect each path feeds.
"""

# %%
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import FancyArrowPatch

from popfair.estimate.pse.simulate import SimulatedSFM

NODES = {  # name: (x, y, label)
    "Z": (0.0, 1.3, "Z\nconfounders\n(other attribute, age)"),
    "X": (0.0, 0.0, "X\nprotected attribute\n(gender or race)"),
    "B": (1.6, 1.0, "B\nbusiness necessity\n(education, experience)"),
    "R": (1.6, -1.0, "R\nproxies\n(name, surname, state)"),
    "Y": (3.2, 0.0, "Y\ndecision\n(score or callback)"),
}
PATHS = {  # which effect an edge carries X's influence for: colour and legend
    "direct": ("#c0392b", "X -> Y: direct (NDE)"),
    "business": ("#2471a3", "X -> B -> Y: business necessity (BIE)"),
    "proxy": ("#d68910", "X -> R -> Y, X -> R -> B -> Y: proxies (RIE)"),
    "confounding": ("#7f8c8d", "Z: confounding, adjusted for"),
}
EDGES = [  # (from, to, path, curvature)
    ("X", "Y", "direct", 0.0),
    ("X", "B", "business", 0.0),
    ("B", "Y", "business", 0.0),
    ("X", "R", "proxy", 0.0),
    ("R", "Y", "proxy", 0.0),
    ("R", "B", "proxy", 0.0),
    ("Z", "B", "confounding", 0.0),
    ("Z", "Y", "confounding", -0.42),
    ("Z", "R", "confounding", 0.6),
]

fig, ax = plt.subplots(figsize=(8.5, 5.2))
for x, y, label in NODES.values():
    ax.text(
        x,
        y,
        label,
        ha="center",
        va="center",
        fontsize=9.5,
        bbox={
            "boxstyle": "round,pad=0.45",
            "facecolor": "#fdfefe",
            "edgecolor": "#34495e",
            "linewidth": 1.2,
        },
    )
for start, end, path, bend in EDGES:
    colour, _ = PATHS[path]
    ax.add_patch(
        FancyArrowPatch(
            NODES[start][:2],
            NODES[end][:2],
            connectionstyle=f"arc3,rad={bend}",
            arrowstyle="-|>",
            mutation_scale=16,
            color=colour,
            linewidth=2.2 if path != "confounding" else 1.3,
            linestyle="-" if path != "confounding" else "--",
            shrinkA=38,
            shrinkB=38,
        )
    )
# Z and X: associated (a common cause or selection), no direction assumed
ax.add_patch(
    FancyArrowPatch(
        NODES["Z"][:2],
        NODES["X"][:2],
        arrowstyle="<|-|>",
        mutation_scale=14,
        color=PATHS["confounding"][0],
        linestyle="--",
        linewidth=1.3,
        shrinkA=30,
        shrinkB=30,
    )
)
for colour, label in PATHS.values():
    ax.plot([], [], color=colour, linewidth=2.2, label=label)
ax.legend(loc="lower center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False, fontsize=9)
ax.set_xlim(-1.0, 4.0)
ax.set_ylim(-1.5, 1.8)
ax.set_axis_off()
ax.set_title("Standard fairness model: the paths of X's effect on Y", fontsize=11)
fig

# %%
# Each path switched off in turn: the true TE, NDE, NIE, BIE and RIE of the simulated screener
# (counterfactual means on 100,000 draws with common random numbers, so the sums hold exactly).
# Turning off X -> Y zeroes the NDE; X -> B zeroes the BIE; X -> R zeroes the RIE; TE = NDE + NIE
# and NIE = BIE + RIE in every row.
settings = {
    "all paths": SimulatedSFM(),
    "no X -> Y (direct = 0)": SimulatedSFM(direct=0.0),
    "no X -> B (x_to_b = 0)": SimulatedSFM(x_to_b=0.0),
    "no X -> R (x_to_r = 0)": SimulatedSFM(x_to_r=0.0),
}
truth = pd.DataFrame({name: model.truth(n=100_000) for name, model in settings.items()}).T
gap = (
    (truth["TE"] - truth["NDE"] - truth["NIE"]).abs().max(),
    (truth["NIE"] - truth["BIE"] - truth["RIE"]).abs().max(),
)
print(f"largest |TE - NDE - NIE| = {gap[0]:.1e}, largest |NIE - BIE - RIE| = {gap[1]:.1e}")
truth.round(3)
