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
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from ..kb import ConceptKB
from ..sparse import CharTfidf

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


class TfidfRanker:
    """Cosine similarity of character 3-gram TF-IDF vectors (BioSyn's sparse side, scispacy's
    linker): the linker's own sparse scorer (``sparse.CharTfidf``) ranking every name."""

    def __init__(self, names: Sequence[str], n: int = 3):
        self.tfidf = CharTfidf(names, n)

    def rank(self, queries: Sequence[str], k: int, batch_size: int = 256) -> List[List[int]]:
        return self.tfidf.rank(queries, k, batch_size)


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
