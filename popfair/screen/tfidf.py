"""Lexical matcher: cosine similarity of TF-IDF vectors of job description and resume, x 100."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from popfair.types import Document, Job, ScreenResult


class TfidfScreener:
    """Resume-Matcher-style lexical score. The vocabulary and IDF are fit on the job descriptions
    plus all resumes of the case, so the score is deterministic for a given case."""

    outcome = "score"

    def __init__(self, name: str = "tfidf", sublinear_tf: bool = True, ngram_max: int = 2) -> None:
        self.name = name
        self.vectorizer = TfidfVectorizer(sublinear_tf=sublinear_tf, ngram_range=(1, ngram_max),
                                          stop_words="english")

    def screen(self, jobs: Mapping[str, Job], documents: Sequence[Document]) -> list[ScreenResult]:
        job_ids = list(jobs)
        corpus = [jobs[j].description for j in job_ids] + [d.text for d in documents]
        matrix = normalize(self.vectorizer.fit_transform(corpus))
        job_rows = {j: i for i, j in enumerate(job_ids)}
        docs = matrix[len(job_ids):]
        job_index = np.array([job_rows[d.job_id] for d in documents])
        scores = np.asarray(docs.multiply(matrix[job_index]).sum(axis=1)).ravel() * 100.0
        return [ScreenResult(applicant_id=d.applicant_id, raw=f"{s:.4f}", value=float(s))
                for d, s in zip(documents, scores)]
