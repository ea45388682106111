"""One name normaliser for the KB, the pair corpora and the queries.

The paper lower-cases every name; we also fold Unicode compatibility forms and collapse
whitespace so that a name typed twice with different spacing is one entry, not two.
"""
from __future__ import annotations

import re
import unicodedata

_WS = re.compile(r"\s+")


def normalize_name(text: str, lowercase: bool = True) -> str:
    """NFKC, collapsed whitespace, stripped, lower-cased unless ``lowercase`` is False."""
    text = unicodedata.normalize("NFKC", text)
    text = _WS.sub(" ", text).strip()
    return text.lower() if lowercase else text
