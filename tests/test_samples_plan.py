"""The plan knows the screener's noise: with screener.samples = k and a noise share rho (a pilot's
plan.noise_share or plan.from_run's screen.noise_share), the MDE shrinks by sqrt(1 - rho + rho / k) and
the units needed by 1 - rho + rho / k; the dry run prices k answers and says whether, for the same
money, more answers per prompt or more units buy more precision. Checked against simulation and a
numeric search."""

from __future__ import annotations

import re

import numpy as np
import pytest

from popfair.estimate.power import (
    PowerPlan,
    answers_factor,
    answers_or_units,
    best_answers_per_prompt,
    with_answers,
)
from tests.conftest import popfair_in_process


def test_the_variance_of_k_answers_mean_matches_simulation():
    rng = np.random.default_rng(11)
    sd_between, sd_within, n = 1.0, 1.5, 200_000
    rho = sd_within**2 / (sd_within**2 + sd_between**2)
    single = sd_between**2 + sd_within**2
    for k in (1, 2, 3, 5):
        means = rng.normal(0, sd_between, n) + rng.normal(0, sd_within, (n, k)).mean(axis=1)
        assert means.var() / single == pytest.approx(answers_factor(rho, k), rel=0.02)


def test_with_answers_scales_the_mde_and_the_units_needed():
    base = PowerPlan("gap", "pp", "pairs", 1000, 0.05, 0.8, 0.04, "t", ("a",), 0.03, 1800)
    plan = with_answers(base, 3, 0.6, "a pilot")
    f = 1 - 0.6 + 0.6 / 3
    assert plan.mde == pytest.approx(0.04 * np.sqrt(f)) and plan.n_needed == int(np.ceil(1800 * f))
    assert plan.extra["noise_share"] == 0.6 and "60% of one answer's variance" in plan.line()
    assert with_answers(base, 1, None, "") is base
    unknown = with_answers(base, 3, None, "")
    assert unknown.mde == base.mde and "counted as one" in unknown.line()


@pytest.mark.parametrize("rho,unit,answer", [(0.6, 10.0, 1.0), (0.3, 5.0, 0.5), (0.9, 2.0, 1.0), (0.5, 1.0, 1.0)])
def test_best_answers_per_prompt_minimises_variance_per_dollar(rho, unit, answer):
    grid = np.linspace(1, 60, 200_000)
    cost = (1 - rho + rho / grid) * (unit + (grid - 1) * answer)
    assert best_answers_per_prompt(rho, unit, answer) == pytest.approx(grid[cost.argmin()], abs=1e-3)


def test_separate_requests_make_more_units_the_better_buy():
    note = answers_or_units(0.5, 3, 1.0, 1.0, "pairs")
    assert "more pairs, one answer per prompt" in note
    width = float(re.search(r"CI is ([\d.]+) times", note).group(1))
    assert width == pytest.approx(np.sqrt((1 - 0.5 + 0.5 / 3) * 3), abs=0.005)
    assert "about 4 answers per prompt" in answers_or_units(0.6, 3, 10.0, 1.0, "pairs")  # sqrt(13.5)


def _dry_run(tmp_path, *overrides):
    out = popfair_in_process(
        "experiment=paired_race",
        "screener=gpt4o_mini",
        "screener.route=openai",
        "occupation.n_postings=40",
        "dry_run=true",
        *overrides,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_the_dry_run_prices_k_answers_and_plans_with_the_noise(tmp_path):
    one = _dry_run(tmp_path, "plan.noise_share=0.6")
    hot = ["screener.generation.temperature=1.0", "plan.noise_share=0.6"]
    three = _dry_run(tmp_path, "screener.samples=3", *hot)
    cold = _dry_run(tmp_path, "screener.samples=3", "plan.noise_share=0.6")
    mde = [float(re.search(r"detects ([\d.]+) pp", text).group(1)) for text in (one, three)]
    assert mde[1] == pytest.approx(mde[0] * np.sqrt(1 - 0.6 + 0.6 / 3), abs=0.06)
    assert "screener noise: 60% of one answer's variance" in three and "for the same money" in three
    calls = [int(re.search(r"documents, ([\d,]+) calls", t).group(1).replace(",", "")) for t in (one, three, cold)]
    # n=3 in one request at temperature 1 (one request per prompt); separate requests at temperature 0
    assert calls[1] == calls[0] and calls[2] == 3 * calls[0]
