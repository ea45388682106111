"""spacy-sapbert: SapBERT-style biomedical entity linking for spaCy.

Importing this package registers nothing and loads nothing: the ``sapbert_linker``
factory is found by spaCy through the ``spacy_factories`` entry point.
"""
from .about import __version__
from .encoder import EncoderSettings, SapEncoder
from .kb import ConceptKB
from .records import ConceptRecord, InputError
from .search import Candidate, EncoderMismatchError, LinkingKB

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
]
