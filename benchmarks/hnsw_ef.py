"""HNSW's recall against efSearch on real vectors: the curve behind ``tune_ef_search``.

    python benchmarks/hnsw_ef.py corpus/cache/umls-scale/names-958846-40a62deb48c6

Loads the ``hnsw`` index that ``benchmarks/umls_scale.py`` built in that folder (``index-hnsw``)
and the folder's test mention vectors; for each efSearch, recall@5 against exact search over the
encoding chunks and ms per query (1 thread). Writes ``benchmarks/results/hnsw_ef.json``.
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
from spacy_sapbert.index import VectorIndex, exact_top_k, recall_at_k

ROOT = Path(__file__).resolve().parents[1]


def main(
    folder: Path = typer.Argument(..., help="a benchmarks/umls_scale.py folder with index-hnsw/"),
    ef_search: List[int] = typer.Option([16, 32, 64, 128, 256, 512], "--ef-search"),
    output: Path = typer.Option(ROOT / "benchmarks" / "results" / "hnsw_ef.json"),
) -> None:
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    chunks = [np.load(f, mmap_mode="r", allow_pickle=False) for f in sorted((folder / "chunks").glob("chunk_*.npy"))]
    queries = np.load(folder / "test_queries.npy", allow_pickle=False)
    exact = exact_top_k(chunks, queries, 5)
    index = VectorIndex.from_disk(folder / "index-hnsw")
    rows = []
    for ef in ef_search:
        index.set_ef_search(ef)
        t0 = time.perf_counter()
        found = index.search(queries, 5)[1]
        rows.append({"ef_search": ef, "ms_per_query": round(1000 * (time.perf_counter() - t0) / len(queries), 3), "recall_at_5": round(recall_at_k(found, exact), 4)})
        typer.echo(json.dumps(rows[-1]), err=True)
    write_json(output, {"command": "python benchmarks/hnsw_ef.py " + " ".join(sys.argv[1:]), "names": len(index), "queries": int(len(queries)), "rows": rows})


if __name__ == "__main__":
    typer.run(main)
