"""Index kinds: each a small class behind ``VectorIndex``'s interface (build, add, search, save,
load, describe), registered by name in ``registries.index_kinds``.

Importing this package registers the built-in kinds: ``flat`` (exact; ``flat.py``), ``flat-fp16`` and
``sq8`` (``scalar.py``), ``hnsw`` (``hnsw.py``), ``ivf-sq8`` and ``ivf-fp16`` (``ivf.py``) and
``ivf-pq`` (``ivf_pq.py``) and ``ivf-rabitq`` (``ivf_rabitq.py``). Another kind is one module with a ``VectorIndex`` subclass and
``@index_kinds.register("name")`` (``tests/test_index_kinds.py`` registers a toy one);
``build-kb --index name`` and ``VectorIndex.from_disk`` then find it.
"""
from . import flat, hnsw, ivf, ivf_pq, ivf_rabitq, scalar  # noqa: F401  (the built-in kinds register on import)
from .base import VectorIndex, auto_index_kind, auto_rule, check_kind, choose_kind, index_kind_help, kind_class

__all__ = ["VectorIndex", "auto_index_kind", "auto_rule", "check_kind", "choose_kind", "index_kind_help", "kind_class"]
