"""Lexical matcher: cosine similarity of TF-IDF vectors of job description and resume, x 100.

The scores of a `screen` call are kept in a content-addressed store beside the response cache
(`popfair.store.blobs`: `<cache_dir>/tfidf_scores.sqlite`, or the `cache_url` database), keyed by
the matcher's settings, the library versions, the jobs and every document's job and text (and, for
a later call, the first call's key: the IDF corpus): a rerun of a case reads its scores instead of
counting every resume again.

The IDF is fit on the job descriptions and the applicants of the first call, each applicant once:
its first document. A case passes its factual applicants before their counterfactual worlds, which
repeat their applicant and job ids, so the fit (and every factual score) is the same whether or
not the estimator asked for worlds (`estimator=counterfactual` and `estimator=pse_dml` score the
factual resumes alike).

A document is scored leaving itself out: where its text is one of the fit's documents, it gets the
score it would have had the fit not seen it (leave-one-out IDF, for its vector and its job's).
Otherwise the matcher would score its own fit corpus unlike new text: a factual resume's rare
surname counts in its own document frequency and weighs less than the same surname on an unseen
counterfactual resume, so every cross world would look worse than the factual resume it replaces
(nurse x race: design TE +0.012 against DML-UCA's -0.007)."""

from __future__ import annotations

import hashlib
import logging
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
from popfair.screen.base import Screener, one_answer_per_prompt
from popfair.screen.values import ValueMapping, scored_results
from popfair.store.blobs import (
    STORE_ERRORS,
    TFIDF_SCORES,
    BlobStore,
    content_key,
    installed_versions,
    open_blob_store_or_memory,
    pack_arrays,
    unpack_arrays,
)

log = logging.getLogger("popfair")
STORE_NAME = TFIDF_SCORES  # popfair.store.blobs.BLOB_STORES
SCHEMA = "tfidf-scores-v5"  # bump when what a stored score is changes (counting, weighting, the score)
LIBRARIES = ("scikit-learn", "scipy", "numpy", "popfair")

ROWS_PER_PROCESS = 4_000  # documents counted per forked span (about 0.5 s of tokenising)
DEFAULT_TOKEN_PATTERN = HashingVectorizer().token_pattern


class _WordHashing(HashingVectorizer):
    """sklearn's HashingVectorizer whose word analyzer reads a document line by line: a resume's
    lines are its units (a section title, a bullet, a contact line), so a word n-gram never spans a
    line break (a pair across two lines is not a phrase, and moving a section must not change the
    terms: renderer.placebo=reorder). A document's terms are sklearn's word analyzer applied to
    each line, in line order. With the default lowercasing and token pattern (`by_line`) each
    distinct line's terms (unigrams after stop words, then each adjacent pair joined by a space, as
    `_word_ngrams` builds them) are made once: resumes repeat most of their lines. Other analyzers
    (characters, a callable) are sklearn's."""

    def by_line(self) -> bool:
        """Whether a document's terms are its lines' unigrams and the pairs of adjacent ones."""
        return (
            self.analyzer == "word"
            and tuple(self.ngram_range) == (1, 2)
            and self.lowercase
            and self.preprocessor is None
            and self.strip_accents is None
            and self.tokenizer is None
            and self.token_pattern == DEFAULT_TOKEN_PATTERN
        )

    def build_analyzer(self) -> Any:
        analyzer = super().build_analyzer()  # sklearn's checks (stop-word consistency) still run
        if self.analyzer != "word":
            return analyzer
        decode, preprocess, tokenize = self.decode, self.build_preprocessor(), self.build_tokenizer()
        stop_words = self.get_stop_words() or frozenset()
        if not self.by_line():
            word_ngrams = self._word_ngrams

            def analyze_lines(doc: str) -> list[str]:
                return [
                    term
                    for line in decode(doc).split("\n")
                    for term in word_ngrams(tokenize(preprocess(line)), stop_words)
                ]

            return analyze_lines
        join = " ".join
        lines: dict[str, list[str]] = {}

        def line_terms(line: str) -> list[str]:
            found = lines.get(line)
            if found is None:
                tokens = [w for w in tokenize(line.lower()) if w not in stop_words]
                found = lines[line] = tokens + list(map(join, zip(tokens, tokens[1:])))
            return found

        def analyze(doc: str) -> list[str]:
            return [term for line in decode(doc).split("\n") for term in line_terms(line)]

        return analyze


class TfidfScreener(Screener):
    """Resume-Matcher-style lexical score. Terms are hashed (no fixed vocabulary, so no word is
    ever dropped) and IDF weights are fit once, on the job descriptions plus the resumes of the
    first `screen` call's applicants (the case's own, each once: its first document, so the
    counterfactual worlds screened with them are left out, `fitted_rows`), then reused: a
    document's score is a fixed function of (job, document) within a case, so counterfactual
    resumes are measured on the factual applicants' scale. A term unseen in that corpus gets the
    largest IDF, as the rarest word would."""

    costs_nothing = True  # offline and free to ask: the dry run pilots it (popfair.case.pilot)

    parameter_constraints = {
        "sublinear_tf": Boolean(),
        "ngram_max": Interval(int, 1, None),
        "callback_threshold": Interval(float, 0, 100),
    }

    def __init__(
        self,
        name: str = "tfidf",
        sublinear_tf: bool = True,
        ngram_max: int = 2,
        callback_threshold: float = 20.0,
        cache_dir: str | None = None,
        cache_url: str | None = None,
        samples: int = 1,
    ) -> None:
        one_answer_per_prompt(name, samples, "scores a document by arithmetic (TF-IDF similarity)")
        validate(
            self.parameter_constraints,
            {"sublinear_tf": sublinear_tf, "ngram_max": ngram_max, "callback_threshold": callback_threshold},
        )
        self.name = name
        self.callback_threshold = callback_threshold
        self.values = ValueMapping(range=(0.0, 100.0), callback_threshold=callback_threshold)
        self.counts = _WordHashing(
            n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, ngram_max), stop_words="english"
        )
        self.idf = TfidfTransformer(sublinear_tf=sublinear_tf)  # smooth IDF, rows L2-normalised
        self._fitted = False
        self.store_location = cache_url or cache_dir  # None for both: this process's memory
        self._idf_key: str | None = None  # key of the first call: the corpus the IDF is (to be) fit on
        self._idf_corpus: list[str] | None = None  # that corpus, while its scores came from the store
        self._fit_documents: set[bytes] = set()  # digests of the fit's documents (weighted leaving themselves out)
        self._fit_size = 0  # rows the IDF was fit on
        self._frequency = np.zeros(0, dtype=np.int64)  # and each term's document frequency there

    def _count(self, texts: Sequence[str]) -> sparse.csr_matrix:
        """`self.counts.transform(texts)` with each distinct term hashed once: the terms of all
        documents are factorised, the distinct ones hashed by sklearn's FeatureHasher (the
        HashingVectorizer's own hashing: same columns) and the counts assembled as the hasher does
        (ones, duplicates summed, indices sorted). Resumes share most of their terms, so this
        hashes about a fifth as many strings. With the default settings the terms are counted
        line by line (`_count_by_line`)."""
        self.counts.build_analyzer()  # sklearn's checks of the settings
        if self.counts.by_line():
            return _count_by_line(self.counts, texts)
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
        """Score = 100 x cosine; a callback is yes when the score reaches `callback_threshold`.
        Stored scores of the same call are read instead of computed (same floats)."""
        job_ids = list(jobs)
        corpus = [jobs[j].description for j in job_ids] + [d.text for d in documents]
        key = self._key(job_ids, corpus, documents)
        first, self._idf_key = self._idf_key is None, self._idf_key or key
        fit = fitted_rows(len(job_ids), documents) if first else None
        with self._store() as store:
            blob = store.get_many([key]).get(key)
            scores = unpack_arrays(blob).get("scores") if blob is not None else None
            if scores is not None and scores.shape == (len(documents),):
                if fit is not None:
                    self._idf_corpus = [corpus[i] for i in fit]  # fit only if a later call needs it
            else:
                scores = self._scores(job_ids, corpus, documents, fit)
                try:
                    store.put_many([(key, pack_arrays({"scores": scores}))])
                except STORE_ERRORS as exc:  # the store only saves time: the case goes on without it
                    log.warning("screener %s: scores not stored (%s): %s", self.name, store.location, exc)
        return scored_results(documents, scores, self.values, outcome)

    def _key(self, job_ids: list[str], corpus: list[str], documents: Sequence[Document]) -> str:
        """What the call's scores depend on: settings, versions, jobs, each document's job and
        text, and (after the first call) the first call's key, whose corpus fits the IDF."""
        digest = hashlib.sha256()
        for text in [*job_ids, *corpus, *(d.job_id for d in documents)]:
            data = text.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        settings = {
            "counts": {k: repr(v) for k, v in sorted(self.counts.get_params().items())},
            "idf": {k: repr(v) for k, v in sorted(self.idf.get_params().items())},
        }
        call = content_key(SCHEMA, settings, installed_versions(*LIBRARIES), len(job_ids), digest.digest())
        return call if self._idf_key is None else content_key(self._idf_key, call)

    def _store(self) -> BlobStore:
        return open_blob_store_or_memory(
            self.store_location, STORE_NAME, f"screener {self.name}", "every document is counted"
        )

    def _counted(self, corpus: list[str]) -> sparse.csr_matrix:
        # hashing is stateless: spans of the corpus are counted in forked workers and stacked
        return sparse.vstack(
            [
                part
                for _, part in forked_spans(
                    lambda start, stop: self._count(corpus[start:stop]), len(corpus), ROWS_PER_PROCESS
                )
            ],
            format="csr",
        )

    def _scores(
        self, job_ids: list[str], corpus: list[str], documents: Sequence[Document], fit: np.ndarray | None = None
    ) -> np.ndarray:
        """100 x cosine of each document with its job; the IDF is fit on the first call's corpus
        (its rows `fit` when this is the first call, else the kept `_idf_corpus`), and a document of
        the fit is weighted leaving itself out (module docstring)."""
        counts = self._counted(corpus)
        if not self._fitted:
            if self._idf_corpus is not None:
                fit_texts = self._idf_corpus
                fit_counts = self._counted(fit_texts)
            else:
                assert fit is not None, "the first call's scores fit the IDF on its corpus"
                fit_texts = [corpus[i] for i in fit]
                fit_counts = counts if len(fit) == counts.shape[0] else counts[fit]
            self.idf.fit(fit_counts)
            self._fit_size = fit_counts.shape[0]
            self._frequency = np.bincount(fit_counts.indices, minlength=fit_counts.shape[1])  # df of each term
            # a fit document is known by its terms: a text with the same bag of terms (a placebo edit
            # that reorders sections, renderer.placebo) is the same document to this matcher
            self._fit_documents = set(_bag_digests(fit_counts))
            self._fitted, self._idf_corpus = True, None
        bags = _bag_digests(counts, len(job_ids))
        own = np.fromiter((bag in self._fit_documents for bag in bags), bool, count=len(documents))
        job_rows = {j: i for i, j in enumerate(job_ids)}
        job_index = np.array([job_rows[d.job_id] for d in documents], dtype=int)
        n_jobs = len(job_ids)
        return 100.0 * _cosines(
            self._tf(counts, n_jobs, counts.shape[0]),
            self._tf(counts, 0, n_jobs),
            job_index,
            self.idf.idf_,
            self._frequency,
            self._fit_size,
            own,
        )

    def _tf(self, counts: sparse.csr_matrix, first: int, stop: int) -> sparse.csr_matrix:
        """Term frequencies of rows first..stop of `counts` as the TfidfTransformer weights them (1 +
        log count when sublinear): new values on the counts' own index arrays (no copy of them)."""
        begin, end = counts.indptr[first], counts.indptr[stop]
        data = counts.data[begin:end].astype(float, copy=True)
        if self.idf.sublinear_tf:  # most counts are 1, whose tf is 1: the logarithm of the others only
            more = data > 1
            data[more] = 1 + np.log(data[more])
        return sparse.csr_matrix(
            (data, counts.indices[begin:end], counts.indptr[first : stop + 1] - begin),
            shape=(stop - first, counts.shape[1]),
        )


def _bag_digests(counts: sparse.csr_matrix, first: int = 0) -> list[bytes]:
    """A digest of each row's bag of terms (hashed term indices and their counts) from row `first` on:
    two texts with the same terms, in any order, have the same digest."""
    counts = counts if counts.has_sorted_indices else counts.sorted_indices()
    indptr, indices, data = counts.indptr, counts.indices, counts.data
    blake = hashlib.blake2b
    return [
        blake(indices[a:b].tobytes() + data[a:b].tobytes(), digest_size=16).digest()
        for a, b in zip(indptr[first:-1].tolist(), indptr[first + 1 :].tolist())
    ]


def _cosines(
    docs: sparse.csr_matrix,
    jobs: sparse.csr_matrix,
    job_index: np.ndarray,
    idf: np.ndarray,
    frequency: np.ndarray,
    n_fit: int,
    own: np.ndarray,
) -> np.ndarray:
    """Cosine of each document's tf-idf vector with its job's (`job_index`), both weighted by the
    IDF the document is scored with: the fit's smooth IDF, ln((1 + n) / (1 + df(t))) + 1, or for a
    document of the fit (`own`) the IDF of the fit without it, ln(n / (1 + df(t) - [t in it])) + 1:
    the score it would get had the fit not seen it (`frequency`: the fit's df, `n_fit`: its rows).
    With no `own` document this is sklearn's TfidfTransformer with L2 rows, then their dot product."""
    without = np.log(n_fit / (1 + frequency)) + 1  # the fit without one document: n - 1 rows
    own_terms = np.log(n_fit / np.maximum(frequency, 1)) + 1  # ... and one document fewer for its terms
    # matrix-vector products only (no per-entry arrays): a document's sum over its terms of tf (or
    # tf squared, or 1) times a per-term weight, for both weightings, then picked by `own`
    squared = sparse.csr_matrix((docs.data**2, docs.indices, docs.indptr), shape=docs.shape)
    present = sparse.csr_matrix((np.ones_like(docs.data), docs.indices, docs.indptr), shape=docs.shape)
    doc_norm = np.where(own, squared @ own_terms**2, squared @ idf**2)
    dot, job_norm = np.empty(docs.shape[0]), np.empty(docs.shape[0])
    for j in np.unique(job_index):
        rows = np.flatnonzero(job_index == j)
        whole = len(rows) == docs.shape[0]  # one job (the usual case): no row copies
        start, stop = jobs.indptr[j], jobs.indptr[j + 1]
        terms, tf_job = jobs.indices[start:stop], jobs.data[start:stop]

        def spread(values: np.ndarray, terms: np.ndarray = terms) -> np.ndarray:
            vector = np.zeros(docs.shape[1])
            vector[terms] = values
            return vector

        mine = own[rows]
        part, part_present = (docs, present) if whole else (docs[rows], present[rows])
        dot[rows] = np.where(
            mine, part @ spread(tf_job * own_terms[terms] ** 2), part @ spread(tf_job * idf[terms] ** 2)
        )
        # the job's own norm at the document's IDF: the terms the document lacks at `without`, the
        # terms it has at `own_terms`
        correction = part_present @ spread(tf_job**2 * (own_terms[terms] ** 2 - without[terms] ** 2))
        job_norm[rows] = np.where(
            mine, tf_job**2 @ without[terms] ** 2 + correction, np.full(len(rows), tf_job**2 @ idf[terms] ** 2)
        )
    scale = np.sqrt(doc_norm * job_norm)
    return np.divide(dot, scale, out=np.zeros_like(dot), where=scale > 0)


def fitted_rows(n_jobs: int, documents: Sequence[Document]) -> np.ndarray:
    """The rows of a call's corpus (its `n_jobs` job descriptions, then `documents`) that the IDF is
    fit on: every job and each (applicant, job)'s first document. A counterfactual world's document
    repeats its factual applicant's ids after it, so only factual applicants count."""
    repeated = pd.Series([(d.applicant_id, d.job_id) for d in documents], dtype=object).duplicated(keep="first")
    return np.concatenate([np.arange(n_jobs), n_jobs + np.flatnonzero(~repeated.to_numpy())])


def _count_by_line(counts: _WordHashing, texts: Sequence[str]) -> sparse.csr_matrix:
    """`counts.transform(texts)` (unigrams and bigrams of the default analyzer) from each distinct
    line's words: a document's unigrams are its lines' words (stop words dropped) and its bigrams
    the pairs of adjacent words inside each line (none across a line break). Resumes repeat most of
    their lines, so each distinct line is tokenised once, distinct words and pairs are hashed once,
    and the rest is array arithmetic: about half the CPU of counting every term of every document
    (tests/test_tfidf_counts.py compares it with sklearn's, line by line)."""
    tokenize, stop = counts.build_tokenizer(), counts.get_stop_words() or frozenset()
    split = [counts.decode(text).split("\n") for text in texts]
    per_doc = np.fromiter(map(len, split), np.int64, len(split))
    occurrence, lines = pd.factorize(np.fromiter(chain.from_iterable(split), object, int(per_doc.sum())))
    words = [tokenize(line.lower()) for line in lines]
    per_line = np.fromiter(map(len, words), np.int64, len(words))
    word, vocab = pd.factorize(np.fromiter(chain.from_iterable(words), object, int(per_line.sum())))
    kept = np.fromiter((w not in stop for w in vocab), bool, len(vocab))[word]
    line_of, word = np.repeat(np.arange(len(lines)), per_line)[kept], word[kept]
    shape = (len(texts), counts.n_features)
    if not len(word):
        return sparse.csr_matrix(shape, dtype=np.float64)
    inside = line_of[1:] == line_of[:-1]  # adjacent kept words of one line: a pair
    n_words, n_pairs = (
        np.bincount(line_of, minlength=len(lines)),
        np.bincount(line_of[1:][inside], minlength=len(lines)),
    )
    starts, pair_starts = np.cumsum(n_words) - n_words, np.cumsum(n_pairs) - n_pairs
    doc_of = np.repeat(np.arange(len(texts)), per_doc)
    pairs, pair = np.unique(word[:-1][inside] * len(vocab) + word[1:][inside], return_inverse=True)
    pair = pair.ravel()
    hasher = FeatureHasher(n_features=counts.n_features, input_type="string", alternate_sign=False)
    word_column = hasher.transform([[w] for w in vocab]).indices
    pair_terms = [f"{vocab[k // len(vocab)]} {vocab[k % len(vocab)]}" for k in pairs.tolist()]
    pair_column = hasher.transform([[t] for t in pair_terms]).indices if len(pair_terms) else np.zeros(0, np.int32)
    rows = np.concatenate([np.repeat(doc_of, n_words[occurrence]), np.repeat(doc_of, n_pairs[occurrence])])
    columns = np.concatenate(
        [
            word_column[word[_ranges(starts[occurrence], n_words[occurrence])]],
            pair_column[pair[_ranges(pair_starts[occurrence], n_pairs[occurrence])]],
        ]
    )
    matrix = sparse.csr_matrix((np.ones(len(rows)), (rows, columns)), shape=shape)
    matrix.sum_duplicates()  # also sorts the indices
    return matrix


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenated `arange(s, s + n)` of each start s and length n."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if len(ends) else 0)
