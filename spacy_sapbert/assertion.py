"""Assertion of clinical findings with ConText: negated, historical, hypothetical, uncertain, whose, which section.

``sapbert_context`` is the ConText algorithm (Harkema et al., J Biomed Inform 2009) as a spaCy
component. Trigger phrases carry a *category* (what they assert) and a *direction*: a ``forward``
trigger ("no", "history of", "if", "mother") modifies the spans after it, a ``backward`` one
("ruled out", "unlikely") the spans before it, ``bidirectional`` both. A trigger's scope ends at the
sentence's end, at a ``terminate`` phrase of its category ("but", "however", "presents with"), at
the next trigger of the same attribute that gives it another value ("mother ... the patient"), or
after ``max_scope`` words. ``pseudo`` phrases ("no increase", "not only", "gram negative") are
triggers' look-alikes: where one matches, the trigger words inside it do nothing. Section titles
("PAST MEDICAL HISTORY:", "FAMILY HISTORY:") set ``span._.section`` and, where a section has a
default ("family history": someone else's and historical), it applies unless a trigger in the
sentence says otherwise.

The lexicon is data, not code (read by ``context_rules.py``): ``spacy_sapbert/data/context_rules.json`` (versioned; each imported
list names its source and licence, see ``context_rules_NOTICE.txt`` beside it). An entry is
``{"phrases": [...], "category": ..., "direction": ..., "max_scope": words (optional)}``, where
``sequences`` may stand for many phrases (``[[["his", "her", ""], ["mother"], ["reports", "states"]]]``). Users extend it from
the config (``extra_rules``, ``extra_sections``) or replace it (``rules``: a path); the rules in force
are saved with the pipeline (``to_disk``) and read back from there (``from_disk``).

It sets on every span of ``doc.ents`` and of the span groups named in ``spans_keys``:

=====================  ==========================================================================
``span._.negated``      ``True`` for a denied or absent finding ("no fever", "pneumonia was ruled out")
``span._.uncertain``    ``True`` for a possible finding ("possible pneumonia", "rule out MI")
``span._.hypothetical`` ``True`` for a conditional one ("return if you develop chest pain")
``span._.historical``   ``True`` for a past one ("history of stroke", a past-history section)
``span._.experiencer``  ``"patient"`` or ``"other"`` (a family member's: "the mother had seizures")
``span._.section``      the section the span is in (``"past_medical_history"``...), or ``None``
``span._.assertion``    one summary: ``other`` (someone else's), else ``absent`` (negated), else
                        ``hypothetical``, else ``possible`` (uncertain), else ``historical``, else
                        ``present``
=====================  ==========================================================================

``span._.negex`` (deprecated) reads ``span._.negated``: the name of the package's negation when it
was negspacy's NegEx (``negex_alias``; left alone where negspacy registered it in the process).

"rule out X" is *uncertain*, not hypothetical: ConText's definition of "possible" existence (NegEx's
``[PREP]`` trigger); the NegEx/ConText test set codes it affirmed and recent.

The work is linear in the document's length: phrases are found with one pass of a word trie, and
the scopes with one sorted sweep over trigger, terminator and span positions. Sentences come from
``doc.sents`` when something set them, else from a fast rule (``., !, ?`` before a capital or a
digit, blank lines, line breaks before a capital or a list mark, section titles); a "?" written onto the
word after it is a query ("?PE", "?autoimmune haemolysis": the lexicon's uncertainty), not a sentence's end.
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import srsly
from spacy.attrs import IS_ALPHA, IS_SPACE, IS_UPPER, LENGTH, LOWER, ORTH, SENT_START, SPACY
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.strings import get_string_id
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import ensure_path

from .attributes import register_attribute
from .context_rules import (
    CATEGORIES,
    RULES_FILE,
    RULES_PATH,
    SLOT_DEFAULTS,
    SLOTS,
    Rule,
    describe_rules,
    expand_sequences,
    read_rules,
    rules_from_entries,
    title_table,
)

ATTRIBUTES: Tuple[str, ...] = SLOTS + ("section", "assertion")
ASSERTIONS = ("present", "absent", "possible", "hypothetical", "historical", "other")


def assertion_of(values: Dict[str, Any]) -> str:
    """The summary of one span's attributes (the precedence in the module's docstring)."""
    if values.get("experiencer") == "other":
        return "other"
    if values.get("negated"):
        return "absent"
    if values.get("hypothetical"):
        return "hypothetical"
    if values.get("uncertain"):
        return "possible"
    if values.get("historical"):
        return "historical"
    return "present"


def register_assertion_attributes(negex_alias: bool = False) -> None:
    """``Span._.negated`` ... ``Span._.assertion`` (stored in ``doc.user_data``, so they survive
    ``DocBin`` and ``n_process``); refuses names another package owns. ``negex_alias``: also
    ``Span._.negex``, read-only, the same as ``negated`` (deprecated: the name negspacy's NegEx gave
    the package's negation before ``sapbert_context``), unless negspacy registered it in this process."""
    for name in ATTRIBUTES:
        register_attribute(Span, name, taken=(
            f"Span extension '{name}' is already registered by another package; spacy-sapbert's "
            f"sapbert_context will not overwrite it."
        ))
    if negex_alias:
        current = Span.get_extension("negex") if Span.has_extension("negex") else None
        if current is None or current[2] is _negex_get:
            Span.set_extension("negex", getter=_negex_get, setter=_negex_set, force=True)


def negspacy_negated(span: Span) -> Optional[bool]:
    """``span._.negex`` where negspacy's NegEx registered it (a pipeline saved before ``sapbert_context``), else None."""
    if not Span.has_extension("negex") or Span.get_extension("negex")[2] is _negex_get:
        return None
    return bool(span._.negex)


def _negex_key(span: Span) -> tuple:
    return ("._.", "negex", span.start_char, span.end_char)  # where spaCy keeps a plain extension's value


def _negex_get(span: Span) -> Optional[bool]:
    """Deprecated: ``span._.negex`` is ``span._.negated`` (kept for code written for negspacy's NegEx),
    unless negspacy's NegEx, run in the same process, wrote a value of its own; False (negspacy's
    default) on a span neither set."""
    value = span.doc.user_data.get(_negex_key(span))
    if value is None:
        value = span._.negated
    return bool(value)


def _negex_set(span: Span, value: Optional[bool]) -> None:
    span.doc.user_data[_negex_key(span)] = value


# ---------------------------------------------------------------------------- words, sentences, sections
_SENTENCE_PUNCT = frozenset({".", "!", "?"})
_LIST_MARK = re.compile(r"^(?:[-*•#]|\d+[.)]?)$")


class _Words:
    """The doc's non-space tokens ("words") as arrays read in one ``to_array``: their lowercase and
    verbatim string ids, whether each is an upper-case word, the whitespace after those that space
    tokens follow, the sentence starts a component set, and the token→word map. No ``Token`` objects
    are made and no ``doc.text`` (spaCy joins it anew at each call)."""

    def __init__(self, doc: Doc):
        attrs = [IS_SPACE, LOWER, ORTH, SPACY, IS_UPPER, IS_ALPHA, LENGTH, SENT_START]
        arr = doc.to_array(attrs) if len(doc) else np.zeros((0, len(attrs)), dtype="uint64")
        is_space = arr[:, 0] == 1
        # before[i]: how many words come before token i (a span's start and end in word indices)
        self.before: List[int] = np.concatenate(([0], np.cumsum(~is_space))).tolist()
        words = arr[~is_space]
        self.strings = doc.vocab.strings
        self.lower_ids: np.ndarray = words[:, 1]
        self.orth_ids: np.ndarray = words[:, 2]
        self.lower: List[int] = self.lower_ids.tolist()
        self.n = len(self.lower)
        self.upper: List[bool] = ((words[:, 4] == 1) & (words[:, 5] == 1) & (words[:, 6] > 1)).tolist()
        self.spaced: np.ndarray = words[:, 3] == 1  # whitespace follows the word (or a space token does: ``gap``)
        self.gap: Dict[int, str] = {}  # word -> the whitespace after it, where space tokens follow it
        for i in np.flatnonzero(is_space).tolist():
            w = self.before[i] - 1
            if w < 0:
                continue
            if w not in self.gap:  # the first space token after word w: token i - 1 is the word
                self.gap[w] = " " if arr[i - 1, 3] else ""
            self.gap[w] += self.strings[int(arr[i, 2])] + (" " if arr[i, 3] else "")
        sent = arr[:, 7].astype(np.int64)  # 1 starts a sentence, -1 does not, 0 unset
        self.sent_starts: Optional[List[int]] = (
            [self.before[i] for i in np.flatnonzero(sent == 1).tolist()] if len(sent) > 1 and (sent[1:] != 0).any() else None
        )

    def text(self, w: int) -> str:
        return self.strings[int(self.orth_ids[w])]

    def line_break_before(self, w: int) -> bool:
        return w == 0 or "\n" in self.gap.get(w - 1, "")


_PUNCT_IDS = frozenset(get_string_id(p) for p in _SENTENCE_PUNCT)
_QUERY_ID = get_string_id("?")
_COLON_ID = get_string_id(":")
_GAP_STOP_IDS = _PUNCT_IDS | {_COLON_ID, get_string_id(";")}  # a gap (<any N>) stays within a clause


def _is_query(words: _Words, i: int) -> bool:
    """Is word ``i`` a "?" written onto the next word, after a space or at the start ("... anaemia. ?Haemolysis")?"""
    return (words.orth_ids[i] == _QUERY_ID and not words.spaced[i] and i not in words.gap
            and (i == 0 or bool(words.spaced[i - 1]) or i - 1 in words.gap))


def sentence_starts(words: _Words, extra: Iterable[int] = ()) -> List[int]:
    """Word indices where sentences start: ``doc.sents`` when set, else the rule in the module docstring."""
    starts = {0}
    if words.sent_starts is not None:
        starts.update(words.sent_starts)
    else:
        orth = words.orth_ids.tolist()
        for w in [i + 1 for i, h in enumerate(orth[:-1]) if h in _PUNCT_IDS and not _is_query(words, i)]:
            first = words.text(w)[:1]
            if first.isupper() or first.isdigit() or not first.isalnum():
                starts.add(w)
        for prev, gap in words.gap.items():  # a blank line, or a line break before a capital or a list mark
            w = prev + 1
            if w < words.n and "\n" in gap:
                text = words.text(w)
                if gap.count("\n") > 1 or text[:1].isupper() or _LIST_MARK.match(text):
                    starts.add(w)
    starts.update(extra)
    return sorted(starts)


@dataclass(frozen=True)
class Section:
    start: int  # the title's first word
    end: int  # the word after the title (and its colon)
    name: str


_UNKNOWN_TITLE_WORDS = 6


def find_sections(words: _Words, titles: Dict[Tuple[int, ...], str], longest: int,
                  breaks: Optional[List[int]] = None) -> List[Section]:
    """Section titles: a known title followed by a colon, or an upper-case title alone on its line.

    ``titles``: word string ids → section name. ``breaks`` (when given) receives the first word of
    each *unknown* upper-case title followed by a colon ("REFERRING DIAGNOSIS:", "EXTREMITIES:"): a
    sentence starts there, the section goes on.
    """
    found: List[Section] = []
    lower, upper, n = words.lower, words.upper, words.n
    colons = set(np.flatnonzero(words.lower_ids == _COLON_ID).tolist())
    alone = {w for w, gap in words.gap.items() if "\n" in gap and upper[w]}  # an upper-case line's last word
    if n and upper[n - 1]:
        alone.add(n - 1)
    last_end = 0
    for w in sorted(colons | alone):
        colon = w in colons
        if colon and breaks is not None:
            start = w
            while start > max(last_end, w - _UNKNOWN_TITLE_WORDS) and upper[start - 1]:
                start -= 1
            if start < w:
                breaks.append(start)
        end_word = w if colon else w + 1  # exclusive end of the title's words
        for size in range(min(longest, end_word - last_end), 0, -1):
            name = titles.get(tuple(lower[end_word - size:end_word]))
            if name is None:
                continue
            start = end_word - size
            if not colon and not words.line_break_before(start):
                continue
            found.append(Section(start, w + 1, name))
            last_end = w + 1
            break
    return found


def _by_chunks(tokenize: Callable[[str], Tuple[str, ...]]) -> Callable[[str], Tuple[str, ...]]:
    """``tokenize`` run once per whitespace-separated chunk of the phrases it is given: spaCy's tokenizer
    splits at whitespace first, so a phrase's words are its chunks' words, and the lexicon's
    ``sequences`` repeat the same chunks in thousands of phrases (tokenizing each phrase took most of
    the component's start-up)."""
    words: Dict[str, Tuple[str, ...]] = {}

    def run(phrase: str) -> Tuple[str, ...]:
        out: List[str] = []
        for chunk in phrase.split():
            if chunk not in words:
                words[chunk] = tokenize(chunk)
            out.extend(words[chunk])
        return tuple(out)

    return run


# ---------------------------------------------------------------------------- matching and scopes
class _Lexicon:
    """The rules compiled for matching: a trie over words. A node is [children, rules ending there or
    None, gaps after it or None]; a gap (``<any N>``) is (N, the node of what may follow it)."""

    def __init__(self, rules: Sequence[Rule]):
        self.trie: Dict[int, list] = {}  # word's string id -> node
        for rule in rules:
            level, node = self.trie, None
            for word in rule.words:
                if isinstance(word, int):  # a gap: never first (``phrase_parts``)
                    if node[2] is None:  # type: ignore[index]
                        node[2] = []  # type: ignore[index]
                    gaps = node[2]  # type: ignore[index]
                    node = next((g for size, g in gaps if size == word), None)
                    if node is None:
                        node = [{}, None, None]
                        gaps.append((word, node))
                else:
                    node = level.setdefault(get_string_id(word), [{}, None, None])
                level = node[0]
            if node[1] is None:  # type: ignore[index]
                node[1] = []  # type: ignore[index]
            if rule not in node[1]:  # type: ignore[index]
                node[1].append(rule)  # type: ignore[index]

    def matches(self, words: _Words, blocked: Sequence[bool]) -> List[Tuple[int, int, List[Rule]]]:
        """Non-overlapping matches ``(start, end, rules)`` in word indices, longest first; a pseudo
        rule sharing a match's words blocks the triggers there; ``blocked`` words never match. A gap
        crosses no sentence punctuation, semicolon, colon or blocked word, and its words stay free."""
        found: List[Tuple[int, int, List[Rule], Tuple[int, ...]]] = []  # ..., the words in gaps
        lower, n = words.lower, words.n
        trie = self.trie
        gaps: List[Tuple[int, list, int, Tuple[int, ...]]] = []  # gaps met: (N, the node after it, its first word, skipped)

        def walk(w: int, level: Dict[int, list], k: int, skipped: Tuple[int, ...]) -> None:
            """From word ``k`` down the trie ``level``: each rule that ends is a match of ``w``; each gap met is queued."""
            while k < n:
                node = level.get(lower[k])
                if node is None:
                    return
                k += 1
                if node[1] is not None:
                    found.append((w, k, node[1], skipped))
                if node[2]:
                    gaps.extend((size, after, k, skipped) for size, after in node[2])
                level = node[0]

        for w in [i for i, word in enumerate(lower) if word in trie]:
            walk(w, trie, w, ())
            while gaps:  # a gap goes on after 0 to N words of the clause
                size, after, at, skipped = gaps.pop()
                for j in range(at, min(at + size, n) + 1):
                    if j > at and (lower[j - 1] in _GAP_STOP_IDS or blocked[j - 1]):
                        break
                    walk(w, after[0], j, skipped + tuple(range(at, j)))
        found.sort(key=lambda m: (m[0] - m[1], m[0]))
        taken = list(blocked)
        kept: List[Tuple[int, int, List[Rule]]] = []
        for start, end, group, skipped in found:
            fixed = [i for i in range(start, end) if i not in skipped] if skipped else range(start, end)
            if any(taken[i] for i in fixed):
                continue
            for i in fixed:
                taken[i] = True
            if any(r.direction == "pseudo" for r in group):
                continue
            kept.append((start, end, group))
        kept.sort()
        return kept


# event kinds, in the order they apply at one position
_ACTIVATE, _SENTENCE, _QUERY, _KILL = 0, 1, 2, 3
_UNBOUNDED = float("inf")


def _sweep(events: List[Tuple[int, int, int, Any]], n_targets: int, reverse: bool,
           max_scope: Optional[int]) -> List[Dict[str, Tuple[int, Any]]]:
    """One direction's scopes: for each target, slot → (distance, value) of the nearest trigger reaching it.

    A trigger ends the scopes of earlier triggers of its attribute that give another value ("her
    mother had diabetes; the patient has asthma"); those that give the same value go on where they
    reach further ("history of CAD, s/p CABG, hypertension": "s/p" reaches 4 words, "history of" the
    sentence). Per slot the active triggers all give one value, the nearest last; a new one drops
    those it outreaches (they can reach no target it does not reach first)."""
    events.sort(key=lambda e: ((-e[0]) if reverse else e[0], e[1]))
    active: Dict[str, List[Tuple[int, Any, float]]] = {}  # slot -> [(position, value, reach)], nearest last
    out: List[Dict[str, Tuple[int, Any]]] = [{} for _ in range(n_targets)]
    for pos, kind, _, payload in events:
        here = -pos if reverse else pos
        if kind == _ACTIVATE:
            slot, value, limit = payload
            scope = limit if limit is not None else max_scope
            reach = here + scope if scope is not None else _UNBOUNDED
            current = active.get(slot)
            if current and current[-1][1] == value:
                current[:] = [t for t in current if t[2] > reach]
                current.append((here, value, reach))
            else:
                active[slot] = [(here, value, reach)]
        elif kind == _SENTENCE:
            active.clear()
        elif kind == _KILL:
            slots, value = payload
            for slot in slots:
                current = active.get(slot)
                if current and (value is None or current[-1][1] != value):
                    del active[slot]
        else:
            found = out[payload]
            for slot, current in active.items():
                for where, value, reach in reversed(current):  # the nearest that reaches this far
                    if here < reach:
                        found[slot] = (here - where, value)
                        break
    return out


def assert_spans(
    doc: Doc,
    spans: Sequence[Span],
    lexicon: "_Lexicon",
    titles: Dict[Tuple[str, ...], str],
    longest_title: int,
    section_defaults: Dict[str, Dict[str, Any]],
    max_scope: Optional[int] = None,
    in_title: Optional[List[bool]] = None,
) -> List[Dict[str, Any]]:
    """The attributes of each span (a dict per span, in order); the whole algorithm, one pass.
    ``in_title`` (when given) receives, per span, whether it lies within a section title ("ALLERGIES:")."""
    words = _Words(doc)
    breaks: List[int] = []
    sections = find_sections(words, titles, longest_title, breaks)
    blocked = [False] * words.n
    for s in sections:
        for i in range(s.start, s.end):
            blocked[i] = True
    matches = lexicon.matches(words, blocked)
    starts = sentence_starts(words, extra=[x for s in sections for x in (s.start, s.end)] + breaks)
    targets = [(words.before[s.start], words.before[s.end]) for s in spans]

    fwd: List[Tuple[int, int, int, Any]] = [(b, _SENTENCE, 0, None) for b in starts]
    bwd: List[Tuple[int, int, int, Any]] = [(b, _SENTENCE, 0, None) for b in starts]
    for start, end, group in matches:
        for rule in group:
            if rule.direction == "terminate":
                fwd.append((start, _KILL, 0, (rule.slots, None)))
                bwd.append((end, _KILL, 0, (rule.slots, None)))
                continue
            # the next trigger of an attribute ends the last one's scope where it gives another value
            fwd.append((start, _KILL, 0, (rule.slots, rule.value)))
            bwd.append((end, _KILL, 0, (rule.slots, rule.value)))
            payload = (rule.slots[0], rule.value, rule.max_scope)
            if rule.direction in ("forward", "bidirectional"):
                fwd.append((end, _ACTIVATE, 0, payload))
            if rule.direction in ("backward", "bidirectional"):
                bwd.append((start, _ACTIVATE, 0, payload))
    for t, (start, end) in enumerate(targets):
        fwd.append((start, _QUERY, 0, t))
        bwd.append((end, _QUERY, 0, t))
    ahead = _sweep(fwd, len(targets), reverse=False, max_scope=max_scope)
    behind = _sweep(bwd, len(targets), reverse=True, max_scope=max_scope)

    section_starts = [s.start for s in sections]
    untouched: Dict[Optional[str], Dict[str, Any]] = {}  # a section's values for a span no trigger reaches
    results: List[Dict[str, Any]] = []
    for t, (start, end) in enumerate(targets):
        k = bisect_right(section_starts, start) - 1
        section = sections[k].name if k >= 0 and sections[k].end <= start else None
        if in_title is not None:
            in_title.append(k >= 0 and end <= sections[k].end)
        base = untouched.get(section)
        if base is None:
            base = {**SLOT_DEFAULTS, **(section_defaults.get(section, {}) if section else {}), "section": section}
            base["assertion"] = assertion_of(base)
            untouched[section] = base
        a_hits, b_hits = ahead[t], behind[t]
        if not a_hits and not b_hits:
            results.append(dict(base))
            continue
        values = dict(base)
        for slot in a_hits.keys() | b_hits.keys():
            a, b = a_hits.get(slot), b_hits.get(slot)
            values[slot] = (a if b is None or (a is not None and a[0] <= b[0]) else b)[1]  # the nearer trigger
        values["assertion"] = assertion_of(values)
        results.append(values)
    return results


# ---------------------------------------------------------------------------- the component
DEFAULT_CONFIG: Dict[str, Any] = {
    "rules": None,
    "extra_rules": [],
    "extra_sections": [],
    "max_scope": None,
    "ents": True,
    "spans_keys": ["sapbert_nested"],
    "sections": True,
    "drop_titles": True,
    "negex_alias": True,
}


@Language.factory(
    "sapbert_context",
    assigns=[f"span._.{a}" for a in ATTRIBUTES],
    default_config=DEFAULT_CONFIG,
)
def make_sapbert_context(
    nlp: Language,
    name: str,
    rules: Optional[str],
    extra_rules: List[Dict[str, Any]],
    extra_sections: List[Dict[str, Any]],
    max_scope: Optional[int],
    ents: bool,
    spans_keys: List[str],
    sections: bool,
    drop_titles: bool,
    negex_alias: bool,
) -> "ConTextComponent":
    """Place it after mention detection (it reads ``doc.ents`` and the ``spans_keys`` groups)."""
    return ConTextComponent(nlp, name, rules=rules, extra_rules=extra_rules, extra_sections=extra_sections,
                            max_scope=max_scope, ents=ents, spans_keys=spans_keys, sections=sections,
                            drop_titles=drop_titles, negex_alias=negex_alias)


class ConTextComponent(Pipe):
    """ConText (negated, uncertain, hypothetical, historical, experiencer) and sections on spans."""

    def __init__(
        self,
        nlp: Language,
        name: str = "sapbert_context",
        *,
        rules: Optional[str] = None,
        extra_rules: Sequence[Dict[str, Any]] = (),
        extra_sections: Sequence[Dict[str, Any]] = (),
        max_scope: Optional[int] = None,
        ents: bool = True,
        spans_keys: Sequence[str] = ("sapbert_nested",),
        sections: bool = True,
        drop_titles: bool = True,
        negex_alias: bool = True,
    ):
        if max_scope is not None and max_scope < 1:
            raise ValueError(f"max_scope must be at least 1 (or None: the sentence), got {max_scope}")
        self.name = name
        self.vocab = nlp.vocab
        self._tokenizer = nlp.tokenizer
        self.cfg: Dict[str, Any] = {
            "rules": rules, "extra_rules": list(extra_rules), "extra_sections": list(extra_sections),
            "max_scope": max_scope, "ents": ents, "spans_keys": list(spans_keys), "sections": sections,
            "drop_titles": drop_titles, "negex_alias": negex_alias,
        }
        register_assertion_attributes(negex_alias)
        self._missing: Optional[str] = None
        if rules is not None and not Path(rules).exists():
            # a pipeline saved with its own rules file, loaded elsewhere: from_disk brings the saved copy
            self._missing = f"sapbert_context: the rules file {rules!r} does not exist"
            self.lexicon_data: Dict[str, Any] = read_rules()
        else:
            self.lexicon_data = read_rules(rules)
        self._compile()

    # -- rules
    def _tokenize(self, phrase: str) -> Tuple[str, ...]:
        """A phrase's words as the pipeline's tokenizer splits them (so "s/p" matches "s/p" in text)."""
        return tuple(t.lower_ for t in self._tokenizer(phrase) if not t.is_space)

    def _compile(self) -> None:
        data = self.lexicon_data
        entries = [e for lst in data["lists"] for e in lst.get("rules", [])] + list(self.cfg["extra_rules"])
        tokenize = _by_chunks(self._tokenize)
        self.rules = rules_from_entries(entries, tokenize)
        self.lexicon = _Lexicon(self.rules)
        section_entries = [e for lst in data.get("section_lists", []) for e in lst.get("sections", [])]
        section_entries += list(self.cfg["extra_sections"])
        self.titles = title_table(section_entries, tokenize) if self.cfg["sections"] else {}
        self.longest_title = max((len(k) for k in self.titles), default=0)
        self.section_defaults: Dict[str, Dict[str, Any]] = {}
        for section, defaults in data.get("section_defaults", {}).items():
            for slot in defaults:
                if slot not in SLOTS:
                    raise ValueError(f"section_defaults[{section!r}]: unknown attribute {slot!r} (use {SLOTS})")
            self.section_defaults[section] = dict(defaults)

    @property
    def version(self) -> str:
        """The lexicon's version (``context_rules.json``'s ``version``)."""
        return str(self.lexicon_data["version"])

    # -- processing
    def spans(self, doc: Doc) -> List[Span]:
        """The spans it sets attributes on: the entities, then the named span groups' spans."""
        out: List[Span] = list(doc.ents) if self.cfg["ents"] else []
        for key in self.cfg["spans_keys"]:
            if key in doc.spans:
                out.extend(doc.spans[key])
        return out

    def assert_spans(self, doc: Doc, spans: Sequence[Span], in_title: Optional[List[bool]] = None) -> List[Dict[str, Any]]:
        """The attributes of ``spans`` (any spans of ``doc``) without setting them (``in_title``: see ``assert_spans``)."""
        return assert_spans(doc, spans, self.lexicon, self.titles, self.longest_title, self.section_defaults,
                            self.cfg["max_scope"], in_title)

    def __call__(self, doc: Doc) -> Doc:
        if self._missing:
            raise FileNotFoundError(self._missing)
        spans = self.spans(doc)
        if not spans:
            return doc
        in_title: List[bool] = []
        values_of = self.assert_spans(doc, spans, in_title)
        if self.cfg["drop_titles"] and any(in_title):
            # a section title is no finding: "ALLERGIES:" is not the patient's Allergy
            self._drop(doc, [s for s, inside in zip(spans, in_title) if inside])
            kept = [i for i, inside in enumerate(in_title) if not inside]
            spans, values_of = [spans[i] for i in kept], [values_of[i] for i in kept]
        # where register_attribute's extensions (and spaCy's plain ones) keep a span's value: written
        # directly, 250k setattr calls through Underscore cost more than the whole algorithm
        user_data = doc.user_data
        for span, values in zip(spans, values_of):
            start, end = span.start_char, span.end_char
            for name, value in values.items():
                user_data[("._.", name, start, end)] = value
        return doc

    def _drop(self, doc: Doc, dropped: Sequence[Span]) -> None:
        """Remove ``dropped`` from the entities and the ``spans_keys`` groups, with the values the
        components before set on them (the linker's ``_.cui``...)."""
        offsets = {(s.start, s.end) for s in dropped}
        if self.cfg["ents"]:
            doc.set_ents([e for e in doc.ents if (e.start, e.end) not in offsets], default="outside")
        for key in self.cfg["spans_keys"]:
            if key in doc.spans:
                group = doc.spans[key]
                doc.spans[key] = SpanGroup(doc, name=group.name, attrs=group.attrs,
                                           spans=[s for s in group if (s.start, s.end) not in offsets])
        chars = {(s.start_char, s.end_char) for s in dropped}
        user_data = doc.user_data
        for k in [k for k in user_data if isinstance(k, tuple) and len(k) == 4 and k[0] == "._." and k[2:] in chars]:
            del user_data[k]

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Optional[Language] = None) -> None:
        """Nothing to learn: the rules are data."""

    # -- serialization: the rules in force travel with the pipeline
    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.msgpack_dumps({"cfg": self.cfg, "lexicon": self.lexicon_data})

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ConTextComponent":
        data = srsly.msgpack_loads(bytes_data)
        self.cfg.update(data["cfg"])
        self.lexicon_data = data["lexicon"]
        self._missing = None
        self._compile()
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = ensure_path(path)
        path.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path / RULES_FILE, self.lexicon_data)
        srsly.write_json(path / "cfg", self.cfg)

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ConTextComponent":
        path = ensure_path(path)
        if (path / "cfg").exists():
            self.cfg.update(srsly.read_json(path / "cfg"))
        self.lexicon_data = read_rules(path / RULES_FILE)
        self._missing = None
        self._compile()
        return self


__all__ = ["ConTextComponent", "make_sapbert_context", "register_assertion_attributes", "assertion_of", "negspacy_negated",
           "read_rules", "describe_rules", "expand_sequences", "RULES_PATH", "ATTRIBUTES", "ASSERTIONS", "CATEGORIES"]

