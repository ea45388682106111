"""``ivf-pq``: IVF lists of product-quantized codes (1/16 of float32), whose candidates are re-scored
from an fp16 copy of the vectors (``rerank.fp16.npy``), read row by row (``NpyRows``). It was
``auto``'s kind beyond a million names until ``ivf-rabitq`` (``ivf_rabitq.py``): at 7.5M names it
reached recall@5 0.99 only by probing thousands of lists, and fp16 re-scoring caps what any
shortlist can reach (``benchmarks/umls_scale.py``).

Chosen on ``benchmarks/umls_scale.py`` and ``benchmarks/pq_rerank.py`` (958,846 real name vectors,
1 thread): ``ivf-fp16`` reached the same recall@5 (0.99 with an eighth of the lists probed) but its
lists, which every batch of queries ends up touching, would take 5.8 GB at 7.5M names; SQ8 codes
(``sq8``, ``ivf-sq8``) stayed below 0.99.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..fileio import atomic_path, file_stamp, stamped_path
from ..registries import index_kinds
from .base import INDEX_META
from .ivf import IvfIndex

RERANK_FILE = "rerank.fp16.npy"  # ivf-pq's full vectors, read row by row (NpyRows) for candidates only
RERANK_CANDIDATES = 64  # PQ candidates re-scored per query (recall stopped rising past 64 at 958k names)
RERANK_CHOICES = (64, 128, 256)  # depths tune_nprobe may pick when more names crowd PQ's ranking
RERANK_DTYPES = {"fp16": np.float16, "fp32": np.float32}  # a re-scoring file's precision, as the meta records it


class NpyRows:
    """Rows of a 2-D ``.npy`` file, read on demand with ``os.pread``.

    A memory map would read the same bytes, but every page a search touches (and the neighbours
    the kernel maps in with it) then counts as the process's resident memory: at 7.5M names,
    2,000 queries' re-scoring reads mapped in nearly all of a 5.8 GB file. Reads go through the
    page cache either way; only what the process itself holds differs. The file is read without
    read-ahead (``POSIX_FADV_RANDOM``), so the page cache holds the pages searches read, not their
    neighbours too.
    """

    def __init__(self, path: Union[str, Path]):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, self.dtype = read_header(f)
            self.offset = f.tell()
        if len(shape) != 2 or fortran:
            raise ValueError(f"{self.path} must hold a C-ordered 2-D array, not shape {shape}")
        self.shape = shape
        self.row_bytes = shape[1] * self.dtype.itemsize
        self._stamp = file_stamp(self.path)
        self._file = open(self.path, "rb", buffering=0)
        if hasattr(os, "posix_fadvise"):  # no read-ahead: a row is one page or two, and its neighbours are not wanted
            os.posix_fadvise(self._file.fileno(), 0, 0, os.POSIX_FADV_RANDOM)

    def __getstate__(self) -> dict:  # an open file does not pickle: the path does
        return {"stamp": self._stamp}

    def __setstate__(self, state: dict) -> None:
        self.__init__(stamped_path(state["stamp"]))  # type: ignore[misc]

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Union[slice, np.ndarray]) -> np.ndarray:
        """A slice is one read; an array of rows (sorted is fastest) is one read per row."""
        fd = self._file.fileno()
        if isinstance(rows, slice):
            start, stop, step = rows.indices(len(self))
            if step != 1:
                raise ValueError("NpyRows slices must be contiguous")
            data = os.pread(fd, max(0, stop - start) * self.row_bytes, self.offset + start * self.row_bytes)
        else:
            data = b"".join(os.pread(fd, self.row_bytes, self.offset + int(r) * self.row_bytes) for r in rows)
        return np.frombuffer(data, dtype=self.dtype).reshape(-1, self.shape[1])


def pq_subquantizers(dim: int) -> int:
    """8-bit PQ codes of ``dim // 4`` bytes (96 for MiniLM's 384 dimensions): 1/16 of float32,
    so 7.5M names take ~720 MB. At 958k real names, re-scoring 64 candidates reached recall@5
    0.990 with 96 bytes and 0.972 with 48 (nprobe 512 of 3,916 lists)."""
    m = max(1, dim // 4)
    while dim % m:
        m -= 1
    return m


@index_kinds.register("ivf-pq")
class IvfPqIndex(IvfIndex):
    """IVF lists of PQ codes; the best ``rerank_candidates`` of the codes' ranking are re-scored
    exactly from the full vectors (``rerank``: the build's chunks, or the file read by row)."""

    faiss_class = "IndexIVFPQ"
    rerank_file: ClassVar[str] = RERANK_FILE  # the re-scoring rows' file and its precision (``RERANK_DTYPES``)
    rerank_precision: ClassVar[str] = "fp16"

    def __init__(self, index, meta: Dict[str, object], rerank: Optional[Sequence[np.ndarray]] = None):
        super().__init__(index, meta)
        self.rerank: Optional[List] = list(rerank) if rerank is not None else None

    @classmethod
    def code_string(cls, dim: int) -> str:
        return f"PQ{pq_subquantizers(dim)}"

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "IvfPqIndex":
        created = super().create(kind, chunks, dim, n, seed=seed, nprobe=nprobe)
        created.meta.update(rerank=cls.rerank_precision, rerank_candidates=RERANK_CANDIDATES)
        created.rerank = []  # type: ignore[attr-defined]
        return created  # type: ignore[return-value]

    def add_vectors(self, vectors: np.ndarray) -> None:
        super().add_vectors(vectors)
        if self.rerank is not None:
            self.rerank.append(vectors)  # as given (e.g. a memory-mapped chunk): no copy

    def search_vectors(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        if self.rerank is None:
            return self._code_search(queries, k)
        depth = int(self.meta.get("rerank_candidates", RERANK_CANDIDATES))  # type: ignore[call-overload]
        return self._rescore(queries, self._code_search(queries, max(k, depth))[1], k)

    def stored_vectors(self, rows: Sequence[int]) -> Optional[np.ndarray]:
        """The fp16 re-scoring copy's rows, as float32."""
        return self._gather(np.asarray(rows, dtype=np.int64)) if self.rerank is not None else None

    def _rescore(self, queries: np.ndarray, candidates: np.ndarray, k: int, block: int = 256) -> Tuple[np.ndarray, np.ndarray]:
        """Exact scores of the candidate rows from the full vectors, best ``k`` first. Only the
        candidates' rows are read, so a memory-mapped file stays mostly on disk."""
        scores = np.full((len(queries), k), -np.inf, np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        for start in range(0, len(queries), block):
            cand = candidates[start : start + block]
            vecs = self._gather(np.maximum(cand, 0).ravel()).reshape(*cand.shape, self.dim)
            sims = np.einsum("qcd,qd->qc", vecs, queries[start : start + block])
            sims[cand < 0] = -np.inf
            best = np.argsort(-sims, axis=1, kind="stable")[:, :k]
            scores[start : start + block] = np.take_along_axis(sims, best, 1)
            rows[start : start + block] = np.take_along_axis(cand, best, 1)
        rows[~np.isfinite(scores)] = -1
        scores[~np.isfinite(scores)] = 0.0
        return scores, rows

    def _gather(self, rows: np.ndarray) -> np.ndarray:
        """float32 copies of the re-scoring vectors at ``rows``, which may span several chunks."""
        assert self.rerank is not None
        ends = np.cumsum([len(c) for c in self.rerank])
        which = np.searchsorted(ends, rows, side="right")
        out = np.empty((len(rows), self.dim), np.float32)
        for i, chunk in enumerate(self.rerank):
            mine = np.flatnonzero(which == i)
            if len(mine):
                local = rows[mine] - (ends[i] - len(chunk))
                order = np.argsort(local, kind="stable")  # sorted reads from a mapped file
                out[mine[order]] = chunk[local[order]]
        return out

    def save_files(self, path: Path) -> None:
        super().save_files(path)
        if self.rerank is not None:
            self._write_rerank(path / self.rerank_file)

    def _write_rerank(self, target: Path) -> None:
        """The re-scoring vectors as one ``.npy`` (of ``rerank_precision``), streamed chunk by chunk, then renamed."""
        assert self.rerank is not None
        with atomic_path(target) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=RERANK_DTYPES[self.rerank_precision], shape=(len(self), self.dim))
            start, block = 0, 65536
            for chunk in self.rerank:  # arrays or NpyRows, a block at a time
                for at in range(0, len(chunk), block):
                    part = chunk[at : at + block]
                    out[start + at : start + at + len(part)] = part
                start += len(chunk)
            out.flush()
            del out

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "IvfPqIndex":
        """The codes, and the re-scoring vectors read by row (``NpyRows``) where ``mmap``."""
        loaded = super().load(path, meta, mmap)
        if meta.get("rerank"):
            found = path / cls.rerank_file
            if not found.is_file():
                raise FileNotFoundError(f"{path} has no {cls.rerank_file}, which its {INDEX_META} says it re-scores with")
            vectors = NpyRows(found) if mmap else np.load(found, allow_pickle=False)
            if vectors.shape != (len(loaded), loaded.dim):
                raise ValueError(f"{found} has shape {vectors.shape}, expected ({len(loaded)}, {loaded.dim}): rebuild the index")
            if vectors.dtype != RERANK_DTYPES[cls.rerank_precision]:
                raise ValueError(f"{found} holds {vectors.dtype}, expected {np.dtype(RERANK_DTYPES[cls.rerank_precision])}: rebuild the index")
            loaded.rerank = [vectors]  # type: ignore[attr-defined]
        return loaded  # type: ignore[return-value]
