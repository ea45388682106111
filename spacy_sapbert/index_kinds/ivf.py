"""``ivf-sq8`` and ``ivf-fp16``: the vectors split into lists around cosine k-means centroids (an
inverted file, IVF); a query scans the codes of the ``nprobe`` lists nearest to it.

Centroids are trained with torch (``spherical_kmeans``), and vectors assigned to lists with torch
(``faiss_base._add``): faiss-cpu's BLAS made both many times slower here.
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional, Sequence

import numpy as np

from ..registries import index_kinds
from .faiss_base import FaissIndex, nearest_centroids


def spherical_kmeans(vectors: np.ndarray, k: int, iterations: int = 10, seed: int = 0, bf16: bool = False) -> np.ndarray:
    """Unit-length centroids of ``vectors`` by cosine k-means, with torch matrix products
    (``nearest_centroids``; ``bf16``: in bfloat16 there).

    FAISS' own k-means trains the same IVF coarse quantizer, but through the faiss-cpu wheel's
    BLAS, about 10x slower than torch on the CPUs measured (``benchmarks/flat_search.py``);
    IVF training at millions of names would otherwise take most of an hour.
    """
    import torch

    x = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    k = min(k, len(x))
    gen = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(len(x), generator=gen)[:k]].clone()
    for _ in range(iterations):
        assign = nearest_centroids(x, centroids, bf16)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k)
        empty = counts == 0  # re-seed empty clusters with random points
        sums[empty] = x[torch.randint(len(x), (int(empty.sum()),), generator=gen)]
        centroids = torch.nn.functional.normalize(sums, dim=1)
    return centroids.numpy()


def default_nprobe(nlist: int) -> int:
    """An eighth of the lists (recall@5 0.99 at 958k names needed 512 of 3,916), at least 32."""
    return min(nlist, max(32, nlist // 8))


class IvfIndex(FaissIndex):
    """An IVF index of ``4 √n`` lists (at most 65,536) holding ``codes`` (a FAISS code string)."""

    codes: ClassVar[str] = ""
    faiss_class = "IndexIVF"

    @classmethod
    def code_string(cls, dim: int) -> str:
        return cls.codes

    @classmethod
    def factory_string(cls, dim: int, n: int) -> str:
        nlist = max(1, min(65536, int(4 * np.sqrt(max(n, 1)))))
        return f"IVF{nlist},{cls.code_string(dim)}"

    @classmethod
    def train(cls, index: Any, sample: np.ndarray, seed: int) -> None:
        """Centroids first (``spherical_kmeans``, in bf16 where ``bf16_products``); FAISS then trains only the codes."""
        import faiss

        ivf = faiss.extract_index_ivf(index)
        ivf.quantizer.add(spherical_kmeans(sample, ivf.nlist, seed=seed, bf16=cls.bf16_products()))
        if isinstance(index, faiss.IndexIVFPQ):
            # the factory asks for polysemous training (code orderings for Hamming
            # pre-filtering, which we never use); it made a 20k-name build take minutes
            index.do_polysemous_training = False
        index.train(sample)

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "IvfIndex":
        import faiss

        created = super().create(kind, chunks, dim, n, seed=seed, nprobe=nprobe)
        ivf = faiss.extract_index_ivf(created.index)
        ivf.nprobe = nprobe or default_nprobe(ivf.nlist)
        created.meta["nprobe"] = int(ivf.nprobe)
        return created  # type: ignore[return-value]

    def set_nprobe(self, nprobe: int) -> None:
        import faiss

        faiss.extract_index_ivf(self.index).nprobe = nprobe
        if self._gpu_index is not None:
            faiss.GpuParameterSpace().set_index_parameter(self._gpu_index, "nprobe", nprobe)
        self.meta["nprobe"] = nprobe

    def _apply_search_settings(self) -> None:
        import faiss

        faiss.extract_index_ivf(self.index).nprobe = int(self.meta.get("nprobe", 32))  # type: ignore[call-overload]


@index_kinds.register("ivf-sq8")
class IvfSq8Index(IvfIndex):
    """IVF lists of SQ8 codes (a quarter of float32)."""

    codes = "SQ8"


@index_kinds.register("ivf-fp16")
class IvfFp16Index(IvfIndex):
    """IVF lists of fp16 codes (half of float32)."""

    codes = "SQfp16"
