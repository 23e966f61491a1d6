"""Lexical matcher: cosine similarity of TF-IDF vectors of job description and resume, x 100."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

from popfair.errors import require
from popfair.parallel import forked_spans
from popfair.types import CallPlan, Document, Job, Outcome, ScreenResult

ROWS_PER_PROCESS = 4_000  # documents counted per forked span (about 1 s of tokenising)


class _WordHashing(HashingVectorizer):
    """sklearn's HashingVectorizer with a quicker word analyzer for unigrams + bigrams: the same
    preprocessing, tokenizer and stop words, and the same token list in the same order (unigrams,
    then each adjacent pair joined by a space, as `_word_ngrams` builds them), with the pairs made
    by one `map` over `zip` instead of a Python loop of slices (about a third of the counting time).
    Any other setting uses sklearn's analyzer."""

    def build_analyzer(self) -> Any:
        analyzer = super().build_analyzer()  # sklearn's checks (stop-word consistency) still run
        if self.analyzer != "word" or tuple(self.ngram_range) != (1, 2):
            return analyzer
        decode, preprocess, tokenize = self.decode, self.build_preprocessor(), self.build_tokenizer()
        stop_words = self.get_stop_words()
        join = " ".join

        def analyze(doc: str) -> list[str]:
            tokens = tokenize(preprocess(decode(doc)))
            if stop_words is not None:
                tokens = [w for w in tokens if w not in stop_words]
            return tokens + list(map(join, zip(tokens, tokens[1:])))

        return analyze


class TfidfScreener:
    """Resume-Matcher-style lexical score. Terms are hashed (no fixed vocabulary, so no word is
    ever dropped) and IDF weights are fit once, on the job descriptions plus the resumes of the
    first `screen` call (the case's own applicants), then reused: a document's score is a fixed
    function of (job, document) within a case, so counterfactual resumes scored later are measured
    on the same scale. A term unseen in that corpus gets the largest IDF, as the rarest word would."""

    def __init__(
        self, name: str = "tfidf", sublinear_tf: bool = True, ngram_max: int = 2, callback_threshold: float = 20.0
    ) -> None:
        require(
            isinstance(ngram_max, int) and ngram_max >= 1,
            "screener.ngram_max",
            f"must be an integer >= 1, got {ngram_max!r}",
        )
        require(
            0 <= callback_threshold <= 100,
            "screener.callback_threshold",
            f"must be in [0, 100], got {callback_threshold!r}",
        )
        self.name = name
        self.callback_threshold = callback_threshold
        self.counts = _WordHashing(
            n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, ngram_max), stop_words="english"
        )
        self.idf = TfidfTransformer(sublinear_tf=sublinear_tf)  # smooth IDF, rows L2-normalised
        self._fitted = False

    def plan(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> CallPlan:
        return CallPlan(calls=0)  # local computation: no paid calls

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document], outcome: Outcome) -> list[ScreenResult]:
        """Score = 100 x cosine; a callback is yes when the score reaches `callback_threshold`."""
        job_ids = list(jobs)
        corpus = [jobs[j].description for j in job_ids] + [d.text for d in documents]
        # hashing is stateless: spans of the corpus are counted in forked workers and stacked
        counts = sparse.vstack(
            [
                part
                for _, part in forked_spans(
                    lambda start, stop: self.counts.transform(corpus[start:stop]), len(corpus), ROWS_PER_PROCESS
                )
            ],
            format="csr",
        )
        if not self._fitted:
            self.idf.fit(counts)
            self._fitted = True
        matrix = self.idf.transform(counts)
        job_rows = {j: i for i, j in enumerate(job_ids)}
        docs = matrix[len(job_ids) :]
        job_index = np.array([job_rows[d.job_id] for d in documents])
        scores = np.asarray(docs.multiply(matrix[job_index]).sum(axis=1)).ravel() * 100.0
        if outcome == "callback":
            values = (scores >= self.callback_threshold).astype(float)
        else:
            values = scores
        return [
            ScreenResult(applicant_id=d.applicant_id, raw=f"{s:.4f}", value=float(v))
            for d, s, v in zip(documents, scores, values)
        ]
