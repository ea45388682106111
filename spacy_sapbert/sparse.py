"""Character 3-gram TF-IDF over a KB's names: the sparse score of sparse + dense fusion (BioSyn;
xMEN's default ensemble) and the evaluation's TF-IDF baseline, one implementation on
scikit-learn's vectoriser.

It is derived from the names alone, so it is fitted where it is first needed instead of being
stored: the KB's fingerprint already pins what it was fitted on, and nothing is unpickled.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np


class CharTfidf:
    """TF-IDF vectors of character 3-grams within words (``char_wb``: each word padded with a space
    on both sides), L2-normalised, so a dot product is a cosine; the idf is the names'."""

    def __init__(self, names: Sequence[str], n: int = 3):
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(n, n), lowercase=False, dtype=np.float32)
        self.names = self.vectorizer.fit_transform(list(names)).tocsr()  # (names, n-grams)

    def transform(self, texts: Sequence[str]):
        """The texts' vectors (a CSR matrix, one row each)."""
        return self.vectorizer.transform(list(texts))

    def pair_scores(self, queries: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Cosine of each query with the names of its row of ``rows`` (n, k) name rows; -1 (no
        name) scores 0."""
        rows = np.asarray(rows)
        n, k = rows.shape
        if n == 0 or k == 0:
            return np.zeros((n, k), np.float32)
        q = self.transform(queries)
        picked = self.names[np.maximum(rows, 0).ravel()]
        scores = np.asarray(picked.multiply(q[np.repeat(np.arange(n), k)]).sum(axis=1), dtype=np.float32).reshape(n, k)
        scores[rows < 0] = 0.0
        return scores

    def rank(self, queries: Sequence[str], k: int, batch_size: int = 256) -> List[List[int]]:
        """The ``k`` name rows most similar to each query, best first (ties: the lower row first);
        a query sharing no 3-gram with any name gets none."""
        out: List[List[int]] = []
        names_t = self.names.T.tocsr()
        for start in range(0, len(queries), batch_size):
            scores = (self.transform(queries[start : start + batch_size]) @ names_t).tocsr()
            for i in range(scores.shape[0]):
                lo, hi = scores.indptr[i], scores.indptr[i + 1]
                data, cols = scores.data[lo:hi], scores.indices[lo:hi]
                order = np.lexsort((cols, -data))[:k]
                out.append(cols[order].tolist())
        return out
