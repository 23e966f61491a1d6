"""Shared by screeners that run a model in this process (embedding_minilm, hf_local): checks
that their optional extra is installed, picks the torch device and dtype, and names what computed
an answer (device, dtype, library versions)."""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popfair.core.errors import ConfigError, require
from popfair.store.blobs import installed_versions

# the libraries whose versions are recorded with, and enter the key of, every locally computed answer
LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate")
SAMPLES, SAMPLE_BYTES = 16, 1 << 16  # windows of a weight file read for a model's identity


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


def resolve_dtype(dtype: str, device: str) -> str:
    """The torch dtype name to load weights in. 'auto': bfloat16 on cuda (float16 on a GPU without
    bfloat16), float16 on mps, float32 on cpu (half-precision matmuls are slow or missing on most
    CPUs); a checkpoint saved in fp32 is not left in fp32 on a GPU."""
    if dtype != "auto":
        return dtype
    kind = device.split(":")[0]
    if kind == "cuda":
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float16" if kind == "mps" else "float32"


def device_name(device: str) -> str:
    """What runs the model, for records and keys: 'cpu', or 'cuda (NVIDIA H200)'."""
    if device.split(":")[0] != "cuda":
        return device.split(":")[0]
    import torch

    return f"cuda ({torch.cuda.get_device_name(device)})"


def runtime_versions() -> dict[str, str]:
    """Versions of the libraries that compute a local answer (and torch's CUDA build, if any)."""
    import torch

    return {**installed_versions(*LIBRARIES), "cuda": str(torch.version.cuda)}


def text_config(config: Any) -> Any:
    """The language model's part of a (possibly multimodal) transformers config."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def token_bytes(config: Any, dtype_bytes: int) -> int:
    """Device memory one token of a batch holds at the peak of a forward pass: its keys and values
    in every layer, and the widest activations of a prefill step (the MLP's gate and up projections).
    An estimate for sizing batches (a lower bound for models with extra state)."""
    text = text_config(config)
    hidden = int(text.hidden_size)
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    layers = int(text.num_hidden_layers)
    intermediate = int(getattr(text, "intermediate_size", None) or 4 * hidden)
    return dtype_bytes * (2 * layers * kv_heads * head_dim + 2 * intermediate + 4 * hidden)


def file_samples(path: Path) -> list[Any]:
    """A weight file's size and the sha256 of SAMPLES evenly spaced windows of it: tells checkpoints
    apart (a fine-tune changes every window) without reading gigabytes."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for k in range(SAMPLES):
            handle.seek(k * max(size - SAMPLE_BYTES, 0) // max(SAMPLES - 1, 1))
            digest.update(handle.read(SAMPLE_BYTES))
    return [size, digest.hexdigest()]


def accepts_system_role(tokenizer: Any) -> bool:
    """Whether the chat template renders a system message (some raise on it)."""
    try:
        tokenizer.apply_chat_template(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            tokenize=False,
            add_generation_prompt=True,
        )
    except Exception:  # jinja2 TemplateError from the template's raise_exception
        return False
    return True
