"""The ConText lexicon of ``sapbert_context`` (``assertion.py``): reading, checking and expanding its rules.

The lexicon is a versioned JSON file, ``data/context_rules.json`` by default (its lists name their
source and licence; ``context_rules_NOTICE.txt``). A rule entry is
``{"phrases": [...], "sequences": [...], "category": ..., "direction": ..., "max_scope": ...}``; a phrase
(or a sequence's place) may hold a gap, ``<any N>``: 1 to N words of the sentence, or none, between
two of its words ("none <any 10> developed": "None of the 40 children treated with valproate
developed"). A trigger acts from its last word on (forward) or before its first (backward); the
words in a gap stay free for other triggers. Section titles are ``{"section": name, "titles": [...]}`` entries of ``section_lists``, and
``section_defaults`` maps a section to the attribute values that apply where no trigger says otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import srsly
from spacy.strings import get_string_id

RULES_PATH = Path(__file__).parent / "data" / "context_rules.json"
RULES_FILE = "context_rules.json"

# attribute -> value set by a category's trigger
CATEGORIES: Dict[str, Tuple[str, Any]] = {
    "negated": ("negated", True),
    "uncertain": ("uncertain", True),
    "hypothetical": ("hypothetical", True),
    "historical": ("historical", True),
    "recent": ("historical", False),  # overrides a section's "historical" default
    "family": ("experiencer", "other"),
    "other": ("experiencer", "other"),
    "patient": ("experiencer", "patient"),  # overrides a section's "other" default
}
SLOTS: Tuple[str, ...] = ("negated", "uncertain", "hypothetical", "historical", "experiencer")
SLOT_DEFAULTS: Dict[str, Any] = {"negated": False, "uncertain": False, "hypothetical": False,
                                 "historical": False, "experiencer": "patient"}
DIRECTIONS = ("forward", "backward", "bidirectional", "terminate", "pseudo")
GAP = re.compile(r"<any (\d+)>")  # in a phrase: up to N words of the sentence between its words
MAX_GAP = 20


@dataclass(frozen=True)
class Rule:
    words: Tuple[Union[str, int], ...]  # the phrase's words, lowercase (as the tokenizer splits it); an int: a gap of up to that many
    direction: str
    slots: Tuple[str, ...]  # forward/backward/bidirectional: one slot; terminate/pseudo: those it acts on
    value: Any = None
    max_scope: Optional[int] = None
    category: str = ""


def _as_list(value: Union[str, Sequence[str]]) -> List[str]:
    return [value] if isinstance(value, str) else list(value)


def _slots_of(categories: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    names = _as_list(categories)
    if names == ["all"]:
        return SLOTS
    slots = []
    for name in names:
        if name not in CATEGORIES:
            raise ValueError(f"Unknown ConText category {name!r}: use one of {sorted(CATEGORIES)} or 'all'")
        slot = CATEGORIES[name][0]
        if slot not in slots:
            slots.append(slot)
    return tuple(slots)


def check_rule_entry(entry: Dict[str, Any]) -> None:
    """Raise ``ValueError`` naming what is wrong with the shape of one rule entry of the lexicon or the
    config (its phrases' gaps are checked as they are compiled: ``rules_from_entries``)."""
    if not isinstance(entry, dict):
        raise ValueError(f"A ConText rule is a dict with 'phrase' or 'phrases', 'category', 'direction'; got {entry!r}")
    if not any(k in entry for k in ("phrase", "phrases", "sequences")):
        raise ValueError(f"ConText rule without 'phrase', 'phrases' or 'sequences': {entry!r}")
    for seq in entry.get("sequences", []):
        if not isinstance(seq, list) or not all(isinstance(alts, list) and alts for alts in seq):
            raise ValueError(f"ConText rule {entry!r}: a sequence is a list of lists of alternatives")
    direction = entry.get("direction")
    if direction not in DIRECTIONS:
        raise ValueError(f"ConText rule {entry!r}: 'direction' must be one of {DIRECTIONS}")
    categories = entry.get("category", "all" if direction in ("terminate", "pseudo") else None)
    if categories is None:
        raise ValueError(f"ConText rule {entry!r} needs a 'category'")
    _slots_of(categories)
    if direction in ("forward", "backward", "bidirectional") and len(_as_list(categories)) != 1:
        raise ValueError(f"ConText trigger {entry!r}: one 'category' per trigger")
    max_scope = entry.get("max_scope")
    if max_scope is not None and (not isinstance(max_scope, int) or max_scope < 1):
        raise ValueError(f"ConText rule {entry!r}: 'max_scope' must be a positive integer")


def phrase_parts(phrase: str) -> List[Union[str, int]]:
    """A phrase as its texts and its gaps (``<any N>`` → N): "none <any 10> had" → ["none", 10, "had"].
    A gap lies between two words: never first, last, or beside another gap."""
    parts: List[Union[str, int]] = []
    at = 0
    for m in GAP.finditer(phrase):
        text, size = phrase[at : m.start()].strip(), int(m.group(1))
        if not text:
            raise ValueError(f"{phrase!r}: a gap (<any N>) must come between two words")
        if not 1 <= size <= MAX_GAP:
            raise ValueError(f"{phrase!r}: a gap is <any N> with N from 1 to {MAX_GAP}")
        parts += [text, size]
        at = m.end()
    last = phrase[at:].strip()
    if parts and not last:
        raise ValueError(f"{phrase!r}: a gap (<any N>) must come between two words")
    return parts + [last] if last else parts


def rules_from_entries(entries: Iterable[Dict[str, Any]], tokenize: Callable[[str], Tuple[str, ...]]) -> List[Rule]:
    """One :class:`Rule` per phrase of each entry (``{"phrases": [...], "category", "direction"}``); a
    ``ValueError`` names the entry of a phrase whose gap is misplaced."""
    rules: List[Rule] = []
    for entry in entries:
        check_rule_entry(entry)
        direction = entry["direction"]
        categories = entry.get("category", "all")
        slots = _slots_of(categories)
        value = CATEGORIES[_as_list(categories)[0]][1] if direction not in ("terminate", "pseudo") else None
        for phrase in entry_phrases(entry):
            try:
                parts = phrase_parts(phrase)
            except ValueError as e:
                raise ValueError(f"ConText rule {entry!r}: {e}") from None
            words = tuple(w for part in parts for w in ((part,) if isinstance(part, int) else tokenize(part)))
            if words:
                rules.append(Rule(words, direction, slots, value, entry.get("max_scope"),
                                  "+".join(_as_list(categories))))
    return rules


def expand_sequences(sequences: Iterable[Sequence[Sequence[str]]]) -> List[str]:
    """The phrases a ``sequences`` entry stands for: each sequence a list of alternatives per place
    (``""`` leaves the place out): ``[["his", "her", ""], ["mother"], ["reports", "states"]]`` is
    "his mother reports", ..., "mother states"."""
    phrases = (" ".join(part for part in combo if part) for seq in sequences for combo in product(*seq))
    return [phrase for phrase in dict.fromkeys(phrases) if phrase]  # in order, each once


def entry_phrases(entry: Dict[str, Any]) -> List[str]:
    """Every phrase of a rule entry: its ``phrase`` or ``phrases``, then what its ``sequences`` stand for."""
    return list(entry.get("phrases") or ([entry["phrase"]] if "phrase" in entry else [])) + expand_sequences(entry.get("sequences", []))


def read_rules(path: Union[str, Path, None] = None) -> Dict[str, Any]:
    """The lexicon file (the packaged one when ``path`` is None), checked."""
    data = srsly.read_json(RULES_PATH if path is None else path)
    if not isinstance(data, dict) or "version" not in data or "lists" not in data:
        raise ValueError(f"{path or RULES_PATH}: a ConText lexicon has 'version' and 'lists'")
    for lst in data["lists"]:
        for entry in lst.get("rules", []):
            check_rule_entry(entry)
    return data


def title_table(entries: Iterable[Dict[str, Any]], tokenize: Callable[[str], Tuple[str, ...]]) -> Dict[Tuple[int, ...], str]:
    """Each title's words (as string ids) → its section."""
    table: Dict[Tuple[int, ...], str] = {}
    for entry in entries:
        if not isinstance(entry, dict) or "section" not in entry or not ("title" in entry or "titles" in entry):
            raise ValueError(f"A section entry is {{'section': name, 'titles': [...]}}; got {entry!r}")
        for title in entry.get("titles") or [entry["title"]]:
            words = tokenize(title.rstrip(": "))
            if words:
                table[tuple(get_string_id(w) for w in words)] = entry["section"]
    return table


def describe_rules(data: Optional[Dict[str, Any]] = None) -> str:
    """One line: the lexicon's version and its lists (for benchmark records and ``--help`` texts)."""
    data = data or read_rules()
    parts = [f"{lst['name']}({sum(len(entry_phrases(e)) for e in lst.get('rules', []))} phrases)" for lst in data["lists"]]
    return f"context_rules {data['version']}: " + ", ".join(parts)
