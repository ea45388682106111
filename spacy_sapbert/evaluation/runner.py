"""One evaluation: a benchmark, a dictionary, a system → lenient/strict accuracy, speed, memory.

Two dictionaries per benchmark. ``paper`` is BioSyn's test dictionary, which SapBERT used: the
ontology plus the preprocessed train and dev mentions with their gold ids. ``ontology`` is the
ontology alone — what a user linking new text has.

The ``encoder`` system is the shipped path: the dictionary becomes a KB folder, and
``sapbert_linker`` links the gold spans of the test documents inside ``nlp.pipe`` (abbreviations
and composite mentions handled by the pipeline, see ``gold_spans.py``). The other systems are
baselines that rank the harness's preprocessed query strings.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from ..context import SENTENCE_RULE, ContextPrototypes, annotated_examples, self_supervised_examples
from ..encoder import SapEncoder, resolve_encoder_path
from ..fileio import atomic_dir, atomic_open, write_json
from ..index import VectorIndex
from ..kb import ConceptKB
from ..machine import peak_rss_mb
from ..normalize import normalize_name
from ..records import ConceptRecord
from ..search import META_FILE, LinkingKB
from . import datasets
from .baselines import ExactMatchRanker, ScispacyRanker, TfidfRanker
from .bootstrap import score_interval
from .gold_spans import GOLD_SPANS_KEY, annotated_mentions, find_linker, link_gold_mentions, ranking_of
from .metrics import QueryScores, Ranking, accuracy, hits_per_document, score_queries, summarize
from .preprocess import Query, load_spelling_fixes, preprocess_documents

DICTIONARIES = ("paper", "ontology")
# The ontology with the names the shipped word-variant table generates (``word_variants.py``, its
# ``DEFAULT_OPTIONS``): asked for by name, never part of the default sweeps over ``DICTIONARIES``.
VARIANT_DICTIONARY = "ontology+variants"
KNOWN_DICTIONARIES = (*DICTIONARIES, VARIANT_DICTIONARY)
SYSTEMS = ("exact", "tfidf", "encoder", "scispacy")
NAME_DEPTH = 50  # names retrieved per string: enough for 5 distinct concept predictions
LINKER_TOP_K = 20  # concepts the linker keeps per query: enough for 5 distinct predictions
VECTOR_CHUNK = 20_000  # dictionary names per cached vector file
PathLike = Union[str, Path]


def load_spelling(dataset: "datasets.Dataset", data_dir: PathLike = datasets.DEFAULT_DATA_DIR) -> Optional[Dict[str, str]]:
    """The benchmark's spell-check list (NCBI-disease's), or None."""
    path = datasets.spelling_path(dataset, data_dir)
    return load_spelling_fixes(path) if path else None


def load_queries(dataset: "datasets.Dataset", split: str, data_dir: PathLike = datasets.DEFAULT_DATA_DIR) -> Tuple[List[Query], Dict[str, int]]:
    """The preprocessed queries of one split and the count of every preprocessing step."""
    return preprocess_documents(datasets.load_split(dataset, split, data_dir), load_spelling(dataset, data_dir))


def seen_splits(evaluated: str = "test") -> Tuple[str, ...]:
    """The splits whose mentions the ``paper`` dictionary adds when ``evaluated`` is scored: train and
    dev for test (the paper's protocol), train alone for dev (so that dev stays unseen)."""
    if evaluated not in ("dev", "test"):
        raise ValueError(f"split {evaluated!r}: choose dev (to tune) or test (to report)")
    return ("train", "dev") if evaluated == "test" else ("train",)


def seen_queries(dataset: "datasets.Dataset", data_dir: PathLike = datasets.DEFAULT_DATA_DIR, evaluated: str = "test") -> List[Query]:
    """The queries of ``seen_splits(evaluated)``: the mentions the ``paper`` dictionary adds to the ontology."""
    splits = [s for s in seen_splits(evaluated) if s in datasets.get_benchmark(dataset).mention_files]
    return [q for split in splits for q in load_queries(dataset, split, data_dir)[0]]


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
    dataset: "datasets.Dataset",
    dictionary: str,
    train_queries: Sequence[Query],
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    resources_dir: PathLike = datasets.DEFAULT_RESOURCES_DIR,
) -> ConceptKB:
    """The name table a benchmark is evaluated against (``paper`` or ``ontology``).

    The KB lower-cases and strips punctuation (``strip_punctuation``) from its names and from
    every query, as the harness's ``clean_text`` does, and keeps the names as written for display
    (and for the entity ruler). ``train_queries`` are the names the ``paper`` dictionary adds:
    the preprocessed train/dev mentions (BioSyn) or, for the end-to-end lexicon, the raw ones;
    their counts per concept become the KB's priors, which rank the concepts of an ambiguous name.
    """
    if dictionary not in KNOWN_DICTIONARIES:
        raise ValueError(f"dictionary must be one of {KNOWN_DICTIONARIES}, got {dictionary!r}")
    records = list(datasets.dictionary_records(dataset, data_dir, resources_dir))
    if dictionary == VARIANT_DICTIONARY:
        from ..word_variants import DEFAULT_OPTIONS, SHIPPED_TABLE, load_table, with_variant_names

        _, generated = with_variant_names(records, load_table(SHIPPED_TABLE), DEFAULT_OPTIONS)
        # after the ontology's own names (merged into their concepts), so that its cached vectors serve
        records += [ConceptRecord(cid, name) for name, cid, _ in generated]
    if dictionary in ("ontology", VARIANT_DICTIONARY):
        return ConceptKB.from_records(records, on_duplicate="merge", strip_punctuation=True)
    mentions = list(_mention_records(train_queries, _primary_ids(records)))
    priors = Counter(r.id for r in mentions)  # TaggerOne-style: how often the training text names each concept
    return ConceptKB.from_records(records + mentions, on_duplicate="merge", strip_punctuation=True, priors=priors)


def names_hash(names: Sequence[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode("utf8") + b"\n")
    return h.hexdigest()[:16]


def name_vectors(
    encoder: SapEncoder,
    names: Sequence[str],
    cache_dir: PathLike,
    batch_size: int = 128,
    progress: bool = False,
    chunk_size: int = VECTOR_CHUNK,
) -> Tuple[List[np.ndarray], Dict[str, float]]:
    """The encoder's vectors of ``names``, cached in ``cache_dir`` as ``.npy`` files of
    ``chunk_size`` names, each keyed by the encoder's fingerprint, the precision and a hash of
    its names. The paper's dictionary is the ontology's names followed by the training mentions,
    so it reuses every full chunk of the ontology's and only the tail is encoded again."""
    chunks: List[np.ndarray] = []
    stats = {"names_from_cache": 0, "names_encoded": 0, "encode_seconds": 0.0}
    for start in range(0, len(names), chunk_size):
        chunk = list(names[start : start + chunk_size])
        path = Path(cache_dir) / f"{encoder.fingerprint}-{encoder.precision}-{names_hash(chunk)}.npy"
        if path.is_file():
            vectors = np.load(path, mmap_mode="r", allow_pickle=False)
            if vectors.shape == (len(chunk), encoder.dim):
                stats["names_from_cache"] += len(chunk)
                chunks.append(vectors)
                continue
        t0 = time.perf_counter()
        vectors = encoder.encode(chunk, batch_size=batch_size, progress=progress)
        stats["encode_seconds"] += time.perf_counter() - t0
        stats["names_encoded"] += len(chunk)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "wb") as f:
            np.save(f, vectors, allow_pickle=False)
        chunks.append(vectors)
    return chunks, stats


def dictionary_kb_folder(
    kb: ConceptKB, encoder: SapEncoder, cache_dir: PathLike, batch_size: int = 128, progress: bool = False
) -> Tuple[Path, Dict[str, object]]:
    """The KB folder of an evaluation dictionary (exact ``flat`` index), cached in
    ``cache_dir/kbs`` under the KB's and the encoder's fingerprints and the precision."""
    # what the fingerprint does not cover: punctuation, display names, and "n" since indexes keep a neighbour table
    tag = ("strip" if kb.strip_punctuation else "keep") + names_hash(kb.display_names)[:8] + "n"
    folder = Path(cache_dir) / "kbs" / f"{kb.fingerprint[:16]}-{tag}-{encoder.fingerprint[:16]}-{encoder.precision}"
    info: Dict[str, object] = {"kb_folder": str(folder), "kb_cache_hit": (folder / META_FILE).is_file()}
    if not info["kb_cache_hit"]:
        chunks, stats = name_vectors(encoder, kb.names, cache_dir, batch_size, progress)
        info.update(stats)
        index = VectorIndex.build(chunks or [np.zeros((0, encoder.dim), np.float32)], kind="flat")
        LinkingKB.assemble(kb, index, encoder).to_disk(folder)
    return folder, info


CONTEXT_EXAMPLES = ("self", "self+train")
UNLABELLED = ("ncbi-disease", "bc5cdr-disease")  # whose train abstracts give self-supervised examples (labels unread)


def context_prototypes(
    dataset: "datasets.Dataset", kb: ConceptKB, encoder: SapEncoder, split: str = "test", examples: str = "self",
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR, batch_size: int = 128, cache_dir: Optional[PathLike] = None,
) -> ContextPrototypes:
    """Concept prototypes for evaluating ``split``: ``self``, the KRISSBERT recipe without labels
    (unambiguous KB names found verbatim in the corpora's train abstracts, their annotations unread);
    ``self+train`` also the annotated mentions of ``seen_splits(split)`` (the *paper* setting).
    Kept in ``cache_dir/context`` under the KB, the encoder, the examples and the split."""
    if examples not in CONTEXT_EXAMPLES:
        raise ValueError(f"context examples must be one of {CONTEXT_EXAMPLES}, got {examples!r}")
    spec = datasets.get_benchmark(dataset)
    seen = f"-{spec.name.replace(':', '_')}-{split}" if examples == "self+train" else ""  # self-supervision reads the same texts for every split
    tag = f"{kb.fingerprint[:16]}-{encoder.fingerprint[:16]}-{encoder.precision}-{examples}{seen}-rule{SENTENCE_RULE}"
    cached = Path(cache_dir) / "context" / tag if cache_dir is not None else None
    if cached is not None and (found := ContextPrototypes.from_disk(cached)) is not None:
        return found
    texts: Dict[str, str] = {}
    read = []
    for name in UNLABELLED:
        try:
            texts.update((d.doc_id, d.text) for d in datasets.load_split(name, "train", data_dir))
            read.append(name)
        except FileNotFoundError:  # a data folder with one corpus only
            continue
    pairs = list(self_supervised_examples(kb, texts.values()))
    sources: Dict[str, object] = {"self_supervised": {"abstracts": len(texts), "examples": len(pairs), "from": read}}
    if examples == "self+train":
        labelled = list(annotated_examples(kb, annotated_mentions(
            d for s in seen_splits(split) if s in spec.mention_files for d in datasets.load_split(dataset, s, data_dir))))
        pairs += labelled
        sources["annotated"] = {"splits": list(seen_splits(split)), "examples": len(labelled)}
    prototypes = ContextPrototypes.build(pairs, encoder, batch_size=batch_size, sources=sources)
    if cached is not None:
        with atomic_dir(cached) as tmp:
            prototypes.to_disk(tmp)
    return prototypes


def set_threads(threads: int) -> None:
    import faiss
    import torch

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)


def _make_ranker(system: str, kb: ConceptKB, python: Optional[PathLike], cache_dir: Optional[PathLike]):
    """The baseline ranker for ``system`` and what to record about it; ``python`` is the
    scispacy environment's python for ``scispacy``."""
    if system == "exact":
        return ExactMatchRanker(kb), {}
    if system == "tfidf":
        return TfidfRanker(kb.names), {"ngram": 3}
    if system == "scispacy":
        if python is None:
            raise ValueError("system 'scispacy' needs the python of an environment with scispacy as encoder_path")
        index_cache = None if cache_dir is None else Path(cache_dir) / "scispacy-index"
        return ScispacyRanker(kb, python, index_cache=index_cache), {}
    raise ValueError(f"system must be one of {SYSTEMS}, got {system!r}")


def gold_span_pipeline(kb_folder: PathLike, linking_kb: LinkingKB, encoder: SapEncoder, *, abbreviations: bool = True, composites: bool = True,
                       batch_size: int = 128, fusion_weight: Optional[float] = None, context_weight: Optional[float] = None,
                       consistency: float = 0.0, query_encoder: Optional[str] = None):
    """``build_pipeline(kb, detector="gold")`` with the loaded KB and encoder attached to its linker.

    The linker keeps ``LINKER_TOP_K`` concepts per query (enough for five distinct predictions)
    and also links the span group ``gold_spans.GOLD_SPANS_KEY`` (documents whose gold mentions overlap);
    ``fusion_weight``, ``context_weight``: the linker's settings (None: the KB's); ``consistency`` too (0: off);
    ``query_encoder`` too (None: off).
    """
    from ..pipelines import build_pipeline

    config = {"top_k": LINKER_TOP_K, "spans_key": GOLD_SPANS_KEY, "split_composites": composites, "batch_size": batch_size,
              "fusion_weight": fusion_weight, "context_weight": context_weight, "consistency": consistency,
              "query_encoder": query_encoder}
    nlp = build_pipeline(kb_folder, detector="gold", encoder=encoder.source, abbreviations=abbreviations, linker_config=config)
    find_linker(nlp).set_kb(linking_kb, encoder)
    return nlp


def _pipeline_rankings(
    dataset: "datasets.Dataset",
    test: Sequence[Query],
    kb: ConceptKB,
    encoder: SapEncoder,
    cache_dir: PathLike,
    data_dir: PathLike,
    batch_size: int,
    abbreviations: bool,
    composites: bool,
    spelling: bool,
    progress: bool,
    fusion_weight: Optional[float] = None,
    split: str = "test",
    context: Optional[ContextPrototypes] = None,
    context_weight: Optional[float] = None,
    consistency: float = 0.0,
    query_encoder: Optional[str] = None,
) -> Tuple[List[List[Ranking]], Dict[str, object], float, int, Optional[List[List[Ranking]]]]:
    """Per test query, the linker's rankings (one per linked part), read from ``nlp.pipe`` over
    the test documents with the gold spans set; also what to record, the pipeline's seconds, the
    number of searched strings and, when the spell-check list was applied, the rankings without it
    (its measured effect: the one preprocessing step left outside the pipeline)."""
    folder, kb_info = dictionary_kb_folder(kb, encoder, cache_dir, batch_size, progress)
    linking_kb = LinkingKB.from_disk(folder)
    linking_kb.context = context
    nlp = gold_span_pipeline(folder, linking_kb, encoder, abbreviations=abbreviations, composites=composites,
                             batch_size=batch_size, fusion_weight=fusion_weight, context_weight=context_weight,
                             consistency=consistency, query_encoder=query_encoder)
    fixes = load_spelling(dataset, data_dir) if spelling else None
    documents = datasets.load_split(dataset, split, data_dir)
    links = link_gold_mentions(nlp, documents, fixes, batch_size=batch_size)

    def rankings_of(found) -> List[List[Ranking]]:
        return [[ranking_of(cands) for _, cands in found.parts.get((q.doc_id, q.start, q.end)) or [("", [])]] for q in test]

    without = rankings_of(link_gold_mentions(nlp, documents, None, batch_size=batch_size)) if fixes else None
    info: Dict[str, object] = {
        "encoder": encoder.describe(),
        **({"query_encoder": find_linker(nlp).query_encoder.describe()} if query_encoder else {}),
        "pipeline": [name for name, _ in nlp.pipeline],
        "pipeline_options": {"abbreviations": abbreviations, "split_composites": composites, "linker_top_k": LINKER_TOP_K,
                             "fusion_weight": find_linker(nlp).effective_fusion_weight,
                             "context_weight": find_linker(nlp).effective_context_weight, "consistency": find_linker(nlp).consistency},
        "gold_spans": links.stats(),
        **kb_info,
    }
    rankings = rankings_of(links)
    return rankings, info, links.seconds, sum(len(r) for r in rankings), without


def _rankings(queries: Sequence[Query], rows: Sequence[Sequence[int]], kb: ConceptKB) -> List[List[List[List[str]]]]:
    """Per query, per searched part: the ranked names, each as its concept ids."""
    out, at = [], 0
    for q in queries:
        parts = rows[at : at + len(q.parts)]
        out.append([[[kb.concept_ids[c] for c in kb.concepts_of_name(r)] for r in ranked] for ranked in parts])
        at += len(q.parts)
    return out


def _breakdown(scores: QueryScores, test: Sequence[Query], seen: Sequence[Query], kb: ConceptKB) -> Dict[str, object]:
    """Rates for test queries whose string / all of whose concepts occur in the seen splits, and the
    rest; and for queries whose string is a dictionary name of several concepts (``name_ambiguous``:
    only the context can decide) and the rest."""
    seen_names = {q.name for q in seen}
    seen_ids = {g for q in seen for g in q.gold}

    def ambiguous(q: Query) -> bool:
        row = kb.row_of_name(q.parts[0]) if len(q.parts) == 1 else None
        return row is not None and len(kb.concepts_of_name(row)) > 1

    masks = {
        "string": (np.array([q.name in seen_names for q in test], bool), "seen", "unseen"),
        "concept": (np.array([set(q.gold) <= seen_ids for q in test], bool), "seen", "unseen"),
        "name": (np.array([ambiguous(q) for q in test], bool), "ambiguous", "unambiguous"),
    }
    out: Dict[str, object] = {}
    for key, (mask, yes, no) in masks.items():
        out[f"{key}_{yes}"] = summarize(scores, mask)
        out[f"{key}_{no}"] = summarize(scores, ~mask)
    return out


ACC1 = ("lenient", "strict")


def _by_document(scores: QueryScores, test: Sequence[Query], with_documents: bool) -> Dict[str, object]:
    """Lenient and strict Acc@1 with their 95% intervals over resamples of the documents
    (``bootstrap``: a document's mentions move together, as they are annotated together), and with
    ``with_documents`` each document's hits, ``[right, counted]`` per kind in first-seen order: what a
    paired comparison of two runs on the same documents resamples (``benchmarks/dev_before_after.py``)."""
    doc_ids = [q.doc_id for q in test]
    kinds = {kind: hits_per_document(doc_ids, getattr(scores, kind)[1], scores.nil) for kind in ACC1}
    out: Dict[str, object] = {"intervals": {f"{kind}_acc@1": score_interval(hits, accuracy) for kind, hits in kinds.items()}
                              if len(set(doc_ids)) > 1 else None}
    if with_documents:
        out["per_document"] = [{"doc": doc, **{f"{kind}_acc@1": [hits[i].right, hits[i].counted] for kind, hits in kinds.items()}}
                               for i, doc in enumerate(dict.fromkeys(doc_ids))]
    return out


def evaluate(
    dataset: "datasets.Dataset",
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
    abbreviations: bool = True,
    composites: bool = True,
    spelling: bool = True,
    fusion_weight: Optional[float] = None,
    split: str = "test",
    context_weight: float = 0.0,
    context_examples: str = "self",
    consistency: float = 0.0,
    query_encoder: Optional[str] = None,
    with_documents: bool = False,
) -> Dict[str, object]:
    """Evaluate one system on the ``split`` of ``dataset`` (test to report, dev to choose settings:
    its *paper* dictionary then adds the train mentions alone); accuracies are in percent.

    ``system``: ``encoder`` (``encoder_path``; None = the offline MiniLM base model) links the
    gold spans with ``sapbert_linker`` in ``nlp.pipe``; ``abbreviations`` and ``composites``
    switch the pipeline's expansion and splitting, ``spelling`` the benchmark's spell-check
    list (the one preprocessing step outside the pipeline), ``fusion_weight`` the linker's sparse +
    dense fusion (None: the KB's stored weight, else off); ``context_weight`` > 0 reranks by the
    mention's sentence against concept prototypes built here (``context_prototypes``; their build
    time is setup, not query time); ``consistency`` > 0 switches on the linker's in-document
    consistency at that confidence; ``query_encoder``: the linker's smaller query encoder
    (``query_encoder.py``). ``exact``, ``tfidf`` and
    ``scispacy`` (``encoder_path`` = a python with scispacy installed) rank the harness's
    preprocessed strings. ``mentions_per_s`` times the linking of the test mentions (the
    pipeline for ``encoder``; dictionary encoding and index building excluded);
    ``peak_rss_mb`` is the whole process's peak. ``with_documents`` adds ``per_document``.
    """
    spec = datasets.get_benchmark(dataset)
    set_threads(threads)
    seen = seen_queries(dataset, data_dir, split)
    test, counts = load_queries(dataset, split, data_dir)
    t0 = time.perf_counter()
    kb = build_dictionary(dataset, dictionary, seen, data_dir, resources_dir)
    system_info: Dict[str, object] = {}
    without_spelling: Optional[List[List[Ranking]]] = None
    with contextlib.ExitStack() as stack:
        if system == "encoder":
            encoder = SapEncoder.load(resolve_encoder_path(encoder_path), device=device, precision=precision)
            if cache_dir is None:
                cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="sapbert-eval-"))
            prototypes = (context_prototypes(dataset, kb, encoder, split, context_examples, data_dir, batch_size, cache_dir)
                          if context_weight else None)
            rankings, system_info, query_s, searched, without_spelling = _pipeline_rankings(
                dataset, test, kb, encoder, cache_dir, data_dir, batch_size, abbreviations, composites, spelling, progress,
                fusion_weight, split, prototypes, context_weight, consistency, query_encoder,
            )
            if prototypes is not None:
                system_info["context_prototypes"] = {"concepts": len(prototypes), **prototypes.meta["sources"]}  # type: ignore[dict-item]
            setup_s = time.perf_counter() - t0 - query_s
        else:
            ranker, system_info = _make_ranker(system, kb, encoder_path, cache_dir)
            setup_s = time.perf_counter() - t0
            strings = [normalize_name(p, kb.lowercase) for q in test for p in q.parts]
            t1 = time.perf_counter()
            rows = ranker.rank(strings, NAME_DEPTH)
            query_s = time.perf_counter() - t1
            if isinstance(ranker, ScispacyRanker):  # its index is built inside the same call
                query_s = float(ranker.info["query_seconds"])  # type: ignore[arg-type]
                setup_s += float(ranker.info["index_seconds"])  # type: ignore[arg-type]
                system_info["scispacy"] = ranker.info  # the worker's memory is its own: worker_peak_rss_mb
            rankings, searched = _rankings(test, rows, kb), len(strings)

    aliases = kb.concept_aliases()
    scores = score_queries([q.gold for q in test], rankings, aliases)
    if system == "encoder":  # what the pipeline cannot do itself, and what it is worth
        fixes = load_spelling(dataset, data_dir) if spelling else None
        outside: Dict[str, object] = {"spelling_list": len(fixes or {})}  # entries applied before nlp.pipe
        if without_spelling is not None:
            outside["without_spelling_list"] = summarize(score_queries([q.gold for q in test], without_spelling, aliases))
        system_info["outside_pipeline"] = outside
    known_ids: Set[str] = set(kb.concept_ids) | {a for xs in aliases.values() for a in xs}

    return {
        "dataset": spec.name,
        "dictionary": dictionary,
        "split": split,
        "dictionary_label": spec.dictionary_label + (f" + {'/'.join(seen_splits(split))} mentions" if dictionary == "paper" else ""),
        "system": system,
        **system_info,
        **summarize(scores),
        "paper_test_mentions": spec.paper_test_mentions,
        "preprocessing": counts,
        "dictionary_size": kb.n_names,
        "dictionary_concepts": len(kb),
        "gold_outside_dictionary": sum(not (set(q.gold) & known_ids) for q in test),
        "seen_in": "+".join(seen_splits(split)),
        "breakdown": _breakdown(scores, test, seen, kb),
        "searched_strings": searched,
        "mentions_per_s": round(len(test) / query_s, 1) if query_s > 0 else None,
        "query_seconds": round(query_s, 2),
        "setup_seconds": round(setup_s, 2),
        "peak_rss_mb": peak_rss_mb(),
        "threads": threads,
        "precision": precision if system == "encoder" else None,
        **_by_document(scores, test, with_documents),
    }


def evaluate_command(
    dataset: "datasets.Dataset",
    encoder: Optional[str] = None,
    dictionary: str = "paper",
    output: Optional[PathLike] = None,
    batch_size: int = 128,
    precision: str = "fp32",
    system: str = "encoder",
    **options: object,
) -> Dict[str, object]:
    """CLI body: evaluate, print the JSON, and write it to ``output`` when given (``options``:
    ``evaluate``'s keyword arguments, e.g. ``threads``, ``spelling``)."""
    result = evaluate(dataset, encoder, dictionary, system, batch_size=batch_size, precision=precision, **options)  # type: ignore[arg-type]
    print(json.dumps(result, indent=2, ensure_ascii=False))
    if output:
        write_json(output, result)
    return result
