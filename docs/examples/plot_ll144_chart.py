"""
LL144 impact ratios
===================

NYC Local Law 144 bias audits report, for each sex, race/ethnicity and sex x race category, the
selection or scoring rate and the impact ratio: the category's rate over the highest category's
rate, flagged under the four-fifths rule when below 0.8. popfair logs them for every case
(``outcome_audit``) and ``popfair.impact_ratios`` computes them for any scored table. Here: 1,000
accountants from the bundled ACS PUMS data, scored 0-100 by the structural ``simulated``
screener, whose scores favour men and White applicants by 2 points each.
"""

# %%
import tempfile

from hydra import compose, initialize_config_dir

import popfair
from popfair.runtime.paths import CONF_DIR
from popfair.track.figures import draw

with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
    cfg = compose(
        config_name="config",
        overrides=[
            "occupation=accountant",
            "population.n=1000",
            "screener=simulated",
            "estimator=outcome_gap",  # cheap: this example is about the impact ratios
            "outcome_audit=null",
            "tracking=none",
            f"cache_dir={tempfile.mkdtemp()}",
        ],
    )
scored = popfair.Experiment.from_config(cfg).run().scored

# %%
# Scoring rates (the share of each category above the whole sample's median score) and impact
# ratios with bootstrap CIs. The bootstrap re-chooses the highest-rate category in every
# replicate, so the CIs carry that choice too.
ratios = popfair.impact_ratios(
    scored,
    y="y",
    sex="gender",
    race="race",
    settings=popfair.ImpactRatioSettings(n_bootstrap=500),
)
# The race/ethnicity block of the summary (``ratios.summary()`` holds sex and the intersection too;
# ``ratios.markdown()`` gives all of it as Markdown, for a report).
summary = ratios.summary()
race = summary[summary["dimension"] == "Race/Ethnicity"]
shown = [
    "metric",
    "category",
    "n_applicants",
    "rate",
    "impact_ratio",
    "ci_95",
    "flag_below_0.8",
]
race[[*shown, "flag_survives_test"]]

# %%
# The chart of the auditor's report: one panel per metric x dimension, bars with CIs, the 0.8 line.
draw(ratios.plot())
