"""UMLS-scale search: a KB the size of the MedMentions UMLS dictionary on a laptop.

    python benchmarks/umls_scale.py --names 7500000 --kind ivf-pq    # the issue's size
    python benchmarks/umls_scale.py --names 1000000                  # every index kind, smaller

Encoding 7.5M names takes hours on 2 cores; split it over one process per core first
(``--encode-only --part 0/2`` and ``--part 1/2``), then run the command above.

Names: the open bundle's names (MeSH, MONDO, HPO, DOID, EFO, GO; ``spacy project run preprocess``)
and, past its ~1.09M names, UMLS-style variants of them ("x, nos", "x (disorder)", "history of x",
...) that belong to the same concept, the way UMLS atoms vary. Every vector is a real encoder output
(encoding is resumable: kill it and run the same command again). Queries are real mentions: the
test mentions of NCBI-disease, BC5CDR-disease and BC5CDR-chemical (recall is reported on them);
the train/dev mentions tune IVF's ``nprobe``.

Per index kind: build seconds and file size, then in a fresh process: load seconds (memory-mapped),
resident memory after loading and searching, query ms and recall@5 against exact search. Finally
the whole KB folder (names, concepts, chosen index) is loaded by ``LinkingKB.from_disk`` in a fresh
process: ``load_s``, ``rss_mb``. Prints JSON; ``benchmarks/speed.py`` (without ``--quick``) stores it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import typer

from spacy_sapbert.machine import rss_mb

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "corpus" / "open_bundle.concepts.jsonl"
# UMLS-like atom variants: the same concept written the ways other vocabularies write it
VARIANTS = (
    "{}, nos", "{} (disorder)", "history of {}", "{} unspecified", "[x]{}", "suspected {}",
    "{} (finding)", "chronic {}", "{}, not otherwise specified", "acute {}", "familial {}", "{} (substance)",
)
KINDS = ("flat", "flat-fp16", "sq8", "ivf-sq8", "ivf-fp16", "ivf-pq", "hnsw")
# Recall target of nprobe/efSearch tuning on the train/dev mentions. Unseen test mentions score
# lower: tuned to 0.99 at 7.5M names, ivf-pq gave the test mentions 0.9861; the margin is for them.
TUNE_TARGET = 0.995


def scaled_records(bundle: Path, n_names: int) -> Iterator:
    """The bundle's concepts; variants of their names are added round by round until the KB
    reaches ``n_names`` distinct names (fewer bundle names are kept when ``n_names`` is smaller).
    A variant that normalises to a name the KB already has is skipped, since it adds no row."""
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
    for r, names in zip(records, kept):
        if names:
            yield ConceptRecord(id=r.id, name=names[0], synonyms=names[1:], types=r.types, xrefs=r.xrefs)


def query_strings(splits: Sequence[str], limit: int, seed: int = 0) -> List[str]:
    """Up to ``limit`` distinct normalised mentions of the three benchmarks' ``splits`` (real
    query text), a seeded sample when there are more."""
    from spacy_sapbert.evaluation.datasets import load_split
    from spacy_sapbert.normalize import normalize_name

    out = set()
    for dataset in ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical"):
        for split in splits:
            out.update(normalize_name(m.text) for d in load_split(dataset, split) for m in d.mentions)
    ordered = sorted(out)
    if len(ordered) <= limit:
        return ordered
    return [ordered[i] for i in sorted(np.random.default_rng(seed).choice(len(ordered), limit, replace=False))]


def probe(folder: Path, queries: Path, k: int, whole_kb: bool) -> Dict[str, float]:
    """Run in a fresh process: load (memory-mapped), search, measure time and resident memory."""
    import faiss

    faiss.omp_set_num_threads(1)
    from spacy_sapbert.index import VectorIndex
    from spacy_sapbert.search import LinkingKB

    q = np.load(queries, allow_pickle=False)
    base = rss_mb()
    t0 = time.perf_counter()
    lkb = LinkingKB.from_disk(folder) if whole_kb else None
    index = lkb.index if lkb is not None else VectorIndex.from_disk(folder)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, rows = index.search(q, k)
    search_s = time.perf_counter() - t0
    if lkb is not None:
        lkb.candidates(q[:100], top_k=k)  # the concept lookups a link makes work on the mapped tables
    np.save(folder / "probe_rows.npy", rows, allow_pickle=False)
    return {
        "load_s": round(load_s, 3),
        "query_ms": round(1000 * search_s / len(q), 3),
        "rss_mb": round(rss_mb(), 1),
        "rss_before_load_mb": round(base, 1),
    }  # (resident memory now, not the peak: a child started by a big parent would inherit the parent's peak)


def run_probe(folder: Path, queries: Path, k: int, whole_kb: bool = False) -> Dict[str, float]:
    cmd = [sys.executable, str(Path(__file__)), "--probe", str(folder), "--queries", str(queries), "--k", str(k)]
    out = subprocess.run(cmd + (["--whole-kb"] if whole_kb else []), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def folder_mb(path: Path) -> float:
    """The index's files (not the probe's output)."""
    return round(sum(f.stat().st_size for f in path.iterdir() if f.is_file() and f.name != "probe_rows.npy") / 2**20, 1)


def measure(
    n_names: int, work: Path, kinds: Sequence[str], encoder_path: Optional[str], threads: int, k: int = 5,
    n_queries: int = 2000, encode_only: bool = False, part: Tuple[int, int] = (0, 1),
) -> Dict[str, object]:
    import faiss
    import torch

    from spacy_sapbert.encoder import SapEncoder
    from spacy_sapbert.fileio import read_json, write_json
    from spacy_sapbert.index import (
        INDEX_META,
        VectorIndex,
        auto_index_kind,
        exact_top_k,
        recall_at_k,
        tune_ef_search,
        tune_nprobe,
    )
    from spacy_sapbert.kb import ConceptKB
    from spacy_sapbert.search import ChunksIncomplete, LinkingKB, encode_chunks

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    encoder = SapEncoder.load(encoder_path)
    t0 = time.perf_counter()
    kb = ConceptKB.from_records(scaled_records(BUNDLE, n_names))
    typer.echo(f"KB: {kb.n_names:,} names, {len(kb):,} concepts ({time.perf_counter() - t0:.0f} s)", err=True)
    work = work / f"names-{kb.n_names}-{encoder.fingerprint[:12]}"
    t0 = time.perf_counter()
    try:
        files = encode_chunks(encoder, kb.names, kb.fingerprint, work / "chunks", progress=True, part=part)
    except ChunksIncomplete as e:  # this process's part is done; others are still encoding
        return {"names": kb.n_names, "part": list(part), "incomplete": str(e)}
    encode_s = time.perf_counter() - t0
    if encode_only:
        return {"names": kb.n_names, "chunks": str(work / "chunks"), "encode_s_this_run": round(encode_s, 1)}
    chunks = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files]

    tune_q = encoder.encode(query_strings(("train", "dev"), n_queries))
    test_q = encoder.encode(query_strings(("test",), n_queries))
    np.save(work / "test_queries.npy", test_q, allow_pickle=False)
    t0 = time.perf_counter()
    exact_test = exact_top_k(chunks, test_q, k)
    exact_tune = exact_top_k(chunks, tune_q, k)
    typer.echo(f"exact top-{k} of {len(test_q) + len(tune_q):,} queries: {time.perf_counter() - t0:.0f} s", err=True)

    results: Dict[str, Dict[str, object]] = {}
    for kind in kinds:
        folder = work / f"index-{kind}"
        if (folder / "measured.json").is_file():  # built and measured by an earlier run
            results[kind] = read_json(folder / "measured.json")
            typer.echo(f"{kind} (measured earlier): {results[kind]}", err=True)
            continue
        if (folder / "built.json").is_file():  # built and saved by an earlier run: tune and probe again
            index = VectorIndex.from_disk(folder)
            row: Dict[str, object] = read_json(folder / "built.json")
        else:
            t0 = time.perf_counter()
            index = VectorIndex.build(chunks, kind=kind)
            row = {"build_s": round(time.perf_counter() - t0, 1)}
            index.to_disk(folder)
            write_json(folder / "built.json", row)
        if "nprobe" in index.meta:  # the smallest nprobe reaching the target on the tuning queries
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
        row["recall_at_5"] = round(recall_at_k(np.load(folder / "probe_rows.npy"), exact_test), 4)
        write_json(folder / "measured.json", row)
        results[kind] = row
        typer.echo(f"{kind}: {row}", err=True)

    chosen = auto_index_kind(kb.n_names)
    whole = work / "linking-kb"
    if chosen in results and not (whole / "meta.json").is_file():
        LinkingKB.assemble(kb, VectorIndex.from_disk(work / f"index-{chosen}", mmap=False), encoder).to_disk(whole)
    out: Dict[str, object] = {
        "command": "python benchmarks/umls_scale.py " + " ".join(sys.argv[1:]),
        "names": kb.n_names,
        "concepts": len(kb),
        "encoder": encoder.describe(),
        "encode_s_this_run": round(encode_s, 1),
        "test_queries": int(len(test_q)),
        "tune_queries": int(len(tune_q)),
        "kinds": results,
        "auto_kind": chosen,
        "tune_target": TUNE_TARGET,
    }
    if chosen in results:
        whole_row = run_probe(whole, work / "test_queries.npy", k, whole_kb=True)
        out.update(
            load_s=whole_row["load_s"],
            rss_mb=whole_row["rss_mb"],
            recall_at_5=round(recall_at_k(np.load(whole / "probe_rows.npy"), exact_test), 4),
            whole_kb=whole_row,
        )
    write_json(work / "result.json", out)
    return out


def main(
    names: int = typer.Option(7_500_000, help="KB size in names (bundle names first, then variants)"),
    kinds: List[str] = typer.Option(list(KINDS), "--kind", help="index kinds to compare"),
    work: Path = typer.Option(ROOT / "corpus" / "cache" / "umls-scale", help="encoding chunks and indexes (resumable)"),
    encoder: Optional[str] = typer.Option(None, help="encoder folder (default: the offline MiniLM)"),
    threads: int = typer.Option(1, help="torch and FAISS threads"),
    queries_per_set: int = typer.Option(2000, help="test mentions (recall) and train/dev mentions (nprobe tuning)"),
    encode_only: bool = typer.Option(False, help="stop after encoding the names (resumable)"),
    part: str = typer.Option("0/1", help="I/N: encode every N-th chunk from chunk I (one process per core)"),
    probe_folder: Optional[Path] = typer.Option(None, "--probe", hidden=True),
    queries: Optional[Path] = typer.Option(None, hidden=True),
    k: int = typer.Option(5, hidden=True),
    whole_kb: bool = typer.Option(False, hidden=True),
) -> None:
    """Build and measure KB indexes at UMLS scale; prints JSON."""
    if probe_folder is not None:
        typer.echo(json.dumps(probe(probe_folder, queries, k, whole_kb)))
        return
    typer.echo(json.dumps(measure(
        names, work, kinds, encoder, threads, n_queries=queries_per_set, encode_only=encode_only,
        part=tuple(int(x) for x in part.split("/")),  # type: ignore[arg-type]
    ), indent=2))


if __name__ == "__main__":
    typer.run(main)
