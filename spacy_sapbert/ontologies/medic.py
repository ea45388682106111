"""MEDIC / CTD disease vocabularies: BioSyn's ``ID[|altID…]||name|synonym|…`` dictionary files.

Ids are bare MeSH (``D003920``, ``C567755``) or OMIM numbers; we prefix them (``MESH:``,
``OMIM:``) and keep a composite's further ids as cross-references.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, List, Union

from ..records import ConceptRecord, InputError


def prefixed_id(raw: str) -> str:
    """``D003920`` → ``MESH:D003920``, ``613097`` → ``OMIM:613097``; prefixed ids unchanged."""
    raw = raw.strip()
    if ":" in raw:
        return raw
    if raw.isdigit():
        return f"OMIM:{raw}"
    return f"MESH:{raw}"


def read_medic_dictionary(path: Union[str, Path]) -> Iterator[ConceptRecord]:
    """Read a ``ID[|altID…]||name|synonym|…`` file (the dictionary SapBERT and BioSyn used)."""
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            if "||" not in line:
                raise InputError(path, lineno, "expected 'ID||name|synonym…' (no '||' separator)")
            id_part, names_part = line.split("||", 1)
            ids: List[str] = [prefixed_id(i) for i in id_part.split("|") if i.strip()]
            names = [n.strip() for n in names_part.split("|") if n.strip()]
            if not ids:
                raise InputError(path, lineno, "empty concept id")
            if not names:
                raise InputError(path, lineno, f"concept {ids[0]} has no name")
            yield ConceptRecord(id=ids[0], name=names[0], synonyms=names[1:], xrefs=ids[1:], sources=[("MEDIC", ids[0])])
