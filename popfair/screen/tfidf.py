"""Lexical matcher: cosine similarity of TF-IDF vectors of job description and resume, x 100."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.feature_extraction import FeatureHasher
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

from popfair.core.constraints import Boolean, Interval, validate
from popfair.core.types import CallPlan, Document, Job, Outcome, ScreenResult
from popfair.runtime.parallel import forked_spans
from popfair.screen.base import Screener

ROWS_PER_PROCESS = 4_000  # documents counted per forked span (about 1 s of tokenising)
DEFAULT_TOKEN_PATTERN = HashingVectorizer().token_pattern


class _WordHashing(HashingVectorizer):
    """sklearn's HashingVectorizer with a quicker word analyzer for unigrams + bigrams: the same
    token list in the same order (unigrams after stop words, then each adjacent pair joined by a
    space, as `_word_ngrams` builds them). With the default lowercasing and token pattern, each
    distinct line is tokenised once (tokens never span a newline: the pattern matches word
    characters only, so a document's tokens are its lines' tokens in order) and resumes repeat
    most of their lines; the pairs are made by one `map` over `zip`. Other settings use sklearn's
    analyzer."""

    def build_analyzer(self) -> Any:
        analyzer = super().build_analyzer()  # sklearn's checks (stop-word consistency) still run
        if self.analyzer != "word" or tuple(self.ngram_range) != (1, 2):
            return analyzer
        decode, preprocess, tokenize = self.decode, self.build_preprocessor(), self.build_tokenizer()
        stop_words = self.get_stop_words() or frozenset()
        join = " ".join
        by_line = (
            self.lowercase
            and self.preprocessor is None
            and self.strip_accents is None
            and self.tokenizer is None
            and self.token_pattern == DEFAULT_TOKEN_PATTERN
        )
        lines: dict[str, list[str]] = {}

        def line_tokens(line: str) -> list[str]:
            found = lines.get(line)
            if found is None:
                found = lines[line] = [w for w in tokenize(line.lower()) if w not in stop_words]
            return found

        def analyze(doc: str) -> list[str]:
            text = decode(doc)
            if by_line:
                tokens = [w for line in text.split("\n") for w in line_tokens(line)]
            else:
                tokens = [w for w in tokenize(preprocess(text)) if w not in stop_words]
            return tokens + list(map(join, zip(tokens, tokens[1:])))

        return analyze


class TfidfScreener(Screener):
    """Resume-Matcher-style lexical score. Terms are hashed (no fixed vocabulary, so no word is
    ever dropped) and IDF weights are fit once, on the job descriptions plus the resumes of the
    first `screen` call (the case's own applicants), then reused: a document's score is a fixed
    function of (job, document) within a case, so counterfactual resumes scored later are measured
    on the same scale. A term unseen in that corpus gets the largest IDF, as the rarest word would."""

    parameter_constraints = {
        "sublinear_tf": Boolean(),
        "ngram_max": Interval(int, 1, None),
        "callback_threshold": Interval(float, 0, 100),
    }

    def __init__(
        self, name: str = "tfidf", sublinear_tf: bool = True, ngram_max: int = 2, callback_threshold: float = 20.0
    ) -> None:
        validate(
            self.parameter_constraints,
            {"sublinear_tf": sublinear_tf, "ngram_max": ngram_max, "callback_threshold": callback_threshold},
        )
        self.name = name
        self.callback_threshold = callback_threshold
        self.counts = _WordHashing(
            n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, ngram_max), stop_words="english"
        )
        self.idf = TfidfTransformer(sublinear_tf=sublinear_tf)  # smooth IDF, rows L2-normalised
        self._fitted = False

    def _count(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """`self.counts.transform(texts)` with each distinct term hashed once: the terms of all
        documents are factorised, the distinct ones hashed by sklearn's FeatureHasher (the
        HashingVectorizer's own hashing: same columns) and the counts assembled as the hasher does
        (ones, duplicates summed, indices sorted). Resumes share most of their terms, so this
        hashes about a fifth as many strings."""
        analyze = self.counts.build_analyzer()
        terms = [analyze(text) for text in texts]
        lengths = np.fromiter(map(len, terms), dtype=np.int64, count=len(terms))
        flat = np.fromiter(chain.from_iterable(terms), dtype=object, count=int(lengths.sum()))
        codes, distinct = pd.factorize(flat)
        hasher = FeatureHasher(n_features=self.counts.n_features, input_type="string", alternate_sign=False)
        columns = hasher.transform([[term] for term in distinct]).indices if len(distinct) else np.zeros(0, int)
        matrix = sparse.csr_matrix(
            (np.ones(len(flat)), columns[codes], np.concatenate([[0], np.cumsum(lengths)])),
            shape=(len(texts), self.counts.n_features),
        )
        matrix.sum_duplicates()  # also sorts the indices
        return matrix

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
                    lambda start, stop: self._count(corpus[start:stop]), len(corpus), ROWS_PER_PROCESS
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
