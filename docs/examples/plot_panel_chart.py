"""
The callback panel chart
========================

"Can LLMs Hire Fairly?" reports one paired callback gap per model and axis, Bonferroni-corrected
across the models of each axis, and plots them. ``popfair.panel_report`` builds that table and
chart from one ``paired_gap`` result per model x axis. So that this example runs offline, the
pairs are simulated: six models from popfair's panel configs (their real release dates), each
with a true race and gender gap in callback rates, 300 postings x 4 pairs per axis.
"""

# %%
import numpy as np
import pandas as pd
import yaml

import popfair
from popfair.report.panel import panel_row
from popfair.runtime.paths import CONF_DIR

true_gap_pp = {  # (race, gender): callback-rate gaps built into the simulation, in percentage points
    "gpt35_turbo": (4.0, -3.0),
    "claude3_haiku": (2.5, -1.0),
    "gpt4o_mini": (1.5, -2.0),
    "llama31_8b": (0.0, 0.5),
    "gemini25_flash": (-1.0, 1.5),
    "claude_haiku_4_5": (0.5, 0.0),
}
rng = np.random.default_rng(7)


def simulated_pairs(gap_pp: float, n_postings: int = 300, per_posting: int = 4) -> pd.DataFrame:
    """One row per pair: posting, and the callbacks of the x1-name and x0-name profile."""
    posting = np.repeat(np.arange(n_postings), per_posting)
    base = rng.uniform(0.3, 0.7, n_postings)[
        posting
    ]  # postings differ in how often they call back
    u = rng.uniform(
        size=posting.size
    )  # one draw per pair: the two profiles are identical but for the name
    return pd.DataFrame(
        {
            "posting_id": posting,
            "adv": (u < base + gap_pp / 200).astype(int),
            "other": (u < base - gap_pp / 200).astype(int),
        }
    )


rows = []
for model, gaps in true_gap_pp.items():
    release = str(
        yaml.safe_load((CONF_DIR / "screener" / f"{model}.yaml").read_text())["release_date"]
    )
    for axis, gap in zip(("race", "gender"), gaps):
        result = popfair.paired_gap(
            simulated_pairs(gap), y_adv="adv", y_other="other", cluster="posting_id"
        )
        rows.append(panel_row(model, axis, release, result))
report = popfair.panel_report(pd.DataFrame(rows))

# %%
# The paper's table per axis: gap with stars (McNemar p), cluster-bootstrap CI, discordant pairs
# b:c, and whether the gap survives Bonferroni across the axis's models.
print(report.to_text())

# %%
# The panel at a glance, as the paper's figure: every model's gap with its 95% CI, per axis, in
# release order; filled markers survive Bonferroni.
report.forest

# %%
# The same gaps against each model's release date.
report.figure
