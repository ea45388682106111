"""UMLS-scale search: a KB the size of the MedMentions UMLS dictionary on a laptop.

    python benchmarks/umls_scale.py --names 7500000 --threads 2   # the issue's size: the candidates, then auto's kind
    python benchmarks/umls_scale.py --names 1000000 --threads 2   # the first 1,000,000 of those names (+ exact search)

Encoding 7.5M names takes hours on 2 cores; split it over one process per core first
(``--encode-only --part 0/2`` and ``--part 1/2``), then run the commands above.

Names: the open bundle's names (MeSH, MONDO, HPO, DOID, EFO, GO; ``spacy project run preprocess``)
and, past its ~1.09M names, UMLS-style variants of them ("x, nos", "x (disorder)", "history of x",
...) that belong to the same concept, the way UMLS atoms vary. Every vector is a real encoder output
(encoding is resumable: kill it and run the same command again). ``--names N`` below ``--of`` (7.5M)
takes the KB's first N names and their vectors (the first N rows of the ``--of``-name encoding: no
second encoding): the names of the bundle's first concepts (MeSH first) with their variants.
Queries are real mentions: the test mentions of NCBI-disease, BC5CDR-disease and BC5CDR-chemical
(recall is reported on them); the train/dev mentions tune each kind's search breadth.

Per index kind (``--kind``; the candidates of issue 44 by default, some registered here as variants of
``ivf-rabitq``): build seconds on ``--threads`` threads and file size, then in a fresh process, with
the index's files evicted from the page cache first: load seconds (memory-mapped), all test mentions
as one batch (cold: what the search needs is read from disk), then each test mention searched alone
on 1 thread (median, mean and 99th percentile ms), then all of them as one batch on 1 and on 2
threads, resident memory after that, and how much of the index's files the page cache then holds
(the rows are read with ``os.pread``: page cache, not resident memory); recall@1 and @5 against exact
search. Then the whole KB folder (names, concepts, auto's index) is loaded by
``LinkingKB.from_disk`` in a fresh process (``load_s``, ``rss_mb``), and the distinct test mentions
of the three benchmarks are linked by ``nlp.pipe`` with that folder's ``gold`` pipeline, each mention a
Doc whose one entity it is (the linker normalises, reuses stored vectors of KB names, encodes the
rest, searches a batch at once), at 1 and 2 threads.
Also printed: how many rows are the same or nearly the same name (issue 44's "fewer rows"), and
recall@5 when the exact top 100 are re-scored from fp16 / bf16 rows (the ceiling such rows allow).
Prints JSON and writes it to ``benchmarks/results/umls_scale_NAMES.json``; ``benchmarks/speed.py
--render-only --umls-result …`` puts the tables into the README's Speed block.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import typer

from spacy_sapbert.index_kinds.ivf_pq import pq_subquantizers
from spacy_sapbert.index_kinds.ivf_rabitq import IvfRabitqIndex
from spacy_sapbert.machine import machine_description, rss_mb

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "corpus" / "open_bundle.concepts.jsonl"
# UMLS-like atom variants: the same concept written the ways other vocabularies write it
VARIANTS = (
    "{}, nos", "{} (disorder)", "history of {}", "{} unspecified", "[x]{}", "suspected {}",
    "{} (finding)", "chronic {}", "{}, not otherwise specified", "acute {}", "familial {}", "{} (substance)",
)
FULL_NAMES = 7_500_000  # the encoded KB whose first names smaller runs take (``--of``)
# Recall target of tuning on the train/dev mentions. Unseen test mentions score lower: tuned to
# 0.99 at 7.5M names, ivf-pq gave the test mentions 0.9861; the margin is for them.
TUNE_TARGET = 0.995
BATCH = 512  # distinct strings per linker batch in the rate measurement (nlp.pipe hands over hundreds)


class IvfRabitqFastScan(IvfRabitqIndex):
    """Candidate: RaBitQ codes packed for FAISS' fast-scan kernels (``IndexIVFRaBitQFastScan``)."""

    codes = "RaBitQfs"
    faiss_class = "IndexIVFRaBitQFastScan"
    auto_names = None
    block = 64  # queries per FAISS call: FAISS 1.15.1 crashed searching 2,000 queries at once over 1,024 lists

    def _code_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        found = [super(IvfRabitqFastScan, self)._code_search(queries[i : i + self.block], k) for i in range(0, len(queries), self.block)]
        return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


class IvfPq4FastScan(IvfRabitqIndex):
    """Candidate: 4-bit PQ fast-scan codes, dim/4 sub-quantizers (48 bytes a name at 384 dimensions,
    as RaBitQ's), same probing and exact re-scoring."""

    codes = "PQx4fs"
    faiss_class = "IndexIVFPQFastScan"
    auto_names = None

    @classmethod
    def code_string(cls, dim: int) -> str:
        return f"PQ{pq_subquantizers(dim)}x4"


class IvfRabitqHnswCoarse(IvfRabitqIndex):
    """Candidate: the centroids searched through an HNSW graph instead of a flat scan."""

    coarse = "HNSW32"
    auto_names = None


class IvfRabitqTwiceTheLists(IvfRabitqIndex):
    """Candidate: ``ivf-rabitq`` with twice as many (smaller) lists: cheaper to scan, dearer to train."""

    auto_names = None

    @classmethod
    def lists(cls, n: int) -> int:
        return 2 * super().lists(n)


class IvfRabitqFp16Rows(IvfRabitqIndex):
    """Candidate: ``ivf-rabitq`` re-scoring from fp16 rows (half the file)."""

    rerank_file = "rows.fp16.npy"
    rerank_precision = "fp16"
    auto_names = None


CANDIDATES = {
    "ivf-rabitq-fastscan": IvfRabitqFastScan, "ivf-pq4-fastscan": IvfPq4FastScan,
    "ivf-rabitq-hnsw-coarse": IvfRabitqHnswCoarse, "ivf-rabitq-2x-lists": IvfRabitqTwiceTheLists,
    "ivf-rabitq-fp16-rows": IvfRabitqFp16Rows,
}
KINDS = (
    "ivf-rabitq", "ivf-rabitq-2x-lists", "ivf-rabitq-fastscan", "ivf-pq4-fastscan", "ivf-rabitq-hnsw-coarse", "ivf-rabitq-fp16-rows",
    "ivf-pq",
)
SMALL_KINDS = ("flat",) + KINDS  # exact search too, where its vectors fit in memory (up to a million names)


def register_candidates() -> None:
    """Register the candidate kinds under their names (``--kind``), so that build and load find them."""
    from spacy_sapbert.registries import index_kinds

    for name, kind in CANDIDATES.items():
        index_kinds.register(name)(kind)


def scaled_records(bundle: Path, n_names: int, first: Optional[int] = None) -> Iterator:
    """The bundle's concepts; variants of their names are added round by round until the KB
    reaches ``n_names`` distinct names (fewer bundle names are kept when ``n_names`` is smaller).
    A variant that normalises to a name the KB already has is skipped, since it adds no row.
    ``first``: only the KB's first ``first`` names (its rows in order), with their concepts."""
    from spacy_sapbert.normalize import normalize_name
    from spacy_sapbert.ontologies import read_concepts
    from spacy_sapbert.records import ConceptRecord

    records = list(read_concepts(bundle, "jsonl"))
    seen = set()
    kept: List[List[str]] = []
    for r in records:
        mine = []
        for name in r.all_names:
            key = normalize_name(name)
            if key and key not in seen and len(seen) < n_names:
                seen.add(key)
                mine.append(name)
        kept.append(mine)
    for template in VARIANTS:
        for i, r in enumerate(records):
            for name in r.all_names:
                if len(seen) >= n_names:
                    break
                variant = template.format(name)
                key = normalize_name(variant)
                if key not in seen:
                    seen.add(key)
                    kept[i].append(variant)
    left = n_names if first is None else first
    for r, names in zip(records, kept):
        names = names[:left]
        left -= len(names)
        if names:
            yield ConceptRecord(id=r.id, name=names[0], synonyms=names[1:], types=r.types, xrefs=r.xrefs)


def query_strings(splits: Sequence[str], limit: Optional[int], seed: int = 0) -> List[str]:
    """Up to ``limit`` (None: all) distinct normalised mentions of the three benchmarks' ``splits``
    (real query text), a seeded sample when there are more."""
    from spacy_sapbert.evaluation.datasets import load_split
    from spacy_sapbert.normalize import normalize_name

    out = set()
    for dataset in ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical"):
        for split in splits:
            out.update(normalize_name(m.text) for d in load_split(dataset, split) for m in d.mentions)
    ordered = sorted(k for k in out if k)
    if limit is None or len(ordered) <= limit:
        return ordered
    return [ordered[i] for i in sorted(np.random.default_rng(seed).choice(len(ordered), limit, replace=False))]


# ---------------------------------------------------------------------------- the fresh-process probes
def evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (``POSIX_FADV_DONTNEED``), so that a probe reads
    what it needs from disk and the cache afterwards holds what the searches touched."""
    for f in folder.iterdir():
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def page_cache_mb(folder: Path) -> Optional[Dict[str, float]]:
    """MB of each of the folder's files (over 1 MB) that the page cache holds, by ``fincore``
    (util-linux); None where it is missing."""
    files = [str(f) for f in sorted(folder.iterdir()) if f.is_file() and f.stat().st_size > 2**20]
    if shutil.which("fincore") is None or not files:
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES,FILE", *files], capture_output=True, text=True, check=True)
    return {Path(line.split(maxsplit=1)[1]).name: round(int(line.split()[0]) / 2**20, 1) for line in out.stdout.splitlines() if line.strip()}


def set_threads(n: int) -> None:
    import faiss
    import torch

    faiss.omp_set_num_threads(n)
    torch.set_num_threads(n)


def probe(folder: Path, queries: Path, k: int, whole_kb: bool) -> Dict[str, object]:
    """Run in a fresh process: load (memory-mapped) with the folder's files out of the page cache,
    search all queries as one batch (cold: what the search needs comes from disk), then each query
    alone (1 thread), then all as one batch again (1 and 2 threads); time, memory, page cache."""
    from spacy_sapbert.index import VectorIndex
    from spacy_sapbert.search import LinkingKB

    register_candidates()
    set_threads(1)
    q = np.load(queries, allow_pickle=False)
    evict(folder)
    base = rss_mb()
    t0 = time.perf_counter()
    lkb = LinkingKB.from_disk(folder) if whole_kb else None
    index = lkb.index if lkb is not None else VectorIndex.from_disk(folder)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = index.search(q, k)[1]
    cold = time.perf_counter() - t0
    one = []
    for i in range(len(q)):
        t0 = time.perf_counter()
        index.search(q[i : i + 1], k)
        one.append(time.perf_counter() - t0)
    batch, differ = {}, {}
    for threads in (1, 2):
        set_threads(threads)
        t0 = time.perf_counter()
        found = index.search(q, k)[1]
        batch[threads] = time.perf_counter() - t0
        differ[threads] = int((found != rows).any(1).sum())  # (float rounding of exact ties may differ by batch size)
    if lkb is not None:
        lkb.candidates(q[:100], top_k=k)  # the concept lookups a link makes work on the mapped tables
    np.save(folder / "probe_rows.npy", rows, allow_pickle=False)
    return {
        "load_s": round(load_s, 3),
        "query_ms": round(1000 * float(np.median(one)), 3),  # one query at a time, 1 thread: the median
        "query_ms_mean": round(1000 * float(np.mean(one)), 3),
        "query_ms_p99": round(1000 * float(np.quantile(one, 0.99)), 3),
        "cold_batch_ms_per_query_1_thread": round(1000 * cold / len(q), 3),
        "batch_ms_per_query_1_thread": round(1000 * batch[1] / len(q), 3),
        "batch_ms_per_query_2_threads": round(1000 * batch[2] / len(q), 3),
        "batch_rows_unlike_the_first_batch": differ,
        "rss_mb": round(rss_mb(), 1),
        "rss_before_load_mb": round(base, 1),
        "page_cache_mb": page_cache_mb(folder),
    }  # (resident memory now, not the peak: a child started by a big parent would inherit the parent's peak)


def mention_docs(nlp, texts: Sequence[str], label: str = "Disease") -> list:
    """One Doc per text, the whole text its one entity: mentions for a ``gold`` pipeline to link."""
    from spacy.tokens import Span

    docs = []
    for text in texts:
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, 0, len(doc), label=label)]
        docs.append(doc)
    return docs


def rate(folder: Path, threads: int, mentions: Path) -> Dict[str, object]:
    """Run in a fresh process: the distinct mention strings in ``mentions`` (one a line) linked by
    ``nlp.pipe`` with ``build_pipeline(folder, "gold")``, each string a Doc whose one entity it is,
    ``BATCH`` docs a batch (the linker normalises, takes stored vectors of KB names, encodes the rest
    and searches them in one batch), on ``threads`` threads; and the first link, KB and encoder loaded on the way."""
    from spacy_sapbert.pipelines import build_pipeline

    register_candidates()
    set_threads(threads)
    strings = mentions.read_text(encoding="utf8").split("\n")
    t0 = time.perf_counter()
    nlp = build_pipeline(folder, "gold")
    nlp(mention_docs(nlp, ["warm up"])[0])  # loads the KB and the encoder: what a first ``link`` waits for
    first_link_s = time.perf_counter() - t0
    docs = mention_docs(nlp, strings)
    t0 = time.perf_counter()
    linked = sum(1 for doc in nlp.pipe(docs, batch_size=BATCH) for ent in doc.ents if ent._.cui_candidates)
    seconds = time.perf_counter() - t0
    return {"threads": threads, "mentions": len(strings), "with_candidates": linked, "seconds": round(seconds, 2),
            "mentions_per_s": round(len(strings) / seconds, 1), "rss_mb": round(rss_mb(), 1), "first_link_s": round(first_link_s, 2),
            "path": "nlp.pipe, gold spans"}


def run_child(*args: str) -> Dict[str, object]:
    out = subprocess.run([sys.executable, str(Path(__file__)), *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_probe(folder: Path, queries: Path, k: int, whole_kb: bool = False) -> Dict[str, object]:
    return run_child("--probe", str(folder), "--queries", str(queries), "--k", str(k), *(["--whole-kb"] if whole_kb else []))


def remove_big_files(folder: Path) -> None:
    """Delete a measured index's arrays (its ``.json`` records stay): at 7.5M names each candidate
    takes about 12 GB of disk."""
    for f in folder.iterdir():
        if f.suffix in (".npy", ".faiss"):
            f.unlink()


def folder_mb(path: Path) -> float:
    """The index's files (not the probe's output)."""
    return round(sum(f.stat().st_size for f in path.iterdir() if f.is_file() and f.name != "probe_rows.npy") / 2**20, 1)


# ---------------------------------------------------------------------------- what the rows are
def duplicate_rows(kb, chunks: Sequence[np.ndarray], sample: int = 1000, seed: int = 0) -> Dict[str, object]:
    """Issue 44's "fewer rows": names under several concepts (one row each already: the KB keys rows by
    normalised string), names that would collide under looser keys, rows whose vector another row has
    too, and how near a sample of rows' nearest other rows are."""
    from collections import Counter

    from spacy_sapbert.index import exact_top_k
    from spacy_sapbert.normalize import STOPWORDS, WORD

    n = kb.n_names
    loose = {
        "punctuation_and_spacing": lambda s: " ".join(WORD.findall(s)),
        "content_words_in_any_order": lambda s: " ".join(sorted(w for w in WORD.findall(s) if w not in STOPWORDS)),
    }
    collisions = {}
    for name, key in loose.items():
        counts = Counter(key(s) for s in kb.names)
        collisions[name] = {"keys": len(counts), "rows_beyond_one_per_key": n - len(counts)}
    probe_vector = np.random.default_rng(seed).normal(size=chunks[0].shape[1])
    projections = np.concatenate([np.asarray(c, dtype=np.float64) @ probe_vector for c in chunks])
    order = np.argsort(projections, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(projections[order]) != 0, True])
    same = 0
    flat = _Rows(chunks)
    for a, b in zip(starts[:-1], starts[1:]):
        if b - a > 1:  # equal projections: compare the vectors themselves
            vectors = flat[order[a:b]]
            same += int(sum(np.array_equal(vectors[0], v) for v in vectors[1:]))
    picked = np.sort(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
    top = exact_top_k(chunks, flat[picked], 2)
    second = np.where(top[:, 0] == picked, top[:, 1], top[:, 0])
    cosine = np.einsum("nd,nd->n", flat[picked], flat[second])
    return {
        "names": n,
        "names_under_several_concepts": kb.stats()["ambiguous_names"],
        "looser_keys": collisions,
        "rows_whose_vector_an_earlier_row_has": same,
        "sampled_rows": int(len(picked)),
        "sampled_rows_nearest_other_cosine_at_least": {str(t): round(float(np.mean(cosine >= t)), 4) for t in (0.999, 0.99, 0.98)},
    }


class _Rows:
    """Rows of a list of chunks by global row number (for the few the analyses read)."""

    def __init__(self, chunks: Sequence[np.ndarray]):
        self.chunks = chunks
        self.ends = np.cumsum([len(c) for c in chunks])

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        which = np.searchsorted(self.ends, rows, side="right")
        return np.stack([np.asarray(self.chunks[w][r - (self.ends[w] - len(self.chunks[w]))], dtype=np.float32) for w, r in zip(which, rows)])


def rescoring_ceiling(chunks: Sequence[np.ndarray], queries: np.ndarray, exact: np.ndarray, k: int) -> Dict[str, float]:
    """Recall@k when the exact top ``exact.shape[1]`` of each query are re-scored from rows rounded to
    fp16 / bf16 (float32: 1.0 up to ties): the best a kind re-scoring from such rows can do."""
    import torch

    from spacy_sapbert.index import recall_at_k

    flat = _Rows(chunks)
    vectors = torch.from_numpy(flat[exact.ravel()]).reshape(*exact.shape, -1)
    out = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32)):
        sims = torch.einsum("qcd,qd->qc", vectors.to(dtype).float(), torch.from_numpy(queries)).numpy()
        order = np.argsort(-sims, axis=1, kind="stable")
        out[name] = round(recall_at_k(np.take_along_axis(exact, order, 1)[:, :k], exact[:, :k]), 4)
    return out


def recall_at_1(found: np.ndarray, exact: np.ndarray) -> float:
    """Share of queries whose first row is the exact first row."""
    return float(np.mean(found[:, 0] == exact[:, 0]))


# ---------------------------------------------------------------------------- the vectors
def first_chunks(files: Sequence[Path], n: int) -> List[np.ndarray]:
    """The first ``n`` rows of the chunk files, memory-mapped (the last chunk cut)."""
    chunks, left = [], n
    for f in files:
        if left <= 0:
            break
        c = np.load(f, mmap_mode="r", allow_pickle=False)
        chunks.append(c[:left])
        left -= len(chunks[-1])
    if left > 0:
        raise ValueError(f"the chunks hold fewer than {n:,} rows")
    return chunks


def encoded_prefix(encoder, kb_full, folder: Path, n: int, chunk_size: int = 50_000) -> List[Path]:
    """The chunk files holding the first ``n`` names of ``kb_full``'s encoding, while other processes may
    still be encoding the rest: the folder must record this KB, encoder and precision (``encode_chunks``'
    ``state.json``), and the files needed must be there. Never encodes, never deletes."""
    from spacy_sapbert.fileio import read_json

    state = read_json(folder / "state.json") if (folder / "state.json").is_file() else {}
    expected = {"kb": kb_full.fingerprint, "encoder": encoder.fingerprint, "precision": encoder.precision,
                "chunk_size": chunk_size, "n": kb_full.n_names}
    files = [folder / f"chunk_{i:05d}.npy" for i in range(-(-n // chunk_size))]
    if state != expected or not all(f.is_file() for f in files):
        raise typer.BadParameter(
            f"{folder} does not hold the first {n:,} of the {kb_full.n_names:,} names' vectors yet: "
            f"run python benchmarks/umls_scale.py --names {kb_full.n_names} --encode-only (--part I/N) first"
        )
    return files


# ---------------------------------------------------------------------------- the measurement
def measure(
    n_names: int, work: Path, kinds: Sequence[str], encoder_path: Optional[str], threads: int, k: int = 5,
    n_queries: int = 2000, encode_only: bool = False, part: Tuple[int, int] = (0, 1), of: int = FULL_NAMES,
    keep_files: bool = False,
) -> Dict[str, object]:
    from spacy_sapbert.encoder import SapEncoder
    from spacy_sapbert.fileio import read_json, write_json
    from spacy_sapbert.index import INDEX_META, VectorIndex, choose_kind, exact_top_k, recall_at_k, tune_ef_search, tune_nprobe
    from spacy_sapbert.index_kinds.tuning import tune_probe_margin
    from spacy_sapbert.kb import ConceptKB
    from spacy_sapbert.search import ChunksIncomplete, LinkingKB, encode_chunks

    register_candidates()
    set_threads(threads)
    encoder = SapEncoder.load(encoder_path)
    of = max(of, n_names)
    t0 = time.perf_counter()
    kb_full = ConceptKB.from_records(scaled_records(BUNDLE, of))
    typer.echo(f"KB: {kb_full.n_names:,} names, {len(kb_full):,} concepts ({time.perf_counter() - t0:.0f} s)", err=True)
    encoded = work / f"names-{kb_full.n_names}-{encoder.fingerprint[:12]}"
    t0 = time.perf_counter()
    if n_names == kb_full.n_names:
        kb = kb_full
        try:
            files = encode_chunks(encoder, kb.names, kb.fingerprint, encoded / "chunks", progress=True, part=part)
        except ChunksIncomplete as e:  # this process's part is done; others are still encoding
            return {"names": kb.n_names, "part": list(part), "incomplete": str(e)}
    else:
        files = encoded_prefix(encoder, kb_full, encoded / "chunks", n_names)
        kb = ConceptKB.from_records(scaled_records(BUNDLE, of, first=n_names))
        if kb.n_names != n_names or list(kb.names[-3:]) != list(kb_full.names[n_names - 3 : n_names]):
            raise RuntimeError(f"the first {n_names:,} names are not the first rows of the {of:,}-name KB")
    encode_s = time.perf_counter() - t0
    if encode_only:
        return {"names": kb.n_names, "chunks": str(encoded / "chunks"), "encode_s_this_run": round(encode_s, 1)}
    chunks = first_chunks(files, n_names)
    del kb_full
    work = encoded if n_names == of else encoded / f"first-{n_names}"
    work.mkdir(parents=True, exist_ok=True)

    tune_q = encoder.encode(query_strings(("train", "dev"), n_queries))
    test_q = encoder.encode(query_strings(("test",), n_queries))
    np.save(work / "test_queries.npy", test_q, allow_pickle=False)
    if (work / "exact.npz").is_file():
        saved = np.load(work / "exact.npz")
        exact_test, exact_tune, exact_s = saved["test"], saved["tune"], float(saved["seconds"])
    else:
        t0 = time.perf_counter()
        exact_test = exact_top_k(chunks, test_q, 100)
        exact_tune = exact_top_k(chunks, tune_q, k)
        exact_s = time.perf_counter() - t0
        np.savez(work / "exact.npz", test=exact_test, tune=exact_tune, seconds=exact_s)
    typer.echo(f"exact top-k of {len(test_q) + len(tune_q):,} queries: {exact_s:.0f} s", err=True)
    ceiling = rescoring_ceiling(chunks, test_q, exact_test, k)
    exact_test = exact_test[:, :k]
    if (work / "rows.json").is_file():
        rows_found = read_json(work / "rows.json")
    else:
        rows_found = duplicate_rows(kb, chunks)
        write_json(work / "rows.json", rows_found)
    typer.echo(f"rows: {rows_found}; re-scoring ceiling: {ceiling}", err=True)

    results: Dict[str, Dict[str, object]] = {}
    for kind in kinds:
        folder = work / f"index-{kind}"
        if (folder / "measured.json").is_file():  # built and measured by an earlier run
            results[kind] = read_json(folder / "measured.json")
            typer.echo(f"{kind} (measured earlier): {results[kind]}", err=True)
            continue
        set_threads(threads)
        if (folder / "built.json").is_file():  # built and saved by an earlier run: tune and probe again
            index = VectorIndex.from_disk(folder)
            row: Dict[str, object] = read_json(folder / "built.json")
        else:
            t0 = time.perf_counter()
            index = VectorIndex.build(chunks, kind=kind)
            row = {"build_s": round(time.perf_counter() - t0, 1), "build_threads": threads}
            t0 = time.perf_counter()
            index.to_disk(folder)
            row["save_s"] = round(time.perf_counter() - t0, 1)
            write_json(folder / "built.json", row)
        set_threads(1)
        if "probe_margin" in index.meta:  # the smallest margin (and re-scoring depth) reaching the target
            margin, tuned = tune_probe_margin(index, tune_q, exact_tune, target=TUNE_TARGET)
            row.update(probe_margin=margin, nprobe=index.meta["nprobe"], min_nprobe=index.meta["min_nprobe"],
                       rerank_candidates=index.meta["rerank_candidates"], tune_recall_at_5=round(tuned, 4))
        elif "nprobe" in index.meta:  # the smallest nprobe reaching the target on the tuning queries
            nprobe, tuned = tune_nprobe(index, tune_q, exact_tune, target=TUNE_TARGET)
            row.update(nprobe=nprobe, tune_recall_at_5=round(tuned, 4))
            if "rerank_candidates" in index.meta:  # (ivf-pq) how many PQ candidates are re-scored
                row["rerank_candidates"] = index.meta["rerank_candidates"]
        elif kind == "hnsw":  # likewise efSearch
            ef_search, tuned = tune_ef_search(index, tune_q, exact_tune, target=TUNE_TARGET)
            row.update(ef_search=ef_search, tune_recall_at_5=round(tuned, 4))
        write_json(folder / INDEX_META, index.meta)  # the tuned settings travel with the index
        del index
        row["file_mb"] = folder_mb(folder)
        row.update(run_probe(folder, work / "test_queries.npy", k))
        found = np.load(folder / "probe_rows.npy")
        row.update(recall_at_5=round(recall_at_k(found, exact_test), 4), recall_at_1=round(recall_at_1(found, exact_test), 4))
        write_json(folder / "measured.json", row)
        results[kind] = row
        typer.echo(f"{kind}: {row}", err=True)
        if not keep_files and kind != choose_kind(kb.n_names)[0]:
            remove_big_files(folder)

    chosen, why = choose_kind(kb.n_names)
    whole = work / "linking-kb"
    if chosen in results and not (whole / "meta.json").is_file():
        index = VectorIndex.from_disk(work / f"index-{chosen}")
        index.meta["auto"] = why  # as build-kb --index auto records it
        LinkingKB.assemble(kb, index, encoder).to_disk(whole)
        del index
        if not keep_files:
            remove_big_files(work / f"index-{chosen}")
    out: Dict[str, object] = {
        "command": "python benchmarks/umls_scale.py " + " ".join(sys.argv[1:]),
        "names": kb.n_names,
        "first_names_of": of if n_names < of else None,
        "concepts": len(kb),
        "encoder": encoder.describe(),
        "machine": machine_description(),
        "encode_s_this_run": round(encode_s, 1),
        "threads": threads,
        "load_average_before_probes": [round(x, 2) for x in os.getloadavg()],
        "test_queries": int(len(test_q)),
        "tune_queries": int(len(tune_q)),
        "exact_s_all_queries": round(exact_s, 1),
        "rows": rows_found,
        "rescoring_ceiling_recall_at_5": ceiling,
        "kinds": results,
        "auto_kind": chosen,
        "tune_target": TUNE_TARGET,
    }
    if chosen in results:
        whole_row = run_probe(whole, work / "test_queries.npy", k, whole_kb=True)
        found = np.load(whole / "probe_rows.npy")
        out.update(
            load_s=whole_row["load_s"],
            rss_mb=whole_row["rss_mb"],
            recall_at_5=round(recall_at_k(found, exact_test), 4),
            whole_kb=whole_row,
            auto_reason=read_json(whole / INDEX_META).get("auto"),
        )
        mentions = work / "distinct_test_mentions.txt"
        mentions.write_text("\n".join(query_strings(("test",), None)), encoding="utf8")
        out["batch_rate"] = [run_child("--rate", str(whole), "--threads", str(t), "--queries", str(mentions)) for t in (1, 2)]
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(work / "result.json", out)
    return out


def render(result: Dict[str, object]) -> str:
    """The candidates' table of one run, as markdown (the README quotes it)."""
    lines = [
        f"{result['names']:,} names"
        + (f" (the first of the {result['first_names_of']:,})" if result.get("first_names_of") else "")
        + f", {result['test_queries']:,} test mentions; built on {result['threads']} thread(s); recall against exact search"
        + (f"; {result['machine']['cpu']}, {result['machine']['nproc']} cores." if "machine" in result else "."),  # type: ignore[index]
        "",
        "| index | build s | file MB | load s | RSS MB | page cache MB | ms/query, 1 thread (median / mean) "
        "| batch ms/query, 1 / 2 threads | recall@1 | recall@5 | search settings (tuned on train/dev) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for kind, k in result["kinds"].items():  # type: ignore[union-attr]
        if "probe_margin" in k:
            settings = f"lists within {k['probe_margin']} of the best ({k['min_nprobe']} to {k['nprobe']}), {k['rerank_candidates']} re-scored"
        elif "nprobe" in k:
            settings = f"nprobe {k['nprobe']}" + (f", {k['rerank_candidates']} re-scored" if "rerank_candidates" in k else "")
        else:
            settings = "exact"
        lines.append(
            f"| {kind} | {k['build_s']:,} | {k['file_mb']:,} | {k['load_s']} | {k['rss_mb']:,} | {_cached(k)} | {k['query_ms']} / {k['query_ms_mean']} "
            f"| {k['batch_ms_per_query_1_thread']} / {k['batch_ms_per_query_2_threads']} | {k['recall_at_1']} | {k['recall_at_5']} | {settings} |"
        )
    rows = result.get("rows")
    if rows:
        loose = rows["looser_keys"]  # type: ignore[index]
        lines += ["", f"Rows: {rows['names_under_several_concepts']:,} names under several concepts (one row each already); "  # type: ignore[index]
                  f"{loose['punctuation_and_spacing']['rows_beyond_one_per_key']:,} rows more than one per name with punctuation "
                  f"and spacing ignored, {loose['content_words_in_any_order']['rows_beyond_one_per_key']:,} with content words "
                  f"in any order; {rows['rows_whose_vector_an_earlier_row_has']:,} rows whose vector an earlier row has."]  # type: ignore[index]
    if "whole_kb" in result:
        w = result["whole_kb"]
        lines += ["", f"`auto` at this size: `{result['auto_kind']}`. The whole KB folder (names, concepts, index) loads in "
                  f"{w['load_s']} s and holds {w['rss_mb']:,} MB resident after searching the test mentions ({_cached(w)} MB "  # type: ignore[index]
                  f"of its files in the page cache); recall@5 {result['recall_at_5']}."]
    for r in result.get("batch_rate", []):  # type: ignore[union-attr]
        lines.append(f"Linking the {r['mentions']:,} distinct test mentions ({r.get('path', 'the linker batch path, link_strings')}, {BATCH} a batch) on {r['threads']} thread(s): "
                     f"{r['mentions_per_s']:,} mentions/s ({r['rss_mb']:,} MB resident"
                     + (f"; the pipeline's first link, the KB and encoder loaded on the way, took {r['first_link_s']} s)." if "first_link_s" in r else ")."))
    return "\n".join(lines)


def _cached(row: Dict[str, object]) -> object:
    """MB of a folder's files in the page cache after a probe (``page_cache_mb``), summed; "–" where unknown."""
    found = row.get("page_cache_mb")
    return "–" if not found else f"{sum(found.values()):,.1f}"  # type: ignore[union-attr]


def main(
    names: int = typer.Option(FULL_NAMES, help="KB size in names (bundle names first, then variants)"),
    kinds: Optional[List[str]] = typer.Option(None, "--kind", help="index kinds to compare (default: the candidates, and flat up to 1M names)"),
    work: Path = typer.Option(ROOT / "corpus" / "cache" / "umls-scale", help="encoding chunks and indexes (resumable)"),
    encoder: Optional[str] = typer.Option(None, help="encoder folder (default: the offline MiniLM)"),
    threads: int = typer.Option(1, help="torch and FAISS threads for building (the probes measure 1 and 2)"),
    queries_per_set: int = typer.Option(2000, help="test mentions (recall) and train/dev mentions (tuning)"),
    encode_only: bool = typer.Option(False, help="stop after encoding the names (resumable)"),
    part: str = typer.Option("0/1", help="I/N: encode every N-th chunk from chunk I (one process per core)"),
    of: int = typer.Option(FULL_NAMES, help="with --names below it: take the first names of this KB and their vectors"),
    keep_files: bool = typer.Option(False, help="keep every measured index's files (default: only auto's, in the whole KB folder)"),
    probe_folder: Optional[Path] = typer.Option(None, "--probe", hidden=True),
    rate_folder: Optional[Path] = typer.Option(None, "--rate", hidden=True),
    queries: Optional[Path] = typer.Option(None, hidden=True),
    k: int = typer.Option(5, hidden=True),
    whole_kb: bool = typer.Option(False, hidden=True),
    render_result: Optional[Path] = typer.Option(None, "--render", help="print the candidates' table of this result.json instead"),
    output: Optional[Path] = typer.Option(None, help="where the result is also written (default benchmarks/results/umls_scale_NAMES.json)"),
    readme: Optional[Path] = typer.Option(None, help="with --render: also write the table into this README's UMLS-SCALE block"),
) -> None:
    """Build and measure KB indexes at UMLS scale; prints JSON."""
    if render_result is not None:
        from spacy_sapbert.fileio import read_json, rewrite_between_markers

        text = render(read_json(render_result))
        if readme is not None:
            rewrite_between_markers(readme, f"Generated by `python benchmarks/umls_scale.py --render {render_result} --readme {readme}`"
                                    f" from `{render_result}`, made by `{read_json(render_result)['command']}`:\n\n{text}", block="UMLS-SCALE")
        typer.echo(text)
        return
    if probe_folder is not None:
        typer.echo(json.dumps(probe(probe_folder, queries, k, whole_kb)))  # type: ignore[arg-type]
        return
    if rate_folder is not None:
        typer.echo(json.dumps(rate(rate_folder, threads, queries)))  # type: ignore[arg-type]
        return
    from spacy_sapbert.fileio import write_json

    chosen = kinds or list(SMALL_KINDS if names <= 1_000_000 else KINDS)
    result = measure(
        names, work, chosen, encoder, threads, n_queries=queries_per_set, encode_only=encode_only,
        part=tuple(int(x) for x in part.split("/")), of=of, keep_files=keep_files,  # type: ignore[arg-type]
    )
    if "kinds" in result:  # a finished measurement (not an encoding part)
        write_json(output or ROOT / "benchmarks" / "results" / f"umls_scale_{names}.json", result)
    typer.echo(json.dumps(result, indent=2))


if __name__ == "__main__":
    typer.run(main)
