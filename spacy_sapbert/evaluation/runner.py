"""One evaluation: a benchmark, a dictionary, a system → lenient/strict accuracy, speed, memory.

Two dictionaries per benchmark. ``paper`` is BioSyn's test dictionary, which SapBERT used: the
ontology plus the preprocessed train and dev mentions with their gold ids. ``ontology`` is the
ontology alone — what a user linking new text has.
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from ..fileio import write_json
from ..kb import ConceptKB
from ..normalize import normalize_name
from ..records import ConceptRecord
from . import datasets
from .baselines import DenseRanker, ExactMatchRanker, ScispacyRanker, TfidfRanker
from .metrics import QueryScores, score_queries, summarize
from .preprocess import Query, clean_text, load_spelling_fixes, preprocess_documents

DICTIONARIES = ("paper", "ontology")
SYSTEMS = ("exact", "tfidf", "encoder", "scispacy")
NAME_DEPTH = 50  # names retrieved per string: enough for 5 distinct concept predictions
PathLike = Union[str, Path]


def load_queries(dataset: str, split: str, data_dir: PathLike = datasets.DEFAULT_DATA_DIR) -> Tuple[List[Query], Dict[str, int]]:
    """The preprocessed queries of one split and the count of every preprocessing step."""
    path = datasets.spelling_path(dataset, data_dir)
    spelling = load_spelling_fixes(path) if path else None
    return preprocess_documents(datasets.load_split(dataset, split, data_dir), spelling)


def _cleaned(records: Iterable[ConceptRecord]) -> Iterator[ConceptRecord]:
    """Dictionary names get the queries' lower-casing and punctuation removal (not the spell-check)."""
    for rec in records:
        names = [n for n in (clean_text(x) for x in rec.all_names) if n]
        if names:
            yield ConceptRecord(rec.id, names[0], names[1:], rec.types, rec.xrefs, rec.sources)


def _primary_ids(records: Sequence[ConceptRecord]) -> Dict[str, str]:
    """Alternative id → the concept listing it (MEDIC's ``114500|D015179`` lines), where unique."""
    primary = {r.id for r in records}
    owners: Dict[str, Set[str]] = {}
    for r in records:
        for x in r.xrefs:
            if x not in primary:
                owners.setdefault(x, set()).add(r.id)
    return {x: next(iter(ids)) for x, ids in owners.items() if len(ids) == 1}


def _mention_records(queries: Iterable[Query], primary_of: Dict[str, str]) -> Iterator[ConceptRecord]:
    """Each training mention as a name of each of its gold concepts (a composite mention's
    whole string goes to all its concepts, as in BioSyn's dictionary after punctuation removal).

    A gold id that is another concept's alternative id names that concept: BioSyn's dictionary
    keeps ``114500|D015179`` as one entry, and so must we, or "colorectal cancer" would look
    ambiguous between two ids of one concept.
    """
    for q in queries:
        for gold_id in dict.fromkeys(primary_of.get(g, g) for g in q.gold):
            yield ConceptRecord(gold_id, q.name, sources=[("mention", f"{q.doc_id}:{q.start}-{q.end}")])


def build_dictionary(
    dataset: str,
    dictionary: str,
    train_queries: Sequence[Query],
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    resources_dir: PathLike = datasets.DEFAULT_RESOURCES_DIR,
) -> ConceptKB:
    """The name table a benchmark is evaluated against (``paper`` or ``ontology``)."""
    if dictionary not in DICTIONARIES:
        raise ValueError(f"dictionary must be one of {DICTIONARIES}, got {dictionary!r}")
    records = list(_cleaned(datasets.dictionary_records(dataset, data_dir, resources_dir)))
    if dictionary == "paper":
        records += _mention_records(train_queries, _primary_ids(records))
    return ConceptKB.from_records(records, on_duplicate="merge")


def concept_aliases(kb: ConceptKB) -> Dict[str, List[str]]:
    """Alternative ids that identify a concept (MEDIC's ``ID|altID`` lines), as BioSyn's
    dictionary lists them with the concept and its ``check_label`` accepts them."""
    return {cid: list(x) for cid, x in zip(kb.concept_ids, kb.concept_xrefs) if x}


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


def _set_threads(threads: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def _make_ranker(system: str, kb: ConceptKB, encoder_path, batch_size, precision, device, cache_dir, progress):
    """The ranker for ``system`` and what to record about it; ``encoder_path`` is the
    scispacy environment's python for ``scispacy``."""
    if system == "exact":
        return ExactMatchRanker(kb), {}
    if system == "tfidf":
        return TfidfRanker(kb.names), {"ngram": 3}
    if system == "encoder":
        from ..encoder import SapEncoder

        encoder = SapEncoder.load(encoder_path, device=device, precision=precision)
        ranker = DenseRanker(encoder, kb.names, batch_size=batch_size, cache_dir=cache_dir, progress=progress)
        return ranker, {"encoder": encoder.describe()}
    if system == "scispacy":
        if encoder_path is None:
            raise ValueError("system 'scispacy' needs the python of an environment with scispacy as encoder_path")
        index_cache = None if cache_dir is None else Path(cache_dir) / "scispacy-index"
        return ScispacyRanker(kb, encoder_path, index_cache=index_cache), {}
    raise ValueError(f"system must be one of {SYSTEMS}, got {system!r}")


def _rankings(queries: Sequence[Query], rows: Sequence[Sequence[int]], kb: ConceptKB) -> List[List[List[List[str]]]]:
    """Per query, per searched part: the ranked names, each as its concept ids."""
    out, at = [], 0
    for q in queries:
        parts = rows[at : at + len(q.parts)]
        out.append([[[kb.concept_ids[c] for c in kb.concepts_of_name(r)] for r in ranked] for ranked in parts])
        at += len(q.parts)
    return out


def _seen_breakdown(scores: QueryScores, test: Sequence[Query], seen: Sequence[Query]) -> Dict[str, object]:
    """Rates for test queries whose string / all of whose concepts occur in train+dev, and the rest."""
    seen_names = {q.name for q in seen}
    seen_ids = {g for q in seen for g in q.gold}
    masks = {
        "string": np.array([q.name in seen_names for q in test], bool),
        "concept": np.array([set(q.gold) <= seen_ids for q in test], bool),
    }
    out: Dict[str, object] = {}
    for key, mask in masks.items():
        out[f"{key}_seen"] = summarize(scores, mask)
        out[f"{key}_unseen"] = summarize(scores, ~mask)
    return out


def evaluate(
    dataset: str,
    encoder_path: Optional[PathLike] = None,
    dictionary: str = "paper",
    system: str = "encoder",
    *,
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    resources_dir: PathLike = datasets.DEFAULT_RESOURCES_DIR,
    cache_dir: Optional[PathLike] = "corpus/cache",
    batch_size: int = 128,
    precision: str = "fp32",
    device: str = "cpu",
    threads: int = 1,
    progress: bool = False,
) -> Dict[str, object]:
    """Evaluate one system on the test split of ``dataset``; accuracies are in percent.

    ``system``: ``encoder`` (``encoder_path``; None = the offline MiniLM base model), ``exact``,
    ``tfidf``, or ``scispacy`` (``encoder_path`` = a python with scispacy installed).
    ``mentions_per_s`` times searching the test queries (encoding included, dictionary encoding
    and index building excluded); ``peak_rss_mb`` is the whole process's peak.
    """
    spec = datasets.get_benchmark(dataset)
    _set_threads(threads)
    test, counts = load_queries(dataset, "test", data_dir)
    seen = [q for split in ("train", "dev") for q in load_queries(dataset, split, data_dir)[0]]
    t0 = time.perf_counter()
    kb = build_dictionary(dataset, dictionary, seen, data_dir, resources_dir)
    ranker, system_info = _make_ranker(system, kb, encoder_path, batch_size, precision, device, cache_dir, progress)
    setup_s = time.perf_counter() - t0

    strings = [normalize_name(p, kb.lowercase) for q in test for p in q.parts]
    t1 = time.perf_counter()
    rows = ranker.rank(strings, NAME_DEPTH)
    query_s = time.perf_counter() - t1
    if isinstance(ranker, ScispacyRanker):  # its index is built inside the same call
        query_s = float(ranker.info["query_seconds"])  # type: ignore[arg-type]
        setup_s += float(ranker.info["index_seconds"])  # type: ignore[arg-type]

    aliases = concept_aliases(kb)
    scores = score_queries([q.gold for q in test], _rankings(test, rows, kb), aliases)
    known_ids: Set[str] = set(kb.concept_ids) | {a for xs in aliases.values() for a in xs}

    result: Dict[str, object] = {
        "dataset": dataset,
        "dictionary": dictionary,
        "dictionary_label": spec.dictionary_label + (" + train/dev mentions" if dictionary == "paper" else ""),
        "system": system,
        **system_info,
        **summarize(scores),
        "paper_test_mentions": spec.paper_test_mentions,
        "preprocessing": counts,
        "dictionary_size": kb.n_names,
        "dictionary_concepts": len(kb),
        "gold_outside_dictionary": sum(not (set(q.gold) & known_ids) for q in test),
        "seen_in": "train+dev",
        "breakdown": _seen_breakdown(scores, test, seen),
        "searched_strings": len(strings),
        "mentions_per_s": round(len(test) / query_s, 1) if query_s > 0 else None,
        "query_seconds": round(query_s, 2),
        "setup_seconds": round(setup_s, 2),
        "peak_rss_mb": _peak_rss_mb(),
        "threads": threads,
        "precision": precision if system == "encoder" else None,
    }
    if isinstance(ranker, ScispacyRanker):
        result["scispacy"] = ranker.info  # the worker's memory is its own: worker_peak_rss_mb
    if isinstance(ranker, DenseRanker):
        result["dictionary_cache_hit"] = ranker.cache_hit
        result["dictionary_names_from_cache"] = ranker.cached_names
        result["dictionary_encode_seconds"] = round(ranker.encode_seconds, 1)
    return result


def evaluate_command(
    dataset: str,
    encoder: Optional[str] = None,
    dictionary: str = "paper",
    output: Optional[PathLike] = None,
    batch_size: int = 128,
    precision: str = "fp32",
    system: str = "encoder",
) -> Dict[str, object]:
    """CLI body: evaluate, print the JSON, and write it to ``output`` when given."""
    result = evaluate(dataset, encoder, dictionary, system, batch_size=batch_size, precision=precision)
    print(json.dumps(result, indent=2, ensure_ascii=False))
    if output:
        write_json(output, result)
    return result
