"""Ranking (list-wise) design: trials, the answer parser, the simulated ranker, the rank-ordered logit
against statsmodels' ConditionalLogit, known-truth recovery, and a ranking audit end to end through
the OpenAI SDK against the local stub (faults injected, nothing lost, a rerun sends nothing)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from popfair.case.population import PopulationCase
from popfair.core.errors import ConfigError
from popfair.design.ranking.parse import parse_ranking
from popfair.design.ranking.trials import williams_square
from popfair.estimate.ranking.estimator import ranking_effects
from popfair.estimate.ranking.model import design_matrix, fit_rank_logit
from popfair.estimate.ranking.top1_power import simulate_rankings, trials_needed
from tests.conftest import compose_config

NAMES = ["Maria L. Garcia", "Wei Chen", "Tyrone Washington", "Emily Walsh"]  # shown as candidates 1..4

# (format, reply, expected order as 0-based candidate indices, expected missing)
FIXTURES = [
    ("numbered", "1. Wei Chen\n2. Maria Garcia\n3. Emily Walsh\n4. Tyrone Washington", (1, 0, 3, 2), ()),
    ("paren", "1) Wei Chen\n2) Maria Garcia\n3) Emily Walsh\n4) Tyrone Washington", (1, 0, 3, 2), ()),
    ("bulleted", "- Emily Walsh\n- Wei Chen\n- Tyrone Washington\n- Maria Garcia", (3, 1, 2, 0), ()),
    (
        "unicode bullets",
        "\u2022 Emily Walsh\n\u2022 Wei Chen\n\u2022 Maria Garcia\n\u2022 Tyrone Washington",
        (3, 1, 0, 2),
        (),
    ),
    (
        "prose with reasons",
        "Wei Chen stands out for leadership. Next I would put Tyrone Washington, then Maria Garcia, "
        "and finally Emily Walsh.",
        (1, 2, 0, 3),
        (),
    ),
    ("json array", '["Tyrone Washington", "Emily Walsh", "Wei Chen", "Maria Garcia"]', (2, 3, 1, 0), ()),
    (
        "json objects in a fence",
        '```json\n{"ranking": [{"rank": 2, "name": "Wei Chen"}, {"rank": 1, "name": "Emily Walsh"}, '
        '{"rank": 3, "name": "Maria Garcia"}, {"rank": 4, "name": "Tyrone Washington"}]}\n```',
        (3, 1, 0, 2),
        (),
    ),
    ("capitals", "1. TYRONE WASHINGTON\n2. WEI CHEN\n3. MARIA GARCIA\n4. EMILY WALSH", (2, 1, 0, 3), ()),
    ("middle initial kept", "1. Maria L. Garcia\n2. Wei Chen\n3. Emily Walsh\n4. Tyrone Washington", (0, 1, 3, 2), ()),
    ("middle initial dropped", "1. Maria Garcia\n2. Emily Walsh\n3. Wei Chen\n4. Tyrone Washington", (0, 3, 1, 2), ()),
    ("partial list", "1. Wei Chen\n2. Emily Walsh", (1, 3), (0, 2)),
    (
        "name repeated in the reasoning",
        "Ranking:\n1. Emily Walsh - stronger than Wei Chen on charting\n2. Wei Chen\n3. Maria Garcia\n"
        "4. Tyrone Washington\n\nReasoning: Tyrone Washington and Maria Garcia are close; Emily Walsh leads.",
        (3, 1, 0, 2),
        (),
    ),
    ("last, first", "1. Washington, Tyrone\n2. Chen, Wei\n3. Garcia, Maria\n4. Walsh, Emily", (2, 1, 0, 3), ()),
    ("candidate labels", "Candidate 4 > Candidate 2 > Candidate 1 > Candidate 3", (3, 1, 0, 2), ()),
    ("names in order, no markers", "Wei Chen\nEmily Walsh\nMaria Garcia\nTyrone Washington", (1, 3, 0, 2), ()),
    (
        "markdown bold with rank labels",
        "**Rank 1:** Tyrone Washington\n**Rank 2:** Emily Walsh\n**Rank 3:** Maria Garcia\n**Rank 4:** Wei Chen",
        (2, 3, 0, 1),
        (),
    ),
    (
        "accents and curly quotes",
        "1. Maria Garc\u00eda\n2. Wei Chen\n3. Emily Walsh\n4. Tyrone Washington",
        (0, 1, 3, 2),
        (),
    ),
]


@pytest.mark.parametrize("fmt, reply, order, missing", FIXTURES, ids=[f[0] for f in FIXTURES])
def test_parser_reads_the_order_of_each_answer_format(fmt, reply, order, missing):
    ranking = parse_ranking(reply, NAMES)
    assert ranking.error is None, fmt
    assert ranking.order == order
    assert ranking.missing == missing


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry, but I can't rank candidates based on their names.",
        "I cannot rank Wei Chen against the others: that would be unfair.",
        "All four candidates look equally qualified.",
        "",
    ],
)
def test_a_refusal_or_an_answer_naming_nobody_is_a_recorded_failure(reply):
    ranking = parse_ranking(reply, NAMES)
    assert ranking.order == () and ranking.error is not None
    assert ranking.error.startswith("no ranking")


def test_names_match_as_whole_words_only():
    assert parse_ranking("1. Joann Leeds\n2. Ann Lee", ["Ann Lee", "Jo Ann"]).order == (0,)


@pytest.mark.parametrize("k", [2, 3, 4, 7, 8])
def test_williams_squares_balance_positions_and_neighbours(k):
    square = williams_square(k)
    assert all(sorted(row) == list(range(k)) for row in square)
    for column in square.T:  # every group in every position equally often
        assert np.bincount(column, minlength=k).tolist() == [len(square) // k] * k
    pairs = np.zeros((k, k), int)
    for row in square:
        for a, b in zip(row[:-1], row[1:]):
            pairs[a, b] += 1
    off = pairs[~np.eye(k, dtype=bool)]
    assert off.min() == off.max()  # every ordered pair of groups adjacent equally often


@pytest.fixture(scope="module")
def trials_case():
    cfg = compose_config(["experiment=ranking_race_gender", "population.n_trials=96", "tracking=none"])
    experiment = PopulationCase.from_config(cfg)
    return experiment, experiment.sample()


def test_trials_show_every_group_once_with_identical_profiles_and_distinct_names(trials_case):
    _, profiles = trials_case
    table = profiles.table
    assert len(table) == 96 * 8
    per_trial = table.groupby("trial_id")
    assert (per_trial["group"].nunique() == 8).all()
    assert (per_trial["first_name"].nunique() == 8).all() and (per_trial["surname"].nunique() == 8).all()
    for column in ("age", "state", "edu_level", "exp_year"):
        assert (per_trial[column].nunique() == 1).all(), column
    # counterbalanced: each group at each position 96 / 8 = 12 times
    assert (pd.crosstab(table["group"], table["position"]) == 12).all().all()
    assert (table["race"] + " " + table["gender"]).equals(table["group"])


def test_a_trials_resumes_differ_only_in_the_name_and_its_email(trials_case):
    experiment, profiles = trials_case
    table = profiles.table.head(8 * 12)
    texts = [experiment.renderer.render(row, profiles.jobs[row["job_id"]]).text for row in table.to_dict("records")]

    def without_name(text: str, row: dict) -> str:
        lines = text.splitlines()
        assert lines[0] == f"{row['first_name']} {row['surname']}"
        contact = re.sub(r"\S+@\S+", "<email>", lines[1])  # the address is made from the name
        return "\n".join([contact, *lines[2:]])

    stripped = [without_name(text, row) for text, row in zip(texts, table.to_dict("records"))]
    per_trial = pd.Series(stripped).groupby(table["trial_id"].to_numpy()).nunique()
    assert (per_trial == 1).all()  # city, phone, employers, bullets, schools: the same for all 8
    assert len(set(stripped)) == 12  # and each trial its own resume
    assert len(set(texts)) == len(texts)


def test_ranking_design_rejects_image_renderers_and_scoring_only_screeners():
    with pytest.raises(ConfigError, match="renderer=text"):
        PopulationCase.from_config(
            compose_config(["experiment=ranking_race_gender", "renderer=image", "tracking=none"])
        )
    with pytest.raises(ConfigError, match="renderer=text"):
        PopulationCase.from_config(compose_config(["experiment=ranking_race_gender", "renderer=json", "tracking=none"]))
    with pytest.raises(ConfigError, match="cannot rank"):
        PopulationCase.from_config(
            compose_config(["experiment=ranking_race_gender", "screener=tfidf", "tracking=none"])
        )
    with pytest.raises(ConfigError, match="estimator.reference"):
        PopulationCase.from_config(
            compose_config(
                ["experiment=ranking_race_gender", "population.groups=[black female,white female]", "tracking=none"]
            )
        )
    with pytest.raises(ConfigError, match="does not apply to the ranking design"):
        PopulationCase.from_config(
            compose_config(["experiment=ranking_race_gender", "estimator=pse_dml", "tracking=none"])
        )


def test_exploded_logit_equals_statsmodels_conditional_logit():
    """The vectorised likelihood fits exactly what statsmodels' ConditionalLogit fits on the exploded
    choice sets (params and model-based SEs), partial rankings included."""
    from statsmodels.discrete.conditional_models import ConditionalLogit
    from statsmodels.tools.numdiff import approx_hess

    rng = np.random.default_rng(3)
    trials = simulate_rankings(300, [0.4, 0.0, -0.3, 0.1], [0.5, 0.0, 0.0, -0.2], rng, top=3, top_share=0.3)
    ours = fit_rank_logit(trials, reference="g1", reference_position=4, se="model")
    x, names = design_matrix(trials, "g1", 4)
    rows, chosen, sets = [], [], []
    for t in range(len(trials.rank)):
        r = np.where(np.isfinite(trials.rank[t]), trials.rank[t], np.inf)
        for j in range(1, int(min(np.isfinite(trials.rank[t]).sum(), 3)) + 1):
            for g in np.flatnonzero(r >= j):
                rows.append(x[t, g])
                chosen.append(float(r[g] == j))
                sets.append(t * 10 + j)
    reference = ConditionalLogit(np.array(chosen), np.array(rows), groups=np.array(sets))
    fitted = reference.fit(disp=0)
    # statsmodels' likelihood has its maximum at our estimate (its own optimiser stops a little short)
    np.testing.assert_allclose(reference.score(ours.params), 0, atol=1e-6)
    assert reference.loglike(ours.params) >= reference.loglike(fitted.params) - 1e-9
    np.testing.assert_allclose(ours.params, fitted.params, atol=2e-3)
    information = -approx_hess(ours.params, reference.loglike)
    np.testing.assert_allclose(ours.se, np.sqrt(np.diag(np.linalg.inv(information))), rtol=1e-3)
    assert ours.names[:3] == ["group.g0", "group.g2", "group.g3"]


def test_estimates_recover_known_strengths_and_position_bonus():
    rng = np.random.default_rng(11)
    strengths = [0.3, 0.0, -0.2, 0.0]
    trials = simulate_rankings(4000, strengths, [0.6, 0.0, 0.0, 0.0], rng)
    effects = ranking_effects(trials, reference="g1", reference_position=4, n_bootstrap=300)
    table = effects.table
    for g, truth in (("g0", 0.3), ("g2", -0.2), ("g3", 0.0)):
        row = table.loc[f"logit.group.{g}"]
        assert row["ci_low"] < truth < row["ci_high"], g
    first = table.loc["logit.position.1"]
    assert first["ci_low"] < 0.6 < first["ci_high"]
    # the strongest group wins most, the weakest least; the first position wins above 1/k
    assert table.loc["top1.g0", "estimate"] > table.loc["top1.g2", "estimate"]
    assert table.loc["top1_position.1", "ci_low"] > 0.25
    assert table.loc["impact_ratio.g0", "estimate"] == 1.0
    assert effects.metrics["ranking.no_group_differs_logit_p"] < 1e-6


def test_a_balanced_null_with_strong_position_bias_rejects_at_the_tests_level():
    """No group effect, a strong first-position bonus: "no group differs" is rejected about alpha of
    the time by the logit's Wald test and by the impact ratios' test; the position effect always."""
    rng = np.random.default_rng(5)
    logit_rejects, ratio_rejects, position_found = 0, 0, 0
    sims = 60
    for _ in range(sims):
        trials = simulate_rankings(400, [0.0] * 8, [1.0] + [0.0] * 7, rng)
        metrics = ranking_effects(trials, reference="g1", reference_position=8, n_bootstrap=200).metrics
        logit_rejects += metrics["ranking.no_group_differs_logit_p"] < 0.05
        ratio_rejects += metrics["ranking.no_group_differs_top1_p"] < 0.05
        position_found += metrics["ranking.no_position_effect_logit_p"] < 0.05
    # 60 sims at level 0.05: 3 expected; P(Binomial(60, 0.05) >= 9) < 0.01
    assert logit_rejects <= 8 and ratio_rejects <= 8
    assert position_found == sims


def test_ranking_audit_through_the_openai_sdk_loses_no_row_and_reruns_from_the_cache(tmp_path, monkeypatch):
    """1,000 trials of 8 through the real openai SDK against the local stub, with 429s, 500s and
    malformed bodies injected: every trial is answered and read (the stub's own order, whatever
    format it replied in), and a rerun sends nothing."""
    from tests.llm_stub import Faults, StubServer
    from tests.screen_helpers import make_screener

    cfg = compose_config(["experiment=ranking_race_gender", "population.n_trials=1000", "tracking=none"])
    base = PopulationCase.from_config(cfg)
    with StubServer(faults=Faults(rate_limit=0.05, server_error=0.05, malformed=0.05, retry_after="0.01")) as stub:
        screener = make_screener(
            "openai", stub.url, tmp_path / "cache", monkeypatch, engine={"concurrency": 16, "max_attempts": 10}
        )
        experiment = dataclasses.replace(base, screener=screener)
        result = experiment.run()
        assert sum(stub.state.fault_counts.values()) > 50  # faults were injected, and retried
        scored = result.scored
        assert len(scored) == 8000 and scored["error"].isna().all()
        assert (scored["n_ranked"] == 8).all()
        for trial_id, rows in list(scored.groupby("trial_id"))[:200]:
            names = (rows["first_name"] + " " + rows["surname"]).tolist()
            by_rank = rows.sort_values("rank")
            assert (by_rank["rank"].to_numpy() == np.arange(1, 9)).all()
            expected = stub_ranking_from_reply(rows["raw"].iloc[0], names)
            assert (by_rank["first_name"] + " " + by_rank["surname"]).tolist() == expected, trial_id
        assert set(scored["parse_method"]) >= {"list", "json"}
        sent = stub.state.requests
        again = experiment.run()
        assert stub.state.requests == sent  # every answer came from the cache
        pd.testing.assert_frame_equal(again.effects.table, result.effects.table)


def stub_ranking_from_reply(reply: str, names: list[str]) -> list[str]:
    """The stub's order as it wrote it (independent of the parser: names by first appearance in the
    reply, compared case-insensitively)."""
    low = reply.lower()
    return sorted(names, key=lambda name: low.find(name.lower()))


def test_the_whole_ranking_needs_fewer_trials_than_the_winner_alone():
    """The top-1 count agrees with the two-proportion formula for P(A first) - P(B first)."""
    top1, full = trials_needed(0.2, 8, stages=1), trials_needed(0.2, 8)
    p1, p0 = np.exp(0.2) / (np.exp(0.2) + 7), 1 / (np.exp(0.2) + 7)
    formula = (1.959964 + 0.841621) ** 2 * (p1 + p0 - (p1 - p0) ** 2) / (p1 - p0) ** 2
    assert abs(top1 / formula - 1) < 0.05
    assert full < top1 / 3


def test_panel_report_has_a_summary_row_per_case_and_a_forest_per_model():
    """The report's ranking section from effects rows as popfair.report.runs.effects_long makes them."""
    from popfair.report.ranking import model_forest, ranking_summary

    rng = np.random.default_rng(2)
    rows, runs = [], []
    for model in ("m1", "m2"):
        for job in ("nurse", "teacher"):
            effects = ranking_effects(
                simulate_rankings(240, [0.2, 0, 0, -0.1], [0.4, 0, 0, 0], rng),
                reference="g1",
                reference_position=4,
                n_bootstrap=200,
            )
            run_id = f"{model}-{job}"
            table = effects.table.reset_index()
            rows.append(table.assign(model=model, occupation=job, run_id=run_id, estimator="ranking"))
            runs.append({"run_id": run_id, "metrics": effects.metrics})
    long = pd.concat(rows, ignore_index=True)
    summary = ranking_summary(long, pd.DataFrame(runs))
    assert len(summary) == 4 and summary["trials"].eq(240).all()
    assert (summary["first_position"] > 0).all()
    figure = model_forest(long[long["model"] == "m1"], "m1")
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert "position.1" in labels and "group.g0" in labels


@pytest.mark.parametrize(
    "provider, mode",
    [("anthropic", "online"), ("bedrock", "online"), ("openai_compatible", "online"), ("openai", "batch")],
)
def test_ranking_through_every_provider_and_the_batch_api(provider, mode, tmp_path, monkeypatch):
    """Each provider's real SDK (and OpenAI's batch API) against the stub: every trial read in the
    stub's order; the dry-run plan counts the calls the run then makes."""
    from popfair.sweep.plan import plan_case
    from tests.llm_stub import StubServer
    from tests.screen_helpers import make_screener

    cfg = compose_config(["experiment=ranking_race_gender", "population.n_trials=24", "tracking=none"])
    base = PopulationCase.from_config(cfg)
    with StubServer() as stub:
        extra = {"mode": mode, "batch": {"poll_interval_s": 0.01}} if mode == "batch" else {}
        screener = make_screener(provider, stub.url, tmp_path / "cache", monkeypatch, **extra)
        experiment = dataclasses.replace(base, screener=screener)
        planned = plan_case(experiment)
        assert planned.calls == 24 and planned.output_tokens == 24 * 8 * 8
        scored = experiment.run().scored
        assert scored["error"].isna().all() and (scored["n_ranked"] == 8).all()
        for _, rows in scored.groupby("trial_id"):
            by_rank = rows.sort_values("rank")
            names = (rows["first_name"] + " " + rows["surname"]).tolist()
            assert (by_rank["first_name"] + " " + by_rank["surname"]).tolist() == stub_ranking_from_reply(
                rows["raw"].iloc[0], names
            )


def test_refusals_are_recorded_failures_and_the_rest_is_estimated(tmp_path):
    """A ranker that refuses a share of trials: those trials keep their raw reply and an error on
    every candidate row, and the estimates use the others."""
    cfg = compose_config(
        ["experiment=ranking_race_gender", "population.n_trials=160", "screener.refusal_rate=0.25", "tracking=none"]
    )
    result = PopulationCase.from_config(cfg).run()
    scored = result.scored
    failed = scored[scored["error"].notna()]
    assert 0.1 < failed["trial_id"].nunique() / 160 < 0.4
    assert failed["error"].str.startswith("no ranking").all() and failed["raw"].str.contains("sorry").all()
    assert failed["rank"].isna().all() and failed["y"].isna().all()
    assert result.effects.metrics["ranking.trials"] == 160 - failed["trial_id"].nunique()
