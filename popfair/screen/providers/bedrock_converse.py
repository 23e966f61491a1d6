"""AWS Bedrock Converse API through boto3 (sync client run in a thread pool; botocore retries off).

Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE,
or a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK); none of them is ever written to config."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from popfair.core.errors import MissingSecretError, require
from popfair.runtime.routes import CredentialChain
from popfair.screen.pricing import TOKENS_AREA_IMAGES
from popfair.screen.providers.base import (
    Completion,
    Provider,
    TransientError,
    classify_status,
    network_error,
    register_provider,
)

if TYPE_CHECKING:  # annotations only: prompts pulls in the designs, and choosing a route loads the adapters
    from popfair.screen.prompts import ChatPrompt

TRANSIENT_CODES = {
    "ThrottlingException": 429,
    "ServiceUnavailableException": 503,
    "InternalServerException": 500,
    "ModelTimeoutException": 408,
    "ModelNotReadyException": 503,
    "TooManyRequestsException": 429,
}


# The standard AWS chain: variables from which boto3 finds credentials without a network call, and
# the shared files it reads.
AWS_CREDENTIALS = CredentialChain(
    what="AWS credentials",
    shown="AWS_ACCESS_KEY_ID/AWS_PROFILE/AWS_BEARER_TOKEN_BEDROCK",
    variables=(
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_BEARER_TOKEN_BEDROCK",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ),
    files=(("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), ("AWS_CONFIG_FILE", "~/.aws/config")),
)
# the control plane takes a cross-region inference profile id (us.anthropic...) where it names a geography
PROFILE_PREFIXES = ("us", "eu", "apac", "global", "jp", "au", "ca")


@register_provider("bedrock")
class BedrockConverse(Provider):
    sdk = "boto3"
    key_variables = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK")
    credentials = AWS_CREDENTIALS
    pricing = TOKENS_AREA_IMAGES

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def check_settings(cls, api_key_env: str | None, base_url: str | None, region: str | None) -> None:
        require(bool(region or base_url), "screener.region", f"is required for provider {cls.kind} (e.g. us-east-1)")

    @classmethod
    def check_credentials(cls, region: str | None) -> None:
        """Fail at construction when boto3 finds no AWS credentials (names the variables to set)."""
        import boto3

        if boto3.Session(region_name=region).get_credentials() is None:
            raise MissingSecretError(
                "screener.api_key_env: no AWS credentials found for Bedrock. Set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or a Bedrock API key in AWS_BEARER_TOKEN_BEDROCK)."
            )

    def probe(self, timeout_s: float) -> bool:
        """The control plane's GetFoundationModel (or GetInferenceProfile for a cross-region profile id)."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        config = Config(retries={"total_max_attempts": 1}, read_timeout=timeout_s, connect_timeout=timeout_s)
        client = boto3.client("bedrock", region_name=self.region, endpoint_url=self.base_url, config=config)
        try:
            if self.model.split(".", 1)[0] in PROFILE_PREFIXES:
                client.get_inference_profile(inferenceProfileIdentifier=self.model)
            else:
                client.get_foundation_model(modelIdentifier=self.model)
        except ClientError as exc:
            meta = exc.response.get("ResponseMetadata", {})
            error = exc.response.get("Error", {})
            raise classify_status(
                int(meta.get("HTTPStatusCode") or 400), None, f"{error.get('Code')}: {error.get('Message')}"
            ) from None
        except BotoCoreError as exc:
            raise network_error(exc) from None
        return True

    @property
    def endpoint(self) -> str:
        return self.base_url or f"region:{self.region}"

    @property
    def display_url(self) -> str:
        return self.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com"

    def encode_image(self, png: bytes) -> bytes:
        return png  # boto3 base64-encodes blob fields itself

    def body(self, prompt: ChatPrompt, image: Any) -> dict[str, Any]:
        gen = self.generation
        content: list[dict[str, Any]] = []
        if image is not None:
            content.append({"image": {"format": "png", "source": {"bytes": image}}})
        content.append({"text": prompt.user})
        inference: dict[str, Any] = {"maxTokens": gen.max_tokens}
        if gen.temperature is not None:
            inference["temperature"] = gen.temperature
        body: dict[str, Any] = {
            "modelId": self.model,
            "system": [{"text": prompt.system}],
            "messages": [{"role": "user", "content": content}],
            "inferenceConfig": inference,
        }
        if gen.reasoning_effort is not None:
            body["additionalModelRequestFields"] = {"reasoning_effort": gen.reasoning_effort}
        body.update(gen.extra)
        return body

    async def start(self) -> None:
        import boto3
        from botocore.config import Config

        config = Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            read_timeout=self.timeout_s,
            connect_timeout=min(10.0, self.timeout_s),
            max_pool_connections=max(10, self.concurrency),
        )
        self._client = boto3.client(
            "bedrock-runtime", region_name=self.region, endpoint_url=self.base_url, config=config
        )
        self._pool = ThreadPoolExecutor(max_workers=max(1, self.concurrency), thread_name_prefix="bedrock")

    async def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._client = None

    async def send(self, body: dict[str, Any]) -> Completion:
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        loop = asyncio.get_running_loop()
        try:
            response = await loop.run_in_executor(self._pool, lambda: self._client.converse(**body))
            return completion_from_converse(response)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            meta = exc.response.get("ResponseMetadata", {})
            status = int(meta.get("HTTPStatusCode") or TRANSIENT_CODES.get(error.get("Code"), 400))
            status = TRANSIENT_CODES.get(error.get("Code"), status)
            raise classify_status(
                status, meta.get("HTTPHeaders"), f"{error.get('Code')}: {error.get('Message')}"
            ) from None
        except (BotoConnectionError, HTTPClientError) as exc:  # connection refused, DNS, TLS, proxy, timeouts
            raise network_error(exc) from None
        except BotoCoreError as exc:  # e.g. an unparseable body
            raise TransientError(f"{type(exc).__name__}: {exc}"[:300]) from None
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            raise TransientError(
                f"malformed response: {type(exc).__name__}: {exc}"[:300], cause="malformed response"
            ) from None


def completion_from_converse(response: dict[str, Any]) -> Completion:
    blocks = response["output"]["message"]["content"]
    text = "".join(block.get("text", "") for block in blocks)
    usage = response.get("usage") or {}
    return Completion(
        text=text, input_tokens=int(usage.get("inputTokens", 0)), output_tokens=int(usage.get("outputTokens", 0))
    )
