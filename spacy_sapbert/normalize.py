"""One name normaliser for the KB, the pair corpora and the queries.

The paper lower-cases every name; we also fold Unicode compatibility forms and collapse
whitespace so that a name typed twice with different spacing is one entry, not two.
"""
from __future__ import annotations

import re
import string
import unicodedata

_WS = re.compile(r"\s+")
_PUNCT_RUN = re.compile(r"[\s{}]+".format(re.escape(string.punctuation)))


def normalize_name(text: str, lowercase: bool = True, strip_punctuation: bool = False) -> str:
    """NFKC, collapsed whitespace, stripped, lower-cased unless ``lowercase`` is False.

    ``strip_punctuation`` turns every run of ASCII punctuation into one space, as BioSyn's and
    SapBERT's query and dictionary cleaning does ("non-Hodgkin's" → "non hodgkin s").
    """
    text = unicodedata.normalize("NFKC", text)
    text = (_PUNCT_RUN if strip_punctuation else _WS).sub(" ", text).strip()
    return text.lower() if lowercase else text
