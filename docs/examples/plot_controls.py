"""
Controls that make a finding believable
=======================================

Three controls, all offline (:doc:`../concepts/controls`): placebo edits (how far irrelevant edits
move the screener, beside the demographic effect), name-level effects (is the gap one name's?) and
context conditions (the company description or anti-bias instruction a deployed screener's prompt
carries).
"""

# %%
import tempfile

from hydra import compose, initialize_config_dir

import popfair
from popfair.runtime.paths import CONF_DIR
from popfair.track.figures import forest_plot

cache = tempfile.mkdtemp()


def case(*overrides: str, dry_run: bool = False):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose(
            config_name="config",
            overrides=[*overrides, "tracking=none", "outcome_audit=null", f"cache_dir={cache}"],
        )
    return popfair.Experiment.from_config(cfg, dry_run=dry_run)


# %%
# Placebo edits. The TF-IDF matcher scores 400 nurses; 200 of them are scored again with their
# resume reordered, rephrased, reformatted and padded, and with another nurse's name and
# qualifications from their own group (``within_group``). It reads a bag of terms (words, and the
# word pairs inside each line: none spans a line break), so reordering sections and reformatting
# cannot move it, and their rows are exactly 0.
result = case(
    "population.n=400",
    "population.diagnostics=false",
    "estimator=outcome_gap",
    "renderer.placebo=[reorder,rephrase,format,pad,within_group]",
).run()
columns = ["estimate", "ci_low", "ci_high", "mean_abs_change", "unit"]
result.effects.table[columns].round(4)

# %%
# Each note states the gender gap as a multiple of the screener's movement under the edit.
print("\n".join(n for n in result.effects.notes if n.startswith("placebo.")))

# %%
# Name-level effects. A paired race audit (1,500 postings) whose simulated screener has no race
# effect but favours one name, Greg. The name table finds him, and leaving him out takes the gap
# with him.
paired = case(
    "experiment=paired_race",
    "screener=simulated_paired",
    "occupation.n_postings=1500",
    "screener.coefficients.race.white=0",
    "screener.coefficients.gender.male=0",
    "+screener.coefficients.first_name.Greg=10",
).run()
print("\n".join(n for n in paired.effects.notes if n.startswith(("Name-level", "Leave one name out"))))

# %%
# The names with the largest effects against their race x gender cell's mean (shrunk by empirical
# Bayes), with 95% intervals.
names = paired.effects.artifacts["names/effects.csv"].set_index("first_name")
largest = names.reindex(names["effect"].abs().sort_values().index[-12:])
forest_plot(largest.assign(estimate=largest["effect"]), title="name effects, callback rate vs cell mean")

# %%
# Context conditions. An offline screener reads no prompt, so a context cannot change its answers;
# for a model it changes the prompt (the texts follow the system prompt, before the job and the
# resume), hence the response cache's key and the price. A keyless dry run plans gpt-4o-mini on 300
# nurses under each context.
import pandas as pd  # noqa: E402

from popfair.sweep.plan import plan_case  # noqa: E402

plans = {}
for context in ("none", "company", "selective", "anti_bias", "anti_bias_company"):
    experiment = case(
        "population.n=300",
        "population.diagnostics=false",
        "estimator=outcome_gap",
        "screener=gpt4o_mini",
        "screener.route=openai",
        f"context={context}",
        dry_run=True,
    )
    plan = plan_case(experiment)
    plans[context] = {"calls": plan.calls, "input_tokens": plan.input_tokens, "cost_usd": round(plan.cost_usd, 4)}
pd.DataFrame(plans).T

# %%
# What the model is told before the job under ``context=anti_bias_company``.
bare = case("screener=gpt4o_mini", "screener.route=openai", "context=none", dry_run=True)
system = experiment.screener.prompts.system("score")
print(system.removeprefix(bare.screener.prompts.system("score")).strip())
