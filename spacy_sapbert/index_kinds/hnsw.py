"""``hnsw``: a graph of SQ8 codes (FAISS ``HNSW32,SQ8``), searched from a few entry points; its
breadth per query is ``efSearch`` (``set_ef_search``, ``tuning.tune_ef_search``)."""
from __future__ import annotations

from ..registries import index_kinds
from .faiss_base import FaissIndex


@index_kinds.register("hnsw")
class HnswIndex(FaissIndex):
    """Approximate search over an HNSW graph (32 links a node) of SQ8 codes; no GPU version."""

    factory = "HNSW32,SQ8"
    faiss_class = "IndexHNSW"

    def set_ef_search(self, ef_search: int) -> None:
        import faiss

        faiss.downcast_index(self.index).hnsw.efSearch = ef_search
        self.meta["ef_search"] = ef_search

    def _apply_search_settings(self) -> None:
        import faiss

        if "ef_search" in self.meta:
            faiss.downcast_index(self.index).hnsw.efSearch = int(self.meta["ef_search"])  # type: ignore[call-overload]
