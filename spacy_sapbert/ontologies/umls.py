"""UMLS Metathesaurus RRF files: MRCONSO names, MRSTY semantic types, MRREL drug tradenames.

MRCONSO.RRF has 16M+ rows, so it is streamed: the release is sorted by CUI, so one CUI's
rows are consecutive and a concept is complete when the CUI changes. MRSTY.RRF is sorted
the same way and is merge-joined alongside, so memory holds one concept at a time (plus
the few tradename CUIs). Tradenames follow the paper: names of a concept linked by
``has_tradename`` / ``tradename_of`` become its synonyms, in both directions.
UMLS is licensed: users point at their own ``META`` folder; nothing here downloads it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Collection, Dict, Iterator, List, Optional, Set, Tuple

from tqdm import tqdm

from ..records import ConceptRecord, InputError
from ._common import PathLike, ReadSummary, fail_or_skip, iter_lines, make_summary, unique

MRCONSO_FIELDS = ("CUI", "LAT", "TS", "LUI", "STT", "SUI", "ISPREF", "AUI", "SAUI", "SCUI", "SDUI", "SAB", "TTY", "CODE", "STR", "SRL", "SUPPRESS", "CVF")
MRSTY_FIELDS = ("CUI", "TUI", "STN", "STY", "ATUI", "CVF")
MRREL_FIELDS = ("CUI1", "AUI1", "STYPE1", "REL", "CUI2", "AUI2", "STYPE2", "RELA", "RUI", "SRUI", "SAB", "SL", "RG", "DIR", "SUPPRESS", "CVF")
TRADENAME_RELATIONS = ("has_tradename", "tradename_of")
_CUI, _LAT, _TS, _STT, _ISPREF, _SAB, _TTY, _CODE, _STR, _SUPPRESS = 0, 1, 2, 4, 6, 11, 12, 13, 14, 16
SORT_HINT = "sort it with: LC_ALL=C sort -t'|' -k1,1 -s"
_PROGRESS_EVERY = 100_000


def _rrf_rows(path: Path, fields: Tuple[str, ...], summary: ReadSummary, lenient: bool, progress: bool = False) -> Iterator[Tuple[int, List[str]]]:
    """``(line, fields)`` of an RRF file; every line ends with '|', so a row splits into len(fields)+1 parts."""
    expected = len(fields) + 1
    bar = tqdm(desc=path.name, unit=" rows", unit_scale=True, disable=not progress, mininterval=2)
    n = 0
    try:
        for lineno, line in iter_lines(path, summary, lenient):
            n += 1
            if n % _PROGRESS_EVERY == 0:
                bar.update(_PROGRESS_EVERY)
            if not line:
                continue
            row = line.split("|")
            if len(row) != expected or row[-1] != "":
                fail_or_skip(InputError(path, lineno, f"expected {len(fields)} '|'-terminated fields ({'|'.join(fields[:3])}|…), got {len(row) - 1}"), summary, lenient)
                continue
            if not row[0]:
                fail_or_skip(InputError(path, lineno, f"empty {fields[0]}"), summary, lenient)
                continue
            yield lineno, row
    finally:
        bar.update(n % _PROGRESS_EVERY)
        bar.close()


def _semantic_types(path: Path, summary: ReadSummary, lenient: bool) -> Iterator[Tuple[str, List[str]]]:
    """``(CUI, TUIs)`` per CUI from a CUI-sorted MRSTY.RRF."""
    cui: Optional[str] = None
    tuis: List[str] = []
    for lineno, row in _rrf_rows(path, MRSTY_FIELDS, summary, lenient):
        if row[0] != cui:
            if cui is not None:
                if row[0] < cui:
                    raise InputError(path, lineno, f"not sorted by CUI ({row[0]} after {cui}); {SORT_HINT}")
                yield cui, unique(tuis)
            cui, tuis = row[0], []
        tuis.append(row[1])
    if cui is not None:
        yield cui, unique(tuis)


def _tradename_partners(path: Path, exclude_suppress: Collection[str], summary: ReadSummary, lenient: bool) -> Dict[str, Set[str]]:
    """CUI → CUIs it is a tradename of / has as tradename (symmetric), from MRREL.RRF."""
    partners: Dict[str, Set[str]] = {}
    for _, row in _rrf_rows(path, MRREL_FIELDS, summary, lenient):
        if row[7] in TRADENAME_RELATIONS and row[14] not in exclude_suppress and row[0] != row[4]:
            partners.setdefault(row[0], set()).add(row[4])
            partners.setdefault(row[4], set()).add(row[0])
    return partners


def _find(folder: Path, name: str) -> Optional[Path]:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.exists():
            return candidate
    return None


def _mrconso(path: Path) -> Path:
    """MRCONSO.RRF (or .gz) given the file itself or its ``META`` folder."""
    mrconso = _find(path, "MRCONSO.RRF") if path.is_dir() else path
    if mrconso is None or not mrconso.exists():
        raise FileNotFoundError(f"{path}: no MRCONSO.RRF here")
    return mrconso


def input_files(path: PathLike) -> List[Path]:
    """The files ``read_umls`` reads for ``path``: MRCONSO.RRF and, beside it, MRSTY.RRF and
    MRREL.RRF where present (a resumed build checks that none of them changed)."""
    mrconso = _mrconso(Path(path))
    return [mrconso] + [f for f in (_find(mrconso.parent, "MRSTY.RRF"), _find(mrconso.parent, "MRREL.RRF")) if f is not None]


def read_umls(
    path: PathLike,
    languages: Optional[Collection[str]] = ("ENG",),
    sabs: Optional[Collection[str]] = None,
    ttys: Optional[Collection[str]] = None,
    exclude_ttys: Collection[str] = (),
    exclude_suppress: Collection[str] = ("O", "E", "Y"),
    semantic_types: bool = True,
    tradenames: bool = True,
    lenient: bool = False,
    progress: bool = False,
    summary: Optional[ReadSummary] = None,
) -> Iterator[ConceptRecord]:
    """Stream one record per CUI from ``MRCONSO.RRF`` (``path`` is the file or the ``META`` folder).

    Rows are kept when LAT is in ``languages`` (None: all), SAB in ``sabs`` and TTY in
    ``ttys`` (None: all), TTY not in ``exclude_ttys`` and SUPPRESS not in
    ``exclude_suppress`` (O obsolete, E/Y suppressible; ``()`` keeps all). The name is the
    concept's preferred atom (TS=P, STT=PF, ISPREF=Y) among kept rows, else the first.
    ``MRSTY.RRF`` beside it gives TUIs as ``types``; ``MRREL.RRF`` tradenames add synonyms.
    Memory is one concept at a time; files must be sorted by CUI as released (an unsorted
    file is an error saying how to sort it). Bad rows: error naming file and line, or
    skipped and counted with ``lenient=True``.
    """
    path = Path(path)
    mrconso = _mrconso(path)
    folder = mrconso.parent
    summary = make_summary(mrconso, summary)
    languages_set = set(languages) if languages else None
    sabs_set = set(sabs) if sabs else None
    ttys_set = set(ttys) if ttys else None
    excluded_ttys, excluded_suppress = set(exclude_ttys), set(exclude_suppress)

    def kept(row: List[str]) -> bool:
        return (
            (languages_set is None or row[_LAT] in languages_set)
            and (sabs_set is None or row[_SAB] in sabs_set)
            and (ttys_set is None or row[_TTY] in ttys_set)
            and row[_TTY] not in excluded_ttys
            and row[_SUPPRESS] not in excluded_suppress
        )

    partners: Dict[str, Set[str]] = {}
    partner_names: Dict[str, List[str]] = {}
    mrrel = _find(folder, "MRREL.RRF") if tradenames else None
    if mrrel is not None:
        partners = _tradename_partners(mrrel, excluded_suppress, ReadSummary(str(mrrel)), lenient)
        if partners:  # one extra pass to learn the names of the (few) CUIs in tradename relations
            for _, row in _rrf_rows(mrconso, MRCONSO_FIELDS, ReadSummary(str(mrconso)), lenient=True):
                if row[_CUI] in partners and row[_STR] and kept(row):
                    partner_names.setdefault(row[_CUI], []).append(row[_STR])
    mrsty = _find(folder, "MRSTY.RRF") if semantic_types else None
    types_iter = _semantic_types(mrsty, ReadSummary(str(mrsty)), lenient) if mrsty is not None else iter(())
    next_types: Optional[Tuple[str, List[str]]] = next(types_iter, None)

    def types_of(cui: str) -> List[str]:
        nonlocal next_types
        while next_types is not None and next_types[0] < cui:
            next_types = next(types_iter, None)
        return next_types[1] if next_types is not None and next_types[0] == cui else []

    def build(cui: str, rows: List[List[str]]) -> ConceptRecord:
        preferred = next((r for r in rows if r[_TS] == "P" and r[_STT] == "PF" and r[_ISPREF] == "Y"), rows[0])
        name = preferred[_STR]
        names = [r[_STR] for r in rows]
        for other in sorted(partners.get(cui, ())):
            names.extend(partner_names.get(other, []))
        summary.records += 1
        return ConceptRecord(
            id=cui,
            name=name,
            synonyms=[n for n in unique(names) if n != name],
            types=types_of(cui),
            sources=list(dict.fromkeys((r[_SAB], r[_CODE]) for r in rows)),
        )

    cui: Optional[str] = None
    rows: List[List[str]] = []
    for lineno, row in _rrf_rows(mrconso, MRCONSO_FIELDS, summary, lenient, progress):
        if row[_CUI] != cui:
            if cui is not None and row[_CUI] < cui:
                raise InputError(mrconso, lineno, f"not sorted by CUI ({row[_CUI]} after {cui}); {SORT_HINT}")
            if rows:
                yield build(cui, rows)  # type: ignore[arg-type]
            cui, rows = row[_CUI], []
        if not kept(row):
            continue
        if not row[_STR].strip():
            fail_or_skip(InputError(mrconso, lineno, f"empty STR for {row[_CUI]}"), summary, lenient)
            continue
        rows.append(row)
    if rows:
        yield build(cui, rows)  # type: ignore[arg-type]
    summary.report()


read_umls.input_files = input_files  # type: ignore[attr-defined]  # what build-kb's resumable KB stage checks
