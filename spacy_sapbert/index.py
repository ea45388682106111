"""Vector search over the KB's name vectors with FAISS (inner product on unit vectors = cosine).

Exact ``flat`` search is the default; the compressed and approximate kinds exist for
UMLS-sized KBs, where a float32 flat index no longer fits in a laptop's memory.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Dict, Tuple, Union

import faiss
import numpy as np

from .fileio import read_json, write_json

INDEX_KINDS = ("flat", "flat-fp16", "sq8", "hnsw", "ivf-sq8")
INDEX_FILE = "index.faiss"
INDEX_META = "index.json"


def auto_index_kind(n_vectors: int) -> str:
    """Exact search while it is cheap; int8-compressed exact search past a million names."""
    return "flat" if n_vectors <= 1_000_000 else "sq8"


def _factory_string(kind: str, dim: int, n: int) -> str:
    if kind == "flat":
        return "Flat"
    if kind == "flat-fp16":
        return "SQfp16"
    if kind == "sq8":
        return "SQ8"
    if kind == "hnsw":
        return "HNSW32,SQ8"
    if kind == "ivf-sq8":
        nlist = max(1, min(65536, int(4 * np.sqrt(max(n, 1)))))
        return f"IVF{nlist},SQ8"
    raise ValueError(f"unknown index kind {kind!r}; choose one of {INDEX_KINDS} or 'auto'")


class VectorIndex:
    """A FAISS inner-product index plus a record of how it was built."""

    def __init__(self, index: faiss.Index, meta: Dict[str, object]):
        self.index = index
        self.meta = meta

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def build(cls, vectors: np.ndarray, kind: str = "auto", seed: int = 0) -> "VectorIndex":
        """Build an index over L2-normalised float32 ``vectors`` (n, dim)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2:
            raise ValueError(f"expected a 2-d array of vectors, got shape {vectors.shape}")
        n, dim = vectors.shape
        if kind == "auto":
            kind = auto_index_kind(n)
        index = faiss.index_factory(dim, _factory_string(kind, dim, n), faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            rng = np.random.default_rng(seed)
            sample = vectors if n <= 200_000 else vectors[rng.choice(n, 200_000, replace=False)]
            index.train(sample)
        if n:
            index.add(vectors)
        if kind.startswith("ivf"):
            faiss.extract_index_ivf(index).nprobe = 32
        return cls(index, {"kind": kind, "dim": dim, "n": n, "metric": "inner_product", "faiss": faiss.__version__})

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Scores and name rows, both (n_queries, k); rows are -1 where fewer than k exist."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (n, {self.dim}), got {queries.shape}")
        k = max(1, min(k, max(len(self), 1)))
        if len(self) == 0 or queries.shape[0] == 0:
            return np.zeros((queries.shape[0], k), np.float32), np.full((queries.shape[0], k), -1, np.int64)
        if isinstance(self.index, faiss.IndexFlat):
            return self._flat_search(queries, k)
        return self.index.search(queries, k)

    def _flat_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact search as a torch matmul + top-k over the index's own (possibly mapped) vectors.

        Same results as FAISS' flat search and much faster here (``benchmarks/flat_search.py``):
        the faiss-cpu wheel's BLAS path is slow on this CPU, torch's matmul is not.
        """
        import torch

        n, d = len(self), self.dim
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only mapping; we never write to it
            base = torch.from_numpy(faiss.rev_swig_ptr(self.index.get_xb(), n * d).reshape(n, d))
        block = max(1, int(5e7 // n))  # about 200 MB of scores at a time
        scores, rows = [], []
        with torch.inference_mode():
            for start in range(0, len(queries), block):
                sims = torch.from_numpy(queries[start : start + block]) @ base.T
                top = torch.topk(sims, k, dim=1)
                scores.append(top.values.numpy())
                rows.append(top.indices.numpy())
        return np.concatenate(scores), np.concatenate(rows).astype(np.int64)

    def to_disk(self, path: Union[str, Path]) -> None:
        """Write ``index.faiss`` and ``index.json`` into folder ``path``, each atomically."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{INDEX_FILE}.", suffix=".tmp", dir=path)
        os.close(fd)
        try:
            faiss.write_index(self.index, tmp)
            os.replace(tmp, path / INDEX_FILE)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        write_json(path / INDEX_META, self.meta)

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "VectorIndex":
        """Load; ``mmap`` maps the vectors instead of reading them, so loading is near-instant."""
        path = Path(path)
        if not (path / INDEX_FILE).is_file():
            raise FileNotFoundError(f"{path} has no {INDEX_FILE}")
        meta = read_json(path / INDEX_META)
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            index = faiss.read_index(str(path / INDEX_FILE), flags)
        except RuntimeError:
            index = faiss.read_index(str(path / INDEX_FILE))
        if index.ntotal != meta.get("n") or index.d != meta.get("dim"):
            raise ValueError(f"{path}/{INDEX_FILE} does not match {INDEX_META} (n/dim differ): rebuild the index")
        if isinstance(index, faiss.IndexIVF) or "nprobe" in meta:
            faiss.extract_index_ivf(index).nprobe = int(meta.get("nprobe", 32))  # type: ignore[arg-type]
        return cls(index, meta)

