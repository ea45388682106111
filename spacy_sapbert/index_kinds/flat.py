"""``flat``: exact search over float32 vectors, as a torch matrix product (the default kind).

The vectors live in a FAISS ``IndexFlat`` (so the file is the one FAISS writes and maps), but search
is ours: the faiss-cpu wheel's BLAS path is slow on the CPUs measured, torch's matmul is not
(``benchmarks/flat_search.py``). A big index keeps a bf16 copy too (the shortlist, below).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..fileio import atomic_path
from ..registries import index_kinds
from .base import INDEX_META, NEIGHBOURS_K
from .faiss_base import FaissIndex
from .int8_copy import Int8Copy, int8_products_exact

# A flat index of at least this many names keeps a bf16 copy of its vectors (``SHORTLIST_FILE``):
# where bf16 is the faster choice (``fast_bf16``: AMX), exact search scores every name in bf16 first and
# re-scores in fp32 only the names that bf16 rounding could have put in the top k (``FlatIndex.shortlist_search``):
# the same top k, at twice the speed on the MeSH chemicals (benchmarks/flat_search.py).
SHORTLIST_MIN_NAMES = 200_000  # below it the fp32 pass is as fast (MEDIC, 72k names: slower with the shortlist)
# On an AMD CPU with AVX512-BF16 (no AMX) the shortlist pays from fewer names, so there a flat index of at
# least this many names without a stored bf16 copy searches through one made in memory
# (``benchmarks/results/flat_search_amd.json``: the 2,713 BC5CDR test mention strings, top 20, ms per query
# fp32 → shortlist on 1 / 2 threads: MEDIC's 74,978 names 0.647 → 0.335 / 0.336 → 0.208, the HPO KB's
# 39,474 0.363 → 0.239 / 0.187 → 0.16; the HPO KB's first 30,000 names, ad hoc, were slower on 2 threads).
SHORTLIST_MEMORY_MIN_NAMES = 35_000
# Where bf16 is slow, a flat index of at least this many names searches through an int8 copy made in
# memory (``int8_copy``, ``FlatIndex.int8_search``). As AVX2, top 20, the 2,594 distinct BC5CDR dev mention
# strings 8 at a time / all at once, fp32 → int8 (``benchmarks/results/flat_search_avx2.json``): MEDIC's
# 74,978 names 1.22x / 1.48x faster on 1 thread, 1.95x / 1.44x on 2; the HPO KB's 39,474 only 1.13x /
# 1.07x on 1 thread, and the HPO default over the 2,292 abstracts was no faster with it (ad hoc).
INT8_MIN_NAMES = 60_000
INT32_LOW, INT32_HIGH = -(2**31), 2**31 - 1  # the range of the int8 pass's scores
SHORTLIST_FILE = "shortlist.bf16.npy"  # uint16 bit patterns of bf16, padded with zero rows to whole chunks
SHORTLIST_CHUNK = 1024  # names per chunk: the search keeps the chunks whose best bf16 score could matter
TOP_K_CHUNK = 64  # columns per chunk for ``_top_k``: the k chunks with the best maxima hold a row's k best scores
# Bound on |bf16 score - fp32 score| per unit of |q|·|x|: both vectors rounded to bf16 (2u + u²), the
# sum rounded to bf16 (u(1 + u)²), u = 2^-8; plus fp32 accumulation (under 2e-4 up to 3,000 dimensions).
BF16_UNIT = 2.0**-8
SHORTLIST_ERROR = 3 * BF16_UNIT + 3 * BF16_UNIT**2 + BF16_UNIT**3 + 2e-4
# A query whose bf16 shortlist holds more names than this is shortlisted from its fp32 scores instead: where
# the names' scores lie closer together than bf16 can tell apart (vectors that all share a large component),
# the bf16 shortlist held nearly every name, and the exact scores of 40k names took 19 ms a query against fp32's
# 0.2 (ad hoc). Where fp32 cannot tell them apart either (MiniLM cut to 3 layers without training: every
# cosine between 0.999998 and 1), every name is scored by one float64 product. MiniLM's queries hold at
# most 300 names (HPO KB, MEDIC).
SHORTLIST_MAX_NAMES = 2048
# Bound on |fp32 score - exact score| per unit of |q|·|x| and dimension (fp32 sums: at most d·u, u = 2^-24)
FP32_UNIT_ERROR = 1.1 * 2.0**-24


@index_kinds.register("flat")
class FlatIndex(FaissIndex):
    """Exact inner-product search; keeps its vectors whole (``stored_vectors``) and, up to
    ``NEIGHBOURS_MAX_NAMES``, each name's own search result (the neighbour table)."""

    factory = "Flat"
    faiss_class = "IndexFlat"
    exact = True
    neighbours_by_default = True
    # Chosen on ``benchmarks/umls_scale.py`` (958,846 real name vectors, 1 thread): exact search up to a
    # million names, where its vectors still fit in ~1.5 GB (beyond: ``ivf-pq``).
    auto_names: ClassVar[Optional[Tuple[int, Optional[int]]]] = (0, 1_000_000)
    auto_reason = "exact search, while its float32 vectors fit in memory (~1.5 GB a million names)"
    transient: ClassVar[Tuple[str, ...]] = ("_gpu_index", "_device_base", "_shortlist", "_scores", "_max_norm", "_int8")

    def __init__(self, index, meta: Dict[str, object]):
        super().__init__(index, meta)
        self._device_base = None  # the float32 vectors copied to the GPU, when one is used
        self._shortlist = None  # the bf16 copy (torch, padded to whole chunks): mapped or made once
        self._scores = None  # the score buffer, kept for the next search (``_scores_out``)
        self._max_norm: Optional[float] = None  # the largest vector norm, for a bf16 copy made in memory without meta
        self._int8: Optional[Int8Copy] = None  # the int8 copy (``int8_search``), made in memory once

    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "FlatIndex":
        created = super().create(kind, chunks, dim, n, seed=seed, nprobe=nprobe)
        if n >= SHORTLIST_MIN_NAMES:
            created.meta.update(shortlist="bf16", max_norm=0.0)  # the norm: the largest added (``add_vectors``)
        return created  # type: ignore[return-value]

    def add_vectors(self, vectors: np.ndarray) -> None:
        if self.meta.get("shortlist"):
            self.meta["max_norm"] = max(float(self.meta["max_norm"]), largest_norm(vectors))  # type: ignore[arg-type]
        self._shortlist = self._max_norm = self._int8 = None  # copies made from the vectors before
        super().add_vectors(vectors)

    def use_device(self, device: str) -> None:
        """Search on ``device`` (e.g. ``cuda:0``): the float32 vectors are copied there once (1.5 KB a
        name at 384 dimensions) and search stays exact, as on the CPU."""
        self.device = str(device)
        self._device_base = None
        self._gpu_index = None

    def stored_vectors(self, rows: Sequence[int]) -> Optional[np.ndarray]:
        rows = np.asarray(rows, dtype=np.int64)
        return np.array(self._flat_vectors().numpy()[rows], dtype=np.float32)

    def save_files(self, path: Path) -> None:
        super().save_files(path)
        if self.meta.get("shortlist"):
            self._write_shortlist(path / SHORTLIST_FILE)

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "FlatIndex":
        loaded = super().load(path, meta, mmap)
        if meta.get("shortlist"):
            loaded._shortlist = _read_shortlist(path, len(loaded), loaded.dim, mmap)  # type: ignore[attr-defined]
        return loaded  # type: ignore[return-value]

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

    def _flat_vectors(self):
        """The index's own float32 vectors as a torch tensor (no copy: possibly mapped)."""
        import faiss
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

    def _largest_norm(self) -> float:
        """The largest vector norm: the meta's (a stored shortlist's), else measured once."""
        if "max_norm" in self.meta:
            return float(self.meta["max_norm"])  # type: ignore[arg-type]
        if self._max_norm is None:
            self._max_norm = largest_norm(self._flat_vectors().numpy())
        return self._max_norm

    def describe(self) -> str:
        """``VectorIndex.describe``, and how a search of the linker's name depth runs here (``search_path``)."""
        return f"{super().describe()}; searched here in {self.search_path(NEIGHBOURS_K)}"

    def search_vectors(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact search as a torch matmul + top-k over the index's own (possibly mapped) vectors,
        through the path ``search_path`` chooses: the same top k whichever it is."""
        path = self.search_path(k)
        if path == "bf16":
            return self.shortlist_search(queries, k)
        if path == "int8":
            return self.int8_search(queries, k)
        return self.fp32_search(queries, k)

    def search_path(self, k: int) -> str:
        """How ``search_vectors`` finds the top ``k`` here: ``"fp32"`` (every name scored in fp32,
        the same results as FAISS' flat search and much faster, ``benchmarks/flat_search.py``; always
        on a GPU), ``"bf16"`` (``shortlist_search``) where bf16 is the faster choice (``fast_bf16``:
        AMX, or AMD's AVX512-BF16) and the index has a stored bf16 copy, or on such an AMD CPU has
        ``SHORTLIST_MEMORY_MIN_NAMES`` or more names (a copy made in memory), or ``"int8"``
        (``int8_search``) where bf16 is slow (AVX2 alone, AVX-512 without AMX), the index has
        ``INT8_MIN_NAMES`` or more names and int8 products are exact (``int8_products_exact``)."""
        import torch

        from ..encoder import fast_bf16
        from ..machine import cpu_vendor

        n = len(self)
        if self.device != "cpu":
            return "fp32"
        if fast_bf16(torch.device("cpu")):
            stored_or_amd = self.meta.get("shortlist") == "bf16" or (n >= SHORTLIST_MEMORY_MIN_NAMES and cpu_vendor() == "AuthenticAMD")
            return "bf16" if stored_or_amd and k <= _whole_chunks(n) // SHORTLIST_CHUNK else "fp32"
        return "int8" if n >= INT8_MIN_NAMES and 4 * k * TOP_K_CHUNK <= n and int8_products_exact() else "fp32"

    def fp32_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact search in fp32: every name scored (on the GPU where ``use_device`` put the vectors). One of
        the two paths ``search_vectors`` chooses from; public so that each can be timed alone."""
        import torch

        from ..encoder import fixed_passes

        n = len(self)
        on_cpu = self.device == "cpu"
        base = self._flat_vectors()
        if not on_cpu:
            if self._device_base is None:
                self._device_base = base.to(self.device)
            base = self._device_base
        block = self.pass_queries or max(1, int(5e7 // n))  # about 200 MB of scores at a time
        scores, rows = [], []
        buffer, self._scores = self._scores, None  # taken while in use: a concurrent search makes its own
        with torch.inference_mode():
            for q in _query_blocks(queries, block):
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

    def shortlist_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact top ``k`` from a bf16 pass over every name and fp32 scores of a few.

        A bf16 score is within ``SHORTLIST_ERROR`` · |q| · max |x| of the fp32 one (``margin`` is twice
        that). Every name whose bf16 score reaches the k-th best less the margin is scored exactly
        (float64 sums, each name on its own, so the result does not depend on the other queries), and
        the best ``k`` are kept, ties by row. The k-th best bf16 score comes from the chunk maxima
        (``_top_k``), and only the chunks whose maximum reaches it less the margin are read again
        (``_at_least``), for all queries at once, as ``int8_search`` does, not in a loop of small
        operations per query.
        """
        import torch

        from ..encoder import fixed_passes

        n = len(self)
        short = self._shortlist_matrix()
        block = self.pass_queries or max(1, int(1e8 // short.shape[0]))  # about 200 MB of bf16 scores at a time
        scores, rows = [], []
        buffer, self._scores = self._scores, None  # taken while in use: a concurrent search makes its own
        with torch.inference_mode():
            for q in _query_blocks(queries, block):
                m = len(q)
                margin = (2 * SHORTLIST_ERROR * self._largest_norm()) * q.norm(dim=1, keepdim=True)
                passes = fixed_passes({"q": q}, self.pass_queries)["q"].to(torch.bfloat16)
                buffer, sims = _scores_out(buffer, len(passes), short.shape[0], torch.bfloat16)
                sims = torch.mm(passes, short.T, out=sims)[:m]
                sims[:, n:] = -torch.inf
                # the chunk maxima as int16 bit patterns, faster than bf16's: the same order for every
                # chunk holding a score >= 0; a chunk of negative scores only gets an underestimate,
                # which matters only where a floor below is negative: then the bf16 maxima
                maxima = _chunk_maxima(sims.view(torch.int16)).view(torch.bfloat16).float()
                if bool((torch.topk(maxima, k, dim=1).values[:, -1:] < margin).any()):
                    maxima = _chunk_maxima(sims).float()
                floors = (_top_k(sims, k, maxima)[0][:, -1:].float() - margin).squeeze(1).numpy()
                query, row = _at_least(sims, maxima, floors)  # every name within the margin of the k-th best
                best_scores, best_rows = self._exact_top_k(q, query, row, k)
                scores.append(best_scores)
                rows.append(best_rows)
        self._scores = buffer
        return np.concatenate(scores), np.concatenate(rows).astype(np.int64)

    def int8_search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact top ``k`` from an int8 pass over every name and exact scores of a few (``int8_copy``):
        each query's k best names by int8 score are scored exactly, and then every name whose int8
        score is within the query's bound of the k-th best of those, as ``shortlist_search`` scores its
        shortlist; the best ``k`` are kept, ties by row. A query with more than ``SHORTLIST_MAX_NAMES``
        such names is shortlisted from its fp32 scores instead. The int8 copy is made in memory at the
        first search."""
        import torch

        from ..encoder import fixed_passes

        n = len(self)
        base = self._flat_vectors()
        if self._int8 is None:
            self._int8 = Int8Copy(base)
        block = self.pass_queries or max(1, int(5e7 // n))  # about 200 MB of int32 scores at a time
        scores, rows = [], []
        buffer, self._scores = self._scores, None  # taken while in use: a concurrent search makes its own
        with torch.inference_mode():
            for q in _query_blocks(queries, block):
                m = len(q)
                codes, units, bounds = self._int8.quantize(q)
                codes = fixed_passes({"q": codes}, self.pass_queries)["q"]
                buffer, ints = _scores_out(buffer, len(codes), n, torch.int32)
                ints = torch._int_mm(codes, self._int8.codes.T, out=ints)[:m]
                maxima = _chunk_maxima(ints)
                first_query, first_row = np.repeat(np.arange(m), k), _top_k(ints, k, maxima)[1].numpy().ravel()
                first = _exact_scores(base, q, torch.from_numpy(first_query), torch.from_numpy(first_row))
                floors = np.floor((first.reshape(m, k).min(1) - bounds) / units)
                # (a query near zero has tiny units: a floor beyond every int32 score keeps every name)
                floors = np.clip(floors, INT32_LOW - 1, INT32_HIGH).astype(np.int64) - 1
                query, row = _at_least(ints, maxima, floors)
                best_scores, best_rows = self._exact_top_k(q, query, row, k, known=(first_query, first_row, first))
                scores.append(best_scores)
                rows.append(best_rows)
        self._scores = buffer
        return np.concatenate(scores), np.concatenate(rows).astype(np.int64)

    def _exact_top_k(self, q, query: np.ndarray, row: np.ndarray, k: int,
                     known: Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The best ``k`` names of each query of ``q`` (m, d), ties by row, from the exact scores of its
        shortlisted (query, row) pairs, and of the ``known`` (query, row, exact score) ones (which may be
        shortlisted too: scored once). A crowded query, with more than ``SHORTLIST_MAX_NAMES`` pairs, is
        shortlisted again from its fp32 scores of every name, whose error is a thousandth of bf16's, and
        where fp32 cannot tell the names apart either, every name's score is summed in float64."""
        import torch

        base = self._flat_vectors()
        crowded = np.flatnonzero(np.bincount(query, minlength=len(q)) > SHORTLIST_MAX_NAMES).tolist()
        fresh = ~np.isin(query, crowded)
        if known is not None:
            known = tuple(part[~np.isin(known[0], crowded)] for part in known)  # type: ignore[assignment]
            fresh &= ~_pairs_in(query, row, known[0], known[1], len(self))  # type: ignore[index]
        query, row = [query[fresh]], [row[fresh]]
        scored: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = [known] if known is not None else []  # (query, row, exact score)
        if crowded:
            crowded_rows = torch.tensor(crowded)
            crowded_q = q[crowded_rows]
            sims32 = crowded_q @ base.T
            error = 2 * FP32_UNIT_ERROR * self.dim * self._largest_norm() * crowded_q.norm(dim=1, keepdim=True)
            near = sims32 >= torch.topk(sims32, k, dim=1).values[:, -1:] - error
            dense = near.sum(1) > SHORTLIST_MAX_NAMES  # fp32 cannot tell them apart either: every name summed in float64
            at, pos = torch.nonzero(near & ~dense[:, None], as_tuple=True)
            row.append(pos.numpy())
            query.append(crowded_rows[at].numpy())
            if bool(dense.any()):
                which = crowded_rows[dense]
                wanted = q[which].double()  # every name's score summed in float64, a block of names at a time
                every = torch.cat([(wanted @ part.double().T).float() for part in base.split(65536)], 1)
                at, pos = torch.nonzero(every >= torch.topk(every, k, dim=1).values[:, -1:], as_tuple=True)
                scored.append((which[at].numpy(), pos.numpy(), every[at, pos].numpy()))
        query, row = np.concatenate(query).astype(np.int64), np.concatenate(row).astype(np.int64)
        exact = _exact_scores(base, q, torch.from_numpy(query), torch.from_numpy(row))
        if scored:
            known_query, known_row, known_exact = (np.concatenate(parts) for parts in zip(*scored))
            query, row = np.concatenate([query, known_query]), np.concatenate([row, known_row])
            exact = np.concatenate([exact, known_exact])
        order = np.lexsort((row, -exact, query))  # by query, best first, ties by row
        rank = np.arange(len(order)) - np.searchsorted(query[order], query[order])
        top = order[rank < k]
        return exact[top].reshape(len(q), k), row[top].reshape(len(q), k)


def largest_norm(vectors: np.ndarray, block: int = 65536) -> float:
    """The largest row norm of ``vectors``, a block at a time (they may be memory-mapped)."""
    squares = [float(np.einsum("nd,nd->n", part, part, dtype=np.float64).max()) for part in
               (vectors[at : at + block] for at in range(0, len(vectors), block)) if len(part)]
    return max(squares, default=0.0) ** 0.5


def _query_blocks(queries: np.ndarray, block: int):
    """The queries as torch tensors of ``block`` rows (the last one shorter), without copies."""
    import torch

    for start in range(0, len(queries), block):
        yield torch.from_numpy(queries[start : start + block])


def _scores_out(buffer, rows: int, cols: int, dtype) -> tuple:
    """(buffer, a (rows, cols) view of it) for one product's scores: ``buffer`` (a flat tensor kept
    from the last search) reused where it is big enough, else a new one: a new block of scores per
    search cost more in page faults than the product itself (``benchmarks/flat_search.py``)."""
    import torch

    if buffer is None or buffer.dtype != dtype or buffer.numel() < rows * cols:
        buffer = torch.empty(rows * cols, dtype=dtype)
    return buffer, buffer[: rows * cols].view(rows, cols)


def _chunk_maxima(sims):
    """Each row's maximum over chunks of ``TOP_K_CHUNK`` columns (the last chunk may be shorter)."""
    import torch

    m, n = sims.shape
    whole = n // TOP_K_CHUNK * TOP_K_CHUNK
    maxima = sims[:, :whole].view(m, -1, TOP_K_CHUNK).amax(2)
    return torch.cat([maxima, sims[:, whole:].amax(1, keepdim=True)], 1) if whole < n else maxima


def _top_k(sims, k: int, maxima=None) -> tuple:
    """``torch.topk(sims, k, dim=1)``'s values (its indices too, but for ties), from one pass over
    the scores: each row's maxima of ``TOP_K_CHUNK`` columns (``maxima`` where already taken), then
    a top-k among the k chunks with the largest maxima. Those are k distinct scores at least the k-th
    largest maximum, and a score above it sits in one of those chunks, so the k best are there. On the
    CPU that made an exact search of MeSH's 543k names 4.629 → 3.777 ms per query
    (``benchmarks/flat_search.py``, 1 thread). Float or integer scores (the int8 pass's)."""
    import torch

    m, n = sims.shape
    if n // TOP_K_CHUNK < 4 * k:  # too few chunks to leave any out
        return torch.topk(sims, k, dim=1)
    maxima = _chunk_maxima(sims) if maxima is None else maxima
    columns = (torch.topk(maxima, k, dim=1).indices.unsqueeze(2) * TOP_K_CHUNK + torch.arange(TOP_K_CHUNK)).view(m, -1)
    outside = columns >= n  # the last, shorter chunk's missing columns
    lowest = -torch.inf if sims.dtype.is_floating_point else torch.iinfo(sims.dtype).min
    candidates = sims.gather(1, columns.clamp(max=n - 1)).masked_fill_(outside, lowest)
    values, best = torch.topk(candidates, k, dim=1)
    return values, columns.gather(1, best)


def _at_least(sims, maxima, floors: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(row, column) of every score that reaches its row's ``floors``, by row: only the chunks whose
    maximum (``_chunk_maxima``) reaches it are read."""
    import torch

    n = sims.shape[1]
    floors = torch.from_numpy(floors)
    row, chunk = torch.nonzero(maxima >= floors[:, None], as_tuple=True)
    columns = chunk[:, None] * TOP_K_CHUNK + torch.arange(TOP_K_CHUNK)
    kept = (sims[row[:, None], columns.clamp(max=n - 1)] >= floors[row][:, None]) & (columns < n)
    at, pos = torch.nonzero(kept, as_tuple=True)
    return row[at].numpy(), columns[at, pos].numpy()


def _pairs_in(query: np.ndarray, row: np.ndarray, known_query: np.ndarray, known_row: np.ndarray, n: int) -> np.ndarray:
    """Whether each (query, row) pair is one of the known pairs."""
    return np.isin(query * n + row, known_query * n + known_row)


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
