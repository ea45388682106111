"""Exact search: the faiss-cpu wheel's IndexFlatIP.search versus our torch matmul + top-k path.

    python benchmarks/flat_search.py      # 256 queries, 75,000 x 384 vectors, 1 thread, median of 3
"""
from __future__ import annotations

import faiss
import numpy as np
import torch
from speed import median_time  # benchmarks/ is the script's folder, so its sibling imports

from spacy_sapbert.index import VectorIndex


def main(n: int = 75_000, dim: int = 384, n_queries: int = 256, k: int = 20) -> None:
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:n_queries] + 0.05 * rng.normal(size=(n_queries, dim)).astype(np.float32)
    index = VectorIndex.build(vectors, kind="flat")
    ours = median_time(lambda: index.search(queries, k), 3)
    theirs = median_time(lambda: index.index.search(queries, k), 3)
    same = (index.search(queries, k)[1] == index.index.search(queries, k)[1]).mean()
    print(f"{n_queries} queries, {n} x {dim}, k={k}, 1 thread: faiss {theirs:.3f} s, torch {ours:.3f} s, same rows {same:.4f}")


if __name__ == "__main__":
    main()
