"""The tfidf screener's counting (line-cached analyzer, distinct terms hashed once) equals sklearn's
applied to each line of a document: a word pair never spans a line break."""

from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer

from popfair.screen.tfidf import TfidfScreener, _WordHashing

DOCS = [
    "Registered Nurse\nICU, telemetry and the ER\n\n- Patient education\n- Patient education",
    "ΣΊΣΥΦΟΣ Ωmega naïve café\nRN BSN 2019-2024 | e-mail: a.b@example.com\nthe and of",
    "",
    "single",
    "Cross-line\nbigrams never join lines\nand stop words are dropped before pairing",
]


def per_line(analyze):
    """A document's terms as sklearn's analyzer finds them in each of its lines, in line order."""
    return lambda doc: [term for line in doc.split("\n") for term in analyze(line)]


def summed_over_lines(vectorizer: HashingVectorizer, docs: list[str]) -> sparse.csr_matrix:
    """sklearn's counts of every line of every document, summed per document."""
    lines = [doc.split("\n") for doc in docs]
    owner = np.repeat(np.arange(len(docs)), [len(parts) for parts in lines])
    by_line = vectorizer.transform([line for parts in lines for line in parts])
    summing = sparse.csr_matrix((np.ones(len(owner)), (owner, np.arange(len(owner)))), shape=(len(docs), len(owner)))
    return (summing @ by_line).tocsr()


def test_analyzer_and_counts_equal_sklearns():
    options = dict(n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, 2), stop_words="english")
    reference = HashingVectorizer(**options)
    fast = _WordHashing(**options)
    slow_analyze, fast_analyze = per_line(reference.build_analyzer()), fast.build_analyzer()
    for doc in DOCS * 2:  # the second pass reads the line cache
        assert fast_analyze(doc) == slow_analyze(doc)
    assert "line bigrams" not in fast_analyze(DOCS[4]) and "lines stop" not in fast_analyze(DOCS[4])
    assert "patient education" in fast_analyze(DOCS[0])
    counts = TfidfScreener()._count(DOCS)
    expected = summed_over_lines(reference, DOCS)
    assert counts.shape == expected.shape and (counts != expected).nnz == 0
    assert counts.has_sorted_indices


def test_other_settings_use_sklearns_analyzer_line_by_line():
    """Other word settings (n-gram range, token pattern, case, accents) are sklearn's analyzer on
    each line; a character analyzer is sklearn's own; the matcher's counts for words only and for
    triples equal sklearn's summed over lines."""
    for options in [
        dict(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b", lowercase=False),
        dict(ngram_range=(1, 3)),
        dict(ngram_range=(1, 1), stop_words="english"),
        dict(ngram_range=(2, 3), strip_accents="unicode"),
    ]:
        for doc in DOCS:
            expected = per_line(HashingVectorizer(**options).build_analyzer())(doc)
            assert _WordHashing(**options).build_analyzer()(doc) == expected
    assert "bigrams never join" in _WordHashing(ngram_range=(1, 3)).build_analyzer()(DOCS[4])
    assert "join lines and" not in _WordHashing(ngram_range=(1, 3)).build_analyzer()(DOCS[4])
    options = dict(analyzer="char", ngram_range=(2, 3))
    assert _WordHashing(**options).build_analyzer()(DOCS[4]) == HashingVectorizer(**options).build_analyzer()(DOCS[4])
    for ngram_max in (1, 3):
        screener = TfidfScreener(ngram_max=ngram_max)
        expected = summed_over_lines(HashingVectorizer(**screener.counts.get_params()), DOCS)
        counts = screener._count(DOCS)
        assert counts.shape == expected.shape and (counts != expected).nnz == 0


def test_stored_scores_are_read_back_and_a_later_call_scores_as_without_the_store(tmp_path):
    """A rerun's screener reads each call's scores from <cache_dir>/tfidf_scores.sqlite (the same
    floats, nothing counted); a later call after a read fits the IDF on the first call's corpus, so
    it scores as the screener that counted everything; a changed text is not served from the store."""
    import sqlite3

    from popfair.core.types import Document, Job

    jobs = {"j": Job(job_id="j", title="Nurse", description="registered nurse patient care ICU telemetry")}
    docs = [Document(applicant_id=str(i), job_id="j", kind="text", text=t) for i, t in enumerate(DOCS)]
    later = [Document(applicant_id="x", job_id="j", kind="text", text="nurse with telemetry and ICU shifts")]
    plain = TfidfScreener()  # memory only
    expected = [r.value for r in plain.screen(jobs, docs, "score")], plain.screen(jobs, later, "score")[0].value
    first = TfidfScreener(cache_dir=str(tmp_path))
    assert [r.value for r in first.screen(jobs, docs, "score")] == expected[0]
    with sqlite3.connect(tmp_path / "tfidf_scores.sqlite") as db:
        assert db.execute("select count(*) from blobs").fetchone()[0] == 1
    rerun = TfidfScreener(cache_dir=str(tmp_path))
    rerun._count = None  # type: ignore[assignment]  # a read must not count
    assert [r.raw for r in rerun.screen(jobs, docs, "score")] == [r.raw for r in first.screen(jobs, docs, "score")]
    assert [r.value for r in rerun.screen(jobs, docs, "callback")] == [float(v >= 20.0) for v in expected[0]]
    del rerun._count  # the class's own counting again
    assert rerun.screen(jobs, later, "score")[0].value == expected[1]
    changed = [*docs[:-1], Document(applicant_id="4", job_id="j", kind="text", text="nurse ICU")]
    assert TfidfScreener(cache_dir=str(tmp_path)).screen(jobs, changed, "score")[-1].value > 0


def test_a_matchers_callbacks_follow_the_one_value_rule():
    """A TF-IDF callback is the rule an HTTP or file screener applies to a score (screen.values):
    each score read by ValueMapping.parse with the matcher's threshold gives the matcher's callback,
    a score exactly at the threshold included."""
    from popfair.core.types import Document, Job
    from popfair.screen.values import ValueMapping

    jobs = {"j": Job(job_id="j", title="Nurse", description="registered nurse patient care ICU telemetry")}
    docs = [Document(applicant_id=str(i), job_id="j", kind="text", text=t) for i, t in enumerate(DOCS)]
    scores = [r.value for r in TfidfScreener().screen(jobs, docs, "score")]
    at_one = sorted(s for s in scores if s > 0)[0]  # a threshold equal to a score: that one is a callback
    for threshold in (20.0, at_one):
        callbacks = [r.value for r in TfidfScreener(callback_threshold=threshold).screen(jobs, docs, "callback")]
        rule = ValueMapping(callback_threshold=threshold)
        assert callbacks == [rule.parse(s, "callback")[0] for s in scores]
        assert 0 < sum(callbacks) < len(docs)


def test_line_by_line_counts_equal_sklearns_on_resumes_sharing_lines():
    """Documents made of shared lines (repeated, empty, stop words only, one word), in every
    order: the line-by-line counts equal sklearn's HashingVectorizer applied to each line and
    summed (no pair across lines, with or without empty lines between them); a reordering of a
    document's lines has the same counts; a corpus without words gives an empty matrix."""
    from popfair.screen.tfidf import _count_by_line

    lines = [*DOCS[0].split("\n"), "the and of", "", "single", "ICU nurse ICU nurse", "Café naïve", "x y z"]
    rng = np.random.default_rng(0)
    docs = ["\n".join(rng.choice(lines, size=rng.integers(0, 9))) for _ in range(300)] + DOCS
    options = dict(n_features=2**20, alternate_sign=False, norm=None, ngram_range=(1, 2), stop_words="english")
    fast = _WordHashing(**options)
    assert fast.by_line()
    counts, expected = _count_by_line(fast, docs), summed_over_lines(HashingVectorizer(**options), docs)
    assert counts.shape == expected.shape and (counts != expected).nnz == 0
    whole = HashingVectorizer(**options).transform(docs)  # sklearn on whole documents pairs across lines
    assert (counts != whole).nnz > 0 and counts.sum() < whole.sum()
    shuffled = ["\n".join(rng.permutation(doc.split("\n"))) for doc in docs]
    assert (_count_by_line(fast, shuffled) != counts).nnz == 0
    assert counts.has_sorted_indices and counts.has_canonical_format
    assert _count_by_line(fast, ["", "the and\nof", "x"]).nnz == 0
    assert not _WordHashing(ngram_range=(1, 3)).by_line() and not _WordHashing(lowercase=False).by_line()
