"""Mention proposals for the span finder: token n-grams whose words are the KB's and whose content
words nearly match a KB name's (``NameIndex``, ``propose``). No encoder here: the span finder
(``span_finder.py``) scores what this proposes through the linker.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import (
    Callable,
    Collection,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import numpy as np
from spacy.attrs import LOWER, SENT_START, SPACY
from spacy.strings import StringStore, get_string_id
from spacy.tokens import Doc

from .composites import COPULAS, is_adverb
from .normalize import STOPWORDS, WORD, word_key
from .variant_proposals import VariantMatcher

# The function words a mention may contain ("abnormality of the hand", "breast and/or ovarian
# cancer"); any other ("is", "was", "not", "which") ends a candidate: "cancer is the second" is no mention.
INNER_WORDS = frozenset("a an and and/or at by during for from in into of on or the to with within without".split())
# Where the words that modify a name's head begin ("abnormality | of the hand").
PREPOSITIONS = INNER_WORDS - {"a", "an", "and", "and/or", "or", "the"}
# The function words that make a name mean its other words' absence ("No appetite", "Growth without growth
# hormone", "Motor developmental milestones not achieved"): a name's words include them, so that "appetite"
# or "growth hormone" alone is no such name's words; inside a mention "without" is a word ("migraine without aura").
NEGATORS = frozenset({"no", "not", "nor", "without"})
# Punctuation that may sit inside a mention ("tonic-clonic", "and/or", "Crohn's"); any other
# punctuation token ends a candidate.
INNER_PUNCT = frozenset({"-", "/", "'", "'s"})
# A word is generic ("disease") only if it is in at least this many names (and a large share of them).
MIN_GENERIC_NAMES = 20
# A KB word that precedes another word in at least this many names is a modifier: the span finder
# also proposes a name with such words before it ("hereditary breast cancer", "hemorrhagic cystitis").
MIN_MODIFIER_NAMES = 3
# An acronym shorter than this ("MS", "HT") is proposed only where the text introduces it in
# parentheses ("multiple sclerosis (MS)"): otherwise such short forms are mostly something else.
MIN_UNDEFINED_ACRONYM_CHARS = 3
# Between the conjuncts of a coordinated mention ("breast and/or ovarian cancer").
COORDINATORS = frozenset({"and", "or", "and/or", "/", ","})
# The coordinating words a proposal other than a coordination may hold only where a KB name has one
# ("cleft lip and palate"): "nasal bridge and low" (in "... and low-set ears") or "lip or cleft" are no mentions.
COORDINATING_WORDS = frozenset({"and", "or", "and/or"})
# The same as ``Doc.to_array(LOWER)`` gives them; the conjunctions make a list a coordination the linker splits
# ("A, B and C"; "A/B C"), where commas alone do so only between one-word modifiers ("small, low-set ears").
COORDINATOR_IDS = frozenset(get_string_id(w) for w in COORDINATORS)
CONJUNCTION_IDS = COORDINATOR_IDS - {get_string_id(",")}
_HYPHEN_ID = get_string_id("-")
_OF_ID = get_string_id("of")
# a finding stated as a clause: "vibration sense was | reduced" (the KB's "Reduced vibration sense")
_COPULA_IDS = frozenset(get_string_id(w) for w in COPULAS)


def _goes_on(word: str) -> bool:
    """Does a noun phrase go on with ``word``: a word, not punctuation nor a coordinating word ("deficiency of ASPA | and")?"""
    return word[:1].isalpha() and word not in COORDINATING_WORDS


def is_acronym(name: str) -> bool:
    """Is ``name`` written like an acronym: in capitals, every word short or with a digit ("VHL",
    "G6PD", "ALL")? OMIM writes whole names in capitals ("ANIRIDIA"): those are words, not acronyms."""
    return name.isupper() and all(len(w) <= 5 or any(c.isdigit() for c in w) for w in WORD.findall(name))


def name_head(name: str, key: Callable[[str], str] = word_key) -> Optional[str]:
    """The word a name is about: the last content word before the first comma or preposition
    ("glucose-6-phosphate dehydrogenase *deficiency*", MeSH's inverted "*Hypertrophy*, Left
    Ventricular", HPO's "*Abnormality* of the hand"), as ``key`` gives it (``NameIndex.key`` remembers them)."""
    last = None
    for w in WORD.findall(name.split(",", 1)[0] if "," in name else name):
        lowered = w.lower()
        if lowered in PREPOSITIONS and last is not None:
            break
        if lowered not in STOPWORDS:
            last = w
    return key(last) if last is not None else None


class NameIndex:
    """The KB's vocabulary and its names as sets of content-word keys.

    A proposal's content words must be some name's, in any order ("type C brachydactyly"), or,
    for names of three to six words, all but one of them, never the head ("optic nerve" is not
    "optic nerve diseases") nor the first word, most often the quality that makes the name an
    abnormality ("blood pressure" is not "Increased blood pressure", "renal function" not "Abnormal
    renal function"; ``benchmarks/README.md``, "Partial matches"). Acronyms ("ALL", "CAN") and names
    in capitals whose words the KB mostly writes in capitals ("INCLUDED") match only capitals in the text; names
    without a letter ("1") are left out; ``word_share`` says in what share of the names a word
    occurs ("disease": many), so that single generic words can be held back; ``modifiers`` are
    the words that precede another in several names ("hereditary", "hemorrhagic").
    """

    def __init__(self, names: Iterable[str]):
        self._keys: Dict[str, str] = {}
        self._tokens: Dict[int, Optional[Tuple[str, ...]]] = {}
        self.vocab: Set[str] = set(STOPWORDS)
        self.exact: Set[FrozenSet[str]] = set()
        self.partial: Set[FrozenSet[str]] = set()
        self.capitals_only: Set[FrozenSet[str]] = set()
        self.coordinated: Set[FrozenSet[str]] = set()  # the words of names with "and"/"or" in them
        self.repeated: Set[FrozenSet[str]] = set()  # the words of names that write one of them twice ("cell-cell")
        # a name's words (two or more) -> its head, or the heads of the names with those words: a string where
        # there is one (the GC tracks no tuple or set per name)
        self._heads: Dict[FrozenSet[str], Union[str, FrozenSet[str]]] = {}
        self.last_words: Set[str] = set()  # the words that end a name or a comma-separated part of one
        written_lower: Set[FrozenSet[str]] = set()
        counts: Dict[str, int] = {}
        before_another: Dict[str, int] = {}
        in_capitals: List[FrozenSet[str]] = []
        case_counts: Dict[str, List[int]] = {}  # word → [names in capitals, other names] it is in
        n_names = 0
        pairs: Set[str] = set()
        for name in names:
            words = WORD.findall(name)
            content = [self.key(w) for w in words if w.lower() not in STOPWORDS or w.lower() in NEGATORS]
            keys = frozenset(content)
            if not keys or not any(k.isalpha() for k in keys):
                continue
            n_names += 1
            if "," not in name:
                self.last_words.add(content[-1])
            else:  # an inverted name ends its noun phrase before its first comma: MeSH's "Hypertrophy, Left Ventricular",
                # HPO's "Hypotonia, neonatal, generalized" ("neonatal" ends no phrase: "hypotonia in the neonatal | period")
                ends = [w for w in WORD.findall(name.split(",", 1)[0]) if w.lower() not in STOPWORDS]
                if ends:
                    self.last_words.add(self.key(ends[-1]))
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
                case_counts.setdefault(k, [0, 0])[0 if name.isupper() else 1] += 1
            for k in set(content[:-1]) if "," not in name else ():
                before_another[k] = before_another.get(k, 0) + 1
            if is_acronym(name):
                self.capitals_only.add(keys)
            elif name.isupper():
                in_capitals.append(keys)
            else:
                written_lower.add(keys)
            self.vocab.update(self.key(w) for w in words)
            pairs.update(f"{a} {b}".lower() for a, b in zip(words, words[1:]))
            self.exact.add(keys)
            if len(content) > len(keys):
                self.repeated.add(keys)
            if any(w.lower() in COORDINATING_WORDS for w in words):
                self.coordinated.add(keys)
            head = name_head(name, self.key)
            if len(keys) >= 2 and head is not None:
                known = self._heads.setdefault(keys, head)
                if known != head:  # another name with these words has another head
                    self._heads[keys] = frozenset({head}).union((known,) if isinstance(known, str) else known)
            if 3 <= len(keys) <= 6:  # never without the head nor the first word, most often the quality
                kept = {head, content[0]} | NEGATORS  # nor what negates it: "growth hormone" is not "Growth without growth hormone"
                self.partial.update(keys - {k} for k in keys if k not in kept)
        # A name in capitals that is no acronym ("ANIRIDIA") holds words the KB mostly writes in lower
        # case ("Congenital aniridia"); words it mostly writes in capitals ("INCLUDED") are OMIM's notation.
        self.capitals_only.update(keys for keys in in_capitals if any(case_counts[k][0] > case_counts[k][1] for k in keys))
        self.capitals_only -= written_lower
        self.word_count = counts
        self.word_share = {k: c / n_names for k, c in counts.items()}
        self.modifiers = frozenset(k for k, c in before_another.items() if c >= MIN_MODIFIER_NAMES and k.isalpha())
        # two words one after the other in a name, as "a b" (lower case): a text's hyphenated pair that a name
        # writes apart ("end stage") is those words, not the word it makes closed ("closed_compound")
        self.adjacent = frozenset(pairs)

    def has_head(self, keys: FrozenSet[str], words: Collection[str]) -> bool:
        """Is one of ``words`` the head (``name_head``) of a name whose words are ``keys``?"""
        found = self._heads.get(keys)
        if found is None:
            return False
        return found in words if isinstance(found, str) else not found.isdisjoint(words)

    def is_generic(self, key: str, max_share: float) -> bool:
        """Is ``key`` a word in more than ``max_share`` of the names (and in at least
        ``MIN_GENERIC_NAMES`` of them, so that a small KB's every word is not "generic")?"""
        return self.word_count.get(key, 0) >= MIN_GENERIC_NAMES and self.word_share[key] > max_share

    def key(self, word: str) -> str:
        """``word_key``, remembered: running text repeats its words."""
        found = self._keys.get(word)
        if found is None:
            found = self._keys[word] = word_key(word)
        return found

    def token_keys(self, lower: int, strings: StringStore) -> Optional[Tuple[str, ...]]:
        """A token's content-word keys by its lower-case string hash: ``()`` for a function word or
        punctuation a mention may contain, None for a token outside the vocabulary or any other
        function word (it ends a proposal)."""
        if lower not in self._tokens:
            text = strings[lower]
            if text in NEGATORS and text in INNER_WORDS:
                self._tokens[lower] = (text,)  # "migraine without aura" is not "Migraine with aura"
            elif text in INNER_PUNCT or text in INNER_WORDS:
                self._tokens[lower] = ()
            elif text in STOPWORDS:
                self._tokens[lower] = None
            else:
                keys = tuple(self.key(w) for w in WORD.findall(text))
                self._tokens[lower] = keys if keys and all(k in self.vocab for k in keys) else None
        return self._tokens[lower]

    def keys_of(self, lower: Sequence[int], strings: StringStore) -> List[Optional[Tuple[str, ...]]]:
        """``token_keys`` of each of a doc's tokens (``lower``: their lower-case string hashes), one dict
        look-up each once the doc's new words are worked out: a method call per token cost more than proposing."""
        known = self._tokens
        try:
            return [known[h] for h in lower]
        except KeyError:
            for h in lower:
                if h not in known:
                    self.token_keys(h, strings)
            return [known[h] for h in lower]

    def closed_compound(self, first: int, second: int, strings: StringStore) -> Optional[str]:
        """The key of the word two hyphen-joined words make written as one ("up" + "slanting":
        "upslanting"), where the KB's vocabulary has it and no name writes the two apart ("end stage"
        renal disease); None elsewhere."""
        a, b = strings[first], strings[second]
        key = self.key(a + b)
        return key if key in self.vocab and key not in STOPWORDS and f"{a} {b}" not in self.adjacent else None

    def match(self, keys: FrozenSet[str]) -> Optional[str]:
        """How ``keys`` match a name: ``"exact"`` (same content words), ``"partial"`` (one word fewer), or None.

        (Allowing one word more, "severe scoliosis", was tried on GSC+ dev: it proposes "skin tags
        that develop" and "loss and cleft palate", and mention F fell from 0.63 to 0.27.)"""
        if keys in self.exact:
            return "exact"
        if len(keys) >= 2 and keys in self.partial:
            return "partial"
        return None


@dataclass(frozen=True)
class Proposal:
    start: int
    end: int
    kind: str


class TokenColumns(NamedTuple):
    """What proposing needs of each token, one list per attribute (index i = token i)."""

    lower: List[int]  # the lower-case form's string hash
    keys: List[Optional[Tuple[str, ...]]]  # ``NameIndex.token_keys``: None where a mention cannot continue
    sent_start: List[bool]
    attached: List[bool]  # no whitespace after it ("thrombo-" in "thrombo-embolism")


def token_columns(doc: Doc, index: NameIndex) -> TokenColumns:
    """Read from arrays, not Token objects, and kept as columns, not a tuple per token: both are slow
    to make. A whitespace token (a line break, a second space) has no word: its keys are None, no mention spans it."""
    if not len(doc):
        return TokenColumns([], [], [], [])
    columns = doc.to_array([LOWER, SENT_START, SPACY])
    lower = columns[:, 0].tolist()
    keys, attached = index.keys_of(lower, doc.vocab.strings), (columns[:, 2] == 0).tolist()
    for i in np.flatnonzero(columns[1:-1, 0] == _HYPHEN_ID).tolist():
        i += 1
        if attached[i - 1] and attached[i]:
            closed = index.closed_compound(lower[i - 1], lower[i + 1], doc.vocab.strings)
            if closed is not None:  # "up-slanting" is the KB's "upslanting", "pre-auricular" its "preauricular"
                keys[i - 1] = keys[i + 1] = (closed,)  # a mention may start at the first part and end at the second
                keys[i] = ()
    return TokenColumns(lower, keys, (columns[:, 1] == 1).tolist(), attached)


def modifier_starts(tokens: TokenColumns, start: int, index: NameIndex, max_words: int) -> List[int]:
    """Where a mention starting at ``start`` would start with 1, 2, … ``max_words`` KB modifiers
    before it ("hereditary | breast cancer", "X-linked | adrenoleukodystrophy"), never across a
    sentence start or a function word; a hyphen counts only inside a word."""
    starts: List[int] = []
    i = start - 1
    keyed, attached = tokens.keys, tokens.attached
    while i >= 0 and len(starts) < max_words and not tokens.sent_start[i + 1]:
        keys = keyed[i]
        if keys == () and attached[i] and i > 0 and attached[i - 1] and keyed[i - 1]:
            i -= 1  # the hyphen of "X-linked": look at "X"
            continue
        if not keys or not all(k in index.modifiers for k in keys):
            break
        starts.append(i)
        i -= 1
    return starts


def _words_keys(keyed: Sequence[Optional[Tuple[str, ...]]], start: int, end: int) -> FrozenSet[str]:
    """The content-word keys of tokens ``start`` to ``end``."""
    return frozenset(k for i in range(start, end) for k in keyed[i] or ())


def _is_hyphen_link(tokens: TokenColumns, i: int) -> bool:
    """Does the hyphen at token ``i`` join the words on either side of it ("low-set")?"""
    return tokens.lower[i] == _HYPHEN_ID and tokens.attached[i - 1] and tokens.attached[i] and bool(tokens.keys[i - 1])


def _compound_end(tokens: TokenColumns, start: int, end: int) -> int:
    """Where the hyphenated word that starts at token ``start`` ends ("low-set" in "low-set ears"), within ``end``."""
    i = start + 1
    while i + 1 < end and _is_hyphen_link(tokens, i) and tokens.keys[i + 1]:
        i += 2
    return i


def _compound_start(tokens: TokenColumns, last: int) -> int:
    """Where the hyphenated word that ends at token ``last`` starts ("low-set" in "low-set and ...")."""
    i = last
    while i >= 2 and _is_hyphen_link(tokens, i - 1) and tokens.keys[i]:
        i -= 2
    return i


_CONNECTOR_IDS = frozenset(get_string_id(w) for w in ("and", "or", "and/or", "with"))


def _parallel(keyed: Sequence[Optional[Tuple[str, ...]]], lower: Sequence[int], start: int, end: int) -> bool:
    """Does the first word of tokens ``start`` to ``end`` start a second conjunct after "and"/"or"/"with"
    ("cleft lip with cleft palate"), not end the span ("nausea and vomiting and nausea")?"""
    return any(lower[i - 1] in _CONNECTOR_IDS and keyed[i] == keyed[start] for i in range(start + 2, end - 1))


def _is_quality(index: NameIndex, keys: Optional[Tuple[str, ...]]) -> bool:
    """Is a token one word that precedes another in several KB names ("reduced", "raised", "absent")?"""
    return keys is not None and len(keys) == 1 and keys[0] in index.modifiers


def _starts_phrase(doc: Doc, i: int) -> bool:
    """Does token ``i`` start a noun phrase: first in its sentence, or after punctuation or a stop word
    ("the [liver was enlarged]", "although [plasma renin activity was decreased]"; not "hitch hiker [thumb were absent]")?"""
    if i == 0 or doc[i].is_sent_start:
        return True
    before = doc[i - 1]
    return not before.is_alpha or before.is_stop


def _shared_front(index: NameIndex, keys: Sequence[str], front: int) -> bool:
    """Are ``keys`` a name of two or more words, a coordinating word (after ``front`` of them), and one
    word that takes the place of the name's last word to make another name ("hypopigmentation of skin or
    hair", "abnormality of the hands and feet", "metaphyseal flaring and irregularity")?"""
    if front < 2 or len(keys) != front + 1:
        return False
    first = frozenset(keys[:front])
    return first in index.exact and frozenset(keys[: front - 1]).union(keys[front:]) in index.exact


def _modifies_next(tokens: TokenColumns, i: int) -> bool:
    """Can token ``i`` be a quality of the word after it: a word follows, not a function word ("reduced | the growth")?"""
    return i + 1 < len(tokens.keys) and bool(tokens.keys[i + 1])


def _names_with_synonym(index: NameIndex, keys: FrozenSet[str], quality: str, synonyms: Mapping[str, Collection[str]]) -> bool:
    """Are ``keys`` a KB name's words, two or more, with its ``quality`` word written as a synonym ("reduced
    vibration sense": "decreased vibration sense")?"""
    rest = keys - {quality}
    return bool(rest) and len(rest) < len(keys) and any(s not in rest and rest | {s} in index.exact for s in synonyms.get(quality, ()))


def propose(
    doc: Doc,
    index: NameIndex,
    max_words: int = 8,
    max_generic_share: float = 1.0,
    acronyms: bool = True,
    short_forms: Collection[str] = (),
    max_modifiers: int = 0,
    variants: Optional[VariantMatcher] = None,
    synonyms: Optional[Mapping[str, Collection[str]]] = None,
) -> List[Proposal]:
    """Token n-grams of ``doc`` whose words are in the KB's vocabulary and nearly match a KB name.

    A single word found in more than ``max_generic_share`` of the KB's names ("disease") is not
    proposed alone, nor, without ``acronyms``, an acronym ("VHL": more often a gene than the
    disease; the abbreviations component adds the short forms a text defines), nor an acronym of
    fewer than ``MIN_UNDEFINED_ACRONYM_CHARS`` characters that is not among the ``short_forms`` the
    text introduces in parentheses ("HT"). A coordination whose first conjunct completes the rest into a name
    ("breast and ovarian cancer", "breast/ovarian cancer", "small and low-set ears": a hyphenated word is
    one conjunct; "low-set and posteriorly rotated ears": the conjunct stands for all the head's modifiers)
    is proposed whole, and the linker splits it, as is a name whose last word is coordinated with one that
    makes another name ("hypopigmentation of skin or hair", "muscle wasting and weakness"); commas alone
    coordinate only one-word modifiers that name nothing alone and end no earlier item ("broad, flat nasal
    bridge"; "impaired memory, weight loss" is a list).
    A name with up to ``max_modifiers`` KB modifiers before it is proposed too, as ``"modified"``
    ("hemorrhagic cystitis"): the encoder decides whether the modifier belongs to the mention.
    With ``variants``, an n-gram whose words name a KB name through the word-variant table is
    proposed as ``"variant"`` ("cutaneous abnormalities"). A name stated as a clause, its words before
    "is/are/was/were" and one KB modifier after it, is proposed as ``"predicative"`` ("vibration sense was
    reduced": *Reduced vibration sense*), and the linker searches it reordered. With ``synonyms`` (a
    quality word -> its synonyms, ``qualities.QualityWords.synonyms``), a name's words with its quality
    word written as a synonym are proposed as ``"synonym"`` ("reduced vibration sense": the KB's
    "Decreased vibration sense"; "vibration sense was reduced"), the quality first (or, in a clause, last).

    No proposal starts inside a hyphenated word ("auricular pits" in "pre-auricular pits"); one may end
    before a hyphen, as the first part of a compound is a mention ("breast cancer" in "breast
    cancer-susceptibility genes"). One that is not a coordination holds "and"/"or" only where a KB
    name does: "nasal bridge and low" (in "broad nasal bridge and low-set ears") and "lip or cleft" (in
    "cleft lip or cleft palate") are not proposed; "cleft lip and palate" is. Words match a name's in any
    order, so one that ends on a word ending no KB name ("renal") is proposed only before punctuation, "and"/"or"
    or the end: "carcinoma of the renal" in "carcinoma of the renal pelvis" cuts a noun phrase.
    """
    tokens = token_columns(doc, index)
    strings = doc.vocab.strings
    keyed, sent_start = tokens.keys, tokens.sent_start
    found: List[Proposal] = []
    n = len(doc)
    lower, attached = tokens.lower, tokens.attached
    for start in range(n):
        if not keyed[start] or (start > 0 and attached[start - 1] and lower[start - 1] == _HYPHEN_ID):
            continue  # never "auricular pits" out of "pre-auricular pits", nor "Tooth" out of "Charcot-Marie-Tooth"
        keys: List[str] = []
        coordinated = False
        front = 0  # the words before the first coordinating word; -1 after a second one
        predicate: Optional[int] = None  # the words before "was" in "vibration sense was reduced"
        for end in range(start + 1, min(n, start + 4 * max_words) + 1):
            token_keys = keyed[end - 1]
            if (token_keys is None and predicate is None and keys and not coordinated and lower[end - 1] in _COPULA_IDS
                    and _starts_phrase(doc, start)):
                quality = end + 1 if end + 1 < n and is_adverb(strings[lower[end]]) else end  # "was markedly | elevated"
                if quality < n and _is_quality(index, keyed[quality]):
                    predicate = len(keys)
                    continue
            if predicate is not None and not keys[predicate:] and is_adverb(strings[lower[end - 1]]):
                continue  # the adverb before the quality word
            if token_keys is None or (end > start + 1 and sent_start[end - 1]):
                break
            if not token_keys:
                if strings[lower[end - 1]] in COORDINATING_WORDS:
                    front, coordinated = (-1 if coordinated else len(keys)), True
                continue  # a mention never ends on a function word or inner punctuation
            if not (end - start > 2 and keyed[end - 3] == token_keys and lower[end - 2] == _HYPHEN_ID and attached[end - 3]):
                keys.extend(token_keys)  # the second part of a closed compound ("pre-auricular") is no second word
            if len(keys) > max_words:
                break
            key_set = frozenset(keys)
            if len(key_set) < len(keys) and key_set not in index.repeated and not _parallel(keyed, lower, start, end):
                continue  # a word twice, where no name has it twice: "cells from basal cell naevus"
            kind = index.match(key_set)
            if kind is None and synonyms:
                quality = keys[-1] if predicate is not None else keys[0]  # a clause states it last
                if quality in synonyms and (predicate is not None or _modifies_next(tokens, start)) and \
                        _names_with_synonym(index, key_set, quality, synonyms):
                    kind = "synonym"
            if predicate is not None:  # the quality word after "was": the proposal ends here, a name's words exactly
                if end + 1 < n and lower[end] == _HYPHEN_ID and attached[end - 1] and attached[end] and keyed[end + 1]:
                    continue  # "ears are low | -set"
                if kind in ("exact", "synonym") and not (end < n and keyed[end] and not is_adverb(strings[lower[end]])):
                    # a clause's end or an adverb ("were decreased | especially in the right leg"), not a noun phrase
                    # going on ("thrombocytopenia is heparin-induced | platelet aggregation")
                    found.append(Proposal(start, end, "predicative"))
                break
            if kind is None and variants is not None and variants.match(key_set):
                kind = "variant"
            if kind is None or (coordinated and key_set not in index.coordinated):
                if not (coordinated and _shared_front(index, keys, front)) or (end < n and lower[end] == _OF_ID):
                    continue  # not "renal hypoplasia or malformations | of the kidney": the new word heads its own phrase
                kind = "coordinated"  # "hypopigmentation of skin or hair": the linker splits it
            if end + 1 < n and keyed[end + 1] == token_keys and attached[end - 1] and lower[end] == _HYPHEN_ID:
                continue  # the first part of a word written closed ("angio" of "angio-oedema", token_columns)
            if kind != "variant" and keys[-1] not in index.last_words and end < n and _goes_on(strings[lower[end]]):
                continue  # ends on a word that ends no name, before a word: "carcinoma of the renal | pelvis"
            if len(key_set) == 1 and index.is_generic(keys[0], max_generic_share):
                continue
            if key_set in index.capitals_only:
                text = doc[start:end].text
                if not (acronyms and text.isupper()):
                    continue
                if len(text) < MIN_UNDEFINED_ACRONYM_CHARS and text not in short_forms:
                    continue
            found.append(Proposal(start, end, kind))
            if kind == "exact":
                found.extend(Proposal(s, end, "modified") for s in modifier_starts(tokens, start, index, max_modifiers))
            # "breast and/or | ovarian cancer": does "breast" + "cancer" name something too? And
            # "branchial, otic and | renal anomalies": each earlier conjunct of a list, while they do
            if end - start < 2 or start == 0 or lower[start - 1] not in COORDINATOR_IDS:
                continue  # no list before it: most proposals
            head = key_set - _words_keys(keyed, start, _compound_end(tokens, start, end))
            shared_head: Optional[bool] = None  # do the shared words hold the head of a name of key_set?
            adjectives = True  # is each earlier conjunct one word that names nothing alone ("broad, flat nasal bridge")?
            first = start
            while head:
                before = first - 1
                while before >= 0 and lower[before] in COORDINATOR_IDS:
                    before -= 1
                if not (0 <= before < first - 1 and keyed[before]):
                    break
                last, before = before, _compound_start(tokens, before)  # a hyphenated conjunct is one word: "low-set"
                if before > 0 and ((attached[before - 1] and lower[before - 1] == _HYPHEN_ID) or (first < start and keyed[before - 1])):
                    break  # not "Chotzen" of "Saethre-Chotzen"; a list's earlier item stands alone (not "cancer" of "breast cancer and …")
                own = _words_keys(keyed, before, last + 1)
                if own <= head or (before < last and own in index.exact):
                    # the end of a list's item ("5th finger clinodactyly and fifth finger clinodactyly"), or a
                    # hyphenated name ("ataxia-telangiectasia and Li-Fraumeni syndrome"): no modifier of the shared words
                    break
                conjunct = head | own
                # the conjunct takes the place of the word it stands beside: a modifier where the shared words
                # hold the head ("breast and ovarian cancer": "breast cancer"), else the head ("aplasia or
                # hypoplasia of the thymus": "aplasia of the thymus"); "hearing loss or blurred vision" holds no "vision loss"
                if shared_head is None:  # a partial or variant match names no head: its shared words are taken to hold it
                    shared_head = kind != "exact" or index.has_head(key_set, head)
                want = head if shared_head else own
                if not index.has_head(conjunct, want) and not (variants is not None and variants.match(conjunct)):
                    # or in the place of all the head's modifiers: "low-set [ears] and posteriorly rotated ears"
                    heads = frozenset(w for w in head if index.has_head(key_set, (w,))) if shared_head else frozenset()
                    if not (heads and len(heads) < len(head) and index.has_head(own | heads, heads)):
                        break
                first = before
                adjectives = (adjectives and shared_head and _compound_end(tokens, before, last + 1) == last + 1
                              and own not in index.exact and not (before > 0 and keyed[before - 1]))  # not "[impaired] memory, weight loss"
                if adjectives or any(lower[i] in CONJUNCTION_IDS for i in range(before, end)):
                    # commas alone join list items as often as adjectives ("impaired memory, weight loss"): only
                    # one-word modifiers that name nothing alone make a comma coordination ("small, low-set ears")
                    found.append(Proposal(before, end, "coordinated"))
    return found
