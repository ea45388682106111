"""Writing a KB folder straight from a stream of concept records, for sources the size of UMLS.

``ConceptKB.from_records(records).to_disk(folder)`` holds every name several times at once: a dict of
per-name row lists, a dict of display forms, the two name lists, then one joined string per table
while saving. ``write_kb`` writes the same folder, byte for byte, while holding only one normalised
key per name (to find a name seen before) and integer arrays: names, display names and the concept
tables are appended to their files as the records arrive, and the name→concept links are put in
name order at the end (one stable ``argsort``: n log n; everything else is linear).
"""
from __future__ import annotations

import io
from array import array
from pathlib import Path
from typing import BinaryIO, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .fileio import write_json
from .kb import ConceptKB, _known_parents, _prior_array, checked_id, duplicate_id, write_name_lookup
from .normalize import normalize_name
from .records import ConceptRecord
from .strings import SEP, ListTable, save_npy, table_files

_SEP = SEP.encode("utf8")
_PROGRESS_EVERY = 1000  # records between progress-bar updates


def _npy_header(n_bytes: int) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a 1-D uint8 array of ``n_bytes``."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (n_bytes,)})
    return buf.getvalue()


class _StringTableWriter:
    """A ``strings.StringTable`` written one string at a time: the blob goes to its ``.npy`` as it
    grows (the header, padded to the same 128 bytes for any length, is rewritten at the end) and
    only the starts (8 bytes a string) stay in memory."""

    def __init__(self, prefix: Path):
        self.blob_path, self.starts_path = table_files(prefix)
        self.file: BinaryIO = open(self.blob_path, "wb")
        self.header_size = len(_npy_header(0))
        self.file.write(_npy_header(0))
        self.starts = array("q", [0])

    def add(self, text: str) -> None:
        data = text.encode("utf8")
        if len(self.starts) > 1:
            self.file.write(_SEP)
        self.file.write(data)
        self.starts.append(self.starts[-1] + len(data) + 1)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def close(self) -> None:
        header = _npy_header(self.starts[-1] - 1 if len(self) else 0)
        if len(header) != self.header_size:  # pragma: no cover - needs a blob of 10^60 bytes
            raise ValueError(f"{self.blob_path}: the .npy header changed size")
        self.file.seek(0)
        self.file.write(header)
        self.file.close()
        save_npy(self.starts_path, np.frombuffer(self.starts, dtype=np.int64))


class _ListTableWriter:
    """A ``strings.ListTable`` written one row at a time (items streamed, row bounds in memory)."""

    def __init__(self, prefix: Path):
        self.prefix = prefix
        self.items = _StringTableWriter(prefix)
        self.rows = array("q", [0])

    def add(self, row: Iterable[str]) -> None:
        for item in row:
            self.items.add(item)
        self.rows.append(len(self.items))

    def close(self) -> None:
        self.items.close()
        save_npy(self.prefix.with_name(self.prefix.name + ".rows.npy"), np.frombuffer(self.rows, dtype=np.int64))


def write_kb(
    records: Iterable[ConceptRecord],
    folder: Path,
    on_duplicate: str = "error",
    lowercase: bool = True,
    strip_punctuation: bool = False,
    priors: Optional[Mapping[str, float]] = None,
    progress: bool = False,
    desc: str = "reading concepts",
) -> ConceptKB:
    """Write the KB of ``records`` into the empty folder ``folder``; return it, memory-mapped.

    The folder is the one ``ConceptKB.from_records(records, on_duplicate, lowercase,
    strip_punctuation, priors).to_disk(folder)`` writes, with the same errors for bad ids and
    repeated ones. A concept repeated with ``on_duplicate="merge"`` (rare: readers merge their own)
    has its types, cross-references and links merged at the end, in memory.
    """
    if on_duplicate not in ("error", "merge"):
        raise ValueError(f"on_duplicate must be 'error' or 'merge', got {on_duplicate!r}")
    from tqdm import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    names, display = _StringTableWriter(folder / "names"), _StringTableWriter(folder / "display_names")
    ids, concept_names = _StringTableWriter(folder / "concept_ids"), _StringTableWriter(folder / "concept_names")
    types, xrefs = _ListTableWriter(folder / "concept_types"), _ListTableWriter(folder / "concept_xrefs")
    row_of_name: Dict[str, int] = {}
    row_of_id: Dict[str, int] = {}
    parents: Dict[int, List[str]] = {}
    merges: List[Tuple[int, Sequence[str], Sequence[str]]] = []  # (row, types, xrefs) of repeated concepts
    link_names, link_concepts = array("i"), array("i")
    bar = tqdm(desc=desc, unit=" concepts", disable=not progress, mininterval=2)
    n = -1
    try:
        for n, rec in enumerate(records):
            cid = checked_id(rec.id, n)
            row = row_of_id.get(cid)
            if row is None:
                row = row_of_id[cid] = len(row_of_id)
                ids.add(cid)
                concept_names.add(rec.name.strip() or cid)
                types.add(dict.fromkeys(rec.types))
                xrefs.add(dict.fromkeys(rec.xrefs))
            elif on_duplicate == "error":
                raise duplicate_id(cid, n)
            else:
                merges.append((row, list(rec.types), list(rec.xrefs)))
            if rec.parents:
                parents[row] = list(dict.fromkeys(parents.get(row, []) + list(rec.parents)))
            linked = set()
            for raw in rec.all_names:
                key = normalize_name(raw, lowercase, strip_punctuation)
                if not key:
                    continue
                name_row = row_of_name.get(key)
                if name_row is None:
                    name_row = row_of_name[key] = len(row_of_name)
                    names.add(key)
                    display.add(normalize_name(raw, lowercase=False))
                if name_row not in linked:
                    linked.add(name_row)
                    link_names.append(name_row)
                    link_concepts.append(row)
            if (n + 1) % _PROGRESS_EVERY == 0:
                bar.update(_PROGRESS_EVERY)
                bar.set_postfix_str(f"{len(row_of_name):,} names", refresh=False)
    finally:  # a source's error then starts on a line of its own
        bar.update((n + 1) % _PROGRESS_EVERY)
        bar.set_postfix_str(f"{len(row_of_name):,} names")
        bar.close()
    n_names, n_concepts = len(row_of_name), len(row_of_id)
    del row_of_name  # the largest object here: gone before the links are sorted
    for writer in (names, display, ids, concept_names, types, xrefs):
        writer.close()
    if merges:
        _merge_lists(folder, merges)
    _write_links(folder, np.frombuffer(link_names, dtype=np.int32), np.frombuffer(link_concepts, dtype=np.int32),
                 n_names, n_concepts, deduplicate=bool(merges))
    if priors is not None:
        save_npy(folder / "concept_priors.npy", _prior_array(priors, row_of_id))
    known = _known_parents([parents.get(r, []) for r in range(n_concepts)], row_of_id) if parents else None
    if known is not None:
        ListTable.save(known, folder / "concept_parents")
    kb = _load_tables(folder, lowercase, strip_punctuation, priors is not None, known is not None)
    write_name_lookup(folder, n_names)
    write_json(folder / "kb.json", kb.disk_meta())
    return ConceptKB.from_disk(folder)


def _merge_lists(folder: Path, merges: List[Tuple[int, Sequence[str], Sequence[str]]]) -> None:
    """Add the types and cross-references of repeated concepts to their first record's, in order."""
    for column, name in ((1, "concept_types"), (2, "concept_xrefs")):
        rows = [list(r) for r in ListTable.load(folder / name, mmap=False)]
        for merge in merges:
            row = merge[0]
            rows[row] = list(dict.fromkeys(rows[row] + list(merge[column])))  # type: ignore[operator]
        ListTable.save(rows, folder / name)


def _write_links(folder: Path, name_rows: np.ndarray, concept_rows: np.ndarray, n_names: int, n_concepts: int,
                 deduplicate: bool) -> None:
    """``name_offsets.npy`` and ``name_concepts.npy``: each name's concepts in the order they first
    gave it the name (a repeated concept may link a name twice: only the first is kept)."""
    if deduplicate:
        _, first = np.unique(name_rows.astype(np.int64) * max(n_concepts, 1) + concept_rows, return_index=True)
        keep = np.sort(first)
        name_rows, concept_rows = name_rows[keep], concept_rows[keep]
    order = np.argsort(name_rows, kind="stable")
    offsets = np.zeros(n_names + 1, dtype=np.int64)
    np.cumsum(np.bincount(name_rows, minlength=n_names), out=offsets[1:])
    save_npy(folder / "name_offsets.npy", offsets)
    save_npy(folder / "name_concepts.npy", np.ascontiguousarray(concept_rows[order], dtype=np.int32))


def _load_tables(folder: Path, lowercase: bool, strip_punctuation: bool, priors: bool, parents: bool) -> ConceptKB:
    """The KB over the files just written (memory-mapped), before ``kb.json`` exists."""
    from .strings import StringTable, load_npy

    tables = {name: StringTable.load(folder / name) for name in ("concept_ids", "concept_names", "names", "display_names")}
    return ConceptKB(
        tables["concept_ids"], tables["concept_names"], ListTable.load(folder / "concept_types"), tables["names"],
        tables["display_names"], load_npy(folder / "name_offsets.npy"), load_npy(folder / "name_concepts.npy"),
        lowercase=lowercase, concept_xrefs=ListTable.load(folder / "concept_xrefs"), strip_punctuation=strip_punctuation,
        concept_priors=load_npy(folder / "concept_priors.npy") if priors else None,
        concept_parents=ListTable.load(folder / "concept_parents") if parents else None,
    )
