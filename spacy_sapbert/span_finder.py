"""The ``sapbert_span_finder`` component: mention detection for any KB, no annotated text needed.

An exact-name ruler finds only the KB's names as written; running text says "tumors", "type C
brachydactyly" and "episodes of abdominal pain". The span finder proposes token n-grams whose words
belong to the KB's vocabulary (compared through ``word_key``: case, plurals, British spellings),
keeps those whose content words nearly match some KB name's (``NameIndex``), and lets the encoder
decide: every proposal is searched through the linker's own batched, cached KB search, and those
scoring at least ``threshold`` become mentions. Overlaps are resolved by length or score, or all
nested spans are kept in a span group.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

from spacy.attrs import IS_SPACE, LOWER, SENT_START, SPACY
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import filter_spans, minibatch

from .abbreviations import abbreviation_expander, find_abbreviations, introduced_short_forms
from .normalize import STOPWORDS, WORD, american_spelling, word_key

RESOLVE_MODES = ("longest", "best", "all")
# Which spans inside a longer accepted one the span group keeps with ``resolve="all"``: every one;
# only those inside a coordination ("plantar pits" in "palmar and plantar pits"), the nested
# mentions that phenotype corpora annotate most consistently; or those and the KB names that end a
# longer mention, its head ("colitis" in "ulcerative colitis") (see benchmarks/hpo_default.py).
NESTED_MODES = ("all", "coordinations", "heads")
# The function words a mention may contain ("abnormality of the hand", "breast and/or ovarian
# cancer"); any other ("is", "was", "not", "which") ends a candidate: "cancer is the second" is no mention.
INNER_WORDS = frozenset("a an and at by during for from in into of on or the to with within without".split())
# Where the words that modify a name's head begin ("abnormality | of the hand").
PREPOSITIONS = INNER_WORDS - {"a", "an", "and", "or", "the"}
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


def is_acronym(name: str) -> bool:
    """Is ``name`` written like an acronym: in capitals, every word short or with a digit ("VHL",
    "G6PD", "ALL")? OMIM writes whole names in capitals ("ANIRIDIA"): those are words, not acronyms."""
    return name.isupper() and all(len(w) <= 5 or any(c.isdigit() for c in w) for w in WORD.findall(name))


def name_head(name: str) -> Optional[str]:
    """The word a name is about: the last content word before the first comma or preposition
    ("glucose-6-phosphate dehydrogenase *deficiency*", MeSH's inverted "*Hypertrophy*, Left
    Ventricular", HPO's "*Abnormality* of the hand")."""
    words = []
    for w in WORD.findall(name.split(",")[0]):
        if w.lower() in PREPOSITIONS and words:
            break
        if w.lower() not in STOPWORDS:
            words.append(w)
    return word_key(words[-1]) if words else None


class NameIndex:
    """The KB's vocabulary and its names as sets of content-word keys.

    A proposal's content words must be some name's, in any order ("type C brachydactyly"), or,
    for names of three to six words, all but one of them, never the head ("optic nerve" is not
    "optic nerve diseases"). Acronyms ("ALL", "CAN") and names in capitals whose words the KB
    mostly writes in capitals ("INCLUDED") match only capitals in the text; names
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
        written_lower: Set[FrozenSet[str]] = set()
        counts: Dict[str, int] = {}
        before_another: Dict[str, int] = {}
        in_capitals: List[FrozenSet[str]] = []
        case_counts: Dict[str, List[int]] = {}  # word → [names in capitals, other names] it is in
        n_names = 0
        for name in names:
            words = WORD.findall(name)
            content = [self.key(w) for w in words if w.lower() not in STOPWORDS]
            keys = frozenset(content)
            if not keys or not any(k.isalpha() for k in keys):
                continue
            n_names += 1
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
            self.exact.add(keys)
            if 3 <= len(keys) <= 6:
                head = name_head(name)
                self.partial.update(keys - {k} for k in keys if k != head)
        # A name in capitals that is no acronym ("ANIRIDIA") holds words the KB mostly writes in lower
        # case ("Congenital aniridia"); words it mostly writes in capitals ("INCLUDED") are OMIM's notation.
        self.capitals_only.update(keys for keys in in_capitals if any(case_counts[k][0] > case_counts[k][1] for k in keys))
        self.capitals_only -= written_lower
        self.word_count = counts
        self.word_share = {k: c / n_names for k, c in counts.items()}
        self.modifiers = frozenset(k for k, c in before_another.items() if c >= MIN_MODIFIER_NAMES and k.isalpha())

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

    def token_keys(self, lower: int, strings) -> Optional[Tuple[str, ...]]:
        """A token's content-word keys by its lower-case string hash: ``()`` for a function word or
        punctuation a mention may contain, None for a token outside the vocabulary or any other
        function word (it ends a proposal)."""
        if lower not in self._tokens:
            text = strings[lower]
            if text in INNER_PUNCT or text in INNER_WORDS:
                self._tokens[lower] = ()
            elif text in STOPWORDS:
                self._tokens[lower] = None
            else:
                keys = tuple(self.key(w) for w in WORD.findall(text))
                self._tokens[lower] = keys if keys and all(k in self.vocab for k in keys) else None
        return self._tokens[lower]

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
    """Read from arrays, not Token objects, and kept as columns, not a tuple per token: both are slow to make."""
    if not len(doc):
        return TokenColumns([], [], [], [])
    lower, is_space, flag, space = doc.to_array([LOWER, IS_SPACE, SENT_START, SPACY]).T.tolist()
    strings = doc.vocab.strings
    return TokenColumns(lower, [None if blank else index.token_keys(h, strings) for h, blank in zip(lower, is_space)],
                        [f == 1 for f in flag], [not sp for sp in space])


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


def propose(
    doc: Doc,
    index: NameIndex,
    max_words: int = 8,
    max_generic_share: float = 1.0,
    acronyms: bool = True,
    short_forms: Collection[str] = (),
    max_modifiers: int = 0,
) -> List[Proposal]:
    """Token n-grams of ``doc`` whose words are in the KB's vocabulary and nearly match a KB name.

    A single word found in more than ``max_generic_share`` of the KB's names ("disease") is not
    proposed alone, nor, without ``acronyms``, an acronym ("VHL": more often a gene than the
    disease; the abbreviations component adds the short forms a text defines), nor an acronym of
    fewer than ``MIN_UNDEFINED_ACRONYM_CHARS`` characters that is not among the ``short_forms`` the
    text introduces in parentheses ("HT"). A coordination whose first conjunct completes the rest into a name
    ("breast and ovarian cancer", "breast/ovarian cancer") is proposed whole; the linker splits it.
    A name with up to ``max_modifiers`` KB modifiers before it is proposed too, as ``"modified"``
    ("hemorrhagic cystitis"): the encoder decides whether the modifier belongs to the mention.
    """
    tokens = token_columns(doc, index)
    strings = doc.vocab.strings
    keyed, sent_start = tokens.keys, tokens.sent_start
    found: List[Proposal] = []
    n = len(doc)
    for start in range(n):
        if not keyed[start]:
            continue
        keys: List[str] = []
        for end in range(start + 1, min(n, start + 4 * max_words) + 1):
            token_keys = keyed[end - 1]
            if token_keys is None or (end > start + 1 and sent_start[end - 1]):
                break
            if not token_keys:
                continue  # a mention never ends on a function word or inner punctuation
            keys.extend(token_keys)
            if len(keys) > max_words:
                break
            key_set = frozenset(keys)
            kind = index.match(key_set)
            if kind is None:
                continue
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
            before = start - 1
            while before >= 0 and strings[tokens.lower[before]] in COORDINATORS:
                before -= 1
            if end - start >= 2 and 0 <= before < start - 1 and keyed[before]:
                # "breast and/or | ovarian cancer": does "breast" + "cancer" name something too?
                head = key_set - frozenset(keyed[start])
                if head and index.match(head | frozenset(keyed[before])) == "exact":  # type: ignore[arg-type]
                    found.append(Proposal(before, end, "coordinated"))
    return found


def resolve_overlaps(spans: Sequence[Tuple[Span, float]], mode: str) -> List[Span]:
    """Non-overlapping spans: the longest first (``longest``/``all``) or the best-scoring first (``best``)."""
    if mode == "best":
        ranked = sorted(spans, key=lambda s: (-s[1], -(s[0].end - s[0].start), s[0].start))
    else:
        ranked = sorted(spans, key=lambda s: (-(s[0].end - s[0].start), -s[1], s[0].start))
    taken: Set[int] = set()
    kept: List[Span] = []
    for span, _ in ranked:
        if not any(i in taken for i in range(span.start, span.end)):
            kept.append(span)
            taken.update(range(span.start, span.end))
    return sorted(kept, key=lambda s: s.start)


@Language.factory(
    "sapbert_span_finder",
    assigns=["doc.ents", "doc.spans"],
    default_config={
        "linker": "sapbert_linker",
        "label": "CONCEPT",
        "threshold": 0.95,
        "partial_threshold": 0.98,
        "resolve": "longest",
        "max_words": 8,
        "max_generic_share": 0.03,
        "acronyms": True,
        "abbreviations": True,
        "max_modifiers": 0,
        "modifier_threshold": 0.95,
        "set_ents": True,
        "spans_key": None,
        "nested": "all",
    },
)
def make_span_finder(
    nlp: Language,
    name: str,
    linker: str,
    label: str,
    threshold: float,
    partial_threshold: float,
    resolve: str,
    max_words: int,
    max_generic_share: float,
    acronyms: bool,
    abbreviations: bool,
    max_modifiers: int,
    modifier_threshold: float,
    set_ents: bool,
    spans_key: Optional[str],
    nested: str,
) -> "SpanFinder":
    """``linker``: the name of the ``sapbert_linker`` whose KB, encoder and cache score the proposals.
    ``abbreviations``: score a short form the text defines through its long form, as the linker
    links it. ``max_modifiers``: also propose a name with up to this many KB modifiers before it
    ("hemorrhagic cystitis"), kept at ``modifier_threshold``. ``resolve``: ``longest`` or ``best``
    decide between overlapping spans; ``all`` writes the non-overlapping longest to ``doc.ents`` and
    keeps nested spans too in ``doc.spans[spans_key]`` (``nested``: every nested span, only those
    inside a coordination, or those and the KB names that end a longer span), for a linker with the
    same ``spans_key`` to link."""
    return SpanFinder(
        nlp, name, linker=linker, label=label, threshold=threshold, partial_threshold=partial_threshold,
        resolve=resolve, max_words=max_words, max_generic_share=max_generic_share, acronyms=acronyms,
        abbreviations=abbreviations, max_modifiers=max_modifiers, modifier_threshold=modifier_threshold,
        set_ents=set_ents, spans_key=spans_key, nested=nested,
    )


class SpanFinder:
    """Proposes KB-vocabulary n-grams and keeps those the encoder matches to a KB name."""

    def __init__(
        self,
        nlp: Language,
        name: str = "sapbert_span_finder",
        *,
        linker: str = "sapbert_linker",
        label: str = "CONCEPT",
        threshold: float = 0.95,
        partial_threshold: float = 0.98,
        resolve: str = "longest",
        max_words: int = 8,
        max_generic_share: float = 0.03,
        acronyms: bool = True,
        abbreviations: bool = True,
        max_modifiers: int = 0,
        modifier_threshold: float = 0.95,
        set_ents: bool = True,
        spans_key: Optional[str] = None,
        nested: str = "all",
    ):
        if resolve not in RESOLVE_MODES:
            raise ValueError(f"resolve must be one of {RESOLVE_MODES}, got {resolve!r}")
        if resolve == "all" and not spans_key:
            raise ValueError("resolve='all' keeps nested spans in a span group: set spans_key")
        if not set_ents and not spans_key:
            raise ValueError("the span finder writes nothing: set set_ents or spans_key")
        if nested not in NESTED_MODES:
            raise ValueError(f"nested must be one of {NESTED_MODES}, got {nested!r}")
        self.nlp = nlp
        self.name = name
        self.linker_name = linker
        self.label = label
        self.threshold = threshold
        self.partial_threshold = partial_threshold
        self.resolve = resolve
        self.max_words = max_words
        self.max_generic_share = max_generic_share
        self.acronyms = acronyms
        self.abbreviations = abbreviations
        self.max_modifiers = max_modifiers
        self.modifier_threshold = modifier_threshold
        self.set_ents = set_ents
        self.spans_key = spans_key
        self.nested = nested
        self._index: Optional[NameIndex] = None
        self._index_kb: Optional[object] = None  # the KB object the index was built from

    # ------------------------------------------------------------------ the linker it shares
    def _linker(self):
        from .linker import SapBertLinker

        if self.linker_name not in self.nlp.pipe_names:
            raise ValueError(
                f"{self.name} scores its proposals with the '{self.linker_name}' component, which this pipeline "
                f"lacks (pipes: {self.nlp.pipe_names}); add a sapbert_linker or set the span finder's 'linker'"
            )
        linker = self.nlp.get_pipe(self.linker_name)
        if not isinstance(linker, SapBertLinker):
            raise ValueError(f"'{self.linker_name}' is a {type(linker).__name__}, not a sapbert_linker")
        return linker

    def name_index(self) -> NameIndex:
        """The vocabulary of the linker's KB, built once per KB (a second or two for 100k names)."""
        linker = self._linker()
        linker._ensure_ready()
        kb = linker.linking_kb.kb  # compared by identity: an in-memory KB's fingerprint hashes every name
        if self._index is None or self._index_kb is not kb:
            self._index = NameIndex(linker.linking_kb.kb.display_names)
            self._index_kb = kb
        return self._index

    def initialize(self, get_examples=None, *, nlp: Optional[Language] = None) -> None:
        self.name_index()

    # ------------------------------------------------------------------ detection
    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc])))

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    def proposals(self, doc: Doc, text: Optional[str] = None) -> List[Proposal]:
        """``propose`` with this component's settings (``text``: ``doc.text``, which spaCy joins anew at each call)."""
        return propose(doc, self.name_index(), self.max_words, self.max_generic_share, self.acronyms,
                       introduced_short_forms(doc.text if text is None else text), self.max_modifiers)

    def predict(self, docs: Sequence[Doc]) -> List[List[Tuple[Span, float]]]:
        """Per doc, the proposals the encoder accepts, with their scores: at least ``threshold``
        for those whose content words are a KB name's, ``partial_threshold`` for those missing one.
        A proposal is searched as the linker will search it: with the short forms the text defines
        replaced by their long forms, so that "GALT", defined as "galactose-1-phosphate
        uridyltransferase (GALT)", scores as the enzyme it names; a British spelling scores as
        well as its American one ("tumours").

        The batch's proposals are searched together through the linker's cache, so the linker
        later finds the kept ones there. With ``resolve="longest"`` they are searched longest
        first, and a proposal overlapping an accepted longer one (or, when only ``doc.ents`` is
        written, an entity an earlier detector set) is never searched: it could not be kept.
        """
        texts = [doc.text for doc in docs]
        expanders = [abbreviation_expander(find_abbreviations(text) if self.abbreviations else {}) for text in texts]
        proposals = [self.proposals(doc, text) for doc, text in zip(docs, texts)]
        minimum = {"exact": self.threshold, "coordinated": self.threshold, "partial": self.partial_threshold,
                   "modified": self.modifier_threshold}
        linker = self._linker()

        asked: Dict[Tuple[int, Proposal], List[str]] = {}

        def queries(d: int, p: Proposal) -> List[str]:
            """The proposal's search string, then for a coordination its parts, as the linker
            searches them, or else its American spelling where it differs ("tumours")."""
            if (d, p) not in asked:
                text = expanders[d](docs[d][p.start : p.end].text)
                if p.kind == "coordinated":
                    asked[d, p] = linker.search_strings(text)
                else:
                    us = american_spelling(text)
                    asked[d, p] = [text, us] if us != text.lower() else [text]
            return asked[d, p]

        def scored(d: int, p: Proposal, scores: Dict[str, float]) -> float:
            """The better spelling's score; for a coordination, the whole's, or its weakest part's
            where every part matches better (the linker then keeps the parts)."""
            whole, *others = queries(d, p)
            if p.kind != "coordinated" or not others:
                return max(scores[q] for q in [whole, *others])
            return max(scores[whole], min(scores[q] for q in others))

        if self.resolve != "longest":
            scores = self._scores({q for d, props in enumerate(proposals) for p in props for q in queries(d, p)})
            return [
                [(docs[d][p.start : p.end], score) for p in props if (score := scored(d, p, scores)) >= minimum[p.kind]]
                for d, props in enumerate(proposals)
            ]
        keep_ents = self.set_ents and not self.spans_key
        taken = [{i for e in doc.ents for i in range(e.start, e.end)} if keep_ents else set() for doc in docs]
        found: List[List[Tuple[Span, float]]] = [[] for _ in docs]
        for length in sorted({p.end - p.start for props in proposals for p in props}, reverse=True):
            todo = [
                (d, p) for d, props in enumerate(proposals) for p in props
                if p.end - p.start == length and not taken[d].intersection(range(p.start, p.end))
            ]
            scores = self._scores({q for d, p in todo for q in queries(d, p)})
            accepted = [(d, p, scored(d, p, scores)) for d, p in todo]
            for d, p, score in sorted(accepted, key=lambda x: (-x[2], x[0], x[1].start)):
                if score >= minimum[p.kind] and not taken[d].intersection(range(p.start, p.end)):
                    taken[d].update(range(p.start, p.end))
                    found[d].append((docs[d][p.start : p.end], score))
        return found

    def _scores(self, texts: Set[str]) -> Dict[str, float]:
        """The best KB match score of each text, through the linker's batched, cached search
        (``SapBertLinker.top_scores``: a KB name's is 1.0, known without searching)."""
        ordered = sorted(texts)
        if not ordered:
            return {}
        return dict(zip(ordered, self._linker().top_scores(ordered)))

    def _nested(self, scored: Sequence[Tuple[Span, float]], ents: Sequence[Span]) -> List[Span]:
        """The accepted spans of the span group of ``resolve="all"``: all of them, or the ``ents``
        and the spans inside a longer one only where each such one is a coordination
        (``nested="coordinations"``) or, with ``nested="heads"``, also where the inner span is a KB
        name (score 1.0) that ends the longer one and starts a word."""
        ordered = sorted(scored, key=lambda x: (x[0].start, -len(x[0])))
        spans = [s for s, _ in ordered]
        if self.nested == "all":
            return spans
        chosen = {(e.start, e.end) for e in ents}

        def coordination(span: Span) -> bool:
            return any(t.lower_ in COORDINATORS for t in span[1:-1])

        def keeps(outer: Span, inner: Span, score: float) -> bool:
            # a head ends the longer span and starts a word ("clonic seizure" in "tonic-clonic
            # seizure" is no mention); it begins after the longer span's first token, so one precedes it
            head = score >= 1.0 and inner.end == outer.end and bool(inner.doc[inner.start - 1].whitespace_)
            return coordination(outer) or (self.nested == "heads" and head)

        return [s for s, score in ordered if (s.start, s.end) in chosen or all(
            keeps(o, s, score) for o in spans if o is not s and o.start <= s.start and s.end <= o.end and len(o) > len(s))]

    def set_annotations(self, docs: Sequence[Doc], found: List[List[Tuple[Span, float]]]) -> None:
        for doc, scored in zip(docs, found):
            scored = [(Span(doc, s.start, s.end, label=self.label), score) for s, score in scored]
            existing = list(doc.ents)
            taken = {i for e in existing for i in range(e.start, e.end)}
            mode = "longest" if self.resolve == "all" else self.resolve
            new = [s for s in resolve_overlaps(scored, mode) if not any(i in taken for i in range(s.start, s.end))]
            if self.spans_key:
                if self.resolve == "all":  # the group holds every entity too (an earlier detector's included)
                    spans = sorted(existing + self._nested(scored, new), key=lambda s: (s.start, -len(s)))
                else:
                    spans = resolve_overlaps(scored, self.resolve)
                doc.spans[self.spans_key] = SpanGroup(doc, name=self.spans_key, spans=spans)
            if self.set_ents:
                doc.ents = filter_spans(existing + new)
