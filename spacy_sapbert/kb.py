"""The concept KB: concepts and the name table the linker searches.

A normalised name is one row even when several concepts carry it ("ms": multiple
sclerosis, mitral stenosis, ...): the row lists all its concepts, so the linker can tell
that a hit is ambiguous instead of silently picking one.

On disk (format version 2) every table is memory-mapped, so a UMLS-sized KB (millions of
names) opens in well under a second without building Python objects:

- ``kb.json``: format, version, ``lowercase``, fingerprint and the counts (``stats()``);
- string tables (``strings.StringTable``, ``<t>.utf8.npy`` + ``<t>.starts.npy``) for
  ``names``, ``display_names``, ``concept_ids`` and ``concept_names``;
- ``concept_types`` and ``concept_xrefs`` (``strings.ListTable``): all items in one string
  table plus ``<t>.rows.npy``, where each concept's items start;
- ``name_offsets.npy`` / ``name_concepts.npy``: the name→concept rows, CSR-style;
- ``concept_priors.npy`` (optional): a weight per concept, e.g. how often annotated text
  uses it, that decides between the concepts of an ambiguous name (``concepts_of_name``);
- ``concept_parents`` (optional, a list table): the ids of each concept's broader concepts
  (OBO ``is_a``), so that a mention lacking a subtype's qualifier can get the broader concept;
- ``names.hashes.npy`` / ``names.hash_rows.npy`` (above ``DICT_LOOKUP_NAMES`` names): the exact-name
  lookup's hash table (``write_name_lookup``; a folder without it computes it on first use).

Version 1 folders (``names.txt``, ``display_names.txt``, ``concepts.jsonl``) still load,
into Python lists; saving such a KB again writes version 2.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .fileio import read_json, tab_pairs, write_json
from .normalize import name_words, normalize_name
from .records import ConceptRecord
from .strings import SEP, ListTable, StringTable, first_decrease, load_npy, lookup_files, save_npy, table_files

KB_FORMAT = "spacy-sapbert-kb"
KB_VERSION = 2
READABLE_VERSIONS = (1, 2)
STRING_TABLES = ("names", "display_names", "concept_ids", "concept_names")
LIST_TABLES = ("concept_types", "concept_xrefs")
_INNER_HYPHEN = re.compile(r"(?<=[^\W_])-(?=[^\W_])")  # "pre-auricular": a hyphen inside a word
DICT_LOOKUP_NAMES = 1_000_000  # above this many names, ``row_of_name`` searches hashes instead of building a dict
V1_FILES = ("names.txt", "display_names.txt", "concepts.jsonl")
_HASH_CHUNK = 1 << 24


class DuplicateConceptError(ValueError):
    pass


class UnknownPriorError(ValueError):
    """A prior names a concept id the KB does not have."""

    def __init__(self, concept_id: str):
        self.concept_id = concept_id
        super().__init__(f"prior for {concept_id!r}, which is not a concept of this KB")


def read_priors(path: Union[str, Path]) -> Dict[str, Tuple[float, int]]:
    """A priors file: ``concept_id<TAB>weight`` per line (``#`` comments and blank lines skipped).
    Returns ``{concept_id: (weight, line)}``; a bad line is an ``InputError`` naming file and line."""
    from .records import InputError

    out: Dict[str, Tuple[float, int]] = {}
    for n, cid, weight, line in tab_pairs(path):
        try:
            value = float(weight)
        except ValueError:
            value = float("nan")
        if not cid or not (np.isfinite(value) and value >= 0):
            raise InputError(path, n, f"expected 'concept_id<TAB>weight' with a weight >= 0, got {line[:80]!r}")
        if cid in out:
            raise InputError(path, n, f"{cid!r} has a prior already (line {out[cid][1]})")
        out[cid] = (value, n)
    return out


class ConceptKB:
    """Concepts (id, display name, types) and names (normalised, display form, concept rows).

    The name→concepts table is stored CSR-style in two integer arrays. Built in memory
    (``from_records``) the string columns are lists; loaded from disk they are read-only
    memory-mapped tables with the same indexing, slicing and iteration.
    """

    def __init__(
        self,
        concept_ids: Sequence[str],
        concept_names: Sequence[str],
        concept_types: Sequence[List[str]],
        names: Sequence[str],
        display_names: Sequence[str],
        name_offsets: np.ndarray,
        name_concepts: np.ndarray,
        lowercase: bool = True,
        concept_xrefs: Optional[Sequence[List[str]]] = None,
        strip_punctuation: bool = False,
        concept_priors: Optional[np.ndarray] = None,
        concept_parents: Optional[Sequence[List[str]]] = None,
    ):
        self.concept_ids = concept_ids
        self.concept_names = concept_names
        self.concept_types = concept_types
        self.names = names
        self.display_names = display_names
        self.name_offsets = name_offsets
        self.name_concepts = name_concepts
        self.lowercase = lowercase
        self.strip_punctuation = strip_punctuation
        self.concept_xrefs = concept_xrefs if concept_xrefs is not None else [[] for _ in concept_ids]
        self.concept_priors = concept_priors
        self.concept_parents = concept_parents
        self._row_of_id: Optional[Dict[str, int]] = None
        self._row_of_name: Optional[Dict[str, int]] = None
        self._row_of_words: Optional[Dict[Tuple[str, ...], int]] = None
        self._name_counts: Optional[np.ndarray] = None
        self._fingerprint: Optional[str] = None  # cached only for read-only (loaded) tables

    # ------------------------------------------------------------------ building
    @classmethod
    def from_records(
        cls,
        records: Iterable[ConceptRecord],
        on_duplicate: str = "error",
        lowercase: bool = True,
        strip_punctuation: bool = False,
        priors: Optional[Mapping[str, float]] = None,
    ) -> "ConceptKB":
        """Build from concept records.

        ``on_duplicate``: a concept id seen twice is an error (``"error"``), or its names and
        types are merged into the first record (``"merge"``). ``priors``: a weight per concept id
        (missing ones 0), e.g. its count in annotated text; it ranks the concepts of a name.
        """
        if on_duplicate not in ("error", "merge"):
            raise ValueError(f"on_duplicate must be 'error' or 'merge', got {on_duplicate!r}")
        concept_ids: List[str] = []
        concept_names: List[str] = []
        concept_types: List[List[str]] = []
        concept_xrefs: List[List[str]] = []
        concept_parents: List[List[str]] = []
        row_of_id: Dict[str, int] = {}
        name_rows: Dict[str, List[int]] = {}
        display: Dict[str, str] = {}
        for n, rec in enumerate(records):
            cid = checked_id(rec.id, n)
            if cid in row_of_id:
                if on_duplicate == "error":
                    raise duplicate_id(cid, n)
                row = row_of_id[cid]
                concept_types[row] = list(dict.fromkeys(concept_types[row] + list(rec.types)))
                concept_xrefs[row] = list(dict.fromkeys(concept_xrefs[row] + list(rec.xrefs)))
                concept_parents[row] = list(dict.fromkeys(concept_parents[row] + list(rec.parents)))
            else:
                row = len(concept_ids)
                row_of_id[cid] = row
                concept_ids.append(cid)
                concept_names.append(rec.name.strip() or cid)
                concept_types.append(list(dict.fromkeys(rec.types)))
                concept_xrefs.append(list(dict.fromkeys(rec.xrefs)))
                concept_parents.append(list(dict.fromkeys(rec.parents)))
            for raw in rec.all_names:
                key = normalize_name(raw, lowercase, strip_punctuation)
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
            strip_punctuation=strip_punctuation,
            concept_xrefs=concept_xrefs,
            concept_priors=None if priors is None else _prior_array(priors, row_of_id),
            concept_parents=_known_parents(concept_parents, row_of_id),
        )

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self.concept_ids)

    @property
    def n_names(self) -> int:
        return len(self.names)

    def concept_aliases(self) -> Dict[str, List[str]]:
        """Alternative ids that identify a concept (its cross-references, e.g. MEDIC's ``ID|altID``
        lines): a gold annotation may use them for it, as BioSyn's ``check_label`` accepts them."""
        return {cid: list(x) for cid, x in zip(self.concept_ids, self.concept_xrefs) if x}

    def concepts_of_name(self, name_row: int) -> np.ndarray:
        """Concept rows of one name row, the likeliest first: the highest ``concept_priors``, then
        the concepts whose preferred name it is, then the best-described concept (the most names),
        then record order.

        That order is the linker's guess when a name alone cannot decide: a name shared by a
        well-described concept and a sparse one (MEDIC's "aniridia": the MeSH heading with its
        synonyms, and an OMIM entry with one name) usually means the former. A concept's own
        preferred name comes before that: MeSH's "Ketamine" (D007649, one name) is also an entry
        term of Esketamine ("(-)-Ketamine", five more names) once punctuation is stripped, and
        "ketamine" in text means Ketamine.
        """
        rows = self.name_concepts[self.name_offsets[name_row] : self.name_offsets[name_row + 1]]
        if len(rows) < 2:
            return rows
        name = self.names[name_row]
        preferred = np.fromiter((self.normalize(self.concept_names[r]) == name for r in rows.tolist()), dtype=np.int8, count=len(rows))
        keys = [-self.name_counts[rows], -preferred]
        if self.concept_priors is not None:
            keys.append(-np.asarray(self.concept_priors)[rows])
        return rows[np.lexsort(keys)]  # stable; the last key sorts first

    @property
    def name_counts(self) -> np.ndarray:
        """How many names each concept row has (computed once, on first use)."""
        if self._name_counts is None:
            self._name_counts = np.bincount(np.asarray(self.name_concepts), minlength=len(self.concept_ids))
        return self._name_counts

    def ancestors(self, concept_id: str, max_depth: int = 3) -> List[str]:
        """The broader concepts of ``concept_id`` up to ``max_depth`` ``is_a`` steps, nearest first
        (empty without a hierarchy)."""
        if self.concept_parents is None:
            return []
        found: List[str] = []
        level = [concept_id]
        for _ in range(max_depth):
            level = [p for c in level for p in self.concept_parents[self.row_of_concept(c)] if p not in found]
            found.extend(dict.fromkeys(level))
        return found

    def row_of_concept(self, concept_id: str) -> int:
        if self._row_of_id is None:
            self._row_of_id = {c: i for i, c in enumerate(self.concept_ids)}
        return self._row_of_id[concept_id]

    def row_of_name(self, name: str) -> Optional[int]:
        """The name row of ``name`` after normalisation, or None (exact-match lookups).

        Up to ``DICT_LOOKUP_NAMES`` names a dict answers (the fastest lookup); a larger stored name
        table answers itself (``StringTable.find``, hashes): at 7.5M names the dict took 1.2 GB and 5 s."""
        key = self.normalize(name)
        if isinstance(self.names, StringTable) and len(self.names) > DICT_LOOKUP_NAMES:
            return self.names.find(key)
        if self._row_of_name is None:
            self._row_of_name = {n: i for i, n in enumerate(self.names)}
        return self._row_of_name.get(key)

    def row_of_variant(self, text: str) -> Optional[int]:
        """The row of the name that ``text`` spells another way, or None: its words are the name's up to
        case, punctuation, number, British spelling (``normalize.name_words``: "haematuria" and
        "retinopathies" are *Hematuria* and *Retinopathy*) and hyphens inside a word ("pre-auricular
        pits" is *Preauricular pit*, "upslanting" a name's "up-slanting"). None where names of
        different concepts share those words, in a KB that keeps case, and above ``DICT_LOOKUP_NAMES``
        names (the words of every name would be a second table that large). The first such name's row."""
        if not self.lowercase or len(self.names) > DICT_LOOKUP_NAMES:
            return None
        if self._row_of_words is None:
            rows: Dict[Tuple[str, ...], int] = {}
            closed: Dict[Tuple[str, ...], int] = {}  # the words of names with a hyphen inside a word, written closed
            keys: Dict[str, str] = {}

            def add(table: Dict[Tuple[str, ...], int], words: Tuple[str, ...], i: int) -> None:
                first = table.setdefault(words, i)
                if first >= 0 and first != i and set(self.concepts_of_name(first).tolist()) != set(self.concepts_of_name(i).tolist()):
                    table[words] = -1

            for i, name in enumerate(self.names):
                words = tuple(name_words(name, keys))
                if words:  # "+", "--": no word to compare
                    add(rows, words, i)
                if "-" in name and (joined := tuple(name_words(_INNER_HYPHEN.sub("", name), keys))) != words:
                    add(closed, joined, i)
            for words, i in closed.items():  # a name as written wins
                rows.setdefault(words, i)
            self._row_of_words = rows
        row = self._row_of_words.get(tuple(name_words(text)), -1)
        if row < 0 and "-" in text:
            row = self._row_of_words.get(tuple(name_words(_INNER_HYPHEN.sub("", text))), -1)
        return row if row >= 0 else None

    def normalize(self, text: str) -> str:
        """A name or query as this KB's name table stores it: the one rule for KB rows and mention queries."""
        return normalize_name(text, self.lowercase, self.strip_punctuation)

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
        parents = self.concept_parents if self.concept_parents is not None else [[] for _ in self.concept_ids]
        for cid, cname, types, xrefs, ns, ps in zip(
            self.concept_ids, self.concept_names, self.concept_types, self.concept_xrefs, names, parents
        ):
            syn = [n for n in ns if n != cname]
            out.append(ConceptRecord(id=cid, name=cname, synonyms=syn, types=list(types), xrefs=list(xrefs), parents=list(ps)))
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
        """A hash of the ids and the name table: an index is valid only for the names it encoded.

        sha256 over ``"\\x1f".join(concept_ids)``, ``"\\x1f".join(names)`` (UTF-8) and the bytes
        of ``name_offsets`` and ``name_concepts`` (and of ``concept_priors`` when there are
        any, and of ``concept_parents``: they change the answers); the first 32 hex digits. Loaded tables are hashed from
        their mapped bytes (no strings built) and the result is kept.
        """
        if self._fingerprint is not None:
            return self._fingerprint
        h = hashlib.sha256()
        for part in (_joined(self.concept_ids), _joined(self.names), self.name_offsets, self.name_concepts):
            _feed(h, part)
        if self.concept_priors is not None:
            _feed(h, np.asarray(self.concept_priors, dtype=np.float64))
        if self.concept_parents is not None:
            parents = ListTable.of(self.concept_parents)
            _feed(h, _joined(parents.items))
            _feed(h, np.asarray(parents.bounds, dtype=np.int64))
        digest = h.hexdigest()[:32]
        if isinstance(self.names, StringTable) and isinstance(self.concept_ids, StringTable):
            self._fingerprint = digest
        return digest

    # ------------------------------------------------------------------ disk
    def to_disk(self, path: Union[str, Path]) -> None:
        """Write into folder ``path`` (format version 2, see the module docstring).

        Each file is written atomically and ``kb.json`` last; version-1 files left in the
        folder are removed after it.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name in STRING_TABLES:
            StringTable.save(getattr(self, name), path / name)
        for name in LIST_TABLES:
            ListTable.save(getattr(self, name), path / name)
        save_npy(path / "name_offsets.npy", self.name_offsets)
        save_npy(path / "name_concepts.npy", self.name_concepts)
        if self.concept_priors is not None:
            save_npy(path / "concept_priors.npy", np.asarray(self.concept_priors, dtype=np.float64))
        else:
            (path / "concept_priors.npy").unlink(missing_ok=True)
        if self.concept_parents is not None:
            ListTable.save(self.concept_parents, path / "concept_parents")
        else:
            for f in (*table_files(path / "concept_parents"), path / "concept_parents.rows.npy"):
                f.unlink(missing_ok=True)
        write_name_lookup(path, self.n_names, self.names)
        write_json(path / "kb.json", self.disk_meta())
        for name in V1_FILES:
            (path / name).unlink(missing_ok=True)

    def disk_meta(self) -> Dict[str, object]:
        """What ``kb.json`` records: format, settings, fingerprint and ``stats()``."""
        return {
            "format": KB_FORMAT,
            "version": KB_VERSION,
            "lowercase": self.lowercase,
            "strip_punctuation": self.strip_punctuation,
            "fingerprint": self.fingerprint,
            "priors": self.concept_priors is not None,
            "parents": self.concept_parents is not None,
            **self.stats(),
        }

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "ConceptKB":
        """Load a KB folder; with ``mmap`` (the default) its arrays stay on disk, paged in on use."""
        path = Path(path)
        if not (path / "kb.json").is_file():
            raise FileNotFoundError(f"{path} is not a spacy-sapbert KB folder (no kb.json)")
        meta = read_json(path / "kb.json")
        if meta.get("format") != KB_FORMAT or meta.get("version") not in READABLE_VERSIONS:
            raise ValueError(f"{path}/kb.json: unsupported KB format {meta.get('format')!r} v{meta.get('version')}")
        offsets = load_npy(path / "name_offsets.npy", mmap)
        flat = load_npy(path / "name_concepts.npy", mmap)
        if meta["version"] == 1:
            ids, cnames, ctypes, names, display, cxrefs = _read_v1(path)
        else:
            ids, cnames, names, display = (
                StringTable.load(path / name, mmap) for name in ("concept_ids", "concept_names", "names", "display_names")
            )
            ctypes, cxrefs = (ListTable.load(path / name, mmap) for name in ("concept_types", "concept_xrefs"))
        priors = load_npy(path / "concept_priors.npy", mmap) if meta.get("priors") else None
        parents = ListTable.load(path / "concept_parents", mmap) if meta.get("parents") else None
        kb = cls(
            ids, cnames, ctypes, names, display, offsets, flat, meta.get("lowercase", True), cxrefs,
            strip_punctuation=meta.get("strip_punctuation", False), concept_priors=priors, concept_parents=parents,
        )
        kb._check(path, meta)
        return kb

    def _check(self, path: Path, meta: Dict[str, object]) -> None:
        """Every table has the length kb.json records (no data read), then ``_check_values``."""
        if self.name_offsets.ndim != 1 or self.name_concepts.ndim != 1:
            raise ValueError(f"{path}: name_offsets.npy and name_concepts.npy must be 1-D arrays")
        n_names, n_concepts = int(meta["names"]), int(meta["concepts"])  # type: ignore[call-overload]
        expected = {
            "names": (self.names, n_names),
            "display_names": (self.display_names, n_names),
            "concept_ids": (self.concept_ids, n_concepts),
            "concept_names": (self.concept_names, n_concepts),
            "concept_types": (self.concept_types, n_concepts),
            "concept_xrefs": (self.concept_xrefs, n_concepts),
            "name_offsets.npy": (self.name_offsets, n_names + 1),
        }
        if self.concept_priors is not None:
            expected["concept_priors.npy"] = (self.concept_priors, n_concepts)
        if self.concept_parents is not None:
            expected["concept_parents"] = (self.concept_parents, n_concepts)
        for name, (table, n) in expected.items():
            if len(table) != n:
                where = name if name.endswith(".npy") else _where(path, name, meta["version"])
                raise ValueError(
                    f"{path}: {where} has {len(table)} rows but kb.json says {n} (truncated or mixed-up files)"
                )
        links = int(self.name_offsets[-1])
        if len(self.name_concepts) != links:
            raise ValueError(
                f"{path}: name_concepts.npy has {len(self.name_concepts)} rows but name_offsets.npy ends at {links} "
                "(truncated or mixed-up files)"
            )
        self._check_values(path, n_concepts)

    def _check_values(self, path: Path, n_concepts: int) -> None:
        """The name→concept arrays hold what lookups assume: offsets from 0, never decreasing,
        and concept rows in range; otherwise a query answers wrongly or fails far from the cause.

        Vectorised and chunked (a few ms per million names, bounded memory); the string tables'
        own starts get the same monotonicity check.
        """
        offsets, flat = self.name_offsets, self.name_concepts
        for name, arr in (("name_offsets.npy", offsets), ("name_concepts.npy", flat)):
            if not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"{path / name}: must hold integers, not {arr.dtype}")
        if int(offsets[0]) != 0:
            raise ValueError(f"{path / 'name_offsets.npy'}: must start at 0, starts at {int(offsets[0])}")
        bad = first_decrease(offsets)
        if bad is not None:
            raise ValueError(
                f"{path / 'name_offsets.npy'}: offsets must never decrease, but entry {bad + 1} "
                f"({int(offsets[bad + 1])}) is below entry {bad} ({int(offsets[bad])})"
            )
        lo, hi = value_range(flat)
        if lo < 0 or hi >= n_concepts:
            value = lo if lo < 0 else hi
            raise ValueError(
                f"{path / 'name_concepts.npy'}: concept row {value} at entry {int(np.argmax(np.asarray(flat) == value))} "
                f"is out of range for {n_concepts} concepts"
            )
        if self.concept_priors is not None:
            priors = np.asarray(self.concept_priors)
            if not np.issubdtype(priors.dtype, np.floating) or not (np.isfinite(priors).all() and (priors >= 0).all()):
                raise ValueError(f"{path / 'concept_priors.npy'}: priors must be finite floats >= 0")
        for name in STRING_TABLES + LIST_TABLES + ("concept_parents",):
            table = getattr(self, name)
            if hasattr(table, "validate"):
                table.validate()


def checked_id(raw: str, n: int) -> str:
    """The id of concept record ``n`` (0-based), stripped; refused when empty or holding a line break
    or the unit separator (the fingerprint joins ids with it)."""
    cid = raw.strip()
    if not cid:
        raise ValueError(f"concept record {n + 1} has an empty id")
    bad = next((ch for ch in (SEP, "\n", "\r") if ch in cid), None)
    if bad is not None:
        raise ValueError(
            f"concept record {n + 1} has the id {cid!r} containing {bad!r}: ids must not contain "
            "line breaks or the unit separator \\x1f (the KB fingerprint joins ids with it)"
        )
    return cid


def duplicate_id(cid: str, n: int) -> DuplicateConceptError:
    """The error for concept record ``n`` (0-based) repeating the id ``cid``."""
    return DuplicateConceptError(f"duplicate concept id {cid!r} (record {n + 1}); pass on_duplicate='merge' to merge its names")


def _prior_array(priors: Mapping[str, float], row_of_id: Mapping[str, int]) -> np.ndarray:
    """``priors`` by concept row; an unknown id or a weight that is not finite and >= 0 is refused."""
    out = np.zeros(len(row_of_id), dtype=np.float64)
    for cid, weight in priors.items():
        if cid not in row_of_id:
            raise UnknownPriorError(cid)
        if not (np.isfinite(weight) and weight >= 0):
            raise ValueError(f"prior for {cid!r} is {weight!r}: priors must be finite and >= 0")
        out[row_of_id[cid]] = weight
    return out


def _known_parents(parents: List[List[str]], row_of_id: Mapping[str, int]) -> Optional[List[List[str]]]:
    """Each concept's parents that are concepts of this KB (a KB may hold a branch of an
    ontology); None when no concept has one."""
    known = [[p for p in ps if p in row_of_id] for ps in parents]
    return known if any(known) else None


def value_range(arr: np.ndarray) -> tuple:
    """(min, max) of an integer array as Python ints; (0, -1) when empty."""
    if len(arr) == 0:
        return 0, -1
    return int(np.min(arr)), int(np.max(arr))


def _where(path: Path, name: str, version: object) -> str:
    if version == 1:
        return "concepts.jsonl" if name.startswith("concept_") else f"{name}.txt"
    files = [p.name for p in table_files(path / name)] + ([f"{name}.rows.npy"] if name in LIST_TABLES else [])
    return " / ".join(files)


def write_name_lookup(folder: Path, n_names: int, names: Optional[Sequence[str]] = None) -> None:
    """Above ``DICT_LOOKUP_NAMES`` names, ``row_of_name``'s hash table saved beside the name table
    (``StringTable.save_lookup``): a loaded KB then answers its first exact-name lookup at once instead
    of hashing every name (seconds at 7.5M, in every process). A smaller KB keeps none (a dict answers it).
    ``names``: the table just written there, whose hash table is reused where it has one (a KB copied)."""
    if n_names > DICT_LOOKUP_NAMES:
        table = names if isinstance(names, StringTable) else StringTable.load(folder / "names")
        StringTable.save_lookup(table, folder / "names")
    else:
        for f in lookup_files(folder / "names"):
            f.unlink(missing_ok=True)


def _joined(strings: Sequence[str]) -> Union[memoryview, bytes]:
    return strings.joined_bytes() if isinstance(strings, StringTable) else SEP.join(strings).encode("utf8")


def _feed(h: Any, data: Union[memoryview, bytes, np.ndarray]) -> None:
    """Update ``h`` with ``data``'s bytes in large chunks, without copying them."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    mv = memoryview(data).cast("B")
    for i in range(0, len(mv), _HASH_CHUNK):
        h.update(mv[i : i + _HASH_CHUNK])


def _read_v1(path: Path):
    """The string columns of a version-1 folder, as lists."""
    ids, cnames, ctypes, cxrefs = [], [], [], []
    with open(path / "concepts.jsonl", encoding="utf8") as f:
        for line in f:
            d = json.loads(line)
            ids.append(d["id"])
            cnames.append(d["name"])
            ctypes.append(d.get("types", []))
            cxrefs.append(d.get("xrefs", []))
    return ids, cnames, ctypes, _read_lines(path / "names.txt"), _read_lines(path / "display_names.txt"), cxrefs


def _read_lines(path: Path) -> List[str]:
    with open(path, encoding="utf8") as f:
        text = f.read()
    return text.split("\n")[:-1] if text else []
