"""The tfidf screener's counting (line-cached analyzer, distinct terms hashed once) equals sklearn's."""

from __future__ import annotations

from sklearn.feature_extraction.text import HashingVectorizer

from popfair.screen.tfidf import TfidfScreener, _WordHashing

DOCS = [
    "Registered Nurse\nICU, telemetry and the ER\n\n- Patient education\n- Patient education",
    "ΣΊΣΥΦΟΣ Ωmega naïve café\nRN BSN 2019-2024 | e-mail: a.b@example.com\nthe and of",
    "",
    "single",
    "Cross-line\nbigrams join lines\nand stop words are dropped before pairing",
]


def test_analyzer_and_counts_equal_sklearns():
    options = dict(n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, 2), stop_words="english")
    reference = HashingVectorizer(**options)
    fast = _WordHashing(**options)
    slow_analyze, fast_analyze = reference.build_analyzer(), fast.build_analyzer()
    for doc in DOCS * 2:  # the second pass reads the line cache
        assert fast_analyze(doc) == slow_analyze(doc)
    counts = TfidfScreener()._count(DOCS)
    expected = reference.transform(DOCS)
    assert counts.shape == expected.shape and (counts != expected).nnz == 0
    assert counts.has_sorted_indices


def test_other_settings_fall_back_to_sklearns_analyzer():
    options = dict(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", lowercase=False)
    assert _WordHashing(**options).build_analyzer()(DOCS[0]) == HashingVectorizer(**options).build_analyzer()(DOCS[0])
    options = dict(ngram_range=(1, 3))
    assert _WordHashing(**options).build_analyzer()(DOCS[4]) == HashingVectorizer(**options).build_analyzer()(DOCS[4])
