"""Plain tables a user writes by hand: TSV and scispacy-style JSONL.

TSV columns are ``concept_id, canonical_name[, aliases[, types]]`` with ``|`` between
aliases and between types; an optional header row names the columns; ``#`` lines are
comments. JSONL lines are scispacy's ``{"concept_id", "canonical_name", "aliases", "types"}`` or this package's own
record dictionaries (``ConceptRecord.to_dict``), so the bundle's concept table reads back.
"""
from __future__ import annotations

import json
from typing import Iterable, Iterator, List, Optional, Tuple

from ..fileio import atomic_open
from ..records import ConceptRecord, InputError
from ._common import PathLike, ReadSummary, fail_or_skip, iter_lines, make_summary, unique
from .merge import combine_same_ids

TSV_COLUMNS = ("concept_id", "canonical_name", "aliases", "types")
LIST_SEPARATOR = "|"


def _emit(
    numbered: Iterable[Tuple[int, ConceptRecord]],
    path: PathLike,
    on_duplicate: str,
    summary: ReadSummary,
    lenient: bool,
) -> Iterator[ConceptRecord]:
    """Enforce unique ids: error (or skip when lenient), or merge repeated ids' names."""
    if on_duplicate not in ("error", "merge"):
        raise ValueError(f"on_duplicate must be 'error' or 'merge', got {on_duplicate!r}")
    if on_duplicate == "merge":
        merged, _ = combine_same_ids(rec for _, rec in numbered)
        summary.records = len(merged)
        yield from merged
    else:
        seen = set()
        for lineno, rec in numbered:
            if rec.id in seen:
                fail_or_skip(InputError(path, lineno, f"duplicate concept id {rec.id}"), summary, lenient)
                continue
            seen.add(rec.id)
            summary.records += 1
            yield rec
    summary.report()


def _split_list(value: str) -> List[str]:
    return unique([v.strip() for v in value.split(LIST_SEPARATOR)])


def _tsv_records(path: PathLike, summary: ReadSummary, lenient: bool) -> Iterator[Tuple[int, ConceptRecord]]:
    width: Optional[int] = None
    for lineno, line in iter_lines(path, summary, lenient):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if width is None and [f.strip().lower() for f in fields] == list(TSV_COLUMNS[: len(fields)]):
            width = len(fields)
            continue
        problem = None
        if width is None:
            if not 2 <= len(fields) <= 4:
                problem = f"expected 2 to 4 tab-separated columns ({', '.join(TSV_COLUMNS)}), got {len(fields)}"
            else:
                width = len(fields)
        elif len(fields) != width:
            problem = f"expected {width} tab-separated columns like the first row, got {len(fields)}"
        if problem is None:
            fields += [""] * (4 - len(fields))
            cid, name = fields[0].strip(), fields[1].strip()
            if not cid:
                problem = "empty concept id"
            elif not name:
                problem = f"concept {cid} has an empty name"
        if problem is not None:
            fail_or_skip(InputError(path, lineno, problem), summary, lenient)
            continue
        synonyms = [s for s in _split_list(fields[2]) if s != name]
        yield lineno, ConceptRecord(id=cid, name=name, synonyms=synonyms, types=_split_list(fields[3]))


def read_tsv(
    path: PathLike, lenient: bool = False, on_duplicate: str = "error", summary: Optional[ReadSummary] = None
) -> Iterator[ConceptRecord]:
    """Stream a ``concept_id<TAB>canonical_name[<TAB>aliases[<TAB>types]]`` table.

    Wrong column count, empty id or name, bad UTF-8 and duplicate ids are errors naming
    file and line (``lenient=True``: skipped and counted); ``on_duplicate="merge"`` instead
    merges rows sharing an id (which holds the table in memory).
    """
    summary = make_summary(path, summary)
    return _emit(_tsv_records(path, summary, lenient), path, on_duplicate, summary, lenient)


def _string_list(value: object, key: str) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"'{key}' must be a list of strings")
    return unique([v.strip() for v in value])


def record_from_json(obj: object) -> ConceptRecord:
    """A record from a scispacy-style or ``ConceptRecord.to_dict`` object; ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    scispacy = "concept_id" in obj
    id_key, name_key, syn_key = ("concept_id", "canonical_name", "aliases") if scispacy else ("id", "name", "synonyms")
    cid, name = obj.get(id_key), obj.get(name_key)
    if not isinstance(cid, str) or not cid.strip():
        raise ValueError(f"missing or empty '{id_key}'")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"concept {cid} has an empty '{name_key}'")
    name = name.strip()
    sources = obj.get("sources") or []
    if not isinstance(sources, list) or not all(isinstance(s, list) and len(s) == 2 for s in sources):
        raise ValueError("'sources' must be a list of [vocabulary, id] pairs")
    return ConceptRecord(
        id=cid.strip(),
        name=name,
        synonyms=[s for s in _string_list(obj.get(syn_key), syn_key) if s != name],
        types=_string_list(obj.get("types"), "types"),
        xrefs=_string_list(obj.get("xrefs"), "xrefs"),
        sources=[(str(a), str(b)) for a, b in sources],
    )


def _jsonl_records(path: PathLike, summary: ReadSummary, lenient: bool) -> Iterator[Tuple[int, ConceptRecord]]:
    for lineno, line in iter_lines(path, summary, lenient):
        if not line.strip():
            continue
        try:
            rec = record_from_json(json.loads(line))
        except json.JSONDecodeError as e:
            fail_or_skip(InputError(path, lineno, f"not valid JSON ({e.msg} at column {e.colno})"), summary, lenient)
            continue
        except ValueError as e:
            fail_or_skip(InputError(path, lineno, str(e)), summary, lenient)
            continue
        yield lineno, rec


def read_jsonl(
    path: PathLike, lenient: bool = False, on_duplicate: str = "error", summary: Optional[ReadSummary] = None
) -> Iterator[ConceptRecord]:
    """Stream a JSONL concept table (scispacy keys or ``ConceptRecord.to_dict`` keys).

    Bad JSON, a non-object line, a missing or empty id or name, wrongly typed lists, bad
    UTF-8 and duplicate ids are errors naming file and line (``lenient=True``: skipped and
    counted); ``on_duplicate="merge"`` merges lines sharing an id.
    """
    summary = make_summary(path, summary)
    return _emit(_jsonl_records(path, summary, lenient), path, on_duplicate, summary, lenient)


def _check_cell(value: str, what: str, rec_id: str, forbidden: str) -> str:
    bad = [c for c in forbidden if c in value]
    if bad or value != value.strip():
        raise ValueError(f"concept {rec_id}: {what} {value!r} cannot be written to TSV (tab, newline, '|' or outer spaces)")
    return value


def write_tsv(records: Iterable[ConceptRecord], path: PathLike, header: bool = True) -> int:
    """Write records as the TSV ``read_tsv`` reads (atomically); returns the number written.

    xrefs and sources have no column here: use ``write_jsonl`` to keep them.
    """
    n = 0
    with atomic_open(path, "w") as f:
        if header:
            f.write("\t".join(TSV_COLUMNS) + "\n")
        for rec in records:
            if rec.id.startswith("#"):
                raise ValueError(f"concept id {rec.id!r} starts with '#', which read_tsv takes for a comment")
            cells = [_check_cell(rec.id, "id", rec.id, "\t\n\r|"), _check_cell(rec.name, "name", rec.id, "\t\n\r")]
            aliases = [_check_cell(s, "alias", rec.id, "\t\n\r|") for s in rec.synonyms]
            types = [_check_cell(t, "type", rec.id, "\t\n\r|") for t in rec.types]
            f.write("\t".join([*cells, LIST_SEPARATOR.join(aliases), LIST_SEPARATOR.join(types)]) + "\n")
            n += 1
    return n


def write_jsonl(records: Iterable[ConceptRecord], path: PathLike, style: str = "record") -> int:
    """Write one JSON object per record (atomically); ``style`` "record" keeps xrefs and sources, "scispacy" uses scispacy's keys."""
    if style not in ("record", "scispacy"):
        raise ValueError(f"style must be 'record' or 'scispacy', got {style!r}")
    n = 0
    with atomic_open(path, "w") as f:
        for rec in records:
            if style == "record":
                obj = rec.to_dict()
            else:
                obj = {"concept_id": rec.id, "canonical_name": rec.name, "aliases": list(rec.synonyms), "types": list(rec.types)}
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n
