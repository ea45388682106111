"""``flat-fp16`` and ``sq8``: every vector kept as scalar-quantized codes and scanned in full by
FAISS: half (fp16) or a quarter (8 bits per dimension) of a flat index's memory, near-exact ranking."""
from __future__ import annotations

from ..registries import index_kinds
from .faiss_base import FaissIndex


@index_kinds.register("flat-fp16")
class Fp16Index(FaissIndex):
    """Each vector as 16-bit floats (FAISS ``SQfp16``)."""

    factory = "SQfp16"
    faiss_class = "IndexScalarQuantizer"


@index_kinds.register("sq8")
class Sq8Index(FaissIndex):
    """Each dimension as 8 bits over a range trained on a sample (FAISS ``SQ8``)."""

    factory = "SQ8"
    faiss_class = "IndexScalarQuantizer"
