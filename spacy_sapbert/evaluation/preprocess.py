"""The standard query preprocessing of BioSyn and SapBERT, re-implemented.

Order matters and follows BioSyn: abbreviations are expanded on the raw mention (short forms
are case-sensitive), composite mentions are split, then text is lower-cased, spell-corrected
and stripped of punctuation. Unlinkable (``-1``) mentions are dropped; every step is counted so
the totals can be checked against the papers.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..records import InputError
from .datasets import Document

_PUNCT_RUN = re.compile(r"[\s{}]+".format(re.escape(string.punctuation)))
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
_PARENTHESIS = re.compile(r"\(([^()]+)\)")
_CONJUNCTION = re.compile(r",?\s+(?:and/or|and|or)\s+")
_LONG_FORM_WORD_SPLIT = re.compile(r"[\s-]+")


# ---------------------------------------------------------------------------- abbreviations
def _is_short_form(candidate: str) -> bool:
    """Schwartz & Hearst: 2–10 characters, at most two words, a letter, starts alphanumeric."""
    return (
        2 <= len(candidate) <= 10
        and len(candidate.split()) <= 2
        and candidate[0].isalnum()
        and any(c.isalpha() for c in candidate)
    )


def best_long_form(short: str, candidate: str) -> Optional[str]:
    """The shortest tail of ``candidate`` whose characters contain ``short``'s, right to left,
    with the first short-form character starting a word (Schwartz & Hearst, PSB 2003)."""
    s = len(short) - 1
    c = len(candidate) - 1
    while s >= 0:
        ch = short[s].lower()
        if not ch.isalnum():
            s -= 1
            continue
        while c >= 0 and (candidate[c].lower() != ch or (s == 0 and c > 0 and candidate[c - 1].isalnum())):
            c -= 1
        if c < 0:
            return None
        c -= 1
        s -= 1
    start = candidate.rfind(" ", 0, c + 1) + 1
    return candidate[start:].strip()


def _accept_pair(short: str, long: str) -> bool:
    n_chars = sum(ch.isalnum() for ch in short)
    n_words = len([w for w in _LONG_FORM_WORD_SPLIT.split(long) if w])
    return (
        len(long) > len(short)
        and n_words <= min(n_chars + 5, 2 * n_chars)
        and short.lower() not in {w.lower() for w in long.split()}
    )


def find_abbreviations(text: str) -> Dict[str, str]:
    """Short form → long form for every ``long form (SF)`` (or ``SF (long form)``) in ``text``.

    The first definition of a short form in the document wins.
    """
    found: Dict[str, str] = {}
    for sentence in _SENTENCE_END.split(text):
        for match in _PARENTHESIS.finditer(sentence):
            inside = re.split(r"[;,]", match.group(1))[0].strip()
            before = sentence[: match.start()].rstrip()
            if not inside or not before:
                continue
            if _is_short_form(inside):
                short = inside
                max_words = min(len(short) + 5, 2 * len(short))
                window = " ".join(before.split()[-max_words:])
                long = best_long_form(short, window)
            else:  # "SF (long form)": the word before the parenthesis is the short form
                short = before.split()[-1]
                long = best_long_form(short, inside) if _is_short_form(short) and len(inside.split()) > 1 else None
            if long and _accept_pair(short, long):
                found.setdefault(short, long)
    return found


def expand_abbreviations(mention: str, abbreviations: Mapping[str, str], max_rounds: int = 3) -> str:
    """Replace whole-token short forms (also inside ``A/B`` and before a comma) by long forms.

    Repeated a few rounds because a long form may itself contain a short form; a short form
    whose long form contains it is never expanded, so the loop cannot grow a mention forever.
    """
    usable = {s: l for s, l in abbreviations.items() if s not in l.split()}
    if not usable:
        return mention
    pattern = re.compile(
        r"(?<![^\s/])(" + "|".join(re.escape(s) for s in sorted(usable, key=len, reverse=True)) + r")(?=$|[\s/,;:])"
    )
    for _ in range(max_rounds):
        expanded = pattern.sub(lambda m: usable[m.group(1)], mention)
        if expanded == mention:
            break
        mention = expanded
    return mention


# ---------------------------------------------------------------------------- composite mentions
def _coordinated_items(text: str) -> List[str]:
    """``A, B, and the C`` → [A, B, C] (commas split only before the last conjunction)."""
    chunks = _CONJUNCTION.split(text)
    if len(chunks) < 2:
        return []
    items = [i for chunk in chunks[:-1] for i in chunk.split(",")] + [chunks[-1].replace(",", " ")]
    items = [re.sub(r"^(?:both|the)\s+", "", " ".join(i.split())) for i in items]
    return [i for i in items if i]


def _split_head_of(mention: str) -> List[str]:
    """``cancers of the breast and ovary`` → ``cancers of breast``, ``cancers of ovary``."""
    m = re.fullmatch(r"(?P<head>\S.*?) of (?P<rest>.+)", mention)
    if not m:
        return []
    items = _coordinated_items(m.group("rest"))
    return [f"{m.group('head')} of {item}" for item in items] if len(items) > 1 else []


def _split_coordination(mention: str) -> List[str]:
    """Coordinated modifiers, heads, or whole names.

    ``breast and ovarian cancer`` → ``breast cancer``, ``ovarian cancer`` (shared head);
    ``colorectal adenomas and carcinoma`` → ``colorectal adenomas``, ``colorectal carcinoma``
    (shared modifier); ``breast cancer and ovarian cancer`` → the two names as they are.
    """
    items = _coordinated_items(mention)
    if len(items) < 2:
        return []
    words = [i.split() for i in items]
    last = words[-1]
    if all(len(w) > 1 for w in words) and len({w[-1] for w in words}) == 1:
        return items  # whole names, each with its own head
    if len(last) > 1:
        stem = " ".join(last[1:])
        return [f"{i} {stem}" for i in items[:-1]] + [items[-1]]
    if len(words[0]) > 1 and all(len(w) == 1 for w in words[1:]):
        prefix = " ".join(words[0][:-1])
        return [items[0]] + [f"{prefix} {i}" for i in items[1:]]
    return items


def _split_slash(mention: str) -> List[str]:
    """``breast/ovarian cancer`` → ``breast cancer``, ``ovarian cancer`` (one slashed word)."""
    words = mention.split()
    slashed = [i for i, w in enumerate(words) if "/" in w and w.lower() != "and/or"]
    if len(slashed) != 1:
        return []
    i = slashed[0]
    alternatives = [a for a in words[i].split("/") if a]
    return [" ".join(words[:i] + [a] + words[i + 1 :]) for a in alternatives] if len(alternatives) > 1 else []


def split_composite(mention: str, n_ids: int) -> List[str]:
    """Split a mention annotated with ``n_ids`` concepts into that many names, or keep it whole.

    Tried in order: ``X of A and B``, coordination, a slash, one word per id. A split is kept
    only when it yields exactly ``n_ids`` parts, so an unusual phrasing stays one query with all
    its ids rather than becoming wrong parts.
    """
    if n_ids < 2:
        return [mention]
    for splitter in (_split_head_of, _split_coordination, _split_slash, str.split):
        parts = splitter(mention)
        if len(parts) == n_ids:
            return parts
    return [mention]


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
