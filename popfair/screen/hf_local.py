"""A local transformers chat model as a screener (for users with weights on disk).

Same prompt files (conf/prompts/, popfair.screen.prompts) and parsing (popfair.screen.parse) as
the API screeners; greedy
decoding (the papers' temperature 0). Needs the optional extra: pip install 'popfair[hflocal]'."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from tqdm.auto import tqdm

from popfair.core.constraints import Boolean, Interval, Options, validate
from popfair.core.errors import ConfigError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.screen.base import Screener
from popfair.screen.local_runtime import require_extra, resolve_device
from popfair.screen.parse import SCORE_REPLIES, parse_answer
from popfair.screen.prompts import PromptSet

EXTRA_MODULES = {"transformers": "transformers", "torch": "torch"}
DTYPES = ("auto", "float32", "bfloat16", "float16")


class HFLocalScreener(Screener):
    """Greedy chat generation with a transformers causal LM loaded from `model_path`.

    Prompts are tokenised once, sorted by length and generated in batches (left padding). Each
    answer is parsed; an unparseable answer, or a prompt longer than the model's context, is a
    failure that keeps the raw text and the reason. Models whose chat template rejects a system
    message (Gemma, Mistral-Instruct v0.2) get the system text prepended to the user message."""

    parameter_constraints = {
        "max_new_tokens": Interval(int, 1, 4096),
        "batch_size": Interval(int, 1, None),
        "dtype": Options(DTYPES),
        "trust_remote_code": Boolean(),
        "score_reply": Options(SCORE_REPLIES),
        "max_new_tokens_override": [None, Interval(int, 1, 4096)],
    }

    def __init__(
        self,
        model_path: str | None = None,
        prompts: Mapping[str, str] | None = None,
        name: str = "hf_local",
        max_new_tokens: int = 200,
        batch_size: int = 8,
        device: str = "auto",
        dtype: str = "auto",
        trust_remote_code: bool = False,
        prompts_dir: str | None = None,
        score_reply: str = "integer",
        max_new_tokens_override: int | None = None,
    ) -> None:
        require(
            isinstance(model_path, str) and model_path.strip() != "",
            "screener.model_path",
            "set it to a local directory holding a transformers chat model "
            "(config.json, weights, tokenizer), e.g. screener.model_path=/models/Llama-3.1-8B-Instruct",
        )
        model_path = str(model_path)  # a non-empty string, checked above
        require(
            Path(model_path, "config.json").is_file(),
            "screener.model_path",
            f"{model_path!r} has no config.json; point it at a saved transformers model directory",
        )
        validate(
            self.parameter_constraints,
            {
                "max_new_tokens": max_new_tokens,
                "batch_size": batch_size,
                "dtype": dtype,
                "trust_remote_code": trust_remote_code,
                "score_reply": score_reply,
                "max_new_tokens_override": max_new_tokens_override,
            },
        )
        self.prompts = PromptSet(prompts, prompts_dir)
        self.score_reply = score_reply
        require_extra("hflocal", EXTRA_MODULES, name)
        self.name = name
        self.model_path = model_path
        # prompts.max_new_tokens (a preset's one cap for every screener) wins over the screener's own
        self.max_new_tokens = max_new_tokens if max_new_tokens_override is None else max_new_tokens_override
        self.batch_size = batch_size
        self.device = resolve_device(device)
        self.dtype = dtype
        self.trust_remote_code = trust_remote_code
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=trust_remote_code
        )
        require(
            bool(getattr(self.tokenizer, "chat_template", None)),
            "screener.model_path",
            f"the tokenizer in {model_path!r} has no chat_template; hf_local needs a chat (instruction-tuned) model",
        )
        self.tokenizer.padding_side = "left"  # generation continues from the right edge
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.system_role = _accepts_system_role(self.tokenizer)
        self._model: Any = None

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    @property
    def model(self) -> Any:
        """The causal LM, loaded on first use (construction stays cheap for dry runs)."""
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            dtype = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
            model = AutoModelForCausalLM.from_pretrained(
                self.model_path, dtype=dtype, local_files_only=True, trust_remote_code=self.trust_remote_code
            )
            self._model = model.to(self.device).eval()  # type: ignore[arg-type]  # transformers' stub of .to
        return self._model

    def prompt_text(self, job: Job, document: Document, outcome: Outcome) -> str:
        """The chat-formatted prompt string, ending where the assistant's answer begins."""
        prompt = self.prompts.build(outcome, job, document)
        if self.system_role:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        else:
            messages = [{"role": "user", "content": f"{prompt.system}\n\n{prompt.user}"}]
        return cast(str, self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        images = [d.applicant_id for d in documents if d.kind == "image"]
        if images:
            raise ConfigError(
                f"screener {self.name} reads text only, but the renderer produced image "
                f"documents (e.g. {images[0]!r}); use renderer=text or a VLM screener"
            )
        if not documents:
            return []
        import torch

        prompts = [self.prompt_text(jobs[d.job_id], d, outcome) for d in documents]
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        lengths = np.array([len(row) for row in ids])
        context = getattr(self.model.config, "max_position_embeddings", None)
        too_long = (lengths + self.max_new_tokens > context) if context else np.zeros(len(ids), bool)
        results: list[ScreenResult | None] = [None] * len(documents)
        for i in map(int, np.flatnonzero(too_long)):
            results[i] = ScreenResult(
                applicant_id=documents[i].applicant_id,
                raw=None,
                value=None,
                error=f"prompt of {lengths[i]} tokens + max_new_tokens "
                f"{self.max_new_tokens} exceeds the model context {context}",
                input_tokens=int(lengths[i]),
            )
        order = [int(i) for i in np.argsort(-lengths, kind="stable") if not too_long[i]]
        batches = [order[s : s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        end_ids = _end_token_ids(self.model, self.tokenizer)
        for batch in tqdm(batches, desc=f"screen {self.name}", unit="batch", leave=False):
            padded = self.tokenizer.pad({"input_ids": [ids[i] for i in batch]}, return_tensors="pt")
            encoded = {k: v.to(self.device) for k, v in padded.items()}
            with torch.inference_mode():
                out = self.model.generate(
                    **encoded,
                    do_sample=False,
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                    eos_token_id=end_ids,
                )
            generated = out[:, encoded["input_ids"].shape[1] :].cpu().numpy()
            texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
            for i, tokens, text in zip(batch, generated, texts):
                value, error = parse_answer(text, outcome, self.score_reply)
                results[i] = ScreenResult(
                    applicant_id=documents[i].applicant_id,
                    raw=text,
                    value=value,
                    error=error,
                    input_tokens=int(lengths[i]),
                    output_tokens=_answer_length(tokens, end_ids),
                )
        return cast("list[ScreenResult]", results)  # every index set: too long, or generated


def _accepts_system_role(tokenizer: Any) -> bool:
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


def _end_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Token ids that end an answer: the generation config's eos id(s) and the tokenizer's."""
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    ids.append(tokenizer.eos_token_id)
    return sorted({int(i) for i in ids if i is not None})


def _answer_length(tokens: np.ndarray, end_ids: list[int]) -> int:
    """Generated tokens up to and including the first end token (padding after it excluded)."""
    ends = np.flatnonzero(np.isin(tokens, end_ids))
    return int(ends[0] + 1) if len(ends) else len(tokens)
