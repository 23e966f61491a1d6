"""
Population diagnostics
======================

Every PopResume case logs checks of the applicants it drew: how experience grows with age by
sex, and a Q-Q plot of the experience model's residuals against the normal distribution it
assumes. Here they are for 500 teachers drawn from the bundled ACS PUMS data, without screening
anything.
"""

# %%
from hydra import compose, initialize_config_dir

import popfair
from popfair.runtime.paths import CONF_DIR
from popfair.track.figures import draw

with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
    cfg = compose(
        config_name="config",
        overrides=[
            "occupation=teacher",
            "population.n=500",
            "tracking=none",
            "outcome_audit=null",
        ],
    )
experiment = popfair.Experiment.from_config(cfg)
profiles = experiment.sample()  # the population stage alone: no rendering, no screening

print("\n".join(profiles.notes[:2]))
profiles.table[["gender", "race", "age", "edu_level", "exp_year", "state"]].head()

# %%
# The composition of the sample by sex and race (weighted shares, as logged with the run).
profiles.artifacts["population_composition.csv"].head(12)

# %%
# Age against years of experience: the generated applicants (truncated normal around an XGBoost
# fit to NLSY97 person-years) next to the NLSY97 reference.
draw(profiles.artifacts["population_age_vs_experience.png"])

# %%
# The experience model's standardized residuals against the normal quantiles.
draw(profiles.artifacts["population_experience_qq.png"])
