"""The ``sapbert_linker`` pipeline component.

It links entity spans (``doc.ents``, optionally a span group) to KB concepts: mentions of a
whole batch of docs are normalised, de-duplicated, looked up in a small cache, encoded
together and searched in one FAISS call. Results go to ``span._.cui``,
``span._.cui_candidates`` and ``token.ent_kb_id_`` (so ``ent.kb_id_`` holds).
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import minibatch

from .encoder import SapEncoder, resolve_encoder_path
from .fileio import read_json, write_json
from .normalize import normalize_name
from .search import Candidate, LinkingKB

CandidateTuple = Tuple[str, str, float, bool]


class _SpanAttribute:
    """A span extension stored exactly where spaCy stores plain ones, marked as ours.

    The mark lets us re-register our own attribute freely while refusing to overwrite an
    attribute of the same name that another package registered.
    """

    def __init__(self, name: str):
        self.name = name

    def _key(self, span: Span) -> tuple:
        return ("._.", self.name, span.start_char, span.end_char)

    def get(self, span: Span) -> Any:
        return span.doc.user_data.get(self._key(span))

    def set(self, span: Span, value: Any) -> None:
        span.doc.user_data[self._key(span)] = value


def register_span_attribute(name: str) -> None:
    """Register ``Span._.<name>`` unless another package already owns that name."""
    if Span.has_extension(name):
        getter = Span.get_extension(name)[2]
        if isinstance(getattr(getter, "__self__", None), _SpanAttribute):
            return
        raise ValueError(
            f"Span extension '{name}' is already registered by another package. spacy-sapbert will not "
            f"overwrite it: choose other names with the component's 'cui_attr' / 'candidates_attr' settings."
        )
    attr = _SpanAttribute(name)
    Span.set_extension(name, getter=attr.get, setter=attr.set)


@Language.factory(
    "sapbert_linker",
    assigns=["token.ent_kb_id"],
    default_config={
        "kb": None,
        "encoder": None,
        "top_k": 5,
        "threshold": 0.0,
        "labels": [],
        "spans_key": None,
        "link_ents": True,
        "cui_attr": "cui",
        "candidates_attr": "cui_candidates",
        "batch_size": 256,
        "cache_size": 10000,
        "device": "auto",
        "precision": "auto",
    },
)
def make_sapbert_linker(
    nlp: Language,
    name: str,
    kb: Optional[str],
    encoder: Optional[str],
    top_k: int,
    threshold: float,
    labels: List[str],
    spans_key: Optional[str],
    link_ents: bool,
    cui_attr: str,
    candidates_attr: str,
    batch_size: int,
    cache_size: int,
    device: str,
    precision: str,
) -> "SapBertLinker":
    """``kb``: a folder built by ``build-kb`` (None: the embedded HPO default).
    ``encoder``: a local transformers folder (None: the encoder the KB was built with if that
    folder exists here, else the offline MiniLM)."""
    return SapBertLinker(
        nlp.vocab,
        name=name,
        kb_path=kb,
        encoder_path=encoder,
        top_k=top_k,
        threshold=threshold,
        labels=labels,
        spans_key=spans_key,
        link_ents=link_ents,
        cui_attr=cui_attr,
        candidates_attr=candidates_attr,
        batch_size=batch_size,
        cache_size=cache_size,
        device=device,
        precision=precision,
    )


class SapBertLinker:
    """Links spans to concepts by nearest-neighbour search over SapBERT name embeddings."""

    def __init__(
        self,
        vocab,
        name: str = "sapbert_linker",
        *,
        kb_path: Optional[str] = None,
        encoder_path: Optional[str] = None,
        top_k: int = 5,
        threshold: float = 0.0,
        labels: Sequence[str] = (),
        spans_key: Optional[str] = None,
        link_ents: bool = True,
        cui_attr: str = "cui",
        candidates_attr: str = "cui_candidates",
        batch_size: int = 256,
        cache_size: int = 10000,
        device: str = "auto",
        precision: str = "auto",
    ):
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        if cui_attr == candidates_attr:
            raise ValueError("cui_attr and candidates_attr must differ")
        self.vocab = vocab
        self.name = name
        self.kb_path = kb_path
        self.encoder_path = encoder_path
        self.top_k = top_k
        self.threshold = threshold
        self.labels = set(labels)
        self.spans_key = spans_key
        self.link_ents = link_ents
        self.cui_attr = cui_attr
        self.candidates_attr = candidates_attr
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.device = device
        self.precision = precision
        self.linking_kb: Optional[LinkingKB] = None
        self.encoder: Optional[SapEncoder] = None
        self._cache: "OrderedDict[str, List[Candidate]]" = OrderedDict()
        register_span_attribute(cui_attr)
        register_span_attribute(candidates_attr)

    # ------------------------------------------------------------------ loading
    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Any]]] = None,
        *,
        nlp: Optional[Language] = None,
        kb: Optional[str] = None,
        encoder: Optional[str] = None,
    ) -> None:
        """Load the KB folder and the encoder (the heavy part), checking that they belong together."""
        kb_path = kb or self.kb_path
        encoder_path = encoder or self.encoder_path
        if kb_path is None:
            from .defaults import default_kb_path

            enc = self._load_encoder(encoder_path)
            self.set_kb(LinkingKB.from_disk(default_kb_path(enc)), enc)
            return
        linking_kb = LinkingKB.from_disk(kb_path)
        if encoder_path is None:
            built_with = str(linking_kb.meta["encoder"].get("source", ""))  # type: ignore[union-attr]
            encoder_path = built_with if built_with and (Path(built_with) / "config.json").is_file() else None
        self.set_kb(linking_kb, self._load_encoder(encoder_path))

    def _load_encoder(self, path: Optional[str]) -> SapEncoder:
        return SapEncoder.load(resolve_encoder_path(path), device=self.device, precision=self.precision)

    def set_kb(self, linking_kb: LinkingKB, encoder: SapEncoder) -> None:
        """Attach an in-memory KB and encoder (refused if the KB was built with another encoder)."""
        linking_kb.check_encoder(encoder)
        linking_kb.index.use_device(str(encoder.device))  # exact search next to the encoder (GPU too)
        self.linking_kb = linking_kb
        self.encoder = encoder
        self._cache.clear()

    def _ensure_ready(self) -> None:
        if self.linking_kb is None or self.encoder is None:
            self.initialize()

    # ------------------------------------------------------------------ linking
    def spans_to_link(self, doc: Doc) -> List[Span]:
        spans: List[Span] = []
        if self.link_ents:
            spans.extend(e for e in doc.ents if not self.labels or e.label_ in self.labels)
        if self.spans_key is not None and self.spans_key in doc.spans:
            spans.extend(s for s in doc.spans[self.spans_key] if not self.labels or s.label_ in self.labels)
        return spans

    def __call__(self, doc: Doc) -> Doc:
        return next(iter(self.pipe([doc])))

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    def predict(self, docs: Sequence[Doc]) -> List[List[List[Candidate]]]:
        """Candidates for every span of every doc; each distinct mention is encoded once."""
        per_doc_keys = [[normalize_name(s.text) for s in self.spans_to_link(doc)] for doc in docs]
        wanted = {k for keys in per_doc_keys for k in keys if k}
        if wanted:
            self._ensure_ready()
            self._fill_cache(sorted(wanted))
        return [[self._cache.get(k, []) if k else [] for k in keys] for keys in per_doc_keys]

    def link_strings(self, mentions: Sequence[str]) -> List[List[Candidate]]:
        """Candidates for bare mention strings (no Doc needed)."""
        keys = [normalize_name(m) for m in mentions]
        wanted = sorted({k for k in keys if k})
        if wanted:
            self._ensure_ready()
            self._fill_cache(wanted)
        return [self._cache.get(k, []) if k else [] for k in keys]

    def _fill_cache(self, keys: List[str]) -> None:
        assert self.linking_kb is not None and self.encoder is not None
        missing = [k for k in keys if k not in self._cache]
        for k in keys:
            if k in self._cache:
                self._cache.move_to_end(k)
        if missing:
            vectors = self.encoder.encode(missing, batch_size=self.batch_size)
            for key, cands in zip(missing, self.linking_kb.candidates(vectors, top_k=self.top_k)):
                self._cache[key] = cands
        # Evict least recently used entries, never the ones this batch needs.
        excess = len(self._cache) - self.cache_size
        if excess > 0:
            needed = set(keys)
            for key in [k for k in self._cache if k not in needed][:excess]:
                del self._cache[key]

    def set_annotations(self, docs: Sequence[Doc], candidates: List[List[List[Candidate]]]) -> None:
        for doc, doc_cands in zip(docs, candidates):
            linked: Dict[Tuple[int, int, int], str] = {}
            for span, cands in zip(self.spans_to_link(doc), doc_cands):
                best = cands[0] if cands and cands[0].score >= self.threshold else None
                span._.set(self.cui_attr, best.concept_id if best else None)
                span._.set(self.candidates_attr, [c.to_tuple() for c in cands])
                if best is not None:
                    linked[(span.start, span.end, span.label)] = best.concept_id
            if self.link_ents:
                for ent in doc.ents:
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

    # ------------------------------------------------------------------ serialization
    def _cfg(self) -> Dict[str, Any]:
        return {
            "top_k": self.top_k,
            "threshold": self.threshold,
            "labels": sorted(self.labels),
            "spans_key": self.spans_key,
            "link_ents": self.link_ents,
            "cui_attr": self.cui_attr,
            "candidates_attr": self.candidates_attr,
        }

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Save encoder, KB and index inside the pipeline folder, so it loads anywhere."""
        self._ensure_ready()
        assert self.linking_kb is not None and self.encoder is not None
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if "encoder" not in exclude:
            self.encoder.save(path / "encoder")
        if "kb" not in exclude:
            self.linking_kb.to_disk(path / "kb")
        write_json(path / "cfg.json", self._cfg())

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "SapBertLinker":
        path = Path(path)
        cfg = read_json(path / "cfg.json")
        self.top_k = cfg["top_k"]
        self.threshold = cfg["threshold"]
        self.labels = set(cfg["labels"])
        self.spans_key = cfg["spans_key"]
        self.link_ents = cfg["link_ents"]
        self.set_kb(LinkingKB.from_disk(path / "kb"), self._load_encoder(str(path / "encoder")))
        return self
