"""The standard query preprocessing of BioSyn and SapBERT, re-implemented.

Order matters and follows BioSyn: abbreviations are expanded on the raw mention (short forms
are case-sensitive), composite mentions are split, then text is lower-cased, spell-corrected
and stripped of punctuation. Unlinkable (``-1``) mentions are dropped; every step is counted so
the totals can be checked against the papers. Abbreviations and composite splitting are the
pipeline's own implementation (``abbreviations.py``, ``composites.py``), so both agree.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..abbreviations import expand_abbreviations, find_abbreviations
from ..composites import split_composite
from ..records import InputError
from .datasets import Document

_PUNCT_RUN = re.compile(r"[\s{}]+".format(re.escape(string.punctuation)))


def select_gold_ids(ids: Sequence[str]) -> Tuple[str, ...]:
    """BioSyn's rule for NCBI: when a mention mixes MeSH and OMIM ids, the OMIM ones are dropped."""
    omim = [i for i in ids if i.startswith("OMIM:")]
    if omim and len(omim) < len(ids):
        return tuple(i for i in ids if not i.startswith("OMIM:"))
    return tuple(ids)


# ---------------------------------------------------------------------------- text cleaning
def load_spelling_fixes(path: Union[str, Path]) -> Dict[str, str]:
    """``typo||fix`` lines (the NCBI spell-check list)."""
    fixes: Dict[str, str] = {}
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if "||" not in line:
                raise InputError(path, lineno, "expected 'typo||correction'")
            typo, fix = line.split("||", 1)
            fixes[typo.strip()] = fix.strip()
    return fixes


def clean_text(text: str, spelling: Optional[Mapping[str, str]] = None) -> str:
    """Lower-case, correct listed typos word by word, and turn punctuation runs into one space."""
    text = text.lower()
    if spelling:
        text = " ".join(spelling.get(w, w) for w in text.split())
    return " ".join(w for w in _PUNCT_RUN.split(text) if w)


# ---------------------------------------------------------------------------- queries
@dataclass(frozen=True)
class Query:
    """One evaluation query: the annotated mention, the preprocessed strings to search (several
    for a split composite mention) and the gold ids."""

    doc_id: str
    start: int
    end: int
    mention: str
    parts: Tuple[str, ...]
    gold: Tuple[str, ...]

    @property
    def name(self) -> str:
        """The whole preprocessed mention (what enters the paper's dictionary)."""
        return " ".join(self.parts)


COUNT_KEYS = (
    "mentions",
    "nil_dropped",
    "empty_dropped",
    "abbreviations_expanded",
    "composite_mentions",
    "composites_split",
    "spelling_corrected",
    "queries",
)


def preprocess_documents(
    docs: Iterable[Document],
    spelling: Optional[Mapping[str, str]] = None,
    abbreviations: bool = True,
    composites: bool = True,
) -> Tuple[List[Query], Dict[str, int]]:
    """Turn gold mentions into queries; returns the queries and the count of each step."""
    counts = dict.fromkeys(COUNT_KEYS, 0)
    queries: List[Query] = []
    for doc in docs:
        abbrs = find_abbreviations(doc.text) if abbreviations and doc.text else {}
        for m in doc.mentions:
            counts["mentions"] += 1
            if m.is_nil:
                counts["nil_dropped"] += 1
                continue
            gold = select_gold_ids(m.ids)
            text = expand_abbreviations(m.text, abbrs) if abbrs else m.text
            counts["abbreviations_expanded"] += text != m.text
            raw_parts = [text]
            if len(gold) > 1:
                counts["composite_mentions"] += 1
                if composites:
                    raw_parts = split_composite(text, len(gold))
                    counts["composites_split"] += len(raw_parts) > 1
            parts = tuple(clean_text(p, spelling) for p in raw_parts)
            if spelling:
                counts["spelling_corrected"] += parts != tuple(clean_text(p) for p in raw_parts)
            if not all(parts):
                counts["empty_dropped"] += 1
                continue
            queries.append(Query(m.doc_id, m.start, m.end, m.text, parts, gold))
    counts["queries"] = len(queries)
    return queries, counts
