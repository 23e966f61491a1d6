"""
A ranking audit
===============

Deployed screeners often rank several candidates in one prompt. ``experiment=ranking_race_gender``
shows 8 equally qualified resumes per trial, their names signalling 4 race/ethnicity x 2 sex
groups, in counterbalanced order, and asks for an order. Here the offline ``simulated_ranker``
(Plackett-Luce rankings with the group preferences set in
``conf/screener/simulated_ranker.yaml``) ranks 400 trials; the estimator reports
top-1 rates and LL144 impact ratios, mean ranks, position effects, and a rank-ordered
(Plackett-Luce) conditional logit over the whole order.
"""

# %%
import tempfile

from hydra import compose, initialize_config_dir

import popfair
from popfair.runtime.paths import CONF_DIR
from popfair.track.figures import forest_plot

with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
    cfg = compose(
        config_name="config",
        overrides=[
            "experiment=ranking_race_gender",
            "population.n_trials=400",
            "tracking=none",
            f"cache_dir={tempfile.mkdtemp()}",
        ],
    )
table = popfair.Experiment.from_config(cfg).run().effects.table

# %%
# Top-1 rates and impact ratios per group (the LL144 view: who is ranked first).
shown = ["estimate", "ci_low", "ci_high"]
table.loc[table.index.str.startswith(("top1.", "impact_ratio."))][shown].round(3)

# %%
# The rank-ordered logit's group effects (log-worth relative to the reference group, white_male) and
# position effects (log-worth of each position shown relative to the reference position) with 95%
# CIs; filled markers exclude 0.
logit = table.loc[table.index.str.startswith("logit.")]
fig = forest_plot(logit, title="rank-ordered logit: group and position effects (400 trials)")
fig.axes[0].set_xlabel("log-worth vs the reference (positive: ranked higher)")
fig
