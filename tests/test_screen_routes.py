"""`screener.route: auto` follows the keys the user has: the default route when its key is set, else the
first route whose key is; a pinned route wins; with no key at all the error lists every route with its
variable and the override. The design card's command goes through the OpenAI route when only
OPENAI_API_KEY is set, and says so."""

from __future__ import annotations

import os

import mlflow
import pytest
from omegaconf import OmegaConf

from popfair.case.population import PopulationCase
from popfair.core.errors import MissingSecretError
from popfair.runtime.routes import CREDENTIAL_CHAINS
from popfair.runtime.secrets import SECRET_VARIABLES
from popfair.screen.providers import PROVIDERS
from tests.conftest import compose_config, popfair_in_process
from tests.llm_stub import StubServer

KEY = "sk-route-test-0123456789abcdef"


@pytest.fixture
def no_keys(monkeypatch, tmp_path):
    """An environment without any provider key or AWS credentials (the variables every adapter declares)."""
    assert {"OPENAI_API_KEY", "OPENROUTER_API_KEY"} <= SECRET_VARIABLES and "bedrock" in CREDENTIAL_CHAINS
    declared = {v for cls in PROVIDERS.values() for v in cls.key_variables}
    for variable in (
        *declared,
        *SECRET_VARIABLES,
        *(v for chain in CREDENTIAL_CHAINS.values() for v in chain.variables),
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    return monkeypatch


def _chosen(*overrides: str) -> str:
    cfg = compose_config(["screener=gpt4o_mini", *overrides]).screener
    return OmegaConf.to_container(cfg, resolve=True)["chosen_route"]


def test_auto_takes_the_default_route_when_its_key_is_set_else_the_first_route_with_a_key(no_keys):
    no_keys.setenv("OPENAI_API_KEY", KEY)
    assert _chosen() == "openai"  # the default (openrouter) has no key: OpenAI direct
    no_keys.setenv("OPENROUTER_API_KEY", KEY)
    assert _chosen() == "openrouter"  # both set: the default route
    assert _chosen("screener.route=openai") == "openai"  # a pinned route wins


def test_bedrock_default_route_is_taken_with_aws_credentials_only(no_keys):
    no_keys.setenv("ANTHROPIC_API_KEY", KEY)
    cfg = compose_config(["screener=claude_haiku_4_5"]).screener
    assert OmegaConf.to_container(cfg, resolve=True)["chosen_route"] == "anthropic"
    no_keys.setenv("AWS_PROFILE", "audit")
    assert OmegaConf.to_container(cfg, resolve=True)["chosen_route"] == "bedrock"


def test_no_key_at_all_lists_every_route_with_its_variable_and_override(no_keys, tmp_path):
    cfg = compose_config(["screener=gpt4o_mini"], tmp_path=tmp_path)
    with pytest.raises(MissingSecretError) as error:
        PopulationCase.from_config(cfg)
    message = str(error.value)
    assert message.startswith("screener.route: no credentials")
    for route, variable in (("openrouter", "OPENROUTER_API_KEY"), ("openai", "OPENAI_API_KEY")):
        assert f"{route}: export {variable} (screener.route={route})" in message
    # a dry run plans without any key, on the default route
    planned = PopulationCase.from_config(cfg, dry_run=True)
    assert planned.screener.route == "openrouter"


def test_design_card_command_with_only_openai_key_goes_through_openai_and_says_so(no_keys, tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    with StubServer() as stub:
        env["OPENAI_BASE_URL"] = f"{stub.url}/v1"  # the SDK's own variable: the command stays the card's
        out = popfair_in_process(  # what it prints: in this process, with exactly this environment
            "screener=gpt4o_mini",
            "occupation=nurse",
            "population.n=60",
            "estimator=outcome_gap",
            "screener.engine.progress=false",
            cwd=tmp_path,
            env=env,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert stub.state.requests >= 60
    said = out.stdout + out.stderr
    assert "screener gpt4o_mini: route openai (auto: OPENAI_API_KEY is set; OPENROUTER_API_KEY" in said
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    run = mlflow.search_runs(experiment_names=["popfair"]).iloc[0]
    assert run["tags.route"] == "openai" and run["tags.route_reason"].startswith("auto:")
    assert run["params.screener.model"] == "gpt-4o-mini-2024-07-18"  # the OpenAI route's model id
    assert run["params.screener.route"] == "auto" and run["params.screener.chosen_route"] == "openai"
