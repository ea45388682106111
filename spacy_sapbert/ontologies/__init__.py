"""Ontology readers: one module per format, each yielding ``ConceptRecord``s.

``read_concepts(path, fmt, **options)`` is the one door the CLI uses; the format modules
are imported only when asked for, so importing the package costs nothing.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Tuple

from ..records import ConceptRecord
from ._common import PathLike, ReadSummary

# fmt -> (module, function); each function takes the path first and keyword options after
READERS: Dict[str, Tuple[str, str]] = {
    "obo": ("obo", "read_obo"),
    "umls": ("umls", "read_umls"),
    "mesh-xml": ("mesh", "read_mesh_xml"),
    "mesh-tsv": ("mesh", "read_mesh_tsv"),
    "mesh-chemical": ("mesh", "read_mesh_chemicals"),
    "medic": ("medic", "read_medic_dictionary"),
    "medic-tsv": ("medic", "read_medic_tsv"),
    "tsv": ("tables", "read_tsv"),
    "jsonl": ("tables", "read_jsonl"),
    "indra-json": ("indra_json", "read_indra_json"),
}

__all__ = ["READERS", "ReadSummary", "read_concepts", "reader_for"]


def reader_for(fmt: str) -> Callable[..., Iterator[ConceptRecord]]:
    """The reader function for ``fmt`` (imported on demand); unknown formats list the known ones."""
    import importlib

    if fmt not in READERS:
        raise ValueError(f"unknown concept format {fmt!r}; choose from {', '.join(READERS)}")
    module_name, function_name = READERS[fmt]
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, function_name)


def read_concepts(path: PathLike, fmt: str, **options: Any) -> Iterator[ConceptRecord]:
    """Stream concept records from ``path`` in format ``fmt`` with the reader's own ``options``.

    Formats: obo, umls (META folder or MRCONSO.RRF), mesh-xml (descYYYY/suppYYYY.xml),
    mesh-tsv (indra's mesh_*id_label_mappings.tsv), medic (``ID||name|…``), medic-tsv
    (CTD_diseases/CTD_chemicals.tsv), tsv, jsonl, indra-json (indra's ontology JSON).
    """
    return reader_for(fmt)(path, **options)
