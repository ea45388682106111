"""Composite mentions: one mention naming several concepts ("breast and ovarian cancer").

``split_composite`` is the evaluation's rule (the gold id count is known, so a split must give
exactly that many parts); ``split_mention`` is the pipeline's (the count is unknown, so any
coordination is split and the linker keeps the parts only when they link better than the whole).
Both use the same splitters.
"""
from __future__ import annotations

import re
from typing import Callable, List, Optional, Sequence

_CONJUNCTION = re.compile(r",?\s+(?:and/or|and|or)\s+")
_BRACKETS = re.compile(r"[()\[\]{}]")
# A finding stated as a clause: its subject, one of these verbs, perhaps an adverb, the quality word
# ("creatine kinase was markedly elevated"); the span finder proposes such clauses by the same words.
COPULAS = ("is", "are", "was", "were")


def is_adverb(word: str) -> bool:
    """An adverb as the clause rule reads one: a word in "-ly" ("markedly", "bilaterally")."""
    return word.endswith("ly")


_COPULA = re.compile(rf" (?:{'|'.join(COPULAS)}) ", re.IGNORECASE)
_PREDICATE = re.compile(rf"(?P<subject>\S.*?)\s+(?:{'|'.join(COPULAS)})\s+(?:\w+ly\s+)?(?P<quality>[\w-]+)", re.IGNORECASE)


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


def _split_coordination(mention: str, align_modifiers: bool = False) -> List[str]:
    """Coordinated modifiers, heads, or whole names.

    ``breast and ovarian cancer`` → ``breast cancer``, ``ovarian cancer`` (shared head);
    ``colorectal adenomas and carcinoma`` → ``colorectal adenomas``, ``colorectal carcinoma``
    (shared modifier); ``breast cancer and ovarian cancer`` → the two names as they are.
    The shared head is what follows the last item's first word; with ``align_modifiers`` the last
    item's modifier is as long as the item before it, so ``type 1 and type 2 diabetes`` gives
    ``type 1 diabetes`` (the evaluation keeps the original rule, so its counts stay comparable).
    """
    items = _coordinated_items(mention)
    if len(items) < 2:
        return []
    words = [i.split() for i in items]
    last = words[-1]
    if all(len(w) > 1 for w in words) and len({w[-1] for w in words}) == 1:
        return items  # whole names, each with its own head
    if len(last) > 1:
        n_modifier = len(words[-2]) if align_modifiers and len(last) > len(words[-2]) else 1
        if align_modifiers and n_modifier == 1 and len(last) > 2 and is_adverb(last[0]) and last[1].endswith("ed"):
            n_modifier = 2  # an adverb and the participle it modifies: "low-set and posteriorly rotated ears"
        stem = " ".join(last[n_modifier:])
        return [f"{i} {stem}" for i in items[:-1]] + [items[-1]]
    if len(words[0]) > 1 and all(len(w) == 1 for w in words[1:]):
        prefix = " ".join(words[0][:-1])
        return [items[0]] + [f"{prefix} {i}" for i in items[1:]]
    return items


def _split_adjectives(mention: str) -> List[str]:
    """``broad, flat nasal bridge`` → ``broad nasal bridge``, ``flat nasal bridge``: one-word modifiers
    joined by commas alone, before a last item of two or more words whose first word is the last modifier."""
    items = [i.strip() for i in mention.split(",")]
    last = items[-1].split()
    if len(items) < 2 or len(last) < 2 or any(len(i.split()) != 1 for i in items[:-1]):
        return []
    stem = " ".join(last[1:])
    return [f"{i} {stem}" for i in items[:-1]] + [items[-1]]


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
    splitters: Sequence[Callable[[str], List[str]]] = (_split_head_of, _split_coordination, _split_slash, str.split)
    for splitter in splitters:
        parts = splitter(mention)
        if len(parts) == n_ids:
            return parts
    return [mention]


def clause_as_name(text: str) -> Optional[str]:
    """A finding stated as a clause written as a name, its quality first and without an adverb
    ("creatine kinase was markedly elevated" → "elevated creatine kinase"); None for anything else."""
    predicate = _PREDICATE.fullmatch(text) if _COPULA.search(text) else None
    return f"{predicate.group('quality')} {predicate.group('subject')}" if predicate else None


def split_mention(mention: str) -> List[str]:
    """The concepts a mention coordinates, or ``[mention]`` when it does not look composite.

    ``breast and ovarian cancer``, ``palmar and/or plantar pits``, ``cancers of the breast and
    ovary``, ``breast/ovarian cancer``, ``type 1 and type 2 diabetes`` and ``low-set and posteriorly
    rotated ears`` are split, and so are one-word modifiers joined by commas alone (``broad, flat nasal
    bridge``). Names that contain "and" as one concept ("hand, foot and mouth disease") are split too:
    a word list cannot tell them apart, and the linker keeps parts only when each links better than the
    whole. Not split: a mention with brackets (an "and" inside a parenthesis belongs to a gloss) and a
    split that leaves a part equal to the whole. A finding stated as a clause gives one part, itself
    reordered, without an adverb: ``ankle reflexes were absent`` → ``absent ankle reflexes``, ``creatine
    kinase was markedly elevated`` → ``elevated creatine kinase``.
    """
    text = " ".join(mention.split())
    if not text or _BRACKETS.search(text):
        return [mention]
    named = clause_as_name(text)
    if named is not None:  # a finding stated as a clause, searched as a name: "vibration sense was reduced"
        return [named]
    conjunction = _CONJUNCTION.search(text)
    if not conjunction and "/" not in text and "," not in text:
        return [mention]  # every splitter needs a conjunction, a comma or a slash: most mentions stop here
    splitters = (_split_adjectives, _split_slash) if not conjunction else (
        _split_head_of, lambda m: _split_coordination(m, align_modifiers=True), _split_slash)
    for splitter in splitters:
        parts = list(dict.fromkeys(p for p in splitter(text) if p))
        if len(parts) > 1 and text not in parts:
            return parts
    return [mention]
