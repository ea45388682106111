"""Measuring and tuning approximate kinds against exact search: the exact top k (streamed over
chunks), recall@k, and the smallest IVF ``nprobe`` / HNSW ``efSearch`` reaching a recall target."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from .base import VectorIndex
from .ivf_pq import RERANK_CHOICES


def exact_top_k(chunks: Sequence[np.ndarray], queries: np.ndarray, k: int) -> np.ndarray:
    """Exact top-k rows by inner product, streamed over vector chunks (e.g. memory-mapped
    encoding chunks): the ground truth an approximate index is measured against."""
    import torch

    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    best_s = torch.full((len(q), k), -float("inf"))
    best_r = torch.full((len(q), k), -1, dtype=torch.int64)
    start = 0
    for c in chunks:
        if len(c):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # read-only memory maps; never written
                base = torch.from_numpy(np.ascontiguousarray(c, dtype=np.float32))
            sims = q @ base.T
            top = torch.topk(sims, min(k, sims.shape[1]), dim=1)
            s = torch.cat([best_s, top.values], 1)
            r = torch.cat([best_r, top.indices + start], 1)
            keep = torch.topk(s, k, dim=1).indices
            best_s, best_r = torch.gather(s, 1, keep), torch.gather(r, 1, keep)
        start += len(c)
    return best_r.numpy()


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Share of the exact top-k rows that a search also returned in its first k."""
    k = exact.shape[1]
    return float(np.mean([len(set(a[:k].tolist()) & set(b.tolist())) / k for a, b in zip(found, exact)]))


def tune_nprobe(
    index: VectorIndex, queries: np.ndarray, exact: np.ndarray, target: float = 0.99, choices: Optional[Sequence[int]] = None
) -> Tuple[int, float]:
    """The smallest ``nprobe`` whose recall@k on ``queries`` reaches ``target``; it is set on the
    index and returned with the recall it measured. By default the choices are the powers of two
    from 8 up to every list. An index that re-scores PQ candidates also gets the smallest
    re-scoring depth (``RERANK_CHOICES``) reaching the target at that nprobe: deeper re-scoring
    costs little, while every doubling of nprobe doubles the codes scanned per query."""
    if choices is None:
        import faiss

        nlist = faiss.extract_index_ivf(index.index).nlist  # type: ignore[attr-defined]
        choices = [p for p in (2**i for i in range(3, 17)) if p < nlist] + [nlist]
    if getattr(index, "rerank", None) is None:
        return _smallest_reaching(index.set_nprobe, lambda: index.search(queries, exact.shape[1])[1], exact, target, choices)
    return _smallest_reaching(index.set_nprobe, lambda: _best_depth(index, queries, exact, target), exact, target, choices)


def tune_probe_margin(
    index: VectorIndex, queries: np.ndarray, exact: np.ndarray, target: float = 0.99, choices: Optional[Sequence[float]] = None
) -> Tuple[float, float]:
    """``tune_nprobe`` for ``ivf-rabitq``: the smallest ``probe_margin`` (how far below a query's best
    centroid score a list is still probed) whose recall@k reaches ``target``, with the smallest
    re-scoring depth reaching it there; both are set on the index."""
    from .ivf_rabitq import PROBE_MARGINS

    return _smallest_reaching(
        index.set_probe_margin, lambda: _best_depth(index, queries, exact, target), exact, target, choices or PROBE_MARGINS,  # type: ignore[attr-defined]
    )


def _best_depth(index: VectorIndex, queries: np.ndarray, exact: np.ndarray, target: float) -> np.ndarray:
    """The smallest re-scoring depth (the index's ``rerank_choices``, else ``RERANK_CHOICES``) whose re-scored rows reach ``target`` recall
    (else the deepest), set as ``rerank_candidates``; its rows. One pass over the codes serves every depth."""
    k, choices = exact.shape[1], getattr(index, "rerank_choices", RERANK_CHOICES)
    ranked = index._code_search(queries, max(choices))[1]  # type: ignore[attr-defined]
    for depth in choices:
        rows = index._rescore(queries, ranked[:, :depth], k)  # type: ignore[attr-defined]
        if recall_at_k(rows[1], exact) >= target:
            break
    index.meta["rerank_candidates"] = depth
    return rows[1]


def tune_ef_search(
    index: VectorIndex, queries: np.ndarray, exact: np.ndarray, target: float = 0.99,
    choices: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
) -> Tuple[int, float]:
    """``tune_nprobe`` for HNSW: the smallest efSearch reaching ``target`` recall@k."""
    return _smallest_reaching(index.set_ef_search, lambda: index.search(queries, exact.shape[1])[1], exact, target, choices)


def _smallest_reaching(
    setter: Callable[[Any], None], search: Callable[[], np.ndarray], exact: np.ndarray, target: float,
    choices: Sequence[Any], plateau: float = 0.001,
) -> Tuple[Any, float]:
    """The first of ``choices`` whose search reaches ``target`` recall. Short of it, the search stops
    where the next choice gains less than ``plateau`` (wider searches cost more and add nothing:
    at millions of names the last choices would take tens of minutes each) and keeps the last."""
    value, recall = 0, -1.0
    for value in choices:
        previous = recall
        setter(value)
        recall = recall_at_k(search(), exact)
        if recall >= target or recall - previous < plateau:
            break
    return value, recall
