"""The ``sapbert_span_finder`` component: mention detection for any KB, no annotated text needed.

An exact-name ruler finds only the KB's names as written; running text says "tumors", "type C
brachydactyly" and "episodes of abdominal pain". The span finder proposes token n-grams whose words
belong to the KB's vocabulary (compared through ``word_key``: case, plurals, British spellings),
keeps those whose content words nearly match some KB name's (``span_proposals.py``), and lets the
encoder decide: every proposal is searched through the linker's own batched, cached KB search
(``SapBertLinker.top_scores``), and those scoring at least ``min_exact_score``
(``min_partial_score`` for a name missing a word, ``min_modified_score`` for one with KB
modifiers before it) become mentions. Overlaps are resolved by length or score, or all nested
spans are kept in a span group.
"""
from __future__ import annotations

import bisect
import itertools
import warnings
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from spacy.attrs import IDX, LENGTH, LOWER
from spacy.language import Language
from spacy.scorer import Scorer, get_ner_prf
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example
from spacy.util import filter_spans, registry

from .abbreviations import abbreviation_expander, find_abbreviations, introduced_short_forms
from .config_only import ConfigOnlyPipe
from .linker_settings import config_defaults, settings_signature
from .overlap import pipe_predicted
from .scoring import ENTS_SCORE_WEIGHTS
from .span_proposals import COORDINATOR_IDS, NameIndex, Proposal, propose
from .variant_proposals import VariantMatcher, variant_matcher

RESOLVE_MODES = ("longest", "best", "all")
ProposalTuple = Tuple[int, int, str]  # a ``Proposal``'s start, end and kind
# Which spans inside a longer accepted one the span group keeps with ``resolve="all"``: every one;
# only those inside a coordination ("plantar pits" in "palmar and plantar pits"), the nested
# mentions that phenotype corpora annotate most consistently; or those and the KB names that end a
# longer mention, its head ("colitis" in "ulcerative colitis") (see benchmarks/hpo_default.py).
NESTED_MODES = ("all", "coordinations", "heads")


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


def contained_in_longer(spans: Sequence[Tuple[int, int]]) -> Set[Tuple[int, int]]:
    """The (start, end) spans that lie inside a longer one of ``spans``, in one sorted pass."""
    inside: Set[Tuple[int, int]] = set()
    furthest = -1  # the furthest end of the spans starting before the current start
    for start, group in itertools.groupby(sorted(set(spans)), key=lambda span: span[0]):
        ends = [end for _, end in group]
        inside.update((start, end) for end in ends if end <= furthest or end < ends[-1])
        furthest = max(furthest, ends[-1])
    return inside


def char_bounds(doc: Doc) -> Tuple[List[int], List[int]]:
    """Each token's first character offset and the offset after its last, as two flat lists. Not a
    list per token: a batch's ~30k small lists live through the encoder's calls, and the garbage
    collector's full passes over them cost more than proposing did."""
    if not len(doc):
        return [], []
    starts, lengths = doc.to_array([IDX, LENGTH]).T
    return starts.tolist(), (starts + lengths).tolist()


# The span finder's cut-offs were once all called thresholds (as is the linker's NIL cut): the old
# config keys still load, with a FutureWarning that names the new one.
RENAMED_SETTINGS = {"threshold": "min_exact_score", "partial_threshold": "min_partial_score", "modifier_threshold": "min_modified_score"}


def score_found_spans(examples: Iterable[Example], *, set_ents: bool = True, spans_key: Optional[str] = None,
                      **kwargs: Any) -> Dict[str, Any]:
    """spaCy's scores of the spans the span finder sets: ``ents_p/r/f`` (``get_ner_prf``) where it
    writes ``doc.ents``, ``spans_<key>_p/r/f`` (``Scorer.score_spans``, overlaps allowed) for its span group."""
    examples = list(examples)
    scores: Dict[str, Any] = dict(get_ner_prf(examples)) if set_ents else {}
    if spans_key:
        scores.update(Scorer.score_spans(
            examples, f"spans_{spans_key}", getter=lambda doc, attr: doc.spans.get(spans_key, []),
            has_annotation=lambda doc: spans_key in doc.spans, allow_overlap=True, labeled=True,
        ))
    return scores


@registry.scorers("spacy_sapbert.span_finder_scorer.v1")
def make_span_finder_scorer() -> Callable[..., Dict[str, Any]]:
    """The span finder's default ``scorer``: ``score_found_spans``."""
    return score_found_spans


SCORER_CONFIG = {"@scorers": "spacy_sapbert.span_finder_scorer.v1"}
# the proposals the linker searches in other words as well: a coordination's parts, a clause reordered
_REWRITTEN = frozenset({"coordinated", "predicative"})


@dataclass
class SpanFinderSettings:
    """The span finder's settings (``[components.<name>]`` in the pipeline's config), written once:
    the factory's ``default_config``, its signature and the component share them (``linker_settings``).

    ``linker``: the name of the ``sapbert_linker`` whose KB, encoder and cache score the proposals.
    ``min_exact_score``: the lowest score that keeps a proposal whose content words are a KB name's
    (or a coordination of such); ``min_partial_score``: one missing a word of a name. A minimum above
    1.0 (a KB name's own score) switches that kind of proposal off: it is never searched.
    ``abbreviations``: score a short form the text defines through its long form, as the linker
    links it. ``max_modifiers``: also propose a name with up to this many KB modifiers before it
    ("hemorrhagic cystitis"), kept at ``min_modified_score``. ``word_variants``: ``"shipped"`` or a
    word-variant table's path (``word_variants.py``): also propose phrases whose words name a KB name
    through the table ("cutaneous abnormalities"), kept at ``min_variant_score``. ``quality_synonyms``: also
    propose a name with its quality word written as a synonym the KB's names use ("reduced vibration sense"
    for "Decreased vibration sense"; ``qualities.py``), kept at ``min_exact_score``. ``resolve``: ``longest`` or ``best``
    decide between overlapping spans; ``all`` writes the non-overlapping longest to ``doc.ents`` and
    keeps nested spans too in ``doc.spans[spans_key]`` (``nested``: every nested span, only those
    inside a coordination, or those and the KB names that end a longer span), for a linker with the
    same ``spans_key`` to link. ``scorer``: what ``nlp.evaluate`` reports (``score_found_spans``)."""

    linker: str = "sapbert_linker"
    label: str = "CONCEPT"
    min_exact_score: float = 0.95
    min_partial_score: float = 0.98
    resolve: str = "longest"
    max_words: int = 8
    max_generic_share: float = 0.03
    acronyms: bool = True
    abbreviations: bool = True
    max_modifiers: int = 0
    min_modified_score: float = 0.95
    word_variants: Optional[str] = None
    min_variant_score: float = 0.95
    quality_synonyms: bool = False
    set_ents: bool = True
    spans_key: Optional[str] = None
    nested: str = "all"
    scorer: Optional[Callable] = field(default=score_found_spans, metadata={"config": SCORER_CONFIG})

    def validate(self) -> "SpanFinderSettings":
        """These settings, or a ``ValueError`` naming the first that cannot work."""
        if self.resolve not in RESOLVE_MODES:
            raise ValueError(f"resolve must be one of {RESOLVE_MODES}, got {self.resolve!r}")
        if self.resolve == "all" and not self.spans_key:
            raise ValueError("resolve='all' keeps nested spans in a span group: set spans_key")
        if not self.set_ents and not self.spans_key:
            raise ValueError("the span finder writes nothing: set set_ents or spans_key")
        if self.nested not in NESTED_MODES:
            raise ValueError(f"nested must be one of {NESTED_MODES}, got {self.nested!r}")
        return self


class SpanFinder(ConfigOnlyPipe):
    """Proposes KB-vocabulary n-grams and keeps those the encoder matches to a KB name."""

    data_format = "spacy-sapbert-span-finder-v1"

    def __init__(self, nlp: Language, name: str = "sapbert_span_finder", settings: Optional[SpanFinderSettings] = None,
                 **overrides: Any):
        """``settings``: ``SpanFinderSettings`` (its defaults where None), with ``overrides`` by field
        name; each becomes an attribute of the same name (``linker_name`` for ``linker``)."""
        settings = replace(settings or SpanFinderSettings(), **overrides).validate()
        self.nlp = nlp
        self.name = name
        for setting in fields(settings):
            setattr(self, "linker_name" if setting.name == "linker" else setting.name, getattr(settings, setting.name))
        self._variants: Optional[VariantMatcher] = None
        self._synonyms: Optional[Dict[str, Set[str]]] = None
        self._index: Optional[NameIndex] = None
        self._index_kb: Optional[object] = None  # the KB object the index was built from

    @property
    def labels(self) -> Tuple[str, ...]:
        return (self.label,)

    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """``scorer``'s scores of the spans this component sets (``doc.ents``, its span group)."""
        if self.scorer is None:
            return {}
        return self.scorer(examples, **{"set_ents": self.set_ents, "spans_key": self.spans_key, **kwargs})

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
        linker.ensure_ready()
        kb = linker.linking_kb.kb  # compared by identity: an in-memory KB's fingerprint hashes every name
        if self._index is None or self._index_kb is not kb:
            self._index = NameIndex(linker.linking_kb.kb.display_names)
            self._index_kb = kb
            self._variants = variant_matcher(self._index.exact, self._index.vocab, self.word_variants) if self.word_variants else None
            self._synonyms = linker.linking_kb.qualities.synonyms if self.quality_synonyms else None
        return self._index

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Example]]] = None, *, nlp: Optional[Language] = None) -> None:
        """Build the vocabulary of the linker's KB now rather than on the first document."""
        self.name_index()

    # ------------------------------------------------------------------ detection
    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc])))

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """A batch at a time (its proposals searched together), through the error handler."""
        return pipe_predicted(self, stream, batch_size)

    def proposals(self, doc: Doc, text: Optional[str] = None) -> List[Proposal]:
        """``propose`` with this component's settings (``text``: ``doc.text``, which spaCy joins anew at each call)."""
        return propose(doc, self.name_index(), self.max_words, self.max_generic_share, self.acronyms,
                       introduced_short_forms(doc.text if text is None else text), self.max_modifiers, self._variants,
                       self._synonyms)

    def predict(self, docs: Sequence[Doc]) -> List[List[Tuple[Span, float]]]:
        """Per doc, the proposals the encoder accepts, with their scores: at least ``min_exact_score``
        for those whose content words are a KB name's, ``min_partial_score`` for those missing one.
        A proposal is searched as the linker will search it: with the short forms the text defines
        replaced by their long forms, so that "GALT", defined as "galactose-1-phosphate
        uridyltransferase (GALT)", scores as the enzyme it names; a British spelling scores as
        well as its American one ("tumours").

        The batch's proposals are searched together through the linker's cache, so the linker
        later finds the kept ones there. With ``resolve="longest"`` they are searched longest
        first, and a proposal overlapping an accepted longer one (or, when only ``doc.ents`` is
        written, an entity an earlier detector set) is never searched: it could not be kept. With
        ``resolve="all"`` likewise for what the span group would drop (``_predict_all``).
        """
        texts = [doc.text for doc in docs]
        expanders = [abbreviation_expander(find_abbreviations(text) if self.abbreviations else {}) for text in texts]
        # each proposal as a plain (start, end, kind) tuple, which the garbage collector stops tracking: a batch's
        # thousands of Proposal objects live through the encoder's calls, and its full passes cost more than proposing
        minimum = {"exact": self.min_exact_score, "coordinated": self.min_exact_score, "predicative": self.min_exact_score,
                   "synonym": self.min_exact_score,
                   "partial": self.min_partial_score,
                   "modified": self.min_modified_score, "variant": self.min_variant_score}
        # a kind whose minimum is above 1.0, a KB name's own score, is switched off: never searched
        proposals = [[(p.start, p.end, p.kind) for p in self.proposals(doc, text) if minimum[p.kind] <= 1.0]
                     for doc, text in zip(docs, texts)]
        linker = self._linker()

        asked: Dict[Tuple[int, ProposalTuple], List[str]] = {}
        by_text: Dict[Tuple[bool, str], List[str]] = {}  # a long document proposes the same words many times
        # a proposal's text is cut from the doc's text by its tokens' character offsets, no Span made
        bounds = [char_bounds(doc) for doc in docs]

        def queries(d: int, p: ProposalTuple) -> List[str]:
            """The proposal's search string, then for a coordination its parts, as the linker
            searches them (a British spelling of a KB name, "tumours", is that name to the linker)."""
            if (d, p) not in asked:
                (start, end, kind), (starts, ends) = p, bounds[d]
                text = expanders[d](texts[d][starts[start] : ends[end - 1]])
                key = (kind in _REWRITTEN, text)
                if key not in by_text:
                    by_text[key] = linker.search_strings(text) if kind in _REWRITTEN else [text]
                asked[d, p] = by_text[key]
            return asked[d, p]

        def scored(d: int, p: ProposalTuple, scores: Dict[str, float]) -> float:
            """The proposal's score; for a coordination, the whole's, or its weakest part's
            where every part matches better (the linker then keeps the parts)."""
            whole, *parts = queries(d, p)  # parts: a coordination's only
            return max(scores[whole], min(scores[q] for q in parts)) if parts else scores[whole]

        if self.resolve == "all" and self.nested != "all":
            return self._predict_all(docs, proposals, queries, scored, minimum)
        if self.resolve != "longest":
            scores = self._scores({q for d, props in enumerate(proposals) for p in props for q in queries(d, p)})
            return [
                [(docs[d][start:end], score) for start, end, kind in props
                 if (score := scored(d, (start, end, kind), scores)) >= minimum[kind]]
                for d, props in enumerate(proposals)
            ]
        keep_ents = self.set_ents and not self.spans_key
        taken = [{i for e in doc.ents for i in range(e.start, e.end)} if keep_ents else set() for doc in docs]
        found: List[List[Tuple[Span, float]]] = [[] for _ in docs]
        for length in sorted({end - start for props in proposals for start, end, _ in props}, reverse=True):
            todo = [
                (d, (start, end, kind)) for d, props in enumerate(proposals) for start, end, kind in props
                if end - start == length and not taken[d].intersection(range(start, end))
            ]
            scores = self._scores({q for d, p in todo for q in queries(d, p)})
            accepted = [(d, p, scored(d, p, scores)) for d, p in todo]
            for d, (start, end, kind), score in sorted(accepted, key=lambda x: (-x[2], x[0], x[1][0])):  # best, then doc, start
                if score >= minimum[kind] and not taken[d].intersection(range(start, end)):
                    taken[d].update(range(start, end))
                    found[d].append((docs[d][start:end], score))
        return found

    def _predict_all(self, docs: Sequence[Doc], proposals: List[List[ProposalTuple]],
                     queries: Callable[[int, ProposalTuple], List[str]],
                     scored: Callable[[int, ProposalTuple, Dict[str, float]], float],
                     minimum: Dict[str, float]) -> List[List[Tuple[Span, float]]]:
        """``predict`` for ``resolve="all"`` with ``nested`` "heads" or "coordinations", searching only
        the proposals that can reach the output.

        Proposals are scored longest first. ``set_annotations`` picks the entities longest first among
        the accepted spans, and keeps in the span group a span inside a longer accepted one (no
        coordination) only where it is a KB name ending it (``_nested``). So a proposal that overlaps
        a longer entity already picked can only reach the span group, and one that the group would
        drop whatever its score is never searched: one inside a longer accepted span that ends after
        it, or one ending such a span that is no KB name. The output is what scoring every proposal
        gives (``tests/test_span_finder.py``); the encoder sees fewer strings.
        """
        linker = self._linker()
        found: List[List[Tuple[Span, float]]] = [[] for _ in docs]
        picked: List[Set[int]] = [set() for _ in docs]  # the tokens of the entities picked so far
        covering: List[Dict[int, List[Tuple[int, int]]]] = [{} for _ in docs]  # token -> accepted spans (no coordination) over it
        lower = [doc.to_array(LOWER).tolist() for doc in docs]

        def needed(d: int, p: ProposalTuple) -> bool:
            start, end, _ = p
            if not picked[d].intersection(range(start, end)):
                return True  # it may be an entity
            around = covering[d].get(start, [])
            if any(e > end for _, e in around):
                return False  # inside a longer accepted span that ends after it: never in the group
            if any(e == end and s < start for s, e in around):  # it ends one: kept only as a KB name (score 1.0)
                return self.nested == "heads" and any(linker.is_kb_name(q) for q in queries(d, p))
            return True

        # a proposal inside no longer one is always needed: those are searched together first, as one batch
        inner = [contained_in_longer([(start, end) for start, end, _ in props]) for props in proposals]
        scores = self._scores({q for d, props in enumerate(proposals) for p in props if p[:2] not in inner[d] for q in queries(d, p)})
        for length in sorted({end - start for props in proposals for start, end, _ in props}, reverse=True):
            todo = [(d, p) for d, props in enumerate(proposals) for p in props if p[1] - p[0] == length and needed(d, p)]
            scores.update(self._scores({q for d, p in todo for q in queries(d, p)} - scores.keys()))
            accepted = [(d, p, score) for d, p in todo if (score := scored(d, p, scores)) >= minimum[p[2]]]
            for d, (start, end, _), score in sorted(accepted, key=lambda x: (-x[2], x[1][0])):  # as resolve_overlaps picks
                found[d].append((docs[d][start:end], score))
                if not picked[d].intersection(range(start, end)):
                    picked[d].update(range(start, end))
                if not any(lower[d][i] in COORDINATOR_IDS for i in range(start + 1, end - 1)):
                    for i in range(start, end):
                        covering[d].setdefault(i, []).append((start, end))
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
        # A nested span is kept where every longer span around it is a coordination or (``heads``)
        # ends where it ends: only the non-coordinations around it matter. Asked per span through a
        # running maximum of their ends by start, not by looking at every other span, so that a
        # document of many overlapping proposals ("seizures seizures ...") stays linear.
        # each token's lower-case form as a hash (an array read: a Token object per token cost more than the rest here)
        lower = spans[0].doc.to_array(LOWER).tolist() if spans else []
        blocking = sorted((o.start, o.end) for o in spans if not any(lower[i] in COORDINATOR_IDS for i in range(o.start + 1, o.end - 1)))
        blocking_starts = [start for start, _ in blocking]
        furthest_end = list(itertools.accumulate((end for _, end in blocking), max))
        first_start_by_end: Dict[int, int] = {}
        for start, end in blocking:
            first_start_by_end.setdefault(end, start)

        def kept(span: Span, score: float) -> bool:
            if (span.start, span.end) in chosen:
                return True
            before = bisect.bisect_right(blocking_starts, span.start)  # the blocking spans starting at or before it
            ends_later = before > 0 and furthest_end[before - 1] > span.end
            ends_with_it = first_start_by_end.get(span.end, span.start) < span.start
            if not ends_later and not ends_with_it:
                return True
            # a head ends the longer span and starts a word ("clonic seizure" in "tonic-clonic
            # seizure" is no mention); it begins after the longer span's first token, so one precedes it
            return (self.nested == "heads" and not ends_later and score >= 1.0
                    and bool(span.doc[span.start - 1].whitespace_))

        return [s for s, score in ordered if kept(s, score)]

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


@Language.factory(
    "sapbert_span_finder",
    assigns=["doc.ents", "doc.spans"],
    default_config=config_defaults(SpanFinderSettings),
    default_score_weights=ENTS_SCORE_WEIGHTS,
)
@settings_signature(SpanFinderSettings)
def make_span_finder(
    nlp: Language,
    name: str,
    threshold: Optional[float] = None,
    partial_threshold: Optional[float] = None,
    modifier_threshold: Optional[float] = None,
    **settings: Any,
) -> SpanFinder:
    """The ``sapbert_span_finder`` component; its settings are ``SpanFinderSettings``' fields (documented
    there). ``threshold``, ``partial_threshold``, ``modifier_threshold``: deprecated names of three
    cut-offs (a pipeline saved before the rename); set, they win."""
    for old, value in (("threshold", threshold), ("partial_threshold", partial_threshold), ("modifier_threshold", modifier_threshold)):
        if value is not None:
            new = RENAMED_SETTINGS[old]
            warnings.warn(f"{name}: the setting '{old}' is now '{new}'; {old} = {value} is used. Rename it in the "
                          f"pipeline's config: '{old}' will be removed.", FutureWarning, stacklevel=2)
            settings[new] = value
    return SpanFinder(nlp, name, SpanFinderSettings(**settings))
