"""scispacy's candidate generator and linker over our dictionary, run by *another* Python that has scispacy.

scispacy 0.6 pins ``numpy<2`` (this project runs on numpy 2), and its index builder needs
``scipy<1.11``, so it lives in its own environment. This file imports nothing from
spacy_sapbert: ``python scispacy_worker.py IN.json OUT.json`` reads the dictionary entities
and a request, and writes the answer:

* ``"mode": "candidates"`` (the default): scispacy's candidates for each of ``mentions``;
* ``"mode": "link"``: scispacy's ``EntityLinker`` over ``docs`` (text + gold character spans)
  and over ``strings`` (one span each), timed: mentions/s, load seconds, peak resident memory.

The index is built exactly as ``scispacy.candidate_generation.create_tfidf_ann_index`` builds
it (char_wb 3-grams, min_df=10, HNSW M=100, efConstruction=2000) except on ``threads`` threads
instead of its hard-coded 60; search uses scispacy's ``CandidateGenerator`` (efSearch 200) on
``threads`` threads. With ``index_cache`` the HNSW index is saved there (nmslib's own format)
and loaded by later runs over the same aliases; the vectorizer is fitted again each run (scispacy
stores it as a joblib pickle, which we do not write).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import time

INDEX_PARAMS = {"M": 100, "efConstruction": 2000, "post": 0}
EF_SEARCH = 200


class _Threads:
    """The index, searched on a fixed number of threads (CandidateGenerator would let nmslib take every core)."""

    def __init__(self, index, threads: int):
        self.index = index
        self.threads = threads

    def knnQueryBatch(self, queries, k=10, num_threads=0):  # noqa: N802 - nmslib's name
        return self.index.knnQueryBatch(queries, k=k, num_threads=self.threads)


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent).

    ``spacy_sapbert.machine.peak_rss_mb``'s rule, repeated because this runs where spacy_sapbert is not installed."""
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read())[1]) / 1024


def load_or_build_index(vectors, aliases, threads: int, cache):
    """The HNSW index over ``vectors`` and what it cost: built (and saved when ``cache`` is set) or loaded."""
    import nmslib

    key = hashlib.sha256(json.dumps([aliases, INDEX_PARAMS]).encode("utf8")).hexdigest()[:16]
    folder = os.path.join(cache, key) if cache else None
    index = nmslib.init(method="hnsw", space="cosinesimil_sparse", data_type=nmslib.DataType.SPARSE_VECTOR)
    if folder and os.path.isfile(os.path.join(folder, "meta.json")):
        start = time.perf_counter()
        index.loadIndex(os.path.join(folder, "index.bin"), load_data=True)
        with open(os.path.join(folder, "meta.json"), encoding="utf8") as f:
            meta = json.load(f)
        return index, {**meta, "index_load_seconds": time.perf_counter() - start, "index_cached": True}
    start = time.perf_counter()
    index.addDataPointBatch(vectors)
    index.createIndex({**INDEX_PARAMS, "indexThreadQty": threads}, print_progress=False)
    meta = {"index_build_seconds": time.perf_counter() - start, "index_build_threads": threads, "indexed_aliases": len(aliases)}
    if folder:  # a complete folder or none: write beside it, then rename
        tmp = f"{folder}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        index.saveIndex(os.path.join(tmp, "index.bin"), save_data=True)
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf8") as f:
            json.dump(meta, f)
        os.replace(tmp, folder)
    return index, {**meta, "index_cached": False}


def candidate_generator(request):
    """scispacy's generator over the request's entities, and what building/loading it cost."""
    import numpy
    from scispacy.candidate_generation import CandidateGenerator
    from scispacy.linking_utils import Entity, KnowledgeBase
    from sklearn.feature_extraction.text import TfidfVectorizer

    threads = int(request.get("threads", 1))
    start = time.perf_counter()
    kb = KnowledgeBase([Entity(e["concept_id"], e["canonical_name"], e["aliases"]) for e in request["entities"]])
    aliases = sorted(kb.alias_to_cuis)  # (a set's order varies between runs; the cached index must not)
    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 3), min_df=10, dtype=numpy.float32)
    vectors = vectorizer.fit_transform(aliases)
    nonempty = numpy.asarray(vectors.sum(axis=1) != 0).ravel()
    aliases = [a for a, keep in zip(aliases, nonempty) if keep]
    prepared = time.perf_counter()
    index, info = load_or_build_index(vectors[nonempty], aliases, threads, request.get("index_cache"))
    index.setQueryTimeParams({"efSearch": EF_SEARCH})
    generator = CandidateGenerator(ann_index=_Threads(index, threads), tfidf_vectorizer=vectorizer, ann_concept_aliases_list=aliases, kb=kb)
    info.update(kb_and_vectorizer_seconds=prepared - start, index_seconds=time.perf_counter() - start, indexed_aliases=len(aliases))
    return generator, info


def candidates(request, generator):
    start = time.perf_counter()
    batches = generator(request["mentions"], request["k"])
    out = [[{"concept_id": c.concept_id, "aliases": c.aliases, "similarities": c.similarities} for c in cands] for cands in batches]
    return {"candidates": out, "query_seconds": time.perf_counter() - start}


def link(request, generator):
    """Mentions/s of scispacy's EntityLinker (its defaults; no abbreviation resolution and no
    definition filter, since our dictionaries carry neither), median of ``repeats`` runs."""
    import spacy
    from scispacy.linking import EntityLinker
    from spacy.util import filter_spans

    nlp = spacy.blank("en")
    linker = EntityLinker(candidate_generator=generator, resolve_abbreviations=False, filter_for_definitions=False)

    def make(text, spans):
        doc = nlp.make_doc(text)
        made = [doc.char_span(s, e, label="Disease", alignment_mode="expand") for s, e in spans]
        doc.ents = filter_spans([s for s in made if s is not None])
        return doc

    def rate(docs):
        n = sum(len(d.ents) for d in docs)
        times = []
        for _ in range(int(request.get("repeats", 3))):
            start = time.perf_counter()
            for doc in docs:  # what nlp.pipe does with a component that has no pipe()
                linker(doc)
            times.append(time.perf_counter() - start)
        return n, n / statistics.median(times)

    docs = [make(d["text"], d["spans"]) for d in request["docs"]]
    strings = [make(s, [(0, len(s))]) for s in request["strings"]]
    n_mentions, mentions_per_s = rate(docs)
    n_distinct, distinct_per_s = rate(strings)
    return {
        "n_mentions": n_mentions,
        "mentions_per_s": mentions_per_s,
        "n_distinct_mentions": n_distinct,
        "distinct_mentions_per_s": distinct_per_s,
        "linked_fraction": sum(bool(e._.kb_ents) for d in docs for e in d.ents) / max(n_mentions, 1),
    }


def main(in_path: str, out_path: str) -> None:
    import scispacy

    with open(in_path, encoding="utf8") as f:
        request = json.load(f)
    generator, info = candidate_generator(request)
    mode = request.get("mode", "candidates")
    if mode not in ("candidates", "link"):
        sys.exit(f"{in_path}: unknown mode {mode!r} (candidates or link)")
    answer = candidates(request, generator) if mode == "candidates" else link(request, generator)
    answer.update(info, scispacy=scispacy.__version__, threads=int(request.get("threads", 1)), peak_rss_mb=round(peak_rss_mb(), 1))
    tmp = f"{out_path}.tmp"
    with open(tmp, "w", encoding="utf8") as f:
        json.dump(answer, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scispacy_worker.py IN.json OUT.json")
    main(sys.argv[1], sys.argv[2])
