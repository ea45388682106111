"""The ``sapbert_linker`` pipeline component.

It links entity spans (``doc.ents``, optionally a span group) to KB concepts: mentions of a
whole batch of docs are normalised, de-duplicated, looked up in a small cache, encoded
together and searched in one FAISS call. Results go to ``span._.cui``,
``span._.cui_candidates``, ``span._.cui_parts`` and ``token.ent_kb_id_`` (so ``ent.kb_id_`` holds).

It is a ``spacy.pipeline.Pipe``: error handlers apply to it, ``nlp.evaluate`` reports its kb-id
precision/recall/F (``kb_id_p``/``kb_id_r``/``kb_id_f``), and its settings live in the pipeline's
config only; ``to_disk``/``to_bytes`` carry the data (KB and encoder), never settings.

Its parts live next to it: the settings (``linker_settings``), the mention cache (``mention_cache``) and
the search behind it (``query_search``), the answers on the doc (``link_annotations``, ``attributes``),
the scorer (``scoring``), the overlap thread (``overlap``) and the rerankers (``rerankers``).
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import minibatch

from .abbreviations import query_expander
from .attributes import register_span_attribute
from .composites import split_mention
from .context import context_encoder
from .encoder import SapEncoder, resolve_encoder_path
from .fileio import folder_from_bytes, folder_to_bytes
from .hpo_kb import default_kb_path
from .link_annotations import BatchLinks, CandidateTuple, PartTuple, as_candidates, as_parts, ents_and_others, write_links
from .linker_settings import AMBIGUOUS_CHOICES, LinkerSettings, settings_signature
from .mention_cache import MentionCache, cache_key
from .overlap import pipe_batches
from .query_encoder import Student
from .query_search import search_queries, top_score, whole_or_parts
from .rerankers import consistent_in_document, rerank_in_context
from .scoring import make_kb_id_scorer, score_kb_ids
from .search import Candidate, LinkingKB

# what ``from spacy_sapbert.linker import ...`` offers: the component, and names that lived here before they moved next door
__all__ = ["AMBIGUOUS_CHOICES", "CandidateTuple", "LinkerSettings", "PartTuple", "SapBertLinker", "as_candidates", "as_parts",
           "make_kb_id_scorer", "make_sapbert_linker", "register_span_attribute", "score_kb_ids"]
BYTES_FORMAT = "spacy-sapbert-linker-bytes-v1"
# the component's attribute for each setting whose attribute name differs
_ATTRIBUTE_OF_SETTING = {"kb": "kb_path", "encoder": "encoder_path", "query_encoder": "query_encoder_path"}


def _built_with(linking_kb: LinkingKB) -> Optional[str]:
    """The encoder folder the KB was built with, if it exists on this machine."""
    source = str(linking_kb.meta["encoder"].get("source", ""))  # type: ignore[union-attr]
    return source if source and (Path(source) / "config.json").is_file() else None


class SapBertLinker(Pipe):
    """Links spans to concepts by nearest-neighbour search over SapBERT name embeddings."""

    def __init__(self, vocab, name: str = "sapbert_linker", settings: Optional[LinkerSettings] = None, *,
                 default_kb: Optional[Callable[[SapEncoder], Union[str, Path]]] = None, **overrides: Any):
        """``settings``: ``LinkerSettings`` (its defaults where None), with ``overrides`` by field name
        (``kb_path``/``encoder_path`` for ``kb``/``encoder``); each becomes an attribute of the same
        name (``kb_path``/``encoder_path``/``query_encoder_path`` for those three). ``default_kb``: the KB folder for an encoder,
        used when ``kb_path`` is None (the factory passes the embedded HPO default's; without it such a
        linker refuses to load)."""
        settings = (settings or LinkerSettings()).with_overrides(**overrides).validate()
        self.vocab = vocab
        self.name = name
        self._cache = MentionCache(settings.cache_size)  # ``cache_size`` is its size
        for setting in fields(settings):
            setattr(self, _ATTRIBUTE_OF_SETTING.get(setting.name, setting.name), getattr(settings, setting.name))
        self.default_kb = default_kb
        self.linking_kb: Optional[LinkingKB] = None
        self.encoder: Optional[SapEncoder] = None
        # the smaller encoder of the queries (``query_encoder``), built on ``encoder`` from the student
        self.query_encoder: Optional[SapEncoder] = None
        self._student: Optional[Student] = None
        self._calibrated_threshold = 0.0  # the KB's, read when it is set (``_attach``)
        self._context_reader: Optional[SapEncoder] = None
        register_span_attribute(self.cui_attr)
        register_span_attribute(self.candidates_attr, as_candidates)
        register_span_attribute(self.parts_attr, as_parts)

    def _own_or_kb(self, own: Optional[float], stored: str) -> float:
        """A setting: its own value, or when it is None the one the KB stores (``LinkingKB.<stored>``), else 0.0."""
        if own is not None:
            return float(own)
        found = getattr(self.linking_kb, stored) if self.linking_kb is not None else None
        return 0.0 if found is None else float(found)

    @property
    def effective_threshold(self) -> float:
        """``threshold``, or when it is None the KB's calibrated threshold (``LinkingKB.calibrated_threshold``,
        read once when the KB is set), else 0.0."""
        return float(self.threshold) if self.threshold is not None else self._calibrated_threshold

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

    @labels.setter
    def labels(self, labels: Iterable[str]) -> None:
        self._labels = frozenset(labels)

    @property
    def cache_size(self) -> int:
        """The most normalised queries the mention cache keeps."""
        return self._cache.size

    @cache_size.setter
    def cache_size(self, size: int) -> None:
        self._cache.size = size

    # ------------------------------------------------------------------ loading
    def initialize(self, get_examples: Optional[Callable[[], Iterable[Any]]] = None, *, nlp: Optional[Language] = None,
                   kb: Optional[str] = None, encoder: Optional[str] = None) -> None:
        """Load the KB folder and the encoder (the heavy part), checking that they belong together.

        ``nlp.initialize()`` calls this; without it the first ``__call__``/``pipe`` does, before
        any doc, so a wrong path fails there naming it. ``kb``/``encoder`` (from
        ``[initialize.components.<name>]``) replace the component's settings for this load.
        """
        self._load(kb or self.kb_path, encoder or self.encoder_path, keep=False)

    def ensure_ready(self) -> None:
        """Load what is not loaded yet (``from_disk`` may have loaded one part), from the settings: a
        component that searches through this linker (the span finder) calls it before it does."""
        if self.linking_kb is None or self.encoder is None:
            self._load(self.kb_path, self.encoder_path, keep=True)

    _ensure_ready = ensure_ready  # its name before it was public

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
        self._attach(linking_kb, encoder)

    def _attach(self, linking_kb: Optional[LinkingKB], encoder: Optional[SapEncoder]) -> None:
        """Hold ``linking_kb`` and ``encoder`` (one may be None until loaded), reading the KB's calibrated
        threshold once, and forget what came from the ones before: the cache, the context reader. With
        ``query_encoder`` set, its student is rebuilt on ``encoder`` (refused if distilled from another)."""
        if self._student is None and self.query_encoder_path is not None:
            self._student = Student.read(self.query_encoder_path)
        self.query_encoder = self._student.build(encoder) if self._student is not None and encoder is not None else None
        self.linking_kb, self.encoder = linking_kb, encoder
        found = linking_kb.calibrated_threshold if linking_kb is not None else None
        self._calibrated_threshold = 0.0 if found is None else float(found)
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
        return ents_and_others(doc, self.link_ents, self._labels, self.spans_key)

    def __call__(self, doc: Doc) -> Doc:
        self.ensure_ready()
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
        next batch from the components before it, one batch in flight (``overlap.pipe_batches``).
        """
        self.ensure_ready()
        yield from pipe_batches(minibatch(stream, size=batch_size), self._link, self._handle_error,
                                overlap=self.overlap, thread_name=self.name)

    def _handle_error(self, docs: List[Doc], e: Exception) -> None:
        self.get_error_handler()(self.name, self, docs, e)

    def predict(self, docs: Sequence[Doc]) -> BatchLinks:
        """Per doc, per span: the linked parts ``(query, candidates)``; each distinct query is encoded once.

        A span's query is its text with abbreviations defined in the doc expanded; a coordination
        ("breast and ovarian cancer") is also queried part by part, and the parts are kept when
        every part matches the KB better than the whole does.
        """
        return self._predict(docs, [self.spans_to_link(doc) for doc in docs])

    def _predict(self, docs: Sequence[Doc], to_link: List[List[Span]]) -> BatchLinks:
        per_doc = []
        for doc, doc_spans in zip(docs, to_link):
            expand = query_expander(doc)  # short forms expanded: "DM" searched as "diabetes mellitus"
            per_doc.append([self.search_strings(expand(span.text)) for span in doc_spans])
        wanted = {q for spans in per_doc for queries in spans for q in queries}
        if wanted:
            self.ensure_ready()
        normalized = {q: self.normalize(q) for q in wanted}
        found = self._lookup(sorted(set(normalized.values()) - {""}))
        out = [[whole_or_parts([(normalized[q], found.get(normalized[q], [])) for q in queries]) for queries in spans]
               for spans in per_doc]
        prototypes = self.linking_kb.context if self.linking_kb is not None else None
        linked = rerank_in_context(to_link, out, self.effective_context_weight, prototypes, self._encode_contexts)
        return consistent_in_document(to_link, linked, self.consistency)

    def _encode_contexts(self, texts: List[str]) -> np.ndarray:
        """Mentions in their sentences (``context.mention_in_context``) as the KB's context prototypes read them."""
        assert self.linking_kb is not None and self.linking_kb.context is not None and self.encoder is not None
        if self._context_reader is None:
            self.linking_kb.context.check_reader(self.encoder, self.kb_path or "the KB")
            self._context_reader = context_encoder(self.encoder)
        self._context_reader.pass_rows = self.encoder.pass_rows  # fixed passes where set: output independent of batching
        return self._context_reader.encode(texts, batch_size=self.batch_size)

    def search_strings(self, text: str) -> List[str]:
        """What the linker searches for a mention ``text``: the text, then its parts when it looks
        like a coordination ("breast and ovarian cancer") and ``split_composites`` is on."""
        parts = split_mention(text) if self.split_composites else [text]
        return [text] + (parts if parts != [text] else [])

    def normalize(self, text: str) -> str:
        """A query as the KB normalises its names (``ConceptKB.normalize``: the KB decides case and
        punctuation), the one rule ``LinkingKB.link`` applies too."""
        self.ensure_ready()
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
        named = {k for k in keys if self._is_name_key(k)}
        found = self._lookup(sorted({k for k in keys if k and k not in named}))
        return [1.0 if k in named else top_score(found.get(k, [])) for k in keys]

    def is_kb_name(self, mention: str) -> bool:
        """Whether ``mention`` scores 1.0 in ``top_scores`` without a search (``exact_names`` and a KB name)."""
        return self._is_name_key(self.normalize(mention))

    def _is_name_key(self, key: str) -> bool:
        return bool(self.exact_names and key and self.linking_kb.kb.row_of_name(key) is not None)  # type: ignore[union-attr]

    def _lookup(self, keys: List[str]) -> Dict[str, List[Candidate]]:
        """Candidates of normalised queries: cached ones from the mention cache, the rest searched in one batch."""
        return self._cache.lookup(keys, self._search)

    def _search(self, queries: List[str]) -> List[List[Candidate]]:
        """Candidates of normalised queries, searched in one batch (no cache), encoded by the query encoder if set."""
        assert self.linking_kb is not None and self.encoder is not None
        return search_queries(self.linking_kb, self.query_encoder or self.encoder, queries, top_k=self.top_k, exact_names=self.exact_names,
                              fusion_weight=self.effective_fusion_weight, batch_size=self.batch_size)

    def _cache_key(self) -> Dict[str, Any]:
        """What the cached candidates depend on: the KB, its index, the encoder, its precision, ``top_k``,
        ``exact_names``, the fusion weight and the query encoder."""
        assert self.linking_kb is not None and self.encoder is not None
        return cache_key(self.linking_kb, self.encoder, top_k=self.top_k, exact_names=self.exact_names,
                         fusion_weight=self.effective_fusion_weight, query_encoder=self.query_encoder)

    def save_cache(self, path: Union[str, Path]) -> int:
        """Write the mention cache (normalised query → candidates, least recently used first) to
        ``path`` as JSON, atomically, with what made its entries: the KB, its index, the encoder, its
        precision and ``top_k``. Another process or a later run loads it (``load_cache``) instead of
        encoding those strings again. Returns the number of entries written."""
        self.ensure_ready()
        return self._cache.save(path, self._cache_key())

    def load_cache(self, path: Union[str, Path]) -> int:
        """Add the entries ``save_cache`` wrote to the mention cache as its least recently used ones
        (a query cached already keeps its entry), up to ``cache_size``. A file written for another
        KB, index, encoder, precision or ``top_k`` is refused, naming both; a damaged one, or one whose
        candidates are not this KB's, raises ``mention_cache.DamagedCacheError``. Returns how many were added."""
        self.ensure_ready()
        return self._cache.load(path, self._cache_key(), self.name, kb=self.linking_kb.kb)  # type: ignore[union-attr]

    def best(self, cands: Sequence[Candidate]) -> Optional[Candidate]:
        """The candidate ``_.cui`` gets: the top one if it reaches ``effective_threshold``, unless its
        name is ambiguous and ``ambiguous`` is ``"none"`` (the top one is then the likeliest of the
        name's concepts: candidates list them in ``ConceptKB.concepts_of_name`` order)."""
        if not cands or cands[0].score < self.effective_threshold:
            return None
        if cands[0].ambiguous and self.ambiguous == "none":
            return None
        return cands[0]

    def decided_parts(self, span: Span) -> List[Tuple[str, Optional[Candidate]]]:
        """A composite mention's parts as this linker linked them ("breast and ovarian cancer":
        "breast cancer", "ovarian cancer"), each with the candidate ``best`` accepts (None where
        none does); ``[]`` for a mention linked whole."""
        parts = span._.get(self.parts_attr) or []
        if len(parts) < 2:
            return []
        return [(query, self.best([Candidate(*c) for c in cands])) for query, cands in parts]

    def set_annotations(self, docs: Sequence[Doc], linked_parts: BatchLinks) -> None:
        self._set_annotations(docs, [self._ents_and_others(doc) for doc in docs], linked_parts)

    def _set_annotations(self, docs: Sequence[Doc], split: List[Tuple[List[Span], List[Span]]],
                         linked_parts: BatchLinks) -> None:
        """``set_annotations`` given each doc's spans to link as ``_ents_and_others`` gives them."""
        write_links(docs, split, linked_parts, self.best, (self.cui_attr, self.candidates_attr, self.parts_attr), self.spans_key)

    def score(self, examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        """``scorer`` (default ``score_kb_ids``) over the spans this linker links."""
        if self.scorer is None:
            return {}
        settings = {"spans_key": self.spans_key, "link_ents": self.link_ents, "labels": self.labels}
        return self.scorer(examples, **{**settings, **kwargs})

    # ------------------------------------------------------------------ serialization
    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Save the encoder (``encoder/``), the KB with its index (``kb/``) and the query encoder's
        student (``query_encoder/``, where set) inside the pipeline folder, so it loads anywhere. Settings are the pipeline's config and are not saved here.

        A linker on the embedded default KB that was never used saves neither: loaded, it builds
        or reuses the default from its config at first use, as it would have here."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        parts = [p for p in ("encoder", "kb", "query_encoder") if p not in exclude]
        if not parts or (self.linking_kb is None and self.encoder is None and self.kb_path is None):
            return
        self.ensure_ready()
        assert self.linking_kb is not None and self.encoder is not None
        if "encoder" in parts:
            self.encoder.save(path / "encoder")
        if "kb" in parts:
            self.linking_kb.to_disk(path / "kb")
        if "query_encoder" in parts and self._student is not None:
            self._student.write(path / "query_encoder")

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "SapBertLinker":
        """Load the KB, encoder and query encoder ``to_disk`` saved, except those in ``exclude`` (``"kb"``,
        ``"encoder"``, ``"query_encoder"``); a part excluded or not saved is kept, or loaded from the config at first use."""
        return self._from_folder(Path(path), exclude, mmap=True)

    def _from_folder(self, path: Path, exclude: Iterable[str], mmap: bool) -> "SapBertLinker":
        linking_kb, encoder = self.linking_kb, self.encoder
        if "kb" not in exclude and (path / "kb").is_dir():
            linking_kb = LinkingKB.from_disk(path / "kb", mmap=mmap)
        if "encoder" not in exclude and (path / "encoder").is_dir():
            encoder = self._load_encoder(str(path / "encoder"))
        if "query_encoder" not in exclude and (path / "query_encoder").is_dir():
            self._student = Student.read(path / "query_encoder")
        if linking_kb is not None and encoder is not None:
            self.set_kb(linking_kb, encoder)
        else:
            self._attach(linking_kb, encoder)
        return self

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """What ``to_disk`` writes (KB, index and encoder weights: large), as one msgpack message."""
        return folder_to_bytes(lambda root: self.to_disk(root, exclude=exclude), BYTES_FORMAT)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "SapBertLinker":
        """Load what ``to_bytes`` wrote (into memory: nothing stays on disk)."""
        return folder_from_bytes(bytes_data, BYTES_FORMAT, lambda root: self._from_folder(root, exclude, mmap=False), "sapbert_linker")


# ---------------------------------------------------------------------------- the factory
@Language.factory(
    "sapbert_linker",
    assigns=["token.ent_kb_id"],
    default_config=LinkerSettings.default_config(),
    default_score_weights={"kb_id_f": 1.0, "kb_id_p": 0.0, "kb_id_r": 0.0, "kb_id_per_type": None},
)
@settings_signature(LinkerSettings)
def make_sapbert_linker(nlp: Language, name: str, **settings: Any) -> SapBertLinker:
    """The ``sapbert_linker`` component; its settings are ``LinkerSettings``' fields (documented there),
    and without a ``kb`` it links against the embedded HPO default."""
    return SapBertLinker(nlp.vocab, name, LinkerSettings(**settings), default_kb=default_kb_path)
