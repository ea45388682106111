"""Baseline name rankers for the evaluation harness: exact match, character 3-gram TF-IDF and
scispacy's candidate generator (run in its own environment).

Each ranker sees the same dictionary names (the KB's normalised name rows) and returns, per
query string, name rows best first, so every system is scored by the same metric code. The
encoder itself is not a ranker here: it is evaluated through ``sapbert_linker`` (``gold_spans.py``).
"""
from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
from scipy import sparse

from ..kb import ConceptKB

# The program that runs under the scispacy environment lives with the benchmarks (it imports
# nothing from this package); the scispacy baseline runs from a source checkout.
SCISPACY_WORKER = Path(__file__).resolve().parents[2] / "benchmarks" / "scispacy_worker.py"


class ExactMatchRanker:
    """The name row spelled exactly like the query (after normalisation), or nothing."""

    def __init__(self, kb: ConceptKB):
        self.kb = kb

    def rank(self, queries: Sequence[str], k: int) -> List[List[int]]:
        rows = (self.kb.row_of_name(q) for q in queries)
        return [[] if r is None else [r] for r in rows]


def char_ngrams(text: str, n: int = 3) -> List[str]:
    """Character n-grams of each word padded with a space on both sides (sklearn's ``char_wb``)."""
    grams: List[str] = []
    for word in text.split():
        padded = f" {word} "
        if len(padded) <= n:
            grams.append(padded)
        else:
            grams.extend(padded[i : i + n] for i in range(len(padded) - n + 1))
    return grams


class TfidfRanker:
    """Cosine similarity of character 3-gram TF-IDF vectors: BioSyn's sparse side, scispacy's linker."""

    def __init__(self, names: Sequence[str], n: int = 3):
        self.n = n
        self.vocab: Dict[str, int] = {}
        rows = [Counter(char_ngrams(name, n)) for name in names]
        for counts in rows:
            for g in counts:
                self.vocab.setdefault(g, len(self.vocab))
        counts_matrix = self._count_matrix(rows)
        df = np.bincount(counts_matrix.indices, minlength=len(self.vocab))
        self.idf = (np.log((1 + len(names)) / (1 + df)) + 1.0).astype(np.float32)
        self.matrix_t = self._weigh(counts_matrix).T.tocsr()

    def _count_matrix(self, rows: Sequence[Counter]) -> sparse.csr_matrix:
        indptr = np.zeros(len(rows) + 1, np.int64)
        indices: List[int] = []
        data: List[float] = []
        for i, counts in enumerate(rows):
            known = [(self.vocab[g], c) for g, c in counts.items() if g in self.vocab]
            indices.extend(j for j, _ in known)
            data.extend(c for _, c in known)
            indptr[i + 1] = len(indices)
        return sparse.csr_matrix(
            (np.asarray(data, np.float32), np.asarray(indices, np.int64), indptr), shape=(len(rows), len(self.vocab))
        )

    def _weigh(self, counts: sparse.csr_matrix) -> sparse.csr_matrix:
        weighted = counts.multiply(self.idf[None, :]).tocsr()
        norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        return sparse.diags(1.0 / norms).dot(weighted).tocsr().astype(np.float32)

    def rank(self, queries: Sequence[str], k: int, batch_size: int = 64) -> List[List[int]]:
        out: List[List[int]] = []
        for start in range(0, len(queries), batch_size):
            batch = [Counter(char_ngrams(q, self.n)) for q in queries[start : start + batch_size]]
            scores = (self._weigh(self._count_matrix(batch)) @ self.matrix_t).tocsr()
            for i in range(scores.shape[0]):
                row = scores.getrow(i)
                if row.nnz == 0:
                    out.append([])
                    continue
                top = np.argsort(-row.data, kind="stable")[:k]
                out.append(row.indices[top].tolist())
        return out


def scispacy_entities(kb: ConceptKB) -> List[Dict[str, object]]:
    """The KB as scispacy's entities: each concept with its name rows as aliases."""
    aliases: List[List[str]] = [[] for _ in kb.concept_ids]
    for row, name in enumerate(kb.names):
        for c in kb.concepts_of_name(row):
            aliases[int(c)].append(name)
    return [
        {"concept_id": cid, "canonical_name": names[0], "aliases": names[1:]}
        for cid, names in zip(kb.concept_ids, aliases)
        if names
    ]


def run_scispacy_worker(python: Union[str, Path], request: Dict[str, object]) -> Dict[str, object]:
    """Send ``request`` to ``benchmarks/scispacy_worker.py`` under ``python`` (an environment with
    scispacy) and return its answer."""
    if not SCISPACY_WORKER.is_file():
        raise FileNotFoundError(f"{SCISPACY_WORKER}: the scispacy baseline runs from a source checkout of spacy-sapbert")
    with tempfile.TemporaryDirectory(prefix="scispacy-") as tmp:
        request_path, reply = Path(tmp) / "in.json", Path(tmp) / "out.json"
        request_path.write_text(json.dumps(request), encoding="utf8")
        subprocess.run([str(python), str(SCISPACY_WORKER), str(request_path), str(reply)], check=True)
        return json.loads(reply.read_text(encoding="utf8"))


class ScispacyRanker:
    """scispacy's TF-IDF candidate generator over the same names, run in ``python`` (an
    environment with scispacy; see ``scispacy_worker.py``). Each candidate concept is mapped
    back to its best-matching alias, i.e. one of our name rows, so the metric is the same."""

    def __init__(self, kb: ConceptKB, python: Union[str, Path], index_cache: Optional[Union[str, Path]] = None):
        self.kb = kb
        self.python = str(python)
        self.index_cache = index_cache  # where the worker keeps its HNSW index between runs
        self.info: Dict[str, object] = {}

    def rank(self, queries: Sequence[str], k: int) -> List[List[int]]:
        request: Dict[str, object] = {"entities": scispacy_entities(self.kb), "mentions": list(queries), "k": k}
        if self.index_cache is not None:
            request["index_cache"] = str(Path(self.index_cache).resolve())
        answer = run_scispacy_worker(self.python, request)
        self.info = {key: value for key, value in answer.items() if key != "candidates"}
        self.info["worker_peak_rss_mb"] = answer.get("peak_rss_mb")
        out: List[List[int]] = []
        for candidates in answer["candidates"]:
            best = sorted(
                ((max(c["similarities"]), c["aliases"][int(np.argmax(c["similarities"]))]) for c in candidates),
                key=lambda pair: -pair[0],
            )
            rows = (self.kb.row_of_name(alias) for _, alias in best)
            out.append(list(dict.fromkeys(r for r in rows if r is not None)))
        return out
