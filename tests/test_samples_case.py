"""A case with several answers per prompt: the paired audit through the stub (real openai SDK,
route=local on 127.0.0.1) at temperature 1 with screener.samples=3: each profile's outcome is the mean
of its 3 answers, the gap is tested by the posting-clustered t-test (McNemar is for single yes/no
answers and is not computed), and the screener's noise share is a metric and a line of the report.
Also paired_gap on mean callbacks against an independent t-test."""

from __future__ import annotations

import mlflow
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from popfair.core.types import Roles
from popfair.estimate.gap.paired import PairedGap, paired_gap
from popfair.track.headline import search_logged_runs
from tests.conftest import popfair_in_process
from tests.test_screen_served import MODEL, vllm_stub


def test_paired_gap_on_mean_callbacks_uses_the_clustered_t_test_and_says_so():
    rng = np.random.default_rng(3)
    postings = np.repeat(np.arange(80), 4)
    adv = rng.binomial(3, 0.55, len(postings)) / 3  # mean of 3 answers per profile
    other = rng.binomial(3, 0.45, len(postings)) / 3
    pairs = pd.DataFrame({"white": adv, "black": other, "posting_id": postings})
    result = paired_gap(pairs, y_adv="white", y_other="black", cluster="posting_id", n_bootstrap=500)
    assert result.test == "cluster_t" and np.isnan(result.mcnemar_p) and np.isnan(result.mcnemar_chi2)
    means = pd.Series(adv - other).groupby(postings).mean()
    independent = stats.ttest_1samp(means, 0.0)
    assert result.cluster_t == pytest.approx(independent.statistic) and result.cluster_p == pytest.approx(
        independent.pvalue
    )
    assert result.gap_pp == pytest.approx(100 * (adv - other).mean())
    # single yes/no answers keep McNemar
    single = pairs.assign(white=(adv > 0.5).astype(float), black=(other > 0.5).astype(float))
    assert paired_gap(single, y_adv="white", y_other="black", cluster="posting_id", n_bootstrap=200).test == "mcnemar"
    scored = pd.DataFrame(
        {
            "pair_key": np.r_[np.arange(len(adv)), np.arange(len(adv))],
            "posting_id": np.r_[postings, postings],
            "race": ["white"] * len(adv) + ["black"] * len(adv),
            "y": np.r_[adv, other],
        }
    )
    effects = PairedGap(n_bootstrap=200).estimate(scored, Roles(x="race", x0="black", x1="white", z=(), b=(), r=()))
    assert any("clustered t-test on the mean callbacks" in note for note in effects.notes)
    assert effects.metrics["mcnemar_used"] == 0.0
    assert all("McNemar" not in label for label in effects.labels)


def test_a_paired_case_with_three_answers_per_prompt_reports_the_noise(tmp_path):
    with vllm_stub() as stub:
        out = popfair_in_process(
            "experiment=paired_race",
            "screener=llama31_8b",
            "screener.route=local",
            f"screener.routes.local.base_url={stub.url}/v1",
            "screener.samples=3",
            "screener.generation.temperature=1.0",
            "occupation.n_postings=30",
            "estimator.n_bootstrap=200",
            "screener.engine.progress=false",
            "audit_report=true",
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        n_prompts = len(stub.state.choices)
        assert set(stub.state.choices.values()) == {3} and set(stub.state.n_requested) == {3}
    assert "3 answers per prompt" in out.stderr + out.stdout
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = search_logged_runs(experiment_names=["popfair"]).iloc[0]
    assert run["metrics.screen.samples"] == 3 and run["metrics.screen.noise_prompts"] == n_prompts
    assert 0.5 < run["metrics.screen.noise_share"] <= 1  # the stub's answers at T=1 are mostly noise
    assert run["metrics.mcnemar_used"] == 0.0
    assert run["tags.request.model"] == MODEL
    reports = [p for p in tmp_path.rglob("*") if "audit_report" in p.parts and p.suffix in (".md", ".html")]
    text = "".join(p.read_text() for p in reports)
    assert "answered each prompt 3 times" in text and "within prompts" in text


def test_the_counterfactual_design_takes_a_worlds_answers_as_one_unit(tmp_path):
    """The population audit's default estimator with two answers per prompt at temperature 1: every
    factual and world prompt is answered twice (one request, n=2), each scored row (a world of an
    applicant) is one row whose score is the mean of its two answers, and the effects are estimated."""
    from popfair.case.population import PopulationCase
    from popfair.core.types import FACTUAL, WORLD
    from tests.conftest import compose_config

    with vllm_stub() as stub:
        cfg = compose_config(
            [
                "screener=llama31_8b",
                "screener.route=local",
                f"screener.routes.local.base_url={stub.url}/v1",
                "screener.samples=2",
                "screener.generation.temperature=1.0",
                "screener.engine.progress=false",
                "population.n=80",
                "estimator.n_bootstrap=200",
                "tracking=none",
            ],
            tmp_path=tmp_path,
        )
        result = PopulationCase.from_config(cfg).run()
        assert set(stub.state.choices.values()) == {2} and set(stub.state.n_requested) == {2}
        prompts = len(stub.state.choices)
    worlds = result.scored_worlds
    assert worlds is not None and (worlds[WORLD] != FACTUAL).any()
    assert not worlds.duplicated([c for c in worlds.columns if c in ("applicant_id", WORLD)]).any()
    scores = pd.concat([result.scored["y"], worlds["y"]]).dropna()
    assert np.allclose(scores * 2, np.round(scores * 2))  # the mean of two integer scores
    assert (scores * 2 % 2 == 1).any()  # some worlds' two answers differ: a mean, not one answer
    assert result.screening["screen.samples"] == 2 and result.screening["screen.noise_prompts"] <= prompts
    assert np.isfinite(result.effects.table["estimate"].to_numpy(float)).any()


def test_a_sequential_case_weights_each_looks_noise_by_its_prompts():
    from popfair.case.looks import _add_metrics

    total: dict[str, float] = {}
    _add_metrics(total, {"screen.rows": 10, "screen.samples": 3, "screen.noise_prompts": 10, "screen.flip_rate": 0.5})
    _add_metrics(total, {"screen.rows": 30, "screen.samples": 3, "screen.noise_prompts": 30, "screen.flip_rate": 0.1})
    assert total["screen.flip_rate"] == pytest.approx((0.5 * 10 + 0.1 * 30) / 40)
    assert total["screen.samples"] == 3 and total["screen.noise_prompts"] == 40 and total["screen.rows"] == 40
