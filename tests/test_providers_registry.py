"""Providers come from a registry filled by `@register_provider`; batch support is a capability of
the adapter class; no SDK is imported until a client is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

from popfair.core.errors import ConfigError
from popfair.screen.providers import PROVIDERS, Completion, Provider, make_provider, register_provider
from popfair.screen.providers.base import Generation
from tests.screen_helpers import make_screener


def test_the_shipped_adapters_are_registered_with_their_batch_capability():
    assert {"openai", "openai_compatible", "anthropic", "bedrock"} <= set(PROVIDERS)
    capable = {kind for kind, cls in PROVIDERS.items() if cls.batch_api is not None}
    assert capable == {"openai", "anthropic"}
    provider = make_provider("openai_compatible", model="m", generation=Generation(), base_url="http://x/v1")
    assert provider.kind == "openai_compatible" and provider.batch_api is None
    with pytest.raises(ValueError, match="unknown provider kind 'azure'"):
        make_provider("azure", model="m", generation=Generation())


def test_a_registered_provider_is_a_screener_option_and_batch_mode_follows_its_capability(tmp_path, monkeypatch):
    @register_provider("echo_test")
    class Echo(Provider):
        def body(self, prompt, image):
            return {"model": self.model, "user": prompt.user}

        async def send(self, body):
            return Completion(text="50", input_tokens=1, output_tokens=1)

        def probe(self, timeout_s):
            return None

    try:
        screener = make_screener(
            "openai", "http://127.0.0.1:9", tmp_path, monkeypatch, provider="echo_test", api_key_env=None
        )
        assert screener.provider.kind == "echo_test" and isinstance(screener.provider, Echo)
        with pytest.raises(ConfigError, match="batch mode needs provider openai or anthropic"):
            make_screener(
                "openai",
                "http://127.0.0.1:9",
                tmp_path,
                monkeypatch,
                provider="echo_test",
                api_key_env=None,
                mode="batch",
            )
        with pytest.raises(ValueError, match="registered twice"):
            register_provider("openai")(Echo)
    finally:
        PROVIDERS.pop("echo_test")


def test_choosing_providers_imports_no_sdk():
    code = (
        "import sys; from popfair.screen.providers import make_provider; from popfair.screen.llm import LLMScreener; "
        "print([m for m in ('openai', 'anthropic', 'boto3') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
