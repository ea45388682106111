"""MEDIC / CTD vocabularies: BioSyn's ``ID[|altID…]||name|synonym|…`` dictionary files and CTD's TSV.

Ids are bare MeSH (``D003920``, ``C567755``) or OMIM numbers in the dictionary; we prefix
them (``MESH:``, ``OMIM:``) and keep a composite's further ids as cross-references. CTD's
``CTD_diseases.tsv`` / ``CTD_chemicals.tsv`` already carry prefixed ids.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from ..records import ConceptRecord, InputError
from ._common import ReadSummary, fail_or_skip, iter_lines, make_summary, unique


def prefixed_id(raw: str) -> str:
    """``D003920`` → ``MESH:D003920``, ``613097`` → ``OMIM:613097``; prefixed ids unchanged."""
    raw = raw.strip()
    if ":" in raw:
        return raw
    if raw.isdigit():
        return f"OMIM:{raw}"
    return f"MESH:{raw}"


def read_medic_dictionary(
    path: Union[str, Path], lenient: bool = False, summary: Optional[ReadSummary] = None
) -> Iterator[ConceptRecord]:
    """Read a ``ID[|altID…]||name|synonym|…`` file (the dictionary SapBERT and BioSyn used)."""
    summary = make_summary(path, summary)
    for lineno, line in iter_lines(path, summary, lenient):
        if not line.strip():
            continue
        if "||" not in line:
            fail_or_skip(InputError(path, lineno, "expected 'ID||name|synonym…' (no '||' separator)"), summary, lenient)
            continue
        id_part, names_part = line.split("||", 1)
        ids: List[str] = [prefixed_id(i) for i in id_part.split("|") if i.strip()]
        names = [n.strip() for n in names_part.split("|") if n.strip()]
        if not ids:
            fail_or_skip(InputError(path, lineno, "empty concept id"), summary, lenient)
            continue
        if not names:
            fail_or_skip(InputError(path, lineno, f"concept {ids[0]} has no name"), summary, lenient)
            continue
        summary.records += 1
        yield ConceptRecord(id=ids[0], name=names[0], synonyms=names[1:], xrefs=ids[1:], sources=[("MEDIC", ids[0])])
    summary.report()


# CTD layouts by column count: (name, id, alternative ids or None, CAS number or None, tree numbers, synonyms)
_CTD_LAYOUTS: Dict[int, Tuple[int, int, Optional[int], Optional[int], int, int]] = {
    9: (0, 1, 2, None, 5, 7),  # CTD_diseases.tsv: DiseaseName DiseaseID AltDiseaseIDs Definition ParentIDs TreeNumbers ParentTreeNumbers Synonyms SlimMappings
    8: (0, 1, None, 2, 5, 7),  # CTD_chemicals.tsv: ChemicalName ChemicalID CasRN Definition ParentIDs TreeNumbers ParentTreeNumbers Synonyms
}


def read_medic_tsv(
    path: Union[str, Path], lenient: bool = False, summary: Optional[ReadSummary] = None
) -> Iterator[ConceptRecord]:
    """Read CTD's ``CTD_diseases.tsv`` (MEDIC, 9 columns) or ``CTD_chemicals.tsv`` (8 columns).

    ``#`` lines are comments. Ids keep CTD's prefixes (``MESH:D…``, ``OMIM:…``); alternative
    ids (``DO:DOID:…``, ``OMIM:…``) and CAS numbers become xrefs, tree numbers types.
    Wrong column count, empty id or name, duplicate id, bad UTF-8: error naming file and
    line, or with ``lenient=True`` skipped and counted.
    """
    summary = make_summary(path, summary)
    width: Optional[int] = None
    seen = set()
    for lineno, line in iter_lines(path, summary, lenient):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if width is None and len(fields) in _CTD_LAYOUTS:
            width = len(fields)
        if len(fields) != width:
            expected = f"{width}" if width else " or ".join(str(w) for w in _CTD_LAYOUTS)
            fail_or_skip(InputError(path, lineno, f"expected {expected} tab-separated CTD columns, got {len(fields)}"), summary, lenient)
            continue
        name_col, id_col, alt_col, cas_col, tree_col, syn_col = _CTD_LAYOUTS[width]
        name, cid = fields[name_col].strip(), prefixed_id(fields[id_col])
        problem = None
        if cid in ("", "MESH:"):
            problem = "empty concept id"
        elif not name:
            problem = f"concept {cid} has an empty name"
        elif cid in seen:
            problem = f"duplicate concept id {cid}"
        if problem:
            fail_or_skip(InputError(path, lineno, problem), summary, lenient)
            continue
        seen.add(cid)
        xrefs = fields[alt_col].split("|") if alt_col is not None else []
        if cas_col is not None and fields[cas_col].strip():
            xrefs.append(f"CAS:{fields[cas_col].strip()}")
        synonyms = [s.strip() for s in fields[syn_col].split("|")]
        summary.records += 1
        yield ConceptRecord(
            id=cid,
            name=name,
            synonyms=[s for s in unique(synonyms) if s != name],
            types=unique([t.strip() for t in fields[tree_col].split("|")]),
            xrefs=unique([x.strip() for x in xrefs]),
            sources=[("CTD", cid)],
        )
    summary.report()
