"""Prices per model (from config) and token estimates for planning and budgets, without any call."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from popfair.core.errors import require

CHARS_PER_TOKEN = 4.0  # English text in BPE tokenizers: about 4 characters per token
MESSAGE_OVERHEAD_TOKENS = 8  # role markers and separators per request


@dataclass(frozen=True)
class Price:
    """USD per million tokens; `batch_discount` is the fraction of list price batch jobs pay."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    batch_discount: float = 0.5

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None, key: str = "screener.price") -> Price:
        values = dict(config or {})
        unknown = set(values) - {"input_per_mtok", "output_per_mtok", "batch_discount"}
        require(
            not unknown,
            key,
            f"unknown keys {sorted(unknown)}; allowed: input_per_mtok, output_per_mtok, batch_discount",
        )
        price = cls(**{k: float(v) for k, v in values.items()})
        require(
            price.input_per_mtok >= 0 and price.output_per_mtok >= 0,
            key,
            f"prices must be >= 0 USD per million tokens, got {values}",
        )
        require(
            0 < price.batch_discount <= 1, f"{key}.batch_discount", f"must be in (0, 1], got {price.batch_discount}"
        )
        return price

    def cost(self, input_tokens: float, output_tokens: float, batch: bool = False) -> float:
        """Dollars for the given token counts (vectorises over numpy arrays too)."""
        dollars = (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6
        return dollars * (self.batch_discount if batch else 1.0)


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG header; (0, 0) when the bytes are not a PNG."""
    if len(png) >= 24 and png[:8] == b"\x89PNG\r\n\x1a\n":
        return struct.unpack(">II", png[16:24])
    return 0, 0


def tiled_image_tokens(width: int, height: int) -> int:
    """OpenAI's high-detail tiling: 85 + 170 per 512-px tile, after fitting in 2048 px and scaling
    the short side to 768 (small images are not upscaled)."""
    scale = min(1.0, 2048 / max(width, height))
    fit_w, fit_h = width * scale, height * scale
    scale = min(1.0, 768 / min(fit_w, fit_h))
    fit_w, fit_h = fit_w * scale, fit_h * scale
    return 85 + 170 * math.ceil(fit_w / 512) * math.ceil(fit_h / 512)


def area_image_tokens(width: int, height: int) -> int:
    """Anthropic's rule (Bedrock's too): width * height / 750, after fitting in 1568 px."""
    scale = min(1.0, 1568 / max(width, height))
    return math.ceil(width * scale * height * scale / 750)


@dataclass(frozen=True)
class PricingUnit:
    """What a provider bills a request by, as its adapter declares it (`Provider.pricing`): tokens
    (text at CHARS_PER_TOKEN, plus MESSAGE_OVERHEAD_TOKENS, plus each image by `image_rule` from its
    width and height) priced by `Price`, or calls (`per_call`: nothing is counted in tokens)."""

    name: str
    image_rule: Callable[[int, int], int] = tiled_image_tokens
    per_call: bool = False

    def image_tokens(self, png: bytes) -> int:
        """Input tokens one PNG costs (1000 when the bytes are not a PNG; 0 for calls)."""
        if self.per_call:
            return 0
        width, height = png_size(png)
        return 1000 if width == 0 or height == 0 else self.image_rule(width, height)

    def input_tokens(self, system: str, user: str, image_png: bytes | None) -> int:
        """Rough input tokens of one request (characters / 4, plus image tokens, plus overhead)."""
        if self.per_call:
            return 0
        tokens = math.ceil((len(system) + len(user)) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS
        if image_png is not None:
            tokens += self.image_tokens(image_png)
        return tokens

    def request_tokens(self, prompt: Any) -> int:
        """`input_tokens` of a chat prompt; 0 for a provider priced per call (its request is no prompt)."""
        return 0 if self.per_call else self.input_tokens(prompt.system, prompt.user, prompt.image_png)


TOKENS_TILED_IMAGES = PricingUnit("tokens; images in 512-px tiles", tiled_image_tokens)
TOKENS_AREA_IMAGES = PricingUnit("tokens; images by area", area_image_tokens)
PER_CALL = PricingUnit("calls", per_call=True)
