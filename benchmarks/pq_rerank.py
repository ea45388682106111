"""How many PQ bytes and re-scored candidates ``ivf-pq`` needs: recall@5 against exact search.

    python benchmarks/pq_rerank.py corpus/cache/umls-scale/names-958846-40a62deb48c6

Reads a ``benchmarks/umls_scale.py`` folder (its encoding chunks and ``test_queries.npy``, real
MiniLM vectors of names and of test mentions). For each PQ size and ``nprobe``: recall@5 of the PQ
scores alone, and after re-scoring the best 32/64/128 candidates with the fp16 vectors (what
``VectorIndex`` does for ``ivf-pq``). Writes ``benchmarks/results/pq_rerank.json``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import List

import faiss
import numpy as np
import torch
import typer

from spacy_sapbert.fileio import write_json
from spacy_sapbert.index import _add, _training_sample, exact_top_k, recall_at_k, spherical_kmeans

ROOT = Path(__file__).resolve().parents[1]


def main(
    folder: Path = typer.Argument(..., help="a benchmarks/umls_scale.py folder (chunks/ and test_queries.npy)"),
    pq_bytes: List[int] = typer.Option([96, 48], "--pq-bytes", help="PQ sub-quantizers (bytes per vector)"),
    nprobes: List[int] = typer.Option([128, 256, 512], "--nprobe"),
    candidates: List[int] = typer.Option([32, 64, 128], "--candidates"),
    train_sample: int = typer.Option(100_000, help="vectors that train the centroids and the PQ codebooks"),
    threads: int = typer.Option(1),
    output: Path = typer.Option(ROOT / "benchmarks" / "results" / "pq_rerank.json"),
) -> None:
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    chunks = [np.load(f, mmap_mode="r", allow_pickle=False) for f in sorted((folder / "chunks").glob("chunk_*.npy"))]
    queries = np.load(folder / "test_queries.npy", allow_pickle=False)
    n, dim = sum(len(c) for c in chunks), int(chunks[0].shape[1])
    exact = exact_top_k(chunks, queries, 5)
    full16 = np.concatenate([np.asarray(c, dtype=np.float16) for c in chunks])  # the re-scoring vectors
    sample = _training_sample(chunks, n, train_sample, 0)
    nlist = int(4 * np.sqrt(n))
    centroids = spherical_kmeans(sample, nlist)
    rows = []
    for m in pq_bytes:
        quantizer = faiss.IndexFlatIP(dim)
        quantizer.add(centroids)
        index = faiss.IndexIVFPQ(quantizer, dim, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
        index.train(sample)
        t0 = time.perf_counter()
        for c in chunks:
            _add(index, np.ascontiguousarray(c, dtype=np.float32))
        add_s = time.perf_counter() - t0
        for nprobe in nprobes:
            index.nprobe = nprobe
            t0 = time.perf_counter()
            _, found = index.search(queries, max(candidates))
            row = {
                "pq_bytes": m, "nprobe": nprobe, "nlist": nlist, "add_s": round(add_s, 1),
                "pq_ms_per_query": round(1000 * (time.perf_counter() - t0) / len(queries), 2),
                "recall_at_5_pq_only": round(recall_at_k(found, exact), 4),
            }
            for c in candidates:
                cand = found[:, :c]
                vecs = full16[np.maximum(cand, 0).ravel()].astype(np.float32).reshape(*cand.shape, dim)
                sims = np.einsum("qcd,qd->qc", vecs, queries)
                sims[cand < 0] = -np.inf
                top = np.take_along_axis(cand, np.argsort(-sims, axis=1)[:, :5], 1)
                row[f"recall_at_5_rescored_{c}"] = round(recall_at_k(top, exact), 4)
            typer.echo(json.dumps(row), err=True)
            rows.append(row)
    write_json(output, {"command": "python benchmarks/pq_rerank.py " + " ".join(sys.argv[1:]), "names": n, "queries": int(len(queries)), "rows": rows})


if __name__ == "__main__":
    typer.run(main)
