"""Names a user adds to an ontology's concepts when building a KB (``build-kb --extra-names``).

An ontology seldom writes the shorthand of the text a user links ("HTN" for *Hypertension*, "SOB"
for *Dyspnea* in clinical notes; HPO has neither). Rather than editing a copy of the ontology, a
user lists ``concept_id<TAB>name`` lines; each name is added to that concept's names as it is read,
and the KB searches it like any other. An id the source does not have is refused, naming the file
and line, and nothing is written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Tuple, Union

from .fileio import tab_pairs
from .records import ConceptRecord, InputError

ExtraNames = Dict[str, List[Tuple[str, int]]]  # concept id -> (name, line) in the order given


def read_extra_names(path: Union[str, Path]) -> ExtraNames:
    """``concept_id<TAB>name`` per line (``#`` comments and blank lines skipped); a bad line is an
    ``InputError`` naming the file and line."""
    out: ExtraNames = {}
    for n, cid, name, line in tab_pairs(path):
        if not cid or not name:
            raise InputError(path, n, f"expected 'concept_id<TAB>name', got {line[:80]!r}")
        out.setdefault(cid, []).append((name, n))
    return out


def with_extra_names(records: Iterable[ConceptRecord], extra: ExtraNames, path: Union[str, Path]) -> Iterator[ConceptRecord]:
    """``records`` with each concept's extra names among its synonyms; once they are all read, an
    ``InputError`` for the first listed id that none of them had (the build then writes nothing)."""
    seen = set()
    for record in records:
        names = extra.get(record.id)
        if names:
            record.synonyms = [*record.synonyms, *(name for name, _ in names)]
            seen.add(record.id)
        yield record
    missing = [cid for cid in extra if cid not in seen]
    if missing:
        _, line = extra[missing[0]][0]
        more = f" ({len(missing) - 1} more ids are missing too)" if len(missing) > 1 else ""
        raise InputError(path, line, f"{missing[0]!r} is not a concept of the source{more}")
