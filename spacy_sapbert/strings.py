"""Read-only string tables that load memory-mapped: millions of strings, no Python objects.

A table is two ``.npy`` files: ``<name>.utf8.npy``, the strings joined by ``"\\x1f"`` and
encoded as UTF-8 (uint8), and ``<name>.starts.npy`` (int64, n + 1 values), where string ``i``
starts; ``starts[n]`` is where a next string would start, so string ``i`` is
``blob[starts[i]:starts[i + 1] - 1]``. The separator is not needed for decoding (the starts
are), but it makes the blob byte-for-byte ``"\\x1f".join(strings).encode()``, which is what
the KB fingerprint hashes, so the hash is computed from the mapped bytes directly.
"""
from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union, overload

import numpy as np

from .fileio import FileStamp, atomic_open, file_stamp, stamped_path

SEP = "\x1f"
_CHUNK = 65_536  # strings decoded at once when iterating or slicing
_CHECK_CHUNK = 1 << 22  # values compared at once by ``first_decrease``
_HASH_CHUNK = 1 << 18  # strings hashed at once by ``table_hashes`` (a few hundred MB of temporaries at most)
_MASK = (1 << 64) - 1
_HASH_BASE = 0x100000001B3  # the polynomial's base (FNV-64's prime)
_LENGTH_MIX = 0x9E3779B97F4A7C15
PathLike = Union[str, Path]


def table_files(prefix: PathLike) -> Tuple[Path, Path]:
    """The blob and starts file of the table ``prefix`` (a path without suffix)."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + ".utf8.npy"), prefix.with_name(prefix.name + ".starts.npy")


def load_npy(path: Path, mmap: bool = True) -> np.ndarray:
    """``np.load`` without pickles; a truncated or garbled file is an error naming it.

    A mapped file comes back as a plain ndarray over the map: ``np.memmap``'s Python-level
    ``__getitem__`` slows every element read, and the linker reads millions."""
    try:
        return np.asarray(np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False))
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as e:
        raise ValueError(f"{path}: not a readable .npy file, truncated or damaged ({e})") from e


def first_decrease(arr: np.ndarray, strict: bool = False) -> Optional[int]:
    """The first ``i`` where ``arr[i + 1] < arr[i]`` (``<=`` with ``strict``), or None.

    Reads a memory-mapped array in chunks, so checking millions of offsets stays fast and small.
    """
    for lo in range(0, max(0, len(arr) - 1), _CHECK_CHUNK):
        part = np.asarray(arr[lo : lo + _CHECK_CHUNK + 1])
        down = np.flatnonzero(part[1:] <= part[:-1] if strict else part[1:] < part[:-1])
        if len(down):
            return lo + int(down[0])
    return None


def save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_open(path, "wb") as f:
        np.save(f, arr, allow_pickle=False)


class StringTable(Sequence[str]):
    """``n`` strings over a UTF-8 blob and its starts (see the module docstring).

    Indexing returns ``str``; slicing returns a ``list`` of ``str``. Nothing is decoded
    until asked for, so a memory-mapped table of millions of names opens instantly.
    """

    def __init__(self, blob: np.ndarray, starts: np.ndarray, where: str = "string table"):
        if blob.ndim != 1 or blob.dtype != np.uint8:
            raise ValueError(f"{where}: the blob must be 1-D uint8, got {blob.dtype} with shape {blob.shape}")
        if starts.ndim != 1 or starts.dtype != np.dtype(np.int64) or len(starts) < 1:
            raise ValueError(f"{where}: the starts must be 1-D native int64 with n + 1 values, got {starts.dtype} {starts.shape}")
        n = len(starts) - 1
        first, last = int(starts[0]), int(starts[-1])
        if first != 0 or last != len(blob) + (1 if n else 0):
            raise ValueError(
                f"{where}: the starts ({n} strings, first {first}, last {last}) do not fit the blob "
                f"({len(blob)} bytes): truncated or mismatched files"
            )
        self._blob = blob
        self._starts = starts
        self._where = where
        self._files: Optional[Tuple[FileStamp, FileStamp]] = None  # set when memory-mapped by ``load``
        self._bytes = memoryview(blob)
        self._at = memoryview(np.asarray(starts))  # indexing it gives Python ints, fast
        self._n = n
        self._sorted_hashes: Optional[np.ndarray] = None  # ``find``'s lookup: loaded, or built on its first call
        self._hash_rows: Optional[np.ndarray] = None
        self._lookup_stamps: Optional[Tuple[FileStamp, FileStamp]] = None  # its files, where loaded from them

    # ------------------------------------------------------------------ building
    @classmethod
    def from_strings(cls, strings: Sequence[str]) -> "StringTable":
        blob, starts = _encode(strings)
        return cls(blob, starts)

    @classmethod
    def load(cls, prefix: PathLike, mmap: bool = True) -> "StringTable":
        """The table ``prefix``, with ``find``'s hash table where it was saved beside it (``save_lookup``)."""
        blob_path, starts_path = table_files(prefix)
        table = cls(load_npy(blob_path, mmap), load_npy(starts_path, mmap), where=f"{blob_path} / {starts_path.name}")
        if mmap:
            table._files = (file_stamp(blob_path), file_stamp(starts_path))
        hashes_path, rows_path = lookup_files(prefix)
        if hashes_path.is_file() and rows_path.is_file():
            table._use_lookup(load_npy(hashes_path, mmap), load_npy(rows_path, mmap), str(hashes_path))
            if mmap:
                table._lookup_stamps = (file_stamp(hashes_path), file_stamp(rows_path))
        return table

    @staticmethod
    def save_lookup(table: "StringTable", prefix: PathLike) -> None:
        """Write ``find``'s hash table beside the table ``prefix`` (each file atomically), so that a
        loaded table answers its first ``find`` without hashing every string."""
        hashes, rows = table.lookup_arrays()
        hashes_path, rows_path = lookup_files(prefix)
        save_npy(hashes_path, hashes)
        save_npy(rows_path, rows)

    def lookup_arrays(self) -> Tuple[np.ndarray, np.ndarray]:
        """``find``'s hash table: the strings' ``string_hash`` values sorted, and the row of each."""
        if self._sorted_hashes is None or self._hash_rows is None:
            hashes = table_hashes(self._blob, self._starts)
            order = np.argsort(hashes, kind="stable")
            self._sorted_hashes, self._hash_rows = hashes[order], order
        return self._sorted_hashes, self._hash_rows

    def _use_lookup(self, hashes: np.ndarray, rows: np.ndarray, where: str) -> None:
        """Take a saved hash table, refused (naming ``where``) unless it has one entry per string and
        finds a few of them where they are."""
        self._sorted_hashes, self._hash_rows = hashes, rows
        checked = sorted({0, self._n // 2, self._n - 1}) if self._n else []
        if len(hashes) != self._n or len(rows) != self._n or any(self.find(self[i]) != i for i in checked):
            raise ValueError(f"{where}: the name lookup does not belong to {self._where} (damaged or from another "
                             "build): delete it and it is computed again on first use")

    @staticmethod
    def save(strings: Sequence[str], prefix: PathLike) -> None:
        """Write ``strings`` (a table or any sequence of str) as the table ``prefix``, each file atomically."""
        if isinstance(strings, StringTable):
            blob, starts = strings._blob, strings._starts
        else:
            blob, starts = _encode(strings)
        blob_path, starts_path = table_files(prefix)
        save_npy(blob_path, blob)
        save_npy(starts_path, starts)

    def validate(self) -> None:
        """Raise if the starts ever go backwards (each string takes at least its separator byte).

        Not done on construction: loading a KB calls it once, vectorised."""
        bad = first_decrease(self._starts, strict=True)
        if bad is not None:
            raise ValueError(
                f"{self._where}: string {bad} starts at byte {int(self._starts[bad])} but the next one at "
                f"{int(self._starts[bad + 1])}: the starts must increase (damaged or mismatched files)"
            )

    def find(self, string: str) -> Optional[int]:
        """The row of ``string`` (the first, where it repeats), or None.

        A binary search over the strings' 64-bit hashes (``table_hashes``, computed over the blob with
        numpy on the first call: 16 bytes a string, seconds at 7.5M strings), the match confirmed on
        the bytes: a dict of a UMLS-sized table's strings would take over a GB and seconds to build."""
        sorted_hashes, hash_rows = self.lookup_arrays()
        data = string.encode("utf8")
        h = np.uint64(string_hash(data))
        lo, hi = int(np.searchsorted(sorted_hashes, h, side="left")), int(np.searchsorted(sorted_hashes, h, side="right"))
        at, mv = self._at, self._bytes
        for row in hash_rows[lo:hi].tolist():
            if mv[at[row] : at[row + 1] - 1] == data:
                return row
        return None

    def joined_bytes(self) -> memoryview:
        """``"\\x1f".join(self).encode()``, without decoding anything."""
        return self._bytes

    # ------------------------------------------------------------------ Sequence
    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> List[str]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:
                return list(self._run(start, stop))
            rows = np.arange(start, stop, step)
            if not len(rows):
                return []
            starts = np.asarray(self._starts)
            ends = starts[rows + 1] - 1
            mv = self._bytes
            return [str(mv[a:b], "utf8") for a, b in zip(starts[rows].tolist(), ends.tolist())]
        j = operator.index(i)
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(f"string table index {i} out of range for {self._n} strings")
        return str(self._bytes[self._at[j] : self._at[j + 1] - 1], "utf8")

    def __iter__(self) -> Iterator[str]:
        return self._run(0, self._n)

    def _run(self, start: int, stop: int) -> Iterator[str]:
        """Strings ``start:stop``, decoded a chunk at a time and split on the separator
        (string by string for a chunk where some string contains the separator itself)."""
        at, mv = self._at, self._bytes
        for lo in range(start, stop, _CHUNK):
            hi = min(lo + _CHUNK, stop)
            parts = str(mv[at[lo] : at[hi] - 1], "utf8").split(SEP)
            if len(parts) != hi - lo:
                parts = [str(mv[at[j] : at[j + 1] - 1], "utf8") for j in range(lo, hi)]
            yield from parts

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringTable):
            return self._n == other._n and self._bytes == other._bytes and np.array_equal(self._starts, other._starts)
        if isinstance(other, list):
            return self._n == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict:
        """A memory-mapped table pickles as its files (mapped again on unpickling, e.g. in an
        ``nlp.pipe(n_process=...)`` worker), an in-memory one as copies of its arrays."""
        if self._files is not None:
            return {"files": self._files, "where": self._where, "lookup": self._lookup_stamps}
        return {"blob": np.asarray(self._blob), "starts": np.asarray(self._starts), "where": self._where}

    def __setstate__(self, state: dict) -> None:
        files = state.get("files")
        if files is None:
            self.__init__(state["blob"], state["starts"], state.get("where", "string table"))  # type: ignore[misc]
            return
        blob, starts = (load_npy(stamped_path(f)) for f in files)
        self.__init__(blob, starts, state["where"])  # type: ignore[misc]
        self._files = files
        if state.get("lookup"):
            self._sorted_hashes, self._hash_rows = (load_npy(stamped_path(f)) for f in state["lookup"])
            self._lookup_stamps = state["lookup"]

    def __repr__(self) -> str:
        return f"<StringTable of {self._n} strings, {len(self._blob)} bytes>"


class ListTable(Sequence[List[str]]):
    """Per row a list of strings (a concept's types or xrefs): all items in one
    ``StringTable`` and, in ``<name>.rows.npy`` (int64, n + 1 values), where each row's
    items start, so row ``i`` is ``items[rows[i]:rows[i + 1]]``. Rows are decoded when read."""

    def __init__(self, items: StringTable, rows: np.ndarray, where: str = "list table"):
        if rows.ndim != 1 or rows.dtype != np.dtype(np.int64) or len(rows) < 1:
            raise ValueError(f"{where}: the rows must be 1-D native int64 with n + 1 values, got {rows.dtype} {rows.shape}")
        if int(rows[0]) != 0 or int(rows[-1]) != len(items):
            raise ValueError(
                f"{where}: the rows ({len(rows) - 1}, last ending at item {int(rows[-1])}) do not fit the "
                f"{len(items)} items: truncated or mismatched files"
            )
        self.items = items
        self._rows = rows
        self._where = where
        self._rows_file: Optional[FileStamp] = None  # set when memory-mapped by ``load``
        self._at = memoryview(np.asarray(rows))
        self._n = len(rows) - 1

    def validate(self) -> None:
        """Raise if the row bounds ever go backwards, or the items' starts do."""
        bad = first_decrease(self._rows)
        if bad is not None:
            raise ValueError(
                f"{self._where}: row {bad} starts at item {int(self._rows[bad])} but the next one at "
                f"{int(self._rows[bad + 1])}: the rows must not decrease (damaged or mismatched files)"
            )
        self.items.validate()

    @classmethod
    def from_lists(cls, rows: Sequence[Sequence[str]]) -> "ListTable":
        items, bounds = _flatten(rows)
        return cls(StringTable.from_strings(items), bounds)

    @classmethod
    def load(cls, prefix: PathLike, mmap: bool = True) -> "ListTable":
        rows_path = _rows_file(prefix)
        items = StringTable.load(prefix, mmap)
        table = cls(items, load_npy(rows_path, mmap), where=f"{rows_path} / {' / '.join(p.name for p in table_files(prefix))}")
        if mmap:
            table._rows_file = file_stamp(rows_path)
        return table

    @staticmethod
    def save(rows: Sequence[Sequence[str]], prefix: PathLike) -> None:
        """Write ``rows`` (a ``ListTable`` or any sequence of lists of str) as the table ``prefix``."""
        table = ListTable.of(rows)
        StringTable.save(table.items, prefix)
        save_npy(_rows_file(prefix), table.bounds)

    @classmethod
    def of(cls, rows: Sequence[Sequence[str]]) -> "ListTable":
        """``rows`` as a ``ListTable`` (itself when it is one)."""
        return rows if isinstance(rows, ListTable) else cls.from_lists(rows)

    @property
    def bounds(self) -> np.ndarray:
        """Where each row's items start (n + 1 values): with ``items``, the table's bytes."""
        return self._rows

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step == 1:
                return list(self._run(start, stop))
            return [self[j] for j in range(start, stop, step)]
        j = operator.index(i)
        if j < 0:
            j += self._n
        if not 0 <= j < self._n:
            raise IndexError(f"list table index {i} out of range for {self._n} rows")
        return self.items[self._at[j] : self._at[j + 1]]

    def __iter__(self) -> Iterator[List[str]]:
        return self._run(0, self._n)

    def _run(self, start: int, stop: int) -> Iterator[List[str]]:
        at = self._at
        for lo in range(start, stop, _CHUNK):
            hi = min(lo + _CHUNK, stop)
            first = at[lo]
            flat = self.items[first : at[hi]]
            bounds = at[lo : hi + 1].tolist()
            yield from (flat[a - first : b - first] for a, b in zip(bounds, bounds[1:]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ListTable, list)):
            return len(self) == len(other) and all(a == list(b) for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict:
        """Memory-mapped rows pickle as their file, like ``StringTable``'s arrays."""
        rows = {"rows_file": self._rows_file} if self._rows_file is not None else {"rows": np.asarray(self._rows)}
        return {"items": self.items, "where": self._where, **rows}

    def __setstate__(self, state: dict) -> None:
        rows_file = state.get("rows_file")
        rows = load_npy(stamped_path(rows_file)) if rows_file is not None else state["rows"]
        self.__init__(state["items"], rows, state.get("where", "list table"))  # type: ignore[misc]
        self._rows_file = rows_file

    def __repr__(self) -> str:
        return f"<ListTable of {self._n} rows, {len(self.items)} items>"


def lookup_files(prefix: PathLike) -> Tuple[Path, Path]:
    """``find``'s saved hash table beside the table ``prefix``: the sorted hashes and their rows."""
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + ".hashes.npy"), prefix.with_name(prefix.name + ".hash_rows.npy")


def _rows_file(prefix: PathLike) -> Path:
    prefix = Path(prefix)
    return prefix.with_name(prefix.name + ".rows.npy")


def _flatten(rows: Sequence[Sequence[str]]) -> Tuple[List[str], np.ndarray]:
    items = [x for row in rows for x in row]
    bounds = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=bounds[1:])
    return items, bounds


def _encode(strings: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """The blob and starts of ``strings``."""
    n = len(strings)
    joined = SEP.join(strings)
    blob = np.frombuffer(joined.encode("utf8"), dtype=np.uint8)
    if joined.isascii():
        sizes = np.fromiter(map(len, strings), dtype=np.int64, count=n)
    else:
        sizes = np.fromiter((len(s.encode("utf8")) for s in strings), dtype=np.int64, count=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes + 1, out=starts[1:])
    return blob, starts


def string_hash(data: bytes) -> int:
    """A 64-bit hash of one string's UTF-8 bytes: the sum of (byte + 1) * BASE^i modulo 2^64, its length
    mixed in, then splitmix64's finaliser. ``table_hashes`` computes the same for a whole table."""
    h, power = 0, 1
    for b in data:
        h = (h + (b + 1) * power) & _MASK
        power = (power * _HASH_BASE) & _MASK
    return _finalise(h ^ ((len(data) * _LENGTH_MIX) & _MASK))


def _finalise(z: Any) -> Any:
    """splitmix64's finaliser, for a Python int (masked to 64 bits) or a uint64 array (wrapping)."""
    if isinstance(z, np.ndarray):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def table_hashes(blob: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``string_hash`` of every string of a table (blob and starts as ``StringTable`` keeps them),
    vectorised over the bytes ``_HASH_CHUNK`` strings at a time (uint64 arithmetic wraps modulo 2^64)."""
    n = len(starts) - 1
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    starts = np.asarray(starts)
    lengths = np.diff(starts) - 1  # (``starts[n]`` counts a separator after the last string too)
    powers = np.ones(int(lengths.max()) + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        powers[1:] = np.cumprod(np.full(len(powers) - 1, _HASH_BASE, dtype=np.uint64))
        for lo in range(0, n, _HASH_CHUNK):
            hi = min(lo + _HASH_CHUNK, n)
            first = int(starts[lo])
            seg = np.asarray(blob[first : int(starts[hi]) - 1], dtype=np.uint64)  # the strings and the separators between
            local = starts[lo:hi] - first
            owner = np.repeat(np.arange(hi - lo), lengths[lo:hi] + 1)[: len(seg)]
            pos = np.arange(len(seg)) - local[owner]
            terms = np.where(pos < lengths[lo:hi][owner], (seg + np.uint64(1)) * powers[pos], np.uint64(0))
            sums = np.add.reduceat(np.append(terms, np.uint64(0)), local)  # (the 0: an empty last string's index)
            out[lo:hi] = _finalise(sums ^ (lengths[lo:hi].astype(np.uint64) * np.uint64(_LENGTH_MIX)))
    return out
