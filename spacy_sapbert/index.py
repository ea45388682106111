"""Vector search over the KB's name vectors (inner product on unit vectors = cosine).

The kinds live in ``index_kinds/`` (one module each, registered by name); this module keeps the
names other code imports: ``VectorIndex`` (build and load, dispatching on the kind), the file
names, and the measuring and tuning helpers.
"""
from __future__ import annotations

from .index_kinds.base import (
    INDEX_META,
    NEIGHBOURS_K,
    NEIGHBOURS_MAX_NAMES,
    NEIGHBOURS_ROWS,
    NEIGHBOURS_SCORES,
    VectorIndex,
    auto_index_kind,
    choose_kind,
)
from .index_kinds.faiss_base import INDEX_FILE, TRAIN_SAMPLE, _add, _training_sample
from .index_kinds.flat import SHORTLIST_CHUNK, SHORTLIST_FILE, SHORTLIST_MIN_NAMES, _top_k
from .index_kinds.ivf import default_nprobe, spherical_kmeans
from .index_kinds.ivf_pq import RERANK_CANDIDATES, RERANK_CHOICES, RERANK_FILE, NpyRows, pq_subquantizers
from .index_kinds.tuning import exact_top_k, recall_at_k, tune_ef_search, tune_nprobe

__all__ = [
    "INDEX_FILE", "INDEX_META", "NEIGHBOURS_K", "NEIGHBOURS_MAX_NAMES", "NEIGHBOURS_ROWS", "NEIGHBOURS_SCORES",
    "RERANK_CANDIDATES", "RERANK_CHOICES", "RERANK_FILE", "SHORTLIST_CHUNK", "SHORTLIST_FILE", "SHORTLIST_MIN_NAMES",
    "TRAIN_SAMPLE", "NpyRows", "VectorIndex", "_add", "_top_k", "_training_sample", "auto_index_kind", "choose_kind",
    "default_nprobe", "exact_top_k", "pq_subquantizers", "recall_at_k", "spherical_kmeans", "tune_ef_search", "tune_nprobe",
]
