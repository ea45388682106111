"""Vector search over the KB's name vectors with FAISS (inner product on unit vectors = cosine).

Exact ``flat`` search is the default; the compressed and approximate kinds exist for
UMLS-sized KBs, where a float32 flat index no longer fits in a laptop's memory.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import faiss
import numpy as np

from .fileio import FileStamp, atomic_open, atomic_path, file_stamp, read_json, stamped_path, write_json

INDEX_KINDS = ("flat", "flat-fp16", "sq8", "hnsw", "ivf-sq8", "ivf-fp16", "ivf-pq")
INDEX_FILE = "index.faiss"
INDEX_META = "index.json"
RERANK_FILE = "rerank.fp16.npy"  # ivf-pq's full vectors, read row by row (NpyRows) for candidates only
RERANK_KINDS = ("ivf-pq",)
RERANK_CANDIDATES = 64  # PQ candidates re-scored per query (recall stopped rising past 64 at 958k names)
RERANK_CHOICES = (64, 128, 256)  # depths tune_nprobe may pick when more names crowd PQ's ranking
# A flat index of at least this many names keeps a bf16 copy of its vectors (``SHORTLIST_FILE``):
# where bf16 is the faster choice (``fast_bf16``: AMX), exact search scores every name in bf16 first and
# re-scores in fp32 only the names that bf16 rounding could have put in the top k (``VectorIndex._shortlist_search``):
# the same top k, at twice the speed on the MeSH chemicals (benchmarks/flat_search.py).
SHORTLIST_MIN_NAMES = 200_000  # below it the fp32 pass is as fast (MEDIC, 72k names: slower with the shortlist)
SHORTLIST_FILE = "shortlist.bf16.npy"  # uint16 bit patterns of bf16, padded with zero rows to whole chunks
SHORTLIST_CHUNK = 1024  # names per chunk: the search keeps the chunks whose best bf16 score could matter
TOP_K_CHUNK = 64  # columns per chunk for ``_top_k``: the k chunks with the best maxima hold a row's k best scores
# Bound on |bf16 score - fp32 score| per unit of |q|·|x|: both vectors rounded to bf16 (2u + u²), the
# sum rounded to bf16 (u(1 + u)²), u = 2^-8; plus fp32 accumulation (under 2e-4 up to 3,000 dimensions).
BF16_UNIT = 2.0**-8
SHORTLIST_ERROR = 3 * BF16_UNIT + 3 * BF16_UNIT**2 + BF16_UNIT**3 + 2e-4
# A flat index keeps each name's own search result (``VectorIndex.build_neighbours``): a mention that
# is a KB name is searched with that name's stored vector, so its nearest names are known at build
# time and the linker reads them instead of searching (``neighbours_of``).
NEIGHBOURS_ROWS = "neighbours.rows.npy"  # (n, k) int32 name rows, best first
NEIGHBOURS_SCORES = "neighbours.scores.npy"  # (n, k) float32, as ``search`` returns them
NEIGHBOURS_K = 20  # the linker's name depth at its default top_k (``LinkingKB.candidates``: max(4 × top_k, 20))
NEIGHBOURS_MAX_NAMES = 200_000  # built by default up to here: a search per name (MEDIC, 72k names: under a minute)


TRAIN_SAMPLE = 200_000  # vectors used to train SQ8 ranges and IVF centroids


class NpyRows:
    """Rows of a 2-D ``.npy`` file, read on demand with ``os.pread``.

    A memory map would read the same bytes, but every page a search touches (and the neighbours
    the kernel maps in with it) then counts as the process's resident memory: at 7.5M names,
    2,000 queries' re-scoring reads mapped in nearly all of a 5.8 GB file. Reads go through the
    page cache either way; only what the process itself holds differs.
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


def spherical_kmeans(vectors: np.ndarray, k: int, iterations: int = 10, seed: int = 0) -> np.ndarray:
    """Unit-length centroids of ``vectors`` by cosine k-means, with torch matrix products.

    FAISS' own k-means trains the same IVF coarse quantizer, but through the faiss-cpu wheel's
    BLAS, about 10x slower than torch on the CPUs measured (``benchmarks/flat_search.py``);
    IVF training at millions of names would otherwise take most of an hour.
    """
    import torch

    x = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    k = min(k, len(x))
    gen = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(len(x), generator=gen)[:k]].clone()
    block = max(1, int(5e7 // k))
    for _ in range(iterations):
        assign = torch.cat([torch.argmax(x[i : i + block] @ centroids.T, dim=1) for i in range(0, len(x), block)])
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k)
        empty = counts == 0  # re-seed empty clusters with random points
        sums[empty] = x[torch.randint(len(x), (int(empty.sum()),), generator=gen)]
        centroids = torch.nn.functional.normalize(sums, dim=1)
    return centroids.numpy()


def _add(index: faiss.Index, vectors: np.ndarray) -> None:
    """``index.add``, except that IVF list assignment is a torch matrix product (same lists,
    many times faster than faiss-cpu's BLAS here)."""
    if not isinstance(index, faiss.IndexIVF):
        index.add(vectors)
        return
    import torch

    centroids = torch.from_numpy(index.quantizer.reconstruct_n(0, index.nlist))
    x = torch.from_numpy(vectors)
    block = max(1, int(5e7 // index.nlist))
    assign = torch.cat([torch.argmax(x[i : i + block] @ centroids.T, dim=1) for i in range(0, len(x), block)])
    lists = np.ascontiguousarray(assign.numpy(), dtype=np.int64)
    index.add_core(len(vectors), faiss.swig_ptr(vectors), None, faiss.swig_ptr(lists))


def _faiss_to_gpu(index: faiss.Index, device: str) -> Optional[faiss.Index]:
    """A GPU clone of ``index`` (fp16 storage where FAISS allows it), or None where the installed
    FAISS has no GPU support, sees no GPU, or cannot put this kind on one (HNSW): the CPU index
    then keeps answering, with a warning in the last case."""
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


def auto_index_kind(n_vectors: int) -> str:
    """Chosen on ``benchmarks/umls_scale.py`` and ``benchmarks/pq_rerank.py`` (958,846 real name
    vectors, 1 thread): exact ``flat`` search (torch) up to a million names, where its vectors
    still fit in ~1.5 GB; beyond, ``ivf-pq``: 96-byte codes in memory-mapped lists, candidates
    re-scored from a memory-mapped fp16 file. ``ivf-fp16`` reached the same recall@5 (0.99 with
    an eighth of the lists probed) but its lists, which every batch of queries ends up touching,
    would take 5.8 GB at 7.5M names; SQ8 codes (``sq8``, ``ivf-sq8``) stayed below 0.99."""
    return "flat" if n_vectors <= 1_000_000 else "ivf-pq"


def default_nprobe(nlist: int) -> int:
    """An eighth of the lists (recall@5 0.99 at 958k names needed 512 of 3,916), at least 32."""
    return min(nlist, max(32, nlist // 8))


def pq_subquantizers(dim: int) -> int:
    """8-bit PQ codes of ``dim // 4`` bytes (96 for MiniLM's 384 dimensions): 1/16 of float32,
    so 7.5M names take ~720 MB. At 958k real names, re-scoring 64 candidates reached recall@5
    0.990 with 96 bytes and 0.972 with 48 (nprobe 512 of 3,916 lists)."""
    m = max(1, dim // 4)
    while dim % m:
        m -= 1
    return m


def _factory_string(kind: str, dim: int, n: int) -> str:
    if kind == "flat":
        return "Flat"
    if kind == "flat-fp16":
        return "SQfp16"
    if kind == "sq8":
        return "SQ8"
    if kind == "hnsw":
        return "HNSW32,SQ8"
    if kind.startswith("ivf"):
        nlist = max(1, min(65536, int(4 * np.sqrt(max(n, 1)))))
        codes = {"ivf-sq8": "SQ8", "ivf-fp16": "SQfp16", "ivf-pq": f"PQ{pq_subquantizers(dim)}"}
        if kind in codes:
            return f"IVF{nlist},{codes[kind]}"
    raise ValueError(f"unknown index kind {kind!r}; choose one of {INDEX_KINDS} or 'auto'")


class VectorIndex:
    """A FAISS inner-product index plus a record of how it was built."""

    def __init__(self, index: faiss.Index, meta: Dict[str, object], rerank: Optional[Sequence[np.ndarray]] = None):
        self.index = index
        self.meta = meta
        # full vectors for re-scoring candidates (ivf-pq): the build's chunks, or the mapped file
        self.rerank = list(rerank) if rerank is not None else None
        self.device = "cpu"
        self._device_base = None  # exact search's vectors copied to the GPU, when one is used
        # None: exact search takes as many queries per product as fit ~200 MB of scores. N: exactly N per
        # product (a short one padded), so a query's scores do not depend on the queries beside it
        self.pass_queries: Optional[int] = None
        self._gpu_index = None  # a FAISS GPU clone of a compressed index, when faiss-gpu is installed
        self._source: Optional[Tuple[str, FileStamp]] = None  # the folder, when memory-mapped by ``from_disk``
        self._shortlist = None  # a flat index's bf16 copy (torch, padded to whole chunks): mapped or made once
        self.neighbours: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (scores, rows) per name: ``build_neighbours``
        self._scores = None  # exact search's score buffer, kept for the next search (``_scores_out``)

    def __getstate__(self) -> dict:
        """A memory-mapped index pickles as its folder (a worker maps it again: ``nlp.pipe(n_process=...)``
        under spawn), an in-memory one by value (FAISS serialises it). Search settings changed since
        loading (``meta``) and the device go along; GPU copies are made again where unpickled."""
        if self._source is not None:
            return {"source": self._source, "meta": self.meta, "device": self.device}
        state = dict(self.__dict__)
        state.update(_device_base=None, _gpu_index=None, _shortlist=None, _scores=None)
        return state

    def __setstate__(self, state: dict) -> None:
        if "source" not in state:
            self.__dict__.update(state)
            self.use_device(self.device)
            return
        folder, stamp = state["source"]
        stamped_path(stamp)
        loaded = VectorIndex.from_disk(folder, mmap=True)
        self.__dict__.update(loaded.__dict__)
        self.meta = state["meta"]
        self._apply_search_settings()
        self.use_device(state["device"])

    def _apply_search_settings(self) -> None:
        """Set the FAISS search parameters ``meta`` records (IVF ``nprobe``, HNSW ``efSearch``)."""
        if isinstance(self.index, faiss.IndexIVF) or "nprobe" in self.meta:
            faiss.extract_index_ivf(self.index).nprobe = int(self.meta.get("nprobe", 32))  # type: ignore[call-overload]
        if "ef_search" in self.meta:
            faiss.downcast_index(self.index).hnsw.efSearch = int(self.meta["ef_search"])  # type: ignore[call-overload]

    def use_device(self, device: str) -> None:
        """Search on ``device`` (e.g. ``cuda:0``). Exact search copies its float32 vectors there once
        (1.5 KB a name at 384 dimensions) and stays exact, as on the CPU. Other kinds move to the GPU
        through FAISS when the installed FAISS has GPU support (faiss-gpu); with faiss-cpu they keep
        searching on the CPU."""
        self.device = str(device)
        self._device_base = None
        self._gpu_index = None
        if self.device.startswith("cuda") and not isinstance(self.index, faiss.IndexFlat):
            self._gpu_index = _faiss_to_gpu(self.index, self.device)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def build(
        cls, vectors: Union[np.ndarray, Sequence[np.ndarray]], kind: str = "auto", seed: int = 0, nprobe: Optional[int] = None,
        neighbours: Optional[bool] = None, progress: bool = False,
    ) -> "VectorIndex":
        """Build an index over L2-normalised float32 vectors: one (n, dim) array, or a sequence of
        them (e.g. memory-mapped encoding chunks), added one at a time so that a KB of millions of
        names never needs a second full copy in memory. ``neighbours``: keep each name's nearest
        names (``build_neighbours``); None: for a ``flat`` index of up to ``NEIGHBOURS_MAX_NAMES``."""
        chunks = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
        if any(c.ndim != 2 for c in chunks) or not chunks:
            raise ValueError("expected a 2-d array of vectors (or a non-empty sequence of them)")
        dim = int(chunks[0].shape[1])
        if any(int(c.shape[1]) != dim for c in chunks):
            raise ValueError("all vector chunks must have the same dimension")
        n = sum(int(c.shape[0]) for c in chunks)
        if kind == "auto":
            kind = auto_index_kind(n)
        index = faiss.index_factory(dim, _factory_string(kind, dim, n), faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            sample = _training_sample(chunks, n, TRAIN_SAMPLE, seed)
            if kind.startswith("ivf"):  # centroids first; FAISS then trains only the codes
                ivf = faiss.extract_index_ivf(index)
                ivf.quantizer.add(spherical_kmeans(sample, ivf.nlist, seed=seed))
                if isinstance(index, faiss.IndexIVFPQ):
                    # the factory asks for polysemous training (code orderings for Hamming
                    # pre-filtering, which we never use); it made a 20k-name build take minutes
                    index.do_polysemous_training = False
            index.train(sample)
        for c in chunks:
            if len(c):
                _add(index, np.ascontiguousarray(c, dtype=np.float32))
        meta: Dict[str, object] = {"kind": kind, "dim": dim, "n": n, "metric": "inner_product", "faiss": faiss.__version__}
        if kind.startswith("ivf"):
            ivf = faiss.extract_index_ivf(index)
            ivf.nprobe = nprobe or default_nprobe(ivf.nlist)
            meta["nprobe"] = int(ivf.nprobe)
        if kind == "flat" and n >= SHORTLIST_MIN_NAMES:
            norm = max(float(np.sqrt(np.einsum("nd,nd->n", c, c, dtype=np.float64).max())) for c in chunks if len(c))
            meta.update(shortlist="bf16", max_norm=norm)
        if kind in RERANK_KINDS:
            meta.update(rerank="fp16", rerank_candidates=RERANK_CANDIDATES)
            return cls(index, meta, rerank=chunks)
        built = cls(index, meta)
        if neighbours or (neighbours is None and kind == "flat" and 0 < n <= NEIGHBOURS_MAX_NAMES):
            built.build_neighbours(progress=progress)
        return built

    def build_neighbours(self, k: int = NEIGHBOURS_K, batch: int = 2048, progress: bool = False) -> None:
        """Search every name's stored vector once and keep its ``k`` nearest names: what ``search``
        returns for a mention that is that name (the linker searches with the stored vector)."""
        if not isinstance(self.index, faiss.IndexFlat):
            raise ValueError(f"a neighbour table needs the exact vectors of a flat index, not {self.meta.get('kind')!r}")
        from tqdm import tqdm

        n, k = len(self), max(1, min(k, len(self)))
        scores, rows = np.empty((n, k), np.float32), np.empty((n, k), np.int32)
        for start in tqdm(range(0, n, batch), desc="neighbour table", unit="block", disable=not progress):
            block = np.arange(start, min(n, start + batch))
            scores[block], rows[block] = self.search(self.stored_vectors(block), k)
        self.neighbours = (scores, rows)
        self.meta["neighbours"] = k

    def neighbours_of(self, rows: np.ndarray, k: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """The stored search result (scores, name rows) of the names at ``rows`` with depth ``k``, or
        None where the table is missing or shallower than ``k`` (then search)."""
        if self.neighbours is None:
            return None
        k = max(1, min(k, len(self)))
        scores, found = self.neighbours
        if k > scores.shape[1]:
            return None
        return np.array(scores[rows, :k], dtype=np.float32), np.array(found[rows, :k], dtype=np.int64)

    def set_ef_search(self, ef_search: int) -> None:
        """HNSW's candidate list size per query (recall against speed); recorded so it is saved."""
        if self.meta.get("kind") != "hnsw":
            raise ValueError(f"efSearch applies to hnsw indexes, not {self.meta.get('kind')!r}")
        faiss.downcast_index(self.index).hnsw.efSearch = ef_search
        self.meta["ef_search"] = ef_search

    def set_nprobe(self, nprobe: int) -> None:
        """IVF lists visited per query (recall against speed); recorded so it is saved."""
        if not isinstance(self.index, faiss.IndexIVF) and "nprobe" not in self.meta:
            raise ValueError(f"nprobe applies to IVF indexes, not {self.meta.get('kind')!r}")
        faiss.extract_index_ivf(self.index).nprobe = nprobe
        if self._gpu_index is not None:
            faiss.GpuParameterSpace().set_index_parameter(self._gpu_index, "nprobe", nprobe)
        self.meta["nprobe"] = nprobe

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
        if self.rerank is not None:
            depth = int(self.meta.get("rerank_candidates", RERANK_CANDIDATES))  # type: ignore[call-overload]
            return self._rescore(queries, self._code_search(queries, max(k, depth))[1], k)
        return self._code_search(queries, k)

    def stored_vectors(self, rows: Sequence[int]) -> Optional[np.ndarray]:
        """The vectors added at ``rows``, as float32, where the index keeps them whole: ``flat``
        exactly, ``ivf-pq`` its fp16 re-scoring copy. None for kinds that keep only codes."""
        rows = np.asarray(rows, dtype=np.int64)
        if isinstance(self.index, faiss.IndexFlat):
            return np.array(self._flat_vectors().numpy()[rows], dtype=np.float32)
        if self.rerank is not None:
            return self._gather(rows)
        return None

    def _code_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """FAISS' own search (on the GPU copy when there is one): the compressed codes' ranking."""
        index = self.index if self._gpu_index is None else self._gpu_index
        return index.search(queries, min(k, len(self)))

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

    def _flat_vectors(self):
        """The flat index's own float32 vectors as a torch tensor (no copy: possibly mapped)."""
        import torch

        n, d = len(self), self.dim
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only mapping; we never write to it
            return torch.from_numpy(faiss.rev_swig_ptr(self.index.get_xb(), n * d).reshape(n, d))

    def _shortlist_matrix(self):
        """The bf16 copy of the vectors, zero rows padding it to whole chunks: the mapped
        ``SHORTLIST_FILE``, or (an index built in memory) converted once here."""
        import torch

        if self._shortlist is None:
            n, d = len(self), self.dim
            padded = torch.zeros(_whole_chunks(n), d, dtype=torch.bfloat16)
            padded[:n] = self._flat_vectors()
            self._shortlist = padded
        return self._shortlist

    def _flat_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact search as a torch matmul + top-k over the index's own (possibly mapped) vectors.

        Same results as FAISS' flat search and much faster here (``benchmarks/flat_search.py``):
        the faiss-cpu wheel's BLAS path is slow on this CPU, torch's matmul is not. An index with
        a bf16 shortlist searches through it where bf16 is the faster choice (``fast_bf16``: AMX;
        ``_shortlist_search``).
        """
        import torch

        from .encoder import fast_bf16, fixed_passes

        n = len(self)
        on_cpu = self.device == "cpu"
        shortlist = self.meta.get("shortlist") == "bf16" and k <= _whole_chunks(n) // SHORTLIST_CHUNK
        if on_cpu and shortlist and fast_bf16(torch.device("cpu")):
            return self._shortlist_search(queries, k)
        base = self._flat_vectors()
        if not on_cpu:
            if self._device_base is None:
                self._device_base = base.to(self.device)
            base = self._device_base
        block = self.pass_queries or max(1, int(5e7 // n))  # about 200 MB of scores at a time
        scores, rows = [], []
        buffer, self._scores = self._scores, None  # taken while in use: a concurrent search makes its own
        with torch.inference_mode():
            for start in range(0, len(queries), block):
                q = torch.from_numpy(queries[start : start + block])
                m = len(q)
                q = fixed_passes({"q": q}, self.pass_queries)["q"]
                if on_cpu:
                    buffer, sims = _scores_out(buffer, len(q), n, torch.float32)
                    torch.mm(q, base.T, out=sims)
                else:
                    sims = q.to(self.device) @ base.T
                values, indices = _top_k(sims[:m], k) if on_cpu else torch.topk(sims[:m], k, dim=1)
                scores.append(values.cpu().numpy())
                rows.append(indices.cpu().numpy())
        self._scores = buffer
        return np.concatenate(scores), np.concatenate(rows).astype(np.int64)

    def _shortlist_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact top ``k`` from a bf16 pass over every name and fp32 scores of a few.

        A bf16 score is within ``SHORTLIST_ERROR`` · |q| · max |x| of the fp32 one (``margin`` is twice
        that). The k-th best chunk maximum is a floor under the k-th best bf16 score, so only chunks
        whose maximum reaches the floor less the margin can hold a top-k name; within them, every
        name whose bf16 score reaches the k-th best less the margin is scored exactly (float64 sums,
        each name on its own, so the result does not depend on the other queries), and the best
        ``k`` are kept, ties by row.
        """
        import torch

        from .encoder import fixed_passes

        n = len(self)
        base, short = self._flat_vectors(), self._shortlist_matrix()
        n_chunks = short.shape[0] // SHORTLIST_CHUNK
        block = self.pass_queries or max(1, int(1e8 // short.shape[0]))  # about 200 MB of bf16 scores at a time
        scores, rows = [], []
        buffer, self._scores = self._scores, None  # taken while in use: a concurrent search makes its own
        with torch.inference_mode():
            for start in range(0, len(queries), block):
                q = torch.from_numpy(queries[start : start + block])
                m = len(q)
                margin = (2 * SHORTLIST_ERROR * float(self.meta.get("max_norm", 1.0))) * q.norm(dim=1, keepdim=True)
                passes = fixed_passes({"q": q}, self.pass_queries)["q"].to(torch.bfloat16)
                buffer, sims = _scores_out(buffer, len(passes), short.shape[0], torch.bfloat16)
                sims = torch.mm(passes, short.T, out=sims)[:m]
                sims[:, n:] = -torch.inf
                by_chunk = sims.view(m, n_chunks, SHORTLIST_CHUNK)
                # the chunk maxima as int16 bit patterns, faster than bf16's: the same order for every
                # chunk holding a score >= 0; a chunk of negative scores only gets an underestimate,
                # which matters only where the floor below is negative: then the bf16 maxima
                best = by_chunk.view(torch.int16).amax(2).view(torch.bfloat16).float()
                kth_chunk = torch.topk(best, k, dim=1).values[:, -1:]
                if bool((kth_chunk < margin).any()):
                    best = by_chunk.amax(2).float()
                    kth_chunk = torch.topk(best, k, dim=1).values[:, -1:]
                floor = kth_chunk - margin
                query, row = [], []
                for i in range(m):  # per query: how many chunks can matter varies a lot
                    chunks = torch.nonzero(best[i] >= floor[i]).squeeze(1)
                    kept = by_chunk[i, chunks].float()
                    high = kept[kept >= kth_chunk[i]]  # at least k scores (the k best chunks' maxima): the k best among them
                    chunk, pos = torch.nonzero(kept >= torch.topk(high, k).values[-1] - margin[i], as_tuple=True)
                    row.append(chunks[chunk] * SHORTLIST_CHUNK + pos)
                    query.append(torch.full((len(pos),), i))
                query, row = torch.cat(query), torch.cat(row)
                exact = _exact_scores(base, q, query, row)
                query, row = query.numpy(), row.numpy()
                order = np.lexsort((row, -exact, query))  # by query, best first, ties by row
                rank = np.arange(len(order)) - np.searchsorted(query[order], query[order])
                top = order[rank < k]
                scores.append(exact[top].reshape(m, k))
                rows.append(row[top].reshape(m, k))
        self._scores = buffer
        return np.concatenate(scores), np.concatenate(rows).astype(np.int64)

    def to_disk(self, path: Union[str, Path]) -> None:
        """Write ``index.faiss`` and ``index.json`` into folder ``path``, each atomically."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with atomic_path(path / INDEX_FILE) as tmp:
            faiss.write_index(self.index, str(tmp))
        if self.rerank is not None:
            self._write_rerank(path / RERANK_FILE)
        if self.meta.get("shortlist"):
            self._write_shortlist(path / SHORTLIST_FILE)
        if self.neighbours is not None:
            for name, array in zip((NEIGHBOURS_SCORES, NEIGHBOURS_ROWS), self.neighbours):
                with atomic_open(path / name, "wb") as f:
                    np.save(f, np.asarray(array), allow_pickle=False)
        write_json(path / INDEX_META, self.meta)

    def _write_shortlist(self, target: Path) -> None:
        """The bf16 copy as uint16 bit patterns in one ``.npy``, a block at a time, then renamed."""
        import torch

        short = self._shortlist_matrix()
        with atomic_path(target) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint16, shape=tuple(short.shape))
            for at in range(0, short.shape[0], 65536):
                out[at : at + 65536] = short[at : at + 65536].view(torch.int16).numpy().view(np.uint16)
            out.flush()
            del out

    def _write_rerank(self, target: Path) -> None:
        """The re-scoring vectors as one fp16 ``.npy``, streamed chunk by chunk, then renamed."""
        assert self.rerank is not None
        with atomic_path(target) as tmp:
            out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(len(self), self.dim))
            start, block = 0, 65536
            for chunk in self.rerank:  # arrays or NpyRows, a block at a time
                for at in range(0, len(chunk), block):
                    part = chunk[at : at + block]
                    out[start + at : start + at + len(part)] = part
                start += len(chunk)
            out.flush()
            del out

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "VectorIndex":
        """Load; ``mmap`` maps the vectors instead of reading them, so loading is near-instant
        (an ``ivf-pq`` index's re-scoring vectors are then read row by row: ``NpyRows``)."""
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
        rerank = None
        if meta.get("rerank"):
            if not (path / RERANK_FILE).is_file():
                raise FileNotFoundError(f"{path} has no {RERANK_FILE}, which its {INDEX_META} says it re-scores with")
            vectors = NpyRows(path / RERANK_FILE) if mmap else np.load(path / RERANK_FILE, allow_pickle=False)
            if vectors.shape != (index.ntotal, index.d):
                raise ValueError(f"{path}/{RERANK_FILE} has shape {vectors.shape}, expected ({index.ntotal}, {index.d}): rebuild the index")
            rerank = [vectors]
        loaded = cls(index, meta, rerank=rerank)
        if meta.get("shortlist"):
            loaded._shortlist = _read_shortlist(path, index.ntotal, index.d, mmap)
        if meta.get("neighbours"):
            loaded.neighbours = _read_neighbours(path, index.ntotal, int(meta["neighbours"]), mmap)
        loaded._apply_search_settings()
        if mmap:
            loaded._source = (str(path.resolve()), file_stamp(path / INDEX_FILE))
        return loaded



def _scores_out(buffer, rows: int, cols: int, dtype) -> tuple:
    """(buffer, a (rows, cols) view of it) for one product's scores: ``buffer`` (a flat tensor kept
    from the last search) reused where it is big enough, else a new one: a new block of scores per
    search cost more in page faults than the product itself (``benchmarks/flat_search.py``)."""
    import torch

    if buffer is None or buffer.dtype != dtype or buffer.numel() < rows * cols:
        buffer = torch.empty(rows * cols, dtype=dtype)
    return buffer, buffer[: rows * cols].view(rows, cols)


def _top_k(sims, k: int) -> tuple:
    """``torch.topk(sims, k, dim=1)``'s values (its indices too, but for ties), from one pass over
    the scores: each row's maxima of ``TOP_K_CHUNK`` columns, then a top-k among the k chunks with
    the largest maxima. Those are k distinct scores at least the k-th largest maximum, and a score
    above it sits in one of those chunks, so the k best are there. On the CPU that made an exact
    search of MeSH's 543k names 4.629 → 3.777 ms per query (``benchmarks/flat_search.py``, 1 thread)."""
    import torch

    m, n = sims.shape
    whole = n // TOP_K_CHUNK * TOP_K_CHUNK
    if whole < 4 * k * TOP_K_CHUNK:  # too few chunks to leave any out
        return torch.topk(sims, k, dim=1)
    maxima = sims[:, :whole].view(m, -1, TOP_K_CHUNK).amax(2)
    if whole < n:
        maxima = torch.cat([maxima, sims[:, whole:].amax(1, keepdim=True)], 1)
    columns = (torch.topk(maxima, k, dim=1).indices.unsqueeze(2) * TOP_K_CHUNK + torch.arange(TOP_K_CHUNK)).view(m, -1)
    outside = columns >= n  # the last, shorter chunk's missing columns
    candidates = sims.gather(1, columns.clamp(max=n - 1)).masked_fill_(outside, -torch.inf)
    values, best = torch.topk(candidates, k, dim=1)
    return values, columns.gather(1, best)


def _exact_scores(base, queries, query, row, rows_per_pass: int = 1024) -> np.ndarray:
    """float32 of the float64 inner product of ``queries[query[i]]`` and ``base[row[i]]`` for each i,
    each summed on its own (so a score never depends on the other pairs), a thousand pairs at a time
    so that the float64 copies stay in cache."""
    import torch

    out = torch.empty(len(row), dtype=torch.float64)
    q = queries.double()
    for start in range(0, len(row), rows_per_pass):
        part = slice(start, start + rows_per_pass)
        out[part] = (base[row[part]].double() * q[query[part]]).sum(1)
    return out.float().numpy()


def _whole_chunks(n: int) -> int:
    """``n`` rounded up to whole shortlist chunks: the rows of the bf16 copy."""
    return -(-n // SHORTLIST_CHUNK) * SHORTLIST_CHUNK


def _read_shortlist(path: Path, n: int, dim: int, mmap: bool):
    """The bf16 copy ``_write_shortlist`` wrote, as a torch bf16 tensor (mapped when ``mmap``)."""
    import torch

    if not (path / SHORTLIST_FILE).is_file():
        raise FileNotFoundError(f"{path} has no {SHORTLIST_FILE}, which its {INDEX_META} says it searches with: rebuild the KB")
    bits = np.load(path / SHORTLIST_FILE, mmap_mode="r" if mmap else None, allow_pickle=False)
    if bits.dtype != np.uint16 or bits.shape != (_whole_chunks(n), dim):
        raise ValueError(f"{path}/{SHORTLIST_FILE} holds {bits.dtype} {bits.shape}, expected uint16 ({_whole_chunks(n)}, {dim}): rebuild the KB")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only mapping; we never write to it
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def _read_neighbours(path: Path, n: int, k: int, mmap: bool) -> Tuple[np.ndarray, np.ndarray]:
    """The neighbour table ``to_disk`` wrote: (scores, rows), each (n, k), mapped when ``mmap``."""
    found = []
    for name, dtype in ((NEIGHBOURS_SCORES, np.float32), (NEIGHBOURS_ROWS, np.int32)):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} has no {name}, which its {INDEX_META} says it keeps: rebuild the KB")
        array = np.load(path / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        if array.dtype != dtype or array.shape != (n, k):
            raise ValueError(f"{path}/{name} holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} ({n}, {k}): rebuild the KB")
        found.append(array)
    return found[0], found[1]


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
        nlist = faiss.extract_index_ivf(index.index).nlist
        choices = [p for p in (2**i for i in range(3, 17)) if p < nlist] + [nlist]
    if index.rerank is None:
        return _smallest_reaching(index.set_nprobe, lambda: index.search(queries, exact.shape[1])[1], exact, target, choices)

    def best_depth() -> np.ndarray:
        k = exact.shape[1]
        ranked = index._code_search(queries, max(RERANK_CHOICES))[1]  # one PQ pass serves every depth
        for depth in RERANK_CHOICES:
            rows = index._rescore(queries, ranked[:, :depth], k)[1]
            if recall_at_k(rows, exact) >= target:
                break
        index.meta["rerank_candidates"] = depth
        return rows

    return _smallest_reaching(index.set_nprobe, best_depth, exact, target, choices)


def tune_ef_search(
    index: VectorIndex, queries: np.ndarray, exact: np.ndarray, target: float = 0.99,
    choices: Sequence[int] = (16, 32, 64, 128, 256, 512, 1024),
) -> Tuple[int, float]:
    """``tune_nprobe`` for HNSW: the smallest efSearch reaching ``target`` recall@k."""
    return _smallest_reaching(index.set_ef_search, lambda: index.search(queries, exact.shape[1])[1], exact, target, choices)


def _smallest_reaching(
    setter: Callable[[int], None], search: Callable[[], np.ndarray], exact: np.ndarray, target: float,
    choices: Sequence[int], plateau: float = 0.001,
) -> Tuple[int, float]:
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
