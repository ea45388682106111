"""What the FAISS kinds share: the ``index.faiss`` file, building from a factory string (trained on a
sample), IVF list assignment with torch, and a GPU clone where faiss-gpu is installed.

FAISS is imported where it is used, so that listing the kinds (the CLI's help) does not load it.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from ..fileio import atomic_path
from .base import INDEX_META, VectorIndex, check_size

INDEX_FILE = "index.faiss"
TRAIN_SAMPLE = 200_000  # vectors used to train SQ8 ranges and IVF centroids


def _training_sample(chunks: Sequence[np.ndarray], n: int, size: int, seed: int) -> np.ndarray:
    """Up to ``size`` rows drawn uniformly from all chunks, without concatenating them."""
    if n <= size:
        return np.ascontiguousarray(np.concatenate(chunks), dtype=np.float32)
    rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
    out, start = [], 0
    for c in chunks:
        mine = rows[(rows >= start) & (rows < start + len(c))] - start
        out.append(np.asarray(c[mine], dtype=np.float32))
        start += len(c)
    return np.ascontiguousarray(np.concatenate(out))


def nearest_centroids(x, centroids, bf16: bool = False):
    """Each row of ``x`` (a torch float32 tensor)'s nearest of ``centroids`` by inner product, as a
    torch int64 tensor: blocks of matrix products, so that the scores never take more than ~200 MB.

    ``bf16``: the products in bfloat16, for CPUs where bf16 is the faster choice (``encoder.fast_bf16``:
    on AMD CPUs torch's float32 products run MKL's AVX2 kernels, bf16 ones oneDNN's AVX512-BF16).
    Rounding may then pick a centroid a hair less near, which only moves a vector into a
    neighbouring list."""
    import torch

    block = max(1, int(5e7 // len(centroids)))
    if bf16:
        c = centroids.to(torch.bfloat16).T
        return torch.cat([torch.argmax(x[i : i + block].to(torch.bfloat16) @ c, dim=1) for i in range(0, len(x), block)])
    return torch.cat([torch.argmax(x[i : i + block] @ centroids.T, dim=1) for i in range(0, len(x), block)])


def _add(index: Any, vectors: np.ndarray, bf16: bool = False) -> None:
    """``index.add``, except that IVF list assignment is a torch matrix product (same lists,
    many times faster than faiss-cpu's BLAS here; ``bf16``: ``nearest_centroids``')."""
    import faiss

    if not isinstance(index, faiss.IndexIVF) or isinstance(index, faiss.IndexIVFFastScan):  # (packed fast-scan lists: FAISS assigns)
        index.add(vectors)
        return
    import torch

    centroids = torch.from_numpy(index.quantizer.reconstruct_n(0, index.nlist))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only memory-mapped chunk: never written
        x = torch.from_numpy(vectors)
    assign = nearest_centroids(x, centroids, bf16)
    lists = np.ascontiguousarray(assign.numpy(), dtype=np.int64)
    index.add_core(len(vectors), faiss.swig_ptr(vectors), None, faiss.swig_ptr(lists))


def _faiss_to_gpu(index: Any, device: str) -> Optional[Any]:
    """A GPU clone of ``index`` (fp16 storage where FAISS allows it), or None where the installed
    FAISS has no GPU support, sees no GPU, or cannot put this kind on one (HNSW): the CPU index
    then keeps answering, with a warning in the last case."""
    import faiss

    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
        return None
    import torch

    options = faiss.GpuClonerOptions()
    options.useFloat16 = True
    try:
        clone = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), torch.device(device).index or 0, index, options)
    except RuntimeError as e:  # e.g. HNSW: no GPU implementation
        warnings.warn(f"FAISS cannot move this index to {device} ({e}); it searches on the CPU", stacklevel=2)
        return None
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        faiss.GpuParameterSpace().set_index_parameter(clone, "nprobe", ivf.nprobe)
    return clone


class FaissIndex(VectorIndex):
    """A FAISS inner-product index made by ``faiss.index_factory(dim, factory)``; it searches its own
    codes (on a GPU clone where faiss-gpu can make one)."""

    factory: ClassVar[str] = ""  # the FAISS factory string (``factory_string`` where it depends on the size)
    faiss_class: ClassVar[str] = "Index"  # the FAISS class ``index.faiss`` must hold for this kind
    main_file = INDEX_FILE
    transient: ClassVar[Tuple[str, ...]] = ("_gpu_index",)

    def __init__(self, index: Any, meta: Dict[str, object]):
        super().__init__(meta)
        self.index = index
        self._gpu_index = None  # a FAISS GPU clone, when faiss-gpu is installed and a GPU is used

    @classmethod
    def factory_string(cls, dim: int, n: int) -> str:
        return cls.factory

    @classmethod
    def train_size(cls, n: int) -> int:
        """How many of the ``n`` vectors ``train`` sees (drawn uniformly)."""
        return TRAIN_SAMPLE

    @classmethod
    def train(cls, index: Any, sample: np.ndarray, seed: int) -> None:
        """Train the codes (SQ8 ranges, PQ codebooks) on ``sample``."""
        index.train(sample)

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "FaissIndex":
        import faiss

        index = faiss.index_factory(dim, cls.factory_string(dim, n), faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            cls.train(index, _training_sample(chunks, n, cls.train_size(n), seed), seed)
        return cls(index, {"kind": kind, "dim": dim, "n": n, "metric": "inner_product", "faiss": faiss.__version__})

    @classmethod
    def bf16_products(cls) -> bool:
        """Whether IVF list assignment and k-means multiply in bf16 (``nearest_centroids``): off, so that
        a kind's lists stay what they were measured with; a kind chosen on bf16 measurements turns it on."""
        return False

    def add_vectors(self, vectors: np.ndarray) -> None:
        _add(self.index, np.ascontiguousarray(vectors, dtype=np.float32), bf16=self.bf16_products())

    def search_vectors(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        return self._code_search(queries, k)

    def _code_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """FAISS' own search (on the GPU copy when there is one): the compressed codes' ranking."""
        index = self.index if self._gpu_index is None else self._gpu_index
        return index.search(queries, min(k, len(self)))

    def use_device(self, device: str) -> None:
        """Move to the GPU through FAISS when the installed FAISS has GPU support (faiss-gpu); with
        faiss-cpu the index keeps searching on the CPU."""
        super().use_device(device)
        self._gpu_index = _faiss_to_gpu(self.index, self.device) if self.device.startswith("cuda") else None

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def save_files(self, path: Path) -> None:
        import faiss

        with atomic_path(path / INDEX_FILE) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "FaissIndex":
        import faiss

        if not (path / INDEX_FILE).is_file():
            raise FileNotFoundError(f"{path} has no {INDEX_FILE}")
        flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY if mmap else 0
        try:
            index = faiss.read_index(str(path / INDEX_FILE), flags)
        except RuntimeError:
            index = faiss.read_index(str(path / INDEX_FILE))
        check_size(path, INDEX_FILE, index.ntotal, index.d, meta)
        if not isinstance(index, getattr(faiss, cls.faiss_class)):
            raise ValueError(
                f"{path}/{INDEX_FILE} holds a FAISS {type(index).__name__}, not the {meta.get('kind')!r} index its {INDEX_META} "
                "names: rebuild the index"
            )
        return cls(index, meta)
