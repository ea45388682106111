"""The package's extension points: ``detectors``, ``index_kinds``, ``ontology_readers`` and ``input_formats``.

Each is a ``catalogue`` registry, like spaCy's own: a detector, an index kind, an ontology reader or
an input format is one registered function or class, found by name (``build_pipeline(detector=...)``,
``build-kb --index ...``, ``build-kb --format ...``, ``annotate --input-format ...``), and another
package adds its own through the ``spacy_sapbert_<registry name>`` entry-point groups (e.g.
``spacy_sapbert_ontology_readers``), or by calling ``register`` before it builds. Kept apart from
what they hold, so that reading a registry's names imports no detector, no FAISS code and no reader.
"""
from __future__ import annotations

import importlib
from typing import Any, Dict, List

import catalogue

detectors = catalogue.create("spacy_sapbert", "detectors", entry_points=True)
index_kinds = catalogue.create("spacy_sapbert", "index_kinds", entry_points=True)
ontology_readers = catalogue.create("spacy_sapbert", "ontology_readers", entry_points=True)
input_formats = catalogue.create("spacy_sapbert", "input_formats", entry_points=True)

# The module that registers a registry's built-ins, where it is not ``spacy_sapbert.<registry name>``.
_BUILTINS = {"ontology_readers": "ontologies", "input_formats": "documents"}


def _load_builtins(registry: catalogue.Registry) -> None:
    """Import the module that registers ``registry``'s built-in entries (its decorators run on import):
    ``spacy_sapbert.<registry name>``, or the one ``_BUILTINS`` names. By name, since those modules
    import this one for the registry (a static import back would be an import cycle)."""
    name = registry.namespace[-1]
    importlib.import_module(f"{__package__}.{_BUILTINS.get(name, name)}")


def names(registry: catalogue.Registry) -> List[str]:
    """The names registered in ``registry`` (built-ins, entry points, and any registered at run time), sorted."""
    _load_builtins(registry)
    return sorted(registry.get_all())


def get(registry: catalogue.Registry, name: str) -> Any:
    """The entry ``name`` of ``registry``, or a ValueError that lists the choices."""
    _load_builtins(registry)
    if name not in registry:  # (catalogue's Registry has no ``has``)
        raise ValueError(f"unknown {registry.namespace[-1][:-1].replace('_', ' ')} {name!r}; choose one of {names(registry)}")
    return registry.get(name)


def all_entries(registry: catalogue.Registry) -> Dict[str, Any]:
    """Every entry of ``registry`` by name."""
    _load_builtins(registry)
    return dict(registry.get_all())
