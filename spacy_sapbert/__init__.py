"""spacy-sapbert: SapBERT-style biomedical entity linking for spaCy.

Importing this package registers nothing and loads nothing: the ``sapbert_linker``
factory is found by spaCy through the ``spacy_factories`` entry point, and the names below
are imported on first use (``python -m spacy_sapbert info`` needs neither torch nor FAISS).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, List

from .about import __version__

_EXPORTS = {
    "Candidate": ".search",
    "ConceptKB": ".kb",
    "ConceptRecord": ".records",
    "EncoderMismatchError": ".search",
    "EncoderSettings": ".encoder",
    "InputError": ".records",
    "LinkingKB": ".search",
    "SapEncoder": ".encoder",
    "build_pipeline": ".pipelines",
    "default_pipeline": ".defaults",
}

__all__ = [
    "__version__",
    "Candidate",
    "ConceptKB",
    "ConceptRecord",
    "EncoderMismatchError",
    "EncoderSettings",
    "InputError",
    "LinkingKB",
    "SapEncoder",
    "build_pipeline",
    "default_pipeline",
]

if TYPE_CHECKING:  # pragma: no cover
    from .defaults import default_pipeline
    from .encoder import EncoderSettings, SapEncoder
    from .kb import ConceptKB
    from .pipelines import build_pipeline
    from .records import ConceptRecord, InputError
    from .search import Candidate, EncoderMismatchError, LinkingKB


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
