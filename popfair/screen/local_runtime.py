"""Shared by screeners that run a model in this process (embedding_minilm, hf_local): checks
that their optional extra is installed, and picks the torch device."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from popfair.core.errors import ConfigError, require


def require_extra(extra: str, modules: Mapping[str, str], screener: str) -> None:
    """ConfigError naming the pip extra when any of its modules is not importable."""
    missing = [package for module, package in modules.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(
            f"screener {screener}: needs the optional extra '{extra}' "
            f"(missing: {', '.join(missing)}); install it with "
            f"pip install 'popfair[{extra}]'"
        )


def resolve_device(device: str, key: str = "screener.device") -> str:
    """'auto' -> 'cuda' when a GPU is visible, else 'cpu'; otherwise the value as given."""
    require(
        isinstance(device, str) and device.split(":")[0] in {"auto", "cpu", "cuda", "mps"},
        key,
        f"must be one of auto, cpu, cuda, cuda:N, mps; got {device!r}",
    )
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
