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

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from spacy.attrs import IS_SPACE, LOWER, SENT_START
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import filter_spans, minibatch

RESOLVE_MODES = ("longest", "best", "all")
_WORD = re.compile(r"[^\W_]+")
# Function words: allowed inside a mention ("abnormality of the hand"), never at its edges, and not
# counted when names are compared.
STOPWORDS = frozenset(
    "a an and are as at be been but by during for from has have in into is it its no nor not of on or "
    "other such than that the their these this those to was were which with within without".split()
)
# Punctuation that may sit inside a mention ("tonic-clonic", "and/or", "Crohn's"); any other
# punctuation token ends a candidate.
INNER_PUNCT = frozenset({"-", "/", "'", "'s"})
# A word is generic ("disease") only if it is in at least this many names (and a large share of them).
MIN_GENERIC_NAMES = 20
# Between the conjuncts of a coordinated mention ("breast and/or ovarian cancer").
COORDINATORS = frozenset({"and", "or", "and/or", "/", ","})
_BRITISH = (("aemia", "emia"), ("haem", "hem"), ("paed", "ped"), ("oedem", "edem"), ("oesoph", "esoph"),
            ("oestr", "estr"), ("foet", "fet"), ("coel", "cel"), ("diarrhoea", "diarrhea"), ("ischaem", "ischem"),
            ("leukaem", "leukem"), ("gynaec", "gynec"), ("orthopaed", "orthoped"), ("faec", "fec"))


def word_key(word: str) -> str:
    """A lower-cased word reduced to the form its variants share: singular, American spelling.

    Applied to KB names and text alike, so the rules need only be consistent, not linguistically
    perfect ("tumours" → "tumor", "vertebrae" → "vertebra", "anaemia" → "anemia", "localised" →
    "localize").
    """
    w = word.lower()
    if len(w) <= 3 or w.isdigit():
        return w
    for british, american in _BRITISH:
        if british in w:
            w = w.replace(british, american)
    if w.endswith("ae") and len(w) > 5:
        w = w[:-1]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("ches", "shes", "xes", "sses")):
        w = w[:-2]
    elif w.endswith("ses") and len(w) > 5:
        w = w[:-2] + "is"  # metastases → metastasis
    elif w.endswith("s") and not w.endswith(("ss", "us", "is", "ys")):
        w = w[:-1]
    if w.endswith("our") and len(w) > 5:
        w = w[:-3] + "or"  # tumour, behaviour
    if w.endswith(("ised", "ising", "isation")):
        w = re.sub(r"is(ed|ing|ation)$", r"iz\1", w)
    return w


def content_keys(words: Iterable[str]) -> FrozenSet[str]:
    """The keys of the words that are not function words."""
    return frozenset(word_key(w) for w in words if w.lower() not in STOPWORDS)


class NameIndex:
    """The KB's vocabulary and its names as sets of content-word keys.

    A proposal's content words must be some name's, in any order ("type C brachydactyly"), or,
    for names of three to six words, all but one of them. Names written only in capitals
    ("ALL", "CAN") match only capitals in the text; names without a letter ("1") are left out;
    ``word_share`` says in what share of the names a word occurs ("disease": many), so that
    single generic words can be held back.
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
        n_names = 0
        for name in names:
            words = _WORD.findall(name)
            keys = frozenset(self.key(w) for w in words if w.lower() not in STOPWORDS)
            if not keys or not any(k.isalpha() for k in keys):
                continue
            n_names += 1
            for k in keys:
                counts[k] = counts.get(k, 0) + 1
            (self.capitals_only if name.isupper() else written_lower).add(keys)
            self.vocab.update(self.key(w) for w in words)
            self.exact.add(keys)
            if 3 <= len(keys) <= 6:
                self.partial.update(keys - {k} for k in keys)
        self.capitals_only -= written_lower
        self.word_count = counts
        self.word_share = {k: c / n_names for k, c in counts.items()}

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
        inner punctuation, None for a token outside the vocabulary (it ends a proposal)."""
        if lower not in self._tokens:
            text = strings[lower]
            if text in INNER_PUNCT or text in STOPWORDS:
                self._tokens[lower] = ()
            else:
                keys = tuple(self.key(w) for w in _WORD.findall(text))
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


def propose(
    doc: Doc, index: NameIndex, max_words: int = 8, max_generic_share: float = 1.0, acronyms: bool = True
) -> List[Proposal]:
    """Token n-grams of ``doc`` whose words are in the KB's vocabulary and nearly match a KB name.

    A single word found in more than ``max_generic_share`` of the KB's names ("disease") is not
    proposed alone, nor, without ``acronyms``, a name written only in capitals ("VHL": more often
    a gene than the disease; the abbreviations component adds the short forms a text defines). A coordination whose first conjunct completes the rest into a name
    ("breast and ovarian cancer", "breast/ovarian cancer") is proposed whole; the linker splits it.
    """
    # Per token: the keys of its content words (empty for a function word or inner punctuation),
    # or None where a mention cannot continue. Read from arrays: Token objects are slow to make.
    rows = doc.to_array([LOWER, IS_SPACE, SENT_START]).tolist() if len(doc) else []
    strings = doc.vocab.strings
    keyed = [None if is_space else index.token_keys(lower, strings) for lower, is_space, _ in rows]
    sent_start = [flag == 1 for _, _, flag in rows]
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
            if key_set in index.capitals_only and not (acronyms and doc[start:end].text.isupper()):
                continue
            found.append(Proposal(start, end, kind))
            before = start - 1
            while before >= 0 and strings[rows[before][0]] in COORDINATORS:
                before -= 1
            if end - start >= 2 and 0 <= before < start - 1 and keyed[before]:
                # "breast and/or | ovarian cancer": does "breast" + "cancer" name something too?
                head = key_set - frozenset(keyed[start])
                if head and index.match(head | frozenset(keyed[before])) == "exact":  # type: ignore[arg-type]
                    found.append(Proposal(before, end, "exact"))
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
        "set_ents": True,
        "spans_key": None,
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
    set_ents: bool,
    spans_key: Optional[str],
) -> "SpanFinder":
    """``linker``: the name of the ``sapbert_linker`` whose KB, encoder and cache score the proposals."""
    return SpanFinder(
        nlp, name, linker=linker, label=label, threshold=threshold, partial_threshold=partial_threshold,
        resolve=resolve, max_words=max_words, max_generic_share=max_generic_share, acronyms=acronyms,
        set_ents=set_ents,
        spans_key=spans_key,
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
        set_ents: bool = True,
        spans_key: Optional[str] = None,
    ):
        if resolve not in RESOLVE_MODES:
            raise ValueError(f"resolve must be one of {RESOLVE_MODES}, got {resolve!r}")
        if resolve == "all" and not spans_key:
            raise ValueError("resolve='all' keeps nested spans in a span group: set spans_key")
        if not set_ents and not spans_key:
            raise ValueError("the span finder writes nothing: set set_ents or spans_key")
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
        self.set_ents = set_ents
        self.spans_key = spans_key
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

    def predict(self, docs: Sequence[Doc]) -> List[List[Tuple[Span, float]]]:
        """Per doc, the proposals the encoder accepts, with their scores: at least ``threshold``
        for those whose content words are a KB name's, ``partial_threshold`` for those missing one.

        The batch's proposals are searched together through the linker's cache, so the linker
        later finds the kept ones there. With ``resolve="longest"`` they are searched longest
        first, and a proposal overlapping an accepted longer one (or, when only ``doc.ents`` is
        written, an entity an earlier detector set) is never searched: it could not be kept.
        """
        index = self.name_index()
        proposals = [propose(doc, index, self.max_words, self.max_generic_share, self.acronyms) for doc in docs]
        minimum = {"exact": self.threshold, "partial": self.partial_threshold}
        if self.resolve != "longest":
            scores = self._scores({doc[p.start : p.end].text for doc, props in zip(docs, proposals) for p in props})
            return [
                [(doc[p.start : p.end], scores[doc[p.start : p.end].text]) for p in props
                 if scores[doc[p.start : p.end].text] >= minimum[p.kind]]
                for doc, props in zip(docs, proposals)
            ]
        keep_ents = self.set_ents and not self.spans_key
        taken = [{i for e in doc.ents for i in range(e.start, e.end)} if keep_ents else set() for doc in docs]
        found: List[List[Tuple[Span, float]]] = [[] for _ in docs]
        for length in sorted({p.end - p.start for props in proposals for p in props}, reverse=True):
            todo = [
                (d, p) for d, props in enumerate(proposals) for p in props
                if p.end - p.start == length and not taken[d].intersection(range(p.start, p.end))
            ]
            scores = self._scores({docs[d][p.start : p.end].text for d, p in todo})
            accepted = [(d, p, scores[docs[d][p.start : p.end].text]) for d, p in todo]
            for d, p, score in sorted(accepted, key=lambda x: (-x[2], x[0], x[1].start)):
                if score >= minimum[p.kind] and not taken[d].intersection(range(p.start, p.end)):
                    taken[d].update(range(p.start, p.end))
                    found[d].append((docs[d][p.start : p.end], score))
        return found

    def _scores(self, texts: Set[str]) -> Dict[str, float]:
        """The best KB match score of each text, through the linker's batched, cached search."""
        ordered = sorted(texts)
        if not ordered:
            return {}
        return {t: (c[0].score if c else float("-inf")) for t, c in zip(ordered, self._linker().link_strings(ordered))}

    def set_annotations(self, docs: Sequence[Doc], found: List[List[Tuple[Span, float]]]) -> None:
        for doc, scored in zip(docs, found):
            scored = [(Span(doc, s.start, s.end, label=self.label), score) for s, score in scored]
            if self.spans_key:
                spans = [s for s, _ in scored] if self.resolve == "all" else resolve_overlaps(scored, self.resolve)
                doc.spans[self.spans_key] = SpanGroup(doc, name=self.spans_key, spans=spans)
            if self.set_ents:
                mode = "longest" if self.resolve == "all" else self.resolve
                existing = list(doc.ents)
                taken = {i for e in existing for i in range(e.start, e.end)}
                new = [s for s in resolve_overlaps(scored, mode) if not any(i in taken for i in range(s.start, s.end))]
                doc.ents = filter_spans(existing + new)
