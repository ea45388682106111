"""scispacy's candidate generator over our dictionary, run by *another* Python that has scispacy.

scispacy 0.6 pins ``numpy<2`` (this project runs on numpy 2), and its index builder needs
``scipy<1.11``, so it lives in its own environment. This file imports nothing from
spacy_sapbert: ``python scispacy_worker.py IN.json OUT.json`` reads the dictionary entities
and the mention strings, and writes scispacy's candidates for each mention.

The index is built exactly as ``scispacy.candidate_generation.create_tfidf_ann_index`` builds
it (char_wb 3-grams, min_df=10, HNSW M=100, efConstruction=2000) except on one thread
instead of its hard-coded 60; search uses scispacy's ``CandidateGenerator`` (efSearch 200,
one thread).
"""
from __future__ import annotations

import json
import sys
import time


class _OneThread:
    """The index, searched on one thread (CandidateGenerator would let nmslib take every core)."""

    def __init__(self, index):
        self.index = index

    def knnQueryBatch(self, queries, k=10, num_threads=1):  # noqa: N802 - nmslib's name
        return self.index.knnQueryBatch(queries, k=k, num_threads=1)


def main(in_path: str, out_path: str) -> None:
    import nmslib
    import numpy
    from scispacy.candidate_generation import CandidateGenerator
    from scispacy.linking_utils import Entity, KnowledgeBase
    from sklearn.feature_extraction.text import TfidfVectorizer

    with open(in_path, encoding="utf8") as f:
        request = json.load(f)
    start = time.perf_counter()
    kb = KnowledgeBase([Entity(e["concept_id"], e["canonical_name"], e["aliases"]) for e in request["entities"]])
    aliases = list(kb.alias_to_cuis)
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), min_df=10, dtype=numpy.float32)
    vectors = vectorizer.fit_transform(aliases)
    nonempty = numpy.asarray(vectors.sum(axis=1) != 0).ravel()
    aliases = [a for a, keep in zip(aliases, nonempty) if keep]
    index = nmslib.init(method="hnsw", space="cosinesimil_sparse", data_type=nmslib.DataType.SPARSE_VECTOR)
    index.addDataPointBatch(vectors[nonempty])
    index.createIndex({"M": 100, "indexThreadQty": 1, "efConstruction": 2000, "post": 0}, print_progress=False)
    index.setQueryTimeParams({"efSearch": 200})
    generator = CandidateGenerator(ann_index=_OneThread(index), tfidf_vectorizer=vectorizer, ann_concept_aliases_list=aliases, kb=kb)
    built = time.perf_counter()
    batches = generator(request["mentions"], request["k"])
    done = time.perf_counter()
    out = [[{"concept_id": c.concept_id, "aliases": c.aliases, "similarities": c.similarities} for c in cands] for cands in batches]
    import scispacy

    with open(out_path, "w", encoding="utf8") as f:
        json.dump(
            {
                "candidates": out,
                "index_seconds": built - start,
                "query_seconds": done - built,
                "scispacy": scispacy.__version__,
                "indexed_aliases": len(aliases),
            },
            f,
        )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scispacy_worker.py IN.json OUT.json")
    main(sys.argv[1], sys.argv[2])
