"""``VectorIndex``: the one interface every index kind implements, and what all kinds share.

A kind is a subclass registered in ``registries.index_kinds`` under its name (``flat``, ``ivf-pq``,
a third party's own). ``VectorIndex.build`` and ``VectorIndex.from_disk`` dispatch on that name
(``from_disk`` on the ``kind`` its ``index.json`` records), so the KB, the linker and the CLI never
test a kind by name. Here too: the search wrapper (shapes, empty cases), the neighbour table (each
name's own search result, kept at build), pickling by folder for worker processes, and ``auto``.

A kind implements ``create`` (an empty, trained index), ``add_vectors``, ``search_vectors``,
``save_files``/``load``, ``dim`` and ``__len__``; where they apply, also ``stored_vectors``,
``use_device``, ``set_nprobe``/``set_ef_search`` and ``_apply_search_settings``.
"""
from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from .. import registries
from ..fileio import FileStamp, atomic_open, file_stamp, read_json, stamped_path, write_json

INDEX_META = "index.json"
# A flat index keeps each name's own search result (``VectorIndex.build_neighbours``): a mention that
# is a KB name is searched with that name's stored vector, so its nearest names are known at build
# time and the linker reads them instead of searching (``neighbours_of``).
NEIGHBOURS_ROWS = "neighbours.rows.npy"  # (n, k) int32 name rows, best first
NEIGHBOURS_SCORES = "neighbours.scores.npy"  # (n, k) float32, as ``search`` returns them
NEIGHBOURS_K = 20  # the linker's name depth at its default top_k (``LinkingKB.candidates``: max(4 × top_k, 20))
NEIGHBOURS_MAX_NAMES = 200_000  # built by default up to here: a search per name (MEDIC, 72k names: under a minute)
# The meta keys every kind records; ``describe`` lists the others (search settings, extra files).
BASE_META = ("kind", "dim", "n", "metric", "faiss", "auto")

Vectors = Union[np.ndarray, Sequence[np.ndarray]]


def kind_class(kind: object) -> Type["VectorIndex"]:
    """The class registered as index kind ``kind``, or a ValueError that lists the registered ones."""
    if not isinstance(kind, str):
        raise ValueError(f"an index kind is a name, not {kind!r}; choose one of {registries.names(registries.index_kinds)}")
    return registries.get(registries.index_kinds, kind)


def check_kind(kind: str) -> str:
    """``kind`` itself if ``build`` takes it (``auto`` or a registered kind), else the ValueError
    ``kind_class`` raises: a build checks it before encoding a single name."""
    if kind != "auto":
        kind_class(kind)
    return kind


def _auto_range(names: Tuple[int, Optional[int]]) -> str:
    low, high = names
    if high is None:
        return f"over {low - 1:,} names" if low > 0 else "any number of names"
    return f"up to {high:,} names" if low <= 0 else f"{low:,} to {high:,} names"


def choose_kind(n_vectors: int) -> Tuple[str, str]:
    """The kind ``auto`` builds for ``n_vectors`` names, and why (recorded as ``meta["auto"]``).

    Each kind that ``auto`` may pick declares the numbers of names it is picked for (``auto_names``);
    where several ranges hold ``n_vectors``, the one that starts highest (the kind made for the
    larger index) wins, then the first by name."""
    fits = []
    for name, kind in registries.all_entries(registries.index_kinds).items():
        if kind.auto_names is not None:
            low, high = kind.auto_names
            if low <= n_vectors and (high is None or n_vectors <= high):
                fits.append((-low, name, kind))
    if not fits:
        raise ValueError(f"no registered index kind is picked by 'auto' for {n_vectors:,} names; name a kind")
    _, name, kind = min(fits)
    return name, f"auto: {n_vectors:,} names, {name} for {_auto_range(kind.auto_names)}: {kind.auto_reason}"


def auto_index_kind(n_vectors: int) -> str:
    """The kind ``auto`` builds for ``n_vectors`` names (``choose_kind``)."""
    return choose_kind(n_vectors)[0]


def auto_rule() -> str:
    """What ``auto`` picks, from the registered kinds' ranges (e.g. for the CLI's help)."""
    ranges = sorted((kind.auto_names[0], name, kind.auto_names) for name, kind in registries.all_entries(registries.index_kinds).items()
                    if kind.auto_names is not None)
    return ", ".join(f"{name} for {_auto_range(names)}" for _, name, names in ranges)


def index_kind_help() -> str:
    """The choices of ``build-kb --index``, from the registry: ``auto`` (and what it picks), then every kind."""
    return f"auto ({auto_rule()}) or one of: {', '.join(registries.names(registries.index_kinds))}"


def check_size(path: Path, found: str, n: int, dim: int, meta: Dict[str, object]) -> None:
    """Refuse an index file whose size is not the one its ``index.json`` records."""
    if n != meta.get("n") or dim != meta.get("dim"):
        raise ValueError(f"{path}/{found} does not match {INDEX_META} (n/dim differ): rebuild the index")


class VectorIndex:
    """An inner-product index over unit vectors (inner product = cosine), and a record (``meta``)
    of how it was built. Build and load through this class; each kind is a registered subclass."""

    exact: ClassVar[bool] = False  # search returns the exact top k of vectors kept whole (``stored_vectors``)
    neighbours_by_default: ClassVar[bool] = False  # ``build`` keeps a neighbour table up to NEIGHBOURS_MAX_NAMES
    auto_names: ClassVar[Optional[Tuple[int, Optional[int]]]] = None  # (fewest, most) names ``auto`` picks it for
    auto_reason: ClassVar[str] = ""  # why ``auto`` picks it there, said in ``meta["auto"]``
    main_file: ClassVar[str] = INDEX_META  # the file a memory-mapped index's pickle is stamped with
    transient: ClassVar[Tuple[str, ...]] = ()  # attributes a pickle leaves out (device copies, buffers)

    def __init__(self, meta: Dict[str, object]):
        self.meta = meta
        self.device = "cpu"
        # None: exact search takes as many queries per product as fit ~200 MB of scores. N: exactly N per
        # product (a short one padded), so a query's scores do not depend on the queries beside it
        self.pass_queries: Optional[int] = None
        self.neighbours: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (scores, rows) per name: ``build_neighbours``
        self._source: Optional[Tuple[str, FileStamp]] = None  # the folder, when memory-mapped by ``from_disk``

    # ------------------------------------------------------------------ what a kind implements
    @classmethod
    def create(cls, kind: str, chunks: Sequence[np.ndarray], dim: int, n: int, seed: int = 0,
               nprobe: Optional[int] = None) -> "VectorIndex":
        """An empty index of this kind for ``n`` vectors of ``dim``, trained where it needs training
        (on a sample of ``chunks``, which ``build`` adds next); ``meta`` starts with ``kind``, ``dim``, ``n``."""
        raise NotImplementedError

    def add_vectors(self, vectors: np.ndarray) -> None:
        """Append ``vectors`` (a non-empty (m, dim) array, possibly memory-mapped) as the next rows."""
        raise NotImplementedError

    def search_vectors(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """``search`` once its checks are done: float32 C-ordered (m, dim) queries, m ≥ 1, 1 ≤ k ≤ len."""
        raise NotImplementedError

    def save_files(self, path: Path) -> None:
        """Write this kind's own files into folder ``path``, each atomically (``to_disk`` writes the meta)."""
        raise NotImplementedError

    @classmethod
    def load(cls, path: Path, meta: Dict[str, object], mmap: bool) -> "VectorIndex":
        """Read the files ``save_files`` wrote (mapped where ``mmap``), refusing ones that do not match ``meta``."""
        raise NotImplementedError

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def stored_vectors(self, rows: Sequence[int]) -> Optional[np.ndarray]:
        """The vectors added at ``rows``, as float32, where the index keeps them whole; None where it
        keeps only codes (the linker then encodes the name again)."""
        return None

    def use_device(self, device: str) -> None:
        """Search on ``device`` (e.g. ``cuda:0``) where the kind can; the others keep the CPU."""
        self.device = str(device)

    def set_nprobe(self, nprobe: int) -> None:
        """IVF lists visited per query (recall against speed); recorded so it is saved."""
        raise ValueError(f"nprobe applies to IVF indexes, not {self.meta.get('kind')!r}")

    def set_ef_search(self, ef_search: int) -> None:
        """HNSW's candidate list size per query (recall against speed); recorded so it is saved."""
        raise ValueError(f"efSearch applies to hnsw indexes, not {self.meta.get('kind')!r}")

    def _apply_search_settings(self) -> None:
        """Set the search parameters ``meta`` records (after loading or unpickling)."""

    # ------------------------------------------------------------------ the interface, for every kind
    @classmethod
    def build(
        cls, vectors: Vectors, kind: str = "auto", seed: int = 0, nprobe: Optional[int] = None,
        neighbours: Optional[bool] = None, progress: bool = False,
    ) -> "VectorIndex":
        """Build an index over L2-normalised float32 vectors: one (n, dim) array, or a sequence of
        them (e.g. memory-mapped encoding chunks), added one at a time so that a KB of millions of
        names never needs a second full copy in memory. ``kind``: a registered kind, or ``auto``
        (``choose_kind``; its reason is kept as ``meta["auto"]``). ``neighbours``: keep each name's
        nearest names (``build_neighbours``); None: where the kind does so by default (``flat``), up
        to ``NEIGHBOURS_MAX_NAMES``."""
        chunks = [vectors] if isinstance(vectors, np.ndarray) else list(vectors)
        if any(c.ndim != 2 for c in chunks) or not chunks:
            raise ValueError("expected a 2-d array of vectors (or a non-empty sequence of them)")
        dim = int(chunks[0].shape[1])
        if any(int(c.shape[1]) != dim for c in chunks):
            raise ValueError("all vector chunks must have the same dimension")
        n = sum(int(c.shape[0]) for c in chunks)
        reason = None
        if kind == "auto":
            kind, reason = choose_kind(n)
        built = kind_class(kind).create(kind, chunks, dim, n, seed=seed, nprobe=nprobe)
        for c in chunks:
            built.add(c)
        if reason is not None:
            built.meta["auto"] = reason
        if neighbours or (neighbours is None and built.neighbours_by_default and 0 < n <= NEIGHBOURS_MAX_NAMES):
            built.build_neighbours(progress=progress)
        return built

    def add(self, vectors: np.ndarray) -> None:
        """Append ``vectors`` ((m, dim), unit length) as rows ``len(self)`` onwards. A neighbour table,
        which would no longer hold every name's nearest names, is dropped."""
        if vectors.ndim != 2 or int(vectors.shape[1]) != self.dim:
            raise ValueError(f"vectors must have shape (m, {self.dim}), got {vectors.shape}")
        if len(vectors):
            self.add_vectors(vectors)
            if self.neighbours is not None:
                self.neighbours = None
                self.meta.pop("neighbours", None)
        self.meta["n"] = len(self)

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Scores and name rows, both (n_queries, k); rows are -1 where fewer than k exist."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (n, {self.dim}), got {queries.shape}")
        k = max(1, min(k, max(len(self), 1)))
        if len(self) == 0 or queries.shape[0] == 0:
            return np.zeros((queries.shape[0], k), np.float32), np.full((queries.shape[0], k), -1, np.int64)
        return self.search_vectors(queries, k)

    def describe(self) -> str:
        """One line: the kind, its size, the settings and files its meta records, and ``auto``'s reason."""
        settings = [f"{key}={self.meta[key]}" for key in sorted(self.meta) if key not in BASE_META]
        line = f"{self.meta.get('kind')}: {len(self):,} vectors of {self.dim} dimensions"
        line += f" ({', '.join(settings)})" if settings else ""
        return line + (f"; {self.meta['auto']}" if self.meta.get("auto") else "")

    # ------------------------------------------------------------------ the neighbour table
    def build_neighbours(self, k: int = NEIGHBOURS_K, batch: int = 2048, progress: bool = False) -> None:
        """Search every name's stored vector once and keep its ``k`` nearest names: what ``search``
        returns for a mention that is that name (the linker searches with the stored vector)."""
        if not self.exact:
            raise ValueError(f"a neighbour table needs the exact vectors of an exact kind (a flat index), not {self.meta.get('kind')!r}")
        from tqdm import tqdm

        n, k = len(self), max(1, min(k, len(self)))
        scores, rows = np.empty((n, k), np.float32), np.empty((n, k), np.int32)
        for start in tqdm(range(0, n, batch), desc="neighbour table", unit="block", disable=not progress):
            block = np.arange(start, min(n, start + batch))
            scores[block], rows[block] = self.search(self.stored_vectors(block), k)  # type: ignore[arg-type]
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

    # ------------------------------------------------------------------ disk and pickling
    def to_disk(self, path: Union[str, Path]) -> None:
        """Write the kind's files, the neighbour table and ``index.json`` into folder ``path``, each atomically."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.save_files(path)
        if self.neighbours is not None:
            for name, array in zip((NEIGHBOURS_SCORES, NEIGHBOURS_ROWS), self.neighbours):
                with atomic_open(path / name, "wb") as f:
                    np.save(f, np.asarray(array), allow_pickle=False)
        write_json(path / INDEX_META, self.meta)

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "VectorIndex":
        """Load the kind that ``index.json`` names; ``mmap`` maps the vectors instead of reading them,
        so loading is near-instant."""
        path = Path(path)
        if not (path / INDEX_META).is_file():
            raise FileNotFoundError(f"{path} has no {INDEX_META}")
        meta = read_json(path / INDEX_META)
        try:
            kind = kind_class(meta.get("kind"))
        except ValueError as e:
            raise ValueError(f"{path}/{INDEX_META}: {e} (or install the package that registers it)") from None
        if not issubclass(kind, cls):
            raise ValueError(f"{path} holds a {meta['kind']!r} index, not a {cls.__name__}")
        loaded = kind.load(path, meta, mmap)
        check_size(path, kind.main_file, len(loaded), loaded.dim, meta)
        if meta.get("neighbours"):
            loaded.neighbours = _read_neighbours(path, len(loaded), int(meta["neighbours"]), mmap)
        loaded._apply_search_settings()
        if mmap:
            loaded._source = (str(path.resolve()), file_stamp(path / kind.main_file))
        return loaded

    def __getstate__(self) -> dict:
        """A memory-mapped index pickles as its folder (a worker maps it again: ``nlp.pipe(n_process=...)``
        under spawn), an in-memory one by value. Search settings changed since loading (``meta``) and
        the device go along; device copies are made again where unpickled."""
        if self._source is not None:
            return {"source": self._source, "meta": self.meta, "device": self.device}
        state = dict(self.__dict__)
        state.update({name: None for name in self.transient})
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


def _read_neighbours(path: Path, n: int, k: int, mmap: bool) -> Tuple[np.ndarray, np.ndarray]:
    """The neighbour table ``to_disk`` wrote: (scores, rows), each (n, k), mapped when ``mmap``."""
    found: List[np.ndarray] = []
    for name, dtype in ((NEIGHBOURS_SCORES, np.float32), (NEIGHBOURS_ROWS, np.int32)):
        if not (path / name).is_file():
            raise FileNotFoundError(f"{path} has no {name}, which its {INDEX_META} says it keeps: rebuild the KB")
        array = np.load(path / name, mmap_mode="r" if mmap else None, allow_pickle=False)
        if array.dtype != dtype or array.shape != (n, k):
            raise ValueError(f"{path}/{name} holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} ({n}, {k}): rebuild the KB")
        found.append(array)
    return found[0], found[1]
