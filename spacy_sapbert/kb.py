"""The concept KB: concepts and the name table the linker searches.

A normalised name is one row even when several concepts carry it ("ms": multiple
sclerosis, mitral stenosis, ...): the row lists all its concepts, so the linker can tell
that a hit is ambiguous instead of silently picking one.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Union

import numpy as np

from .fileio import atomic_open, read_json, write_json
from .normalize import normalize_name
from .records import ConceptRecord

KB_FORMAT = "spacy-sapbert-kb"
KB_VERSION = 1


class DuplicateConceptError(ValueError):
    pass


class ConceptKB:
    """Concepts (id, display name, types) and names (normalised, display form, concept rows).

    The name→concepts table is stored CSR-style in two integer arrays so that a KB of
    millions of names loads memory-mapped in a second.
    """

    def __init__(
        self,
        concept_ids: List[str],
        concept_names: List[str],
        concept_types: List[List[str]],
        names: List[str],
        display_names: List[str],
        name_offsets: np.ndarray,
        name_concepts: np.ndarray,
        lowercase: bool = True,
        concept_xrefs: Optional[List[List[str]]] = None,
    ):
        self.concept_ids = concept_ids
        self.concept_names = concept_names
        self.concept_types = concept_types
        self.names = names
        self.display_names = display_names
        self.name_offsets = name_offsets
        self.name_concepts = name_concepts
        self.lowercase = lowercase
        self.concept_xrefs = concept_xrefs if concept_xrefs is not None else [[] for _ in concept_ids]
        self._row_of_id: Optional[Dict[str, int]] = None
        self._row_of_name: Optional[Dict[str, int]] = None

    # ------------------------------------------------------------------ building
    @classmethod
    def from_records(
        cls, records: Iterable[ConceptRecord], on_duplicate: str = "error", lowercase: bool = True
    ) -> "ConceptKB":
        """Build from concept records.

        ``on_duplicate``: a concept id seen twice is an error (``"error"``), or its names and
        types are merged into the first record (``"merge"``).
        """
        if on_duplicate not in ("error", "merge"):
            raise ValueError(f"on_duplicate must be 'error' or 'merge', got {on_duplicate!r}")
        concept_ids: List[str] = []
        concept_names: List[str] = []
        concept_types: List[List[str]] = []
        concept_xrefs: List[List[str]] = []
        row_of_id: Dict[str, int] = {}
        name_rows: Dict[str, List[int]] = {}
        display: Dict[str, str] = {}
        for n, rec in enumerate(records):
            cid = rec.id.strip()
            if not cid:
                raise ValueError(f"concept record {n + 1} has an empty id")
            if cid in row_of_id:
                if on_duplicate == "error":
                    raise DuplicateConceptError(
                        f"duplicate concept id {cid!r} (record {n + 1}); pass on_duplicate='merge' to merge its names"
                    )
                row = row_of_id[cid]
                concept_types[row] = list(dict.fromkeys(concept_types[row] + list(rec.types)))
                concept_xrefs[row] = list(dict.fromkeys(concept_xrefs[row] + list(rec.xrefs)))
            else:
                row = len(concept_ids)
                row_of_id[cid] = row
                concept_ids.append(cid)
                concept_names.append(rec.name.strip() or cid)
                concept_types.append(list(dict.fromkeys(rec.types)))
                concept_xrefs.append(list(dict.fromkeys(rec.xrefs)))
            for raw in rec.all_names:
                key = normalize_name(raw, lowercase)
                if not key:
                    continue
                rows = name_rows.setdefault(key, [])
                if row not in rows:
                    rows.append(row)
                display.setdefault(key, normalize_name(raw, lowercase=False))
        names = list(name_rows)
        offsets = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum([len(name_rows[k]) for k in names], out=offsets[1:])
        flat = np.fromiter((r for k in names for r in name_rows[k]), dtype=np.int32, count=int(offsets[-1]))
        return cls(
            concept_ids,
            concept_names,
            concept_types,
            names,
            [display[k] for k in names],
            offsets,
            flat,
            lowercase=lowercase,
            concept_xrefs=concept_xrefs,
        )

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self.concept_ids)

    @property
    def n_names(self) -> int:
        return len(self.names)

    def concepts_of_name(self, name_row: int) -> np.ndarray:
        """Concept rows of one name row."""
        return self.name_concepts[self.name_offsets[name_row] : self.name_offsets[name_row + 1]]

    def row_of_concept(self, concept_id: str) -> int:
        if self._row_of_id is None:
            self._row_of_id = {c: i for i, c in enumerate(self.concept_ids)}
        return self._row_of_id[concept_id]

    def row_of_name(self, name: str) -> Optional[int]:
        """The name row of ``name`` after normalisation, or None (exact-match lookups)."""
        if self._row_of_name is None:
            self._row_of_name = {n: i for i, n in enumerate(self.names)}
        return self._row_of_name.get(normalize_name(name, self.lowercase))

    def names_of_concept(self, concept_id: str) -> List[str]:
        """All display names of a concept (a slow scan; meant for inspection, not linking)."""
        row = self.row_of_concept(concept_id)
        hits = np.nonzero(self.name_concepts == row)[0]
        name_rows = np.searchsorted(self.name_offsets, hits, side="right") - 1
        return [self.display_names[i] for i in sorted(set(name_rows.tolist()))]

    def records(self) -> List[ConceptRecord]:
        """The KB as concept records again (canonical name first, then the other names)."""
        names: List[List[str]] = [[] for _ in self.concept_ids]
        for i in range(self.n_names):
            for c in self.concepts_of_name(i):
                names[int(c)].append(self.display_names[i])
        out = []
        for cid, cname, types, xrefs, ns in zip(
            self.concept_ids, self.concept_names, self.concept_types, self.concept_xrefs, names
        ):
            syn = [n for n in ns if n != cname]
            out.append(ConceptRecord(id=cid, name=cname, synonyms=syn, types=list(types), xrefs=list(xrefs)))
        return out

    def stats(self) -> Dict[str, int]:
        sizes = np.diff(self.name_offsets)
        return {
            "concepts": len(self.concept_ids),
            "names": self.n_names,
            "ambiguous_names": int((sizes > 1).sum()),
            "name_concept_links": int(self.name_concepts.shape[0]),
        }

    @property
    def fingerprint(self) -> str:
        """A hash of the ids and the name table: an index is valid only for the names it encoded."""
        h = hashlib.sha256()
        h.update("\x1f".join(self.concept_ids).encode())
        h.update("\x1f".join(self.names).encode())
        h.update(np.ascontiguousarray(self.name_offsets).tobytes())
        h.update(np.ascontiguousarray(self.name_concepts).tobytes())
        return h.hexdigest()[:32]

    # ------------------------------------------------------------------ disk
    def to_disk(self, path: Union[str, Path]) -> None:
        """Write into folder ``path`` (JSON lines, text and .npy; each file atomically)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        with atomic_open(path / "concepts.jsonl") as f:
            for cid, name, types, xrefs in zip(self.concept_ids, self.concept_names, self.concept_types, self.concept_xrefs):
                row = {"id": cid, "name": name, "types": types, "xrefs": xrefs}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        with atomic_open(path / "names.txt") as f:
            f.write("".join(n + "\n" for n in self.names))
        with atomic_open(path / "display_names.txt") as f:
            f.write("".join(n + "\n" for n in self.display_names))
        for fname, arr in (("name_offsets.npy", self.name_offsets), ("name_concepts.npy", self.name_concepts)):
            with atomic_open(path / fname, "wb") as f:
                np.save(f, arr, allow_pickle=False)
        write_json(
            path / "kb.json",
            {"format": KB_FORMAT, "version": KB_VERSION, "lowercase": self.lowercase, "fingerprint": self.fingerprint, **self.stats()},
        )

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "ConceptKB":
        path = Path(path)
        if not (path / "kb.json").is_file():
            raise FileNotFoundError(f"{path} is not a spacy-sapbert KB folder (no kb.json)")
        meta = read_json(path / "kb.json")
        if meta.get("format") != KB_FORMAT or meta.get("version") != KB_VERSION:
            raise ValueError(f"{path}/kb.json: unsupported KB format {meta.get('format')!r} v{meta.get('version')}")
        ids, cnames, ctypes, cxrefs = [], [], [], []
        with open(path / "concepts.jsonl", encoding="utf8") as f:
            for line in f:
                d = json.loads(line)
                ids.append(d["id"])
                cnames.append(d["name"])
                ctypes.append(d.get("types", []))
                cxrefs.append(d.get("xrefs", []))
        names = _read_lines(path / "names.txt")
        display = _read_lines(path / "display_names.txt")
        mode = "r" if mmap else None
        offsets = np.load(path / "name_offsets.npy", mmap_mode=mode, allow_pickle=False)
        flat = np.load(path / "name_concepts.npy", mmap_mode=mode, allow_pickle=False)
        kb = cls(ids, cnames, ctypes, names, display, offsets, flat, meta.get("lowercase", True), cxrefs)
        if len(names) != meta["names"] or len(ids) != meta["concepts"] or len(display) != len(names):
            raise ValueError(f"{path}: KB files disagree with kb.json (truncated or mixed-up files)")
        return kb


def _read_lines(path: Path) -> List[str]:
    with open(path, encoding="utf8") as f:
        text = f.read()
    return text.split("\n")[:-1] if text else []

