"""``ivf-rabitq``: IVF lists of RaBitQ codes (one bit a dimension), probed as far as each query
needs, whose best candidates are re-scored exactly from the float32 vectors (``rows.fp32.npy``,
read row by row with ``os.pread``: ``NpyRows``): ``auto``'s kind beyond a million names.

A query probes every list whose centroid scores within ``probe_margin`` of its best one (at least
``min_nprobe`` lists, at most ``nprobe``): a mention close to KB names has a few lists that stand
out and is answered from them, while one far from every name (an abbreviation, a misspelling) has
many lists of about the same score, and its nearest names are spread over all of them. One fixed
nprobe is wide enough for the second kind only if it is wasted on the first.

Re-scoring reads only the candidates' rows, as float32: fp16 rows, even with the exact top 100 as
candidates, put a different name in the top 5 often enough to cap recall@5 below 0.995 (the ceiling
that ``benchmarks/umls_scale.py`` prints), because many mentions have names within 1e-3 of each
other. The rows never enter the process's memory: they are read through the page cache.

Chosen on ``benchmarks/umls_scale.py`` (real MiniLM vectors of 1M and 7.5M names, test mentions);
the README's UMLS section has the table of the candidates (4-bit PQ fast-scan, RaBitQ fast-scan,
an HNSW coarse quantizer, fp16 rows).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional, Sequence, Tuple

import numpy as np

from ..registries import index_kinds
from .base import INDEX_META, VectorIndex
from .ivf_pq import RERANK_DTYPES, IvfPqIndex

ROWS_FILE = "rows.fp32.npy"  # the float32 vectors, read by row for the candidates only
TRAIN_PER_LIST = 40  # k-means sample per list (FAISS warns below 39)
MIN_NPROBE = 16  # lists every query probes, however peaked its centroid scores
MAX_NPROBE = 1024  # lists a query probes at most (``nprobe``)
PROBE_MARGIN = 0.12  # a list is probed when its centroid scores within this of the query's best one
PROBE_MARGINS = (0.04, 0.06, 0.08, 0.1, 0.12, 0.14, 0.16, 0.2)  # what ``tuning.tune_probe_margin`` tries
RESCORE_CANDIDATES = 64  # candidates re-scored per query (``rerank_candidates``)
RESCORE_CHOICES = (32, 64, 128, 256)  # the depths ``tuning.tune_probe_margin`` may pick
CHECKED_ROWS = 8  # rows hashed into ``rows_check`` (spread over the file): a file from another build is refused


def list_count(n: int) -> int:
    """IVF lists for ``n`` vectors: the power of two nearest ``4 √n`` (4,096 at 1M names, 8,192 at 7.5M),
    between 1 and ``n // 32`` so that each list keeps some vectors."""
    target = 4 * np.sqrt(max(n, 1))
    return int(max(1, min(2 ** round(np.log2(target)), max(1, n // 32))))


def probed_lists(scores: np.ndarray, margin: float, least: int, most: int) -> Tuple[np.ndarray, np.ndarray]:
    """The lists each query probes, from its ``scores`` against every centroid: those within ``margin``
    of its best score, at least ``least`` and at most ``most`` (the best ones); as FAISS takes them,
    (lists, their scores), ``most`` columns, -1 (score 0) past a query's last list. (A padding score
    must be finite: fast-scan kernels scale their tables by the probed lists' scores.)"""
    n, nlist = scores.shape
    most, least = min(most, nlist), min(least, most)
    lists = np.full((n, most), -1, np.int64)
    for i, row in enumerate(scores):
        near = np.flatnonzero(row >= row.max() - margin)
        if len(near) < least or len(near) > most:
            near = np.argpartition(-row, (least if len(near) < least else most) - 1)[: least if len(near) < least else most]
        lists[i, : len(near)] = near[np.argsort(-row[near], kind="stable")]
    return lists, np.where(lists >= 0, np.take_along_axis(scores, np.maximum(lists, 0), 1), 0.0).astype(np.float32)


@index_kinds.register("ivf-rabitq")
class IvfRabitqIndex(IvfPqIndex):
    """IVF lists of RaBitQ codes; each query's candidates (``rerank_candidates``, from the lists its
    ``probe_margin`` selects) re-scored exactly from the float32 rows.

    Subclasses may change ``codes`` (a FAISS code string; one ending in ``fs`` is built in the plain
    form, then packed for fast-scan once all vectors are in) and ``coarse`` (e.g. ``HNSW32``: a graph
    over the centroids instead of a flat scan): ``benchmarks/umls_scale.py`` measures such candidates."""

    codes: ClassVar[str] = "RaBitQ"
    coarse: ClassVar[str] = ""  # "" (a flat scan of the centroids) or a FAISS quantizer string such as "HNSW32"
    faiss_class = "IndexIVFRaBitQ"
    rerank_file = ROWS_FILE
    rerank_precision = "fp32"
    rerank_choices: ClassVar[Tuple[int, ...]] = RESCORE_CHOICES
    transient: ClassVar[Tuple[str, ...]] = ("_gpu_index", "_centroid_rows")

    def __init__(self, index: Any, meta: Dict[str, object], rerank: Optional[Sequence[np.ndarray]] = None):
        super().__init__(index, meta, rerank)
        self._centroid_rows: Any = None  # the centroids, for the probe step (``_centroids``)
    auto_names: ClassVar[Optional[Tuple[int, Optional[int]]]] = (1_000_001, None)
    auto_reason = (
        "RaBitQ codes (about 60 bytes a name) in IVF lists probed as far as each query needs, the candidates "
        "re-scored exactly from float32 rows read by row from disk (benchmarks/umls_scale.py: at 7.5M names, "
        "recall@5 over 0.99 against exact search in a few ms per query)"
    )

    # ------------------------------------------------------------------ building
    @classmethod
    def code_string(cls, dim: int) -> str:
        return cls.codes[:-2] if cls.codes.endswith("fs") else cls.codes

    @classmethod
    def lists(cls, n: int) -> int:
        """IVF lists for ``n`` vectors (``list_count``)."""
        return list_count(n)

    @classmethod
    def factory_string(cls, dim: int, n: int) -> str:
        coarse = f"_{cls.coarse}" if cls.coarse else ""
        return f"IVF{cls.lists(n)}{coarse},{cls.code_string(dim)}"

    @classmethod
    def train_size(cls, n: int) -> int:
        return TRAIN_PER_LIST * cls.lists(n)

    @classmethod
    def bf16_products(cls) -> bool:
        """List assignment and k-means in bf16 where bf16 is the faster choice (measured so at 7.5M names)."""
        import torch

        from ..encoder import fast_bf16

        return fast_bf16(torch.device("cpu"))

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "IvfRabitqIndex":
        import faiss

        created = super().create(kind, chunks, dim, n, seed=seed, nprobe=nprobe)
        ivf = faiss.extract_index_ivf(created.index)
        created.set_nprobe(nprobe or min(ivf.nlist, MAX_NPROBE))
        created.meta.update(
            codes=cls.codes, probe_margin=PROBE_MARGIN, min_nprobe=min(ivf.nlist, MIN_NPROBE), rerank_candidates=RESCORE_CANDIDATES,
        )
        return created  # type: ignore[return-value]

    def _searchable(self) -> Any:
        """The FAISS index in the form that searches: a fast-scan code string's plain-form lists are
        packed into fast-scan blocks here, once, after the vectors were added."""
        import faiss

        if self.codes.endswith("fs") and not isinstance(self.index, faiss.IndexIVFFastScan):
            plain = self.index
            packed = faiss.IndexIVFPQFastScan(plain) if isinstance(plain, faiss.IndexIVFPQ) else faiss.IndexIVFRaBitQFastScan(plain)
            packed.nprobe = plain.nprobe
            plain.own_fields, packed.own_fields = False, True  # the packed index now owns the shared quantizer
            self.index = packed
            self._apply_search_settings()
        return self.index

    # ------------------------------------------------------------------ searching
    def _code_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """The codes' best ``k`` per query among the lists its centroid scores select (``probed_lists``).
        The scores of every centroid are one matrix product (cheaper than FAISS' top-``nprobe`` heap
        over them); a graph quantizer (``coarse``) gives its ``nprobe`` nearest instead."""
        import faiss

        index = self._searchable()
        ivf = faiss.extract_index_ivf(index)
        margin, least = float(self.meta["probe_margin"]), int(self.meta["min_nprobe"])  # type: ignore[arg-type]
        if self.coarse:
            scores, nearest = ivf.quantizer.search(queries, ivf.nprobe)
            keep = (nearest >= 0) & ((scores >= scores[:, :1] - margin) | (np.arange(scores.shape[1]) < least))
            lists, scores = np.where(keep, nearest, -1), np.where(keep, scores, 0.0).astype(np.float32)
        else:
            import torch

            with torch.inference_mode():  # (torch: numpy's OpenBLAS would take every core for one query)
                centroid_scores = (torch.from_numpy(queries) @ self._centroids().T).numpy()
            lists, scores = probed_lists(centroid_scores, margin, least, ivf.nprobe)
        return index.search_preassigned(queries, min(k, len(self)), lists, scores)

    def _centroids(self) -> Any:
        """The IVF centroids, a (nlist, dim) float32 torch tensor, read from the quantizer once."""
        import faiss
        import torch

        if self._centroid_rows is None:
            quantizer = faiss.extract_index_ivf(self.index).quantizer
            self._centroid_rows = torch.from_numpy(quantizer.reconstruct_n(0, quantizer.ntotal))
        return self._centroid_rows

    def set_probe_margin(self, margin: float) -> None:
        """Lists within ``margin`` of a query's best centroid score are probed (recall against speed)."""
        self.meta["probe_margin"] = float(margin)

    def set_nprobe(self, nprobe: int) -> None:
        """The most lists a query probes (``probe_margin`` decides how many it does)."""
        super().set_nprobe(nprobe)
        self._apply_search_settings()

    def _apply_search_settings(self) -> None:
        import faiss

        ivf = faiss.extract_index_ivf(self.index)
        ivf.nprobe = int(self.meta.get("nprobe", MAX_NPROBE))  # type: ignore[call-overload]
        # FAISS splits a batch over threads in ``search``, not in ``search_preassigned`` (which
        # ``_code_search`` calls) unless asked to: mode 3 splits the queries there
        ivf.parallel_mode = 3
        if self.coarse.startswith("HNSW"):  # the graph must hold as many candidates as lists asked for
            faiss.downcast_index(ivf.quantizer).hnsw.efSearch = max(ivf.nprobe, 16)

    def use_device(self, device: str) -> None:
        """RaBitQ lists have no FAISS GPU form: the index searches on the CPU whatever the device."""
        VectorIndex.use_device(self, device)

    # ------------------------------------------------------------------ disk
    def save_files(self, path: Path) -> None:
        self._searchable()
        super().save_files(path)
        self.meta["rows_check"] = rows_check(self.stored_vectors(_checked_rows(len(self))), self.rerank_precision)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "IvfRabitqIndex":
        """The lists (mapped where ``mmap``) and the rows, refusing a file whose type, code string or
        rows are not the ones ``index.json`` records."""
        loaded = super().load(path, meta, mmap)
        if meta.get("codes") != cls.codes:
            raise ValueError(f"{path}/{INDEX_META} records {meta.get('codes')!r} codes, not the {cls.codes!r} of {meta.get('kind')!r}: rebuild the index")
        found = rows_check(loaded.stored_vectors(_checked_rows(len(loaded))), cls.rerank_precision)  # type: ignore[arg-type]
        if found != meta.get("rows_check"):
            raise ValueError(f"{path}/{cls.rerank_file} holds other vectors than the index was built with: rebuild the index")
        return loaded  # type: ignore[return-value]


def _checked_rows(n: int) -> np.ndarray:
    return np.unique(np.linspace(0, max(n - 1, 0), CHECKED_ROWS).astype(np.int64)) if n else np.zeros(0, np.int64)


def rows_check(rows: np.ndarray, precision: str) -> str:
    """A short hash of a few rows as the file stores them (``precision``): what ``load`` compares to
    refuse a rows file from another build."""
    return hashlib.sha256(np.ascontiguousarray(rows, dtype=RERANK_DTYPES[precision]).tobytes()).hexdigest()[:16]
