"""The ``sapbert_linker`` pipeline component.

It links entity spans (``doc.ents``, optionally a span group) to KB concepts: mentions of a
whole batch of docs are normalised, de-duplicated, looked up in a small cache, encoded
together and searched in one FAISS call. Results go to ``span._.cui``,
``span._.cui_candidates``, ``span._.cui_parts`` and ``token.ent_kb_id_`` (so ``ent.kb_id_`` holds).

It is a ``spacy.pipeline.Pipe``: error handlers apply to it, ``nlp.evaluate`` reports its kb-id
precision/recall/F (``kb_id_p``/``kb_id_r``/``kb_id_f``), and its settings live in the pipeline's
config only; ``to_disk``/``to_bytes`` carry the data (KB and encoder), never settings.
"""
from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.scorer import PRFScore
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example
from spacy.util import minibatch, registry

from .abbreviations import query_expander
from .composites import split_mention
from .context import contested, context_encoder, mention_in_context, rerank
from .encoder import PicklableLock, SapEncoder, resolve_encoder_path
from .fileio import folder_from_bytes, folder_to_bytes
from .hpo_kb import default_kb_path
from .search import Candidate, LinkingKB

CandidateTuple = Tuple[str, str, float, bool]
PartTuple = Tuple[str, List[CandidateTuple]]
AMBIGUOUS_CHOICES = ("first", "none")
BYTES_FORMAT = "spacy-sapbert-linker-bytes-v1"


def _top_score(cands: Sequence[Candidate]) -> float:
    return cands[0].score if cands else float("-inf")


def as_candidates(value: Optional[Sequence[Sequence[Any]]]) -> Optional[List[CandidateTuple]]:
    """``span._.cui_candidates`` as documented: a list of ``(concept_id, name, score, ambiguous)``
    tuples. ``DocBin``, ``Doc.to_bytes`` and ``n_process`` store them as lists; read back, they are tuples again."""
    return None if value is None else [tuple(c) for c in value]  # type: ignore[misc]


def as_parts(value: Optional[Sequence[Sequence[Any]]]) -> Optional[List[PartTuple]]:
    """``span._.cui_parts``: a list of ``(query, candidates)`` tuples, candidates as in ``as_candidates``."""
    return None if value is None else [(str(q), as_candidates(c) or []) for q, c in value]


class _SpanAttribute:
    """A span extension stored exactly where spaCy stores plain ones, marked as ours.

    The mark lets us re-register our own attribute freely while refusing to overwrite an
    attribute of the same name that another package registered. ``convert`` gives the value
    one type however the doc travelled (serialisation turns tuples into lists).
    """

    def __init__(self, name: str, convert: Optional[Callable[[Any], Any]] = None):
        self.name = name
        self.convert = convert

    def _key(self, span: Span) -> tuple:
        return ("._.", self.name, span.start_char, span.end_char)

    def get(self, span: Span) -> Any:
        value = span.doc.user_data.get(self._key(span))
        return value if self.convert is None or value is None else self.convert(value)

    def set(self, span: Span, value: Any) -> None:
        span.doc.user_data[self._key(span)] = value


def register_span_attribute(name: str, convert: Optional[Callable[[Any], Any]] = None) -> None:
    """Register ``Span._.<name>`` unless another package already owns that name."""
    if Span.has_extension(name):
        getter = Span.get_extension(name)[2]
        if not isinstance(getattr(getter, "__self__", None), _SpanAttribute):
            raise ValueError(
                f"Span extension '{name}' is already registered by another package. spacy-sapbert will not "
                f"overwrite it: choose other names with the component's 'cui_attr' / 'candidates_attr' settings."
            )
        if getter.__self__.convert is convert:
            return
    attr = _SpanAttribute(name, convert)
    Span.set_extension(name, getter=attr.get, setter=attr.set, force=True)


# ---------------------------------------------------------------------------- scoring
def _linkable(doc: Doc, spans_key: Optional[str], link_ents: bool, labels: Iterable[str]) -> Dict[Tuple[int, int], Span]:
    """The spans of ``doc`` a linker with these settings links, by character offsets."""
    wanted = set(labels)
    spans: List[Span] = list(doc.ents) if link_ents else []
    if spans_key is not None and spans_key in doc.spans:
        spans.extend(doc.spans[spans_key])
    out: Dict[Tuple[int, int], Span] = {}
    for span in spans:
        if not wanted or span.label_ in wanted:
            out.setdefault((span.start_char, span.end_char), span)
    return out


def score_kb_ids(
    examples: Iterable[Example],
    *,
    spans_key: Optional[str] = None,
    link_ents: bool = True,
    labels: Iterable[str] = (),
    **cfg: Any,
) -> Dict[str, Any]:
    """Concept-id precision, recall and F (``kb_id_p``/``kb_id_r``/``kb_id_f``, and per gold label).

    Like spaCy's ``Scorer.score_links``, only predicted spans at a gold span's offsets count,
    which keeps linking apart from mention detection (scored by the detector). Gold spans without
    a kb id are not annotated and not scored. A right id is a true positive; no id (below the
    threshold, or an ambiguous name) a false negative; a wrong id both a false positive and a
    false negative.
    """
    labels = list(labels)
    per_type: Dict[str, PRFScore] = {}
    for eg in examples:
        gold = _linkable(eg.reference, spans_key, link_ents, ())
        for offsets, span in _linkable(eg.predicted, spans_key, link_ents, labels).items():
            ref = gold.get(offsets)
            if ref is None or not ref.kb_id_:
                continue
            prf = per_type.setdefault(ref.label_, PRFScore())
            if span.kb_id_ == ref.kb_id_:
                prf.tp += 1
            elif not span.kb_id_:
                prf.fn += 1
            else:
                prf.fp += 1
                prf.fn += 1
    micro = PRFScore()
    for prf in per_type.values():
        micro.tp, micro.fp, micro.fn = micro.tp + prf.tp, micro.fp + prf.fp, micro.fn + prf.fn
    return {
        "kb_id_p": micro.precision,
        "kb_id_r": micro.recall,
        "kb_id_f": micro.fscore,
        "kb_id_per_type": {label: prf.to_dict() for label, prf in sorted(per_type.items())},
    }


@registry.scorers("spacy_sapbert.kb_id_scorer.v1")
def make_kb_id_scorer() -> Callable[..., Dict[str, Any]]:
    """The linker's default ``scorer``: ``score_kb_ids``."""
    return score_kb_ids


# ---------------------------------------------------------------------------- the factory
@Language.factory(
    "sapbert_linker",
    assigns=["token.ent_kb_id"],
    default_config={
        "kb": None,
        "encoder": None,
        "top_k": 5,
        "threshold": None,
        "ambiguous": "first",
        "labels": [],
        "spans_key": None,
        "link_ents": True,
        "cui_attr": "cui",
        "candidates_attr": "cui_candidates",
        "parts_attr": "cui_parts",
        "split_composites": True,
        "exact_names": True,
        "fusion_weight": None,
        "context_weight": None,
        "consistency": 0.0,
        "batch_size": 256,
        "cache_size": 10000,
        "overlap": True,
        "device": "auto",
        "precision": "auto",
        "scorer": {"@scorers": "spacy_sapbert.kb_id_scorer.v1"},
    },
    default_score_weights={"kb_id_f": 1.0, "kb_id_p": 0.0, "kb_id_r": 0.0, "kb_id_per_type": None},
)
def make_sapbert_linker(
    nlp: Language,
    name: str,
    kb: Optional[str],
    encoder: Optional[str],
    top_k: int,
    threshold: Optional[float],
    ambiguous: str,
    labels: List[str],
    spans_key: Optional[str],
    link_ents: bool,
    cui_attr: str,
    candidates_attr: str,
    parts_attr: str,
    split_composites: bool,
    exact_names: bool,
    fusion_weight: Optional[float],
    context_weight: Optional[float],
    consistency: float,
    batch_size: int,
    cache_size: int,
    overlap: bool,
    device: str,
    precision: str,
    scorer: Optional[Callable],
) -> "SapBertLinker":
    """``kb``: a folder built by ``build-kb`` (None: the embedded HPO default).
    ``encoder``: a local transformers folder (None: the encoder the KB was built with if that
    folder exists here, else the offline MiniLM). ``threshold``: the lowest top score that sets
    ``_.cui`` (None: the threshold calibrated on dev mentions stored in the KB, else 0.0; 1.0: exact
    names only). ``ambiguous``: what ``_.cui``/``kb_id_`` get
    when the best name belongs to several concepts: ``"first"`` (the likeliest of them: the KB's
    priors, then the concept with the most names; ``ConceptKB.concepts_of_name``) or ``"none"``
    (nothing: the linker does not guess; the candidates list them all). ``exact_names``: a query
    that is a KB name is searched with the vector the index stores for that name (what the encoder
    gave the same string when the KB was built) instead of being encoded again; turn it off where
    the query vector must come from the encoder (e.g. a reranker that reads the mention's context).
    ``fusion_weight``: w in [0, 1) mixes a character 3-gram TF-IDF score into the nearest names'
    scores, (1 - w) × dense + w × sparse (``LinkingKB.candidates``); None: the weight chosen on dev
    and stored in the KB (``search.store_fusion``), else 0 (off). ``context_weight``: w in [0, 1] adds
    w × the cosine between the mention's sentence and each candidate's context prototype to the scores
    of the candidates within 2w of the top and re-sorts them (``context.rerank``; needs prototypes in
    the KB, ``build-context``); None: the weight chosen on dev and stored with them
    (``search.store_context_weight``), else 0 (off). ``consistency``: in a document, a mention whose
    query repeats an earlier mention's, or is its last words ("pits" after "preauricular pits"; a
    defined short form is searched as its long form), gets that mention's concept when the earlier
    top candidate scored at least this, unless its own best match is an exact KB name; 0: off.
    ``overlap``: in ``nlp.pipe``, link each batch in a background thread while the components before
    this one process the next batch (the links are the same; it uses a core those components leave
    idle, e.g. the CNN NER's second one). ``build_pipeline`` turns it off behind a span finder, which
    looks its proposals up through the linker."""
    return SapBertLinker(
        nlp.vocab,
        name=name,
        kb_path=kb,
        encoder_path=encoder,
        top_k=top_k,
        threshold=threshold,
        ambiguous=ambiguous,
        labels=labels,
        spans_key=spans_key,
        link_ents=link_ents,
        cui_attr=cui_attr,
        candidates_attr=candidates_attr,
        parts_attr=parts_attr,
        split_composites=split_composites,
        exact_names=exact_names,
        fusion_weight=fusion_weight,
        context_weight=context_weight,
        consistency=consistency,
        batch_size=batch_size,
        cache_size=cache_size,
        overlap=overlap,
        device=device,
        precision=precision,
        scorer=scorer,
        default_kb=default_kb_path,
    )


def _built_with(linking_kb: LinkingKB) -> Optional[str]:
    """The encoder folder the KB was built with, if it exists on this machine."""
    source = str(linking_kb.meta["encoder"].get("source", ""))  # type: ignore[union-attr]
    return source if source and (Path(source) / "config.json").is_file() else None


class SapBertLinker(Pipe):
    """Links spans to concepts by nearest-neighbour search over SapBERT name embeddings."""

    def __init__(
        self,
        vocab,
        name: str = "sapbert_linker",
        *,
        kb_path: Optional[str] = None,
        encoder_path: Optional[str] = None,
        top_k: int = 5,
        threshold: Optional[float] = None,
        ambiguous: str = "first",
        labels: Sequence[str] = (),
        spans_key: Optional[str] = None,
        link_ents: bool = True,
        cui_attr: str = "cui",
        candidates_attr: str = "cui_candidates",
        parts_attr: str = "cui_parts",
        split_composites: bool = True,
        exact_names: bool = True,
        fusion_weight: Optional[float] = None,
        context_weight: Optional[float] = None,
        consistency: float = 0.0,
        batch_size: int = 256,
        cache_size: int = 10000,
        overlap: bool = True,
        device: str = "auto",
        precision: str = "auto",
        scorer: Optional[Callable] = score_kb_ids,
        default_kb: Optional[Callable[[SapEncoder], Union[str, Path]]] = None,
    ):
        """``default_kb``: the KB folder for an encoder, used when ``kb_path`` is None (the factory
        passes the embedded HPO default's; without it such a linker refuses to load)."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        if ambiguous not in AMBIGUOUS_CHOICES:
            raise ValueError(f"ambiguous must be one of {AMBIGUOUS_CHOICES}, got {ambiguous!r}")
        if fusion_weight is not None and not 0.0 <= fusion_weight < 1.0:
            raise ValueError(f"fusion_weight must be in [0, 1) or None, got {fusion_weight}")
        if context_weight is not None and not 0.0 <= context_weight <= 1.0:
            raise ValueError(f"context_weight must be in [0, 1] or None, got {context_weight}")
        if not 0.0 <= consistency <= 1.0:
            raise ValueError(f"consistency must be in [0, 1] (0: off), got {consistency}")
        if len({cui_attr, candidates_attr, parts_attr}) < 3:
            raise ValueError("cui_attr, candidates_attr and parts_attr must differ")
        self.vocab = vocab
        self.name = name
        self.kb_path = kb_path
        self.encoder_path = encoder_path
        self.top_k = top_k
        self.threshold = threshold
        self.ambiguous = ambiguous
        self._labels = frozenset(labels)
        self.spans_key = spans_key
        self.link_ents = link_ents
        self.cui_attr = cui_attr
        self.candidates_attr = candidates_attr
        self.parts_attr = parts_attr
        self.split_composites = split_composites
        self.exact_names = exact_names
        self.fusion_weight = fusion_weight
        self.context_weight = context_weight
        self.consistency = consistency
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.overlap = overlap
        self.device = device
        self.precision = precision
        self.scorer = scorer
        self.default_kb = default_kb
        self.linking_kb: Optional[LinkingKB] = None
        self.encoder: Optional[SapEncoder] = None
        self._context_reader: Optional[SapEncoder] = None
        self._cache: "OrderedDict[str, List[Candidate]]" = OrderedDict()
        # the cache is shared with a span finder that scores its proposals through this linker while
        # ``overlap`` links the batch before in another thread: one lookup at a time
        self._lookup_lock = PicklableLock()
        register_span_attribute(cui_attr)
        register_span_attribute(candidates_attr, as_candidates)
        register_span_attribute(parts_attr, as_parts)

    def _own_or_kb(self, own: Optional[float], stored: str) -> float:
        """A setting: its own value, or when it is None the one the KB stores (``LinkingKB.<stored>``), else 0.0."""
        if own is not None:
            return float(own)
        found = getattr(self.linking_kb, stored) if self.linking_kb is not None else None
        return 0.0 if found is None else float(found)

    @property
    def effective_threshold(self) -> float:
        """``threshold``, or when it is None the KB's calibrated threshold (``LinkingKB.calibrated_threshold``), else 0.0."""
        return self._own_or_kb(self.threshold, "calibrated_threshold")

    @property
    def effective_fusion_weight(self) -> float:
        """``fusion_weight``, or when it is None the weight stored in the KB (``LinkingKB.tuned_fusion_weight``), else 0.0."""
        return self._own_or_kb(self.fusion_weight, "tuned_fusion_weight")

    @property
    def effective_context_weight(self) -> float:
        """``context_weight``, or when it is None the weight stored with the KB's prototypes
        (``LinkingKB.tuned_context_weight``), else 0.0; always 0.0 for a KB without prototypes."""
        if self.linking_kb is not None and self.linking_kb.context is None:
            return 0.0
        return self._own_or_kb(self.context_weight, "tuned_context_weight")

    @property
    def labels(self) -> Tuple[str, ...]:
        """The entity labels this linker links (empty: all)."""
        return tuple(sorted(self._labels))

    # ------------------------------------------------------------------ loading
    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Any]]] = None,
        *,
        nlp: Optional[Language] = None,
        kb: Optional[str] = None,
        encoder: Optional[str] = None,
    ) -> None:
        """Load the KB folder and the encoder (the heavy part), checking that they belong together.

        ``nlp.initialize()`` calls this; without it the first ``__call__``/``pipe`` does, before
        any doc, so a wrong path fails there naming it. ``kb``/``encoder`` (from
        ``[initialize.components.<name>]``) replace the component's settings for this load.
        """
        self._load(kb or self.kb_path, encoder or self.encoder_path, keep=False)

    def _ensure_ready(self) -> None:
        """Load what is not loaded yet (``from_disk`` may have loaded one part), from the settings."""
        if self.linking_kb is None or self.encoder is None:
            self._load(self.kb_path, self.encoder_path, keep=True)

    def _load(self, kb_path: Optional[str], encoder_path: Optional[str], keep: bool) -> None:
        linking_kb = self.linking_kb if keep else None
        encoder = self.encoder if keep else None
        if linking_kb is None and kb_path is None:  # the default KB is built for the encoder
            if self.default_kb is None:
                raise ValueError(f"{self.name}: no KB folder given (the 'kb' setting) and no default KB")
            encoder = encoder or self._load_encoder(encoder_path)
            linking_kb = LinkingKB.from_disk(self.default_kb(encoder))
        if linking_kb is None:
            linking_kb = LinkingKB.from_disk(kb_path)  # type: ignore[arg-type]  # its errors name the folder
        if encoder is None:
            encoder = self._load_encoder(encoder_path or _built_with(linking_kb))
        self.set_kb(linking_kb, encoder)

    def _load_encoder(self, path: Optional[str]) -> SapEncoder:
        return SapEncoder.load(resolve_encoder_path(path), device=self.device, precision=self.precision)

    def set_kb(self, linking_kb: LinkingKB, encoder: SapEncoder) -> None:
        """Attach an in-memory KB and encoder (refused if the KB was built with another encoder)."""
        linking_kb.check_encoder(encoder)
        linking_kb.index.use_device(str(encoder.device))  # exact search next to the encoder (GPU too)
        self.linking_kb = linking_kb
        self.encoder = encoder
        self._context_reader = None
        self._cache.clear()

    # ------------------------------------------------------------------ linking
    def spans_to_link(self, doc: Doc) -> List[Span]:
        """The entities (``link_ents``), then the spans of the group ``spans_key`` that are not also
        entities, each once, of the labels it links."""
        ents, others = self._ents_and_others(doc)
        return ents + others

    def _ents_and_others(self, doc: Doc) -> Tuple[List[Span], List[Span]]:
        """``spans_to_link`` in its two parts: the entities, and the group's spans that are not entities."""
        ents: List[Span] = []
        if self.link_ents:
            ents = [e for e in doc.ents if not self._labels or e.label_ in self._labels]
        others: List[Span] = []
        if self.spans_key is not None and self.spans_key in doc.spans:
            seen = {(s.start, s.end, s.label) for s in ents}
            others = [s for s in doc.spans[self.spans_key]
                      if (not self._labels or s.label_ in self._labels) and (s.start, s.end, s.label) not in seen]
        return ents, others

    def __call__(self, doc: Doc) -> Doc:
        self._ensure_ready()
        self._link([doc])
        return doc

    def _link(self, docs: Sequence[Doc]) -> None:
        """``predict`` then ``set_annotations``, reading each doc's spans once for both."""
        split = [self._ents_and_others(doc) for doc in docs]
        self._set_annotations(docs, split, self._predict(docs, [ents + others for ents, others in split]))

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """Link ``stream`` a batch at a time, in order; a batch that raises goes to the error handler
        (``nlp.set_error_handler``; by default it re-raises). Loading happens first, outside it.

        With ``overlap``, a batch is linked in a background thread while this generator takes the
        next batch from the components before it, one batch in flight: a CNN NER and the linker then
        run on two cores at once, as far as the GIL lets them (torch releases it in its kernels).
        """
        self._ensure_ready()
        if not self.overlap:
            for docs in minibatch(stream, size=batch_size):
                yield from self._linked(docs, lambda docs=docs: self._link(docs))
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name) as pool:
            in_flight: Optional[Tuple[List[Doc], Future]] = None
            for docs in minibatch(stream, size=batch_size):
                submitted = (docs, pool.submit(self._link, docs))
                if in_flight is not None:
                    yield from self._linked(in_flight[0], in_flight[1].result)
                in_flight = submitted
            if in_flight is not None:
                yield from self._linked(in_flight[0], in_flight[1].result)

    def _linked(self, docs: List[Doc], link: Callable[[], Any]) -> List[Doc]:
        """``docs`` once ``link()`` has linked them; none when it raised and the error handler did not."""
        try:
            link()
        except Exception as e:
            self.get_error_handler()(self.name, self, docs, e)
            return []
        return docs

    def predict(self, docs: Sequence[Doc]) -> List[List[List[Tuple[str, List[Candidate]]]]]:
        """Per doc, per span: the linked parts ``(query, candidates)``; each distinct query is encoded once.

        A span's query is its text with abbreviations defined in the doc expanded; a coordination
        ("breast and ovarian cancer") is also queried part by part, and the parts are kept when
        every part matches the KB better than the whole does.
        """
        return self._predict(docs, [self.spans_to_link(doc) for doc in docs])

    def _predict(self, docs: Sequence[Doc], to_link: List[List[Span]]) -> List[List[List[Tuple[str, List[Candidate]]]]]:
        per_doc = []
        for doc, doc_spans in zip(docs, to_link):
            expand = query_expander(doc)  # short forms expanded: "DM" searched as "diabetes mellitus"
            per_doc.append([self.search_strings(expand(span.text)) for span in doc_spans])
        wanted = {q for spans in per_doc for queries in spans for q in queries}
        if wanted:
            self._ensure_ready()
        normalized = {q: self.normalize(q) for q in wanted}
        found = self._lookup(sorted(set(normalized.values()) - {""}))
        out: List[List[List[Tuple[str, List[Candidate]]]]] = []
        for spans in per_doc:
            doc_out = []
            for queries in spans:
                linked = [(normalized[q], found.get(normalized[q], [])) for q in queries]
                whole, parts = linked[0], linked[1:]
                if parts and all(p[1] for p in parts) and min(p[1][0].score for p in parts) > _top_score(whole[1]):
                    doc_out.append(parts)
                else:
                    doc_out.append([whole])
            out.append(doc_out)
        return self._consistent_in_document(to_link, self._rerank_in_context(to_link, out))

    def _rerank_in_context(self, spans: List[List[Span]], linked: List[List[List[Tuple[str, List[Candidate]]]]]
                           ) -> List[List[List[Tuple[str, List[Candidate]]]]]:
        """With a context weight, the candidates near the top of each span (of every part) re-sorted by
        its sentence (``context.rerank``); the sentences of all spans with something to decide
        (``context.contested``) are encoded in one batch, the others not at all."""
        weight = self.effective_context_weight
        if not weight:
            return linked
        pending = [(d, i, span) for d, (doc_spans, doc_linked) in enumerate(zip(spans, linked))
                   for i, (span, parts) in enumerate(zip(doc_spans, doc_linked))
                   if any(contested(cands, weight) > 1 for _, cands in parts)]
        if not pending:
            return linked
        assert self.linking_kb is not None and self.linking_kb.context is not None and self.encoder is not None
        prototypes = self.linking_kb.context
        if self._context_reader is None:
            prototypes.check_reader(self.encoder, self.kb_path or "the KB")
            self._context_reader = context_encoder(self.encoder)
        self._context_reader.pass_rows = self.encoder.pass_rows  # fixed passes where set: output independent of batching
        vectors = self._context_reader.encode(
            [mention_in_context(span.doc.text, span.start_char, span.end_char) for _, _, span in pending], batch_size=self.batch_size)
        out = [list(doc_linked) for doc_linked in linked]
        for (d, i, _), vector in zip(pending, vectors):
            out[d][i] = [(query, rerank(cands, prototypes.similarities([c.concept_id for c in cands[:contested(cands, weight)]], vector),
                                        weight)) for query, cands in linked[d][i]]
        return out

    def _consistent_in_document(self, spans: List[List[Span]], linked: List[List[List[Tuple[str, List[Candidate]]]]]
                                ) -> List[List[List[Tuple[str, List[Candidate]]]]]:
        """With ``consistency``, each doc's mentions in text order: one whose query is an earlier
        confident mention's query or its last words, and whose own best match is no exact KB name,
        gets the earlier top candidate first (its other candidates follow, as many as before).
        Coordinations split into parts are left as they are."""
        if not self.consistency:
            return linked
        out = []
        for doc_spans, doc_linked in zip(spans, linked):
            doc_out = list(doc_linked)
            confident: Dict[str, Candidate] = {}  # a confident mention's query and each of its word suffixes
            for i in sorted(range(len(doc_spans)), key=lambda i: (doc_spans[i].start, -len(doc_spans[i]))):
                if len(doc_out[i]) != 1:
                    continue
                query, cands = doc_out[i][0]
                earlier = confident.get(query)
                if earlier is not None and not (cands and (cands[0].score >= 1.0 or cands[0].concept_id == earlier.concept_id)):
                    cands = ([earlier] + [c for c in cands if c.concept_id != earlier.concept_id])[: max(1, len(cands))]
                    doc_out[i] = [(query, cands)]
                if cands and cands[0].score >= self.consistency:
                    words = query.split()
                    for start in range(len(words)):
                        confident.setdefault(" ".join(words[start:]), cands[0])
            out.append(doc_out)
        return out

    def search_strings(self, text: str) -> List[str]:
        """What the linker searches for a mention ``text``: the text, then its parts when it looks
        like a coordination ("breast and ovarian cancer") and ``split_composites`` is on."""
        parts = split_mention(text) if self.split_composites else [text]
        return [text] + (parts if len(parts) > 1 else [])

    def normalize(self, text: str) -> str:
        """A query as the KB normalises its names (``ConceptKB.normalize``: the KB decides case and
        punctuation), the one rule ``LinkingKB.link`` applies too."""
        self._ensure_ready()
        assert self.linking_kb is not None
        return self.linking_kb.kb.normalize(text)

    def link_strings(self, mentions: Sequence[str]) -> List[List[Candidate]]:
        """Candidates for bare mention strings (no Doc needed), through the same cache."""
        if not mentions:
            return []
        keys = [self.normalize(m) for m in mentions]
        found = self._lookup(sorted({k for k in keys if k}))
        return [found.get(k, []) for k in keys]

    def top_scores(self, mentions: Sequence[str]) -> List[float]:
        """The best candidate's score for each bare mention string (-inf without candidates), as
        ``link_strings`` gives it; with ``exact_names`` a KB name scores 1.0 without any search
        (nothing scores above a name's own row), so a detector can score proposals cheaply."""
        keys = [self.normalize(m) for m in mentions]
        kb = self.linking_kb.kb  # type: ignore[union-attr]  # loaded by normalize
        named = {k for k in keys if self.exact_names and k and kb.row_of_name(k) is not None}
        found = self._lookup(sorted({k for k in keys if k and k not in named}))
        return [1.0 if k in named else _top_score(found.get(k, [])) for k in keys]

    def _lookup(self, keys: List[str]) -> Dict[str, List[Candidate]]:
        """Candidates of normalised queries: cached ones from the LRU cache, the rest encoded in one batch."""
        if not keys:
            return {}
        with self._lookup_lock:
            return self._lookup_unlocked(keys)

    def _lookup_unlocked(self, keys: List[str]) -> Dict[str, List[Candidate]]:
        assert self.linking_kb is not None and self.encoder is not None
        missing = [k for k in keys if k not in self._cache]
        for k in keys:
            if k in self._cache:
                self._cache.move_to_end(k)
        if missing:
            vectors, name_rows = self._query_vectors(missing)
            found_now = self.linking_kb.candidates(vectors, top_k=self.top_k, queries=missing, fusion_weight=self.effective_fusion_weight,
                                                   name_rows=name_rows)
            for key, cands in zip(missing, found_now):
                self._cache[key] = cands
        found = {k: self._cache[k] for k in keys}
        # Evict least recently used entries, never the ones this batch needs.
        excess = len(self._cache) - self.cache_size
        if excess > 0:
            needed = set(keys)
            for key in [k for k in self._cache if k not in needed][:excess]:
                del self._cache[key]
        return found

    def _query_vectors(self, keys: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """The search vectors of normalised queries: the encoder's, except that with ``exact_names``
        a query that is a KB name takes that name's vector from the index (no encoding: most
        mentions are KB names). Where the index keeps only codes, every query is encoded. Also each
        query's name row where it took that name's vector (-1 elsewhere): the KB's neighbour table
        then answers it without a search."""
        assert self.linking_kb is not None and self.encoder is not None
        kb = self.linking_kb.kb
        rows = [kb.row_of_name(k) for k in keys] if self.exact_names else [None] * len(keys)
        named = [i for i, row in enumerate(rows) if row is not None]
        stored = self.linking_kb.index.stored_vectors([rows[i] for i in named]) if named else None
        if stored is None:
            named = []
        out = np.empty((len(keys), self.linking_kb.index.dim), dtype=np.float32)
        name_rows = np.full(len(keys), -1, dtype=np.int64)
        if named:
            out[named] = stored
            name_rows[named] = [rows[i] for i in named]
        rest = [i for i, row in enumerate(rows) if row is None or stored is None]
        if rest:
            out[rest] = self.encoder.encode([keys[i] for i in rest], batch_size=self.batch_size)
        return out, name_rows

    def _cache_key(self) -> Dict[str, Any]:
        """What the cached candidates depend on: the KB, its index, the encoder, its precision, ``top_k``,
        ``exact_names`` and the fusion weight."""
        assert self.linking_kb is not None and self.encoder is not None
        return {"kb": self.linking_kb.meta["kb_fingerprint"], "index": self.linking_kb.index.meta, "encoder": self.encoder.fingerprint,
                "precision": self.encoder.precision, "top_k": self.top_k, "exact_names": self.exact_names,
                "fusion_weight": self.effective_fusion_weight}

    def save_cache(self, path: Union[str, Path]) -> int:
        """Write the mention cache (normalised query → candidates, least recently used first) to
        ``path`` as JSON, atomically, with what made its entries: the KB, its index, the encoder, its
        precision and ``top_k``. Another process or a later run loads it (``load_cache``) instead of
        encoding those strings again. Returns the number of entries written."""
        import json

        from .fileio import atomic_open

        self._ensure_ready()
        assert self.linking_kb is not None and self.encoder is not None
        key = self._cache_key()
        entries = [[query, [c.to_tuple() for c in cands]] for query, cands in self._cache.items()]
        with atomic_open(path) as f:
            json.dump({"format": "spacy-sapbert-mention-cache", "version": 1, "key": key, "entries": entries}, f, ensure_ascii=False)
        return len(entries)

    def load_cache(self, path: Union[str, Path]) -> int:
        """Add the entries ``save_cache`` wrote to the mention cache as its least recently used ones
        (a query cached already keeps its entry), up to ``cache_size``. A file written for another
        KB, index, encoder, precision or ``top_k`` is refused, naming both. Returns how many were added."""
        import json

        self._ensure_ready()
        assert self.linking_kb is not None and self.encoder is not None
        key = self._cache_key()
        with open(path, encoding="utf8") as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or saved.get("format") != "spacy-sapbert-mention-cache" or saved.get("version") != 1:
            raise ValueError(f"{path} is not a mention cache written by SapBertLinker.save_cache")
        if saved["key"] != json.loads(json.dumps(key)):
            raise ValueError(
                f"{path} caches the mentions of another linker ({saved['key']}), not of {self.name} ({key}): "
                "delete it or keep caches of different KBs, encoders or settings apart"
            )
        room = self.cache_size - len(self._cache)
        new = [(q, cands) for q, cands in saved["entries"] if q not in self._cache][-room:] if room > 0 else []
        for query, cands in reversed(new):
            self._cache[query] = [Candidate(str(c), str(n), float(s), bool(a)) for c, n, s, a in cands]
            self._cache.move_to_end(query, last=False)
        return len(new)

    def best(self, cands: Sequence[Candidate]) -> Optional[Candidate]:
        """The candidate ``_.cui`` gets: the top one if it reaches ``effective_threshold``, unless its
        name is ambiguous and ``ambiguous`` is ``"none"`` (the top one is then the likeliest of the
        name's concepts: candidates list them in ``ConceptKB.concepts_of_name`` order)."""
        if not cands or cands[0].score < self.effective_threshold:
            return None
        if cands[0].ambiguous and self.ambiguous == "none":
            return None
        return cands[0]

    def set_annotations(self, docs: Sequence[Doc], linked_parts: List[List[List[Tuple[str, List[Candidate]]]]]) -> None:
        self._set_annotations(docs, [self._ents_and_others(doc) for doc in docs], linked_parts)

    def _set_annotations(self, docs: Sequence[Doc], split: List[Tuple[List[Span], List[Span]]],
                         linked_parts: List[List[List[Tuple[str, List[Candidate]]]]]) -> None:
        """``set_annotations`` given each doc's spans to link as ``_ents_and_others`` gives them."""
        # our attributes' own setters (``register_span_attribute``), without building a ``span._`` per value
        set_cui, set_candidates, set_parts = (Span.get_extension(a)[3] for a in (self.cui_attr, self.candidates_attr, self.parts_attr))
        for doc, (ents, others), doc_parts in zip(docs, split, linked_parts):
            linked: Dict[Tuple[int, int, int], str] = {}
            for span, parts in zip(ents + others, doc_parts):
                cands = parts[0][1]
                best = self.best(cands)
                # stored as tuples, which the getters return as lists: tuples of plain values drop out
                # of the garbage collector's passes, lists never do
                as_tuples = tuple([c.to_tuple() for c in cands])
                set_cui(span, best.concept_id if best else None)
                set_candidates(span, as_tuples)
                set_parts(span, tuple((query, as_tuples if pc is cands else tuple(c.to_tuple() for c in pc)) for query, pc in parts))
                if best is not None:
                    linked[(span.start, span.end, span.label)] = best.concept_id
            for ent in ents:
                cui = linked.get((ent.start, ent.end, ent.label))
                if cui is not None:
                    for token in ent:
                        token.ent_kb_id_ = cui
            if self.spans_key is not None and self.spans_key in doc.spans:
                # spans of a group are copies: rebuild the group to store the kb ids
                group = doc.spans[self.spans_key]
                doc.spans[self.spans_key] = SpanGroup(
                    doc,
                    name=self.spans_key,
                    attrs=dict(group.attrs),
                    spans=[
                        Span(doc, s.start, s.end, label=s.label, span_id=s.id, kb_id=linked.get((s.start, s.end, s.label), s.kb_id))
                        for s in group
                    ],
                )

    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """``scorer`` (default ``score_kb_ids``) over the spans this linker links."""
        if self.scorer is None:
            return {}
        settings = {"spans_key": self.spans_key, "link_ents": self.link_ents, "labels": self.labels}
        return self.scorer(examples, **{**settings, **kwargs})

    # ------------------------------------------------------------------ serialization
    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Save the encoder (``encoder/``) and the KB with its index (``kb/``) inside the pipeline
        folder, so it loads anywhere. Settings are the pipeline's config and are not saved here.

        A linker on the embedded default KB that was never used saves neither: loaded, it builds
        or reuses the default from its config at first use, as it would have here."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        parts = [p for p in ("encoder", "kb") if p not in exclude]
        if not parts or (self.linking_kb is None and self.encoder is None and self.kb_path is None):
            return
        self._ensure_ready()
        assert self.linking_kb is not None and self.encoder is not None
        if "encoder" in parts:
            self.encoder.save(path / "encoder")
        if "kb" in parts:
            self.linking_kb.to_disk(path / "kb")

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "SapBertLinker":
        """Load the KB and encoder ``to_disk`` saved, except those in ``exclude`` (``"kb"``,
        ``"encoder"``); a part excluded or not saved is kept, or loaded from the config at first use."""
        return self._from_folder(Path(path), exclude, mmap=True)

    def _from_folder(self, path: Path, exclude: Iterable[str], mmap: bool) -> "SapBertLinker":
        linking_kb, encoder = self.linking_kb, self.encoder
        if "kb" not in exclude and (path / "kb").is_dir():
            linking_kb = LinkingKB.from_disk(path / "kb", mmap=mmap)
        if "encoder" not in exclude and (path / "encoder").is_dir():
            encoder = self._load_encoder(str(path / "encoder"))
        if linking_kb is not None and encoder is not None:
            self.set_kb(linking_kb, encoder)
        else:
            self.linking_kb, self.encoder = linking_kb, encoder
            self._cache.clear()
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """What ``to_disk`` writes (KB, index and encoder weights: large), as one msgpack message."""
        return folder_to_bytes(lambda root: self.to_disk(root, exclude=exclude), BYTES_FORMAT)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "SapBertLinker":
        """Load what ``to_bytes`` wrote (into memory: nothing stays on disk)."""
        return folder_from_bytes(bytes_data, BYTES_FORMAT, lambda root: self._from_folder(root, exclude, mmap=False), "sapbert_linker")
