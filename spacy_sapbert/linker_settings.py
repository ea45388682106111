"""The ``sapbert_linker`` settings, written once: the factory's config, its signature and the component share them
(``config_defaults`` and ``settings_signature`` serve the span finder's settings too).

``LinkerSettings.default_config()`` is the factory's ``default_config`` (what ``nlp.config`` shows), and
``settings_signature`` gives the factory one parameter per field, typed as the field is, which is what
spaCy validates config values against (``inspect.signature`` and ``typing.get_type_hints``).
"""
from __future__ import annotations

import inspect
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Callable, Dict, List, Optional, TypeVar, get_type_hints

from .scoring import score_kb_ids

AMBIGUOUS_CHOICES = ("first", "none")
SCORER_CONFIG = {"@scorers": "spacy_sapbert.kb_id_scorer.v1"}
# the keyword names ``SapBertLinker(...)`` took for ``kb`` and ``encoder`` before the settings were one dataclass
INIT_ALIASES = {"kb_path": "kb", "encoder_path": "encoder"}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class LinkerSettings:
    """The linker's settings (``[components.<name>]`` in the pipeline's config).

    ``kb``: a folder built by ``build-kb`` (None: the embedded HPO default).
    ``encoder``: a local transformers folder (None: the encoder the KB was built with if that
    folder exists here, else the offline MiniLM). ``query_encoder``: a smaller encoder for the queries
    alone, distilled from the KB's encoder (``query_encoder.py``: a folder ``training.distill`` wrote, or
    ``"minilm-l3"``, the 3-layer one shipped for MiniLM's KBs); the KB's names keep their vectors, and any
    other KB encoder is refused. None: the queries are encoded by the KB's encoder. ``threshold``: the lowest top score that sets
    ``_.cui`` (None: the threshold calibrated on dev mentions stored in the KB, else 0.0; 1.0: exact
    names only). ``ambiguous``: what ``_.cui``/``kb_id_`` get
    when the best name belongs to several concepts: ``"first"`` (the likeliest of them: the KB's
    priors, then the concept with the most names; ``ConceptKB.concepts_of_name``) or ``"none"``
    (nothing: the linker does not guess; the candidates list them all). ``exact_names``: a query
    that is a KB name is searched with the vector the index stores for that name (what the encoder
    gave the same string when the KB was built) instead of being encoded again, and so is one that
    spells a KB name another way (number, British spelling, punctuation: ``ConceptKB.row_of_variant``;
    that name then scores just below an exact name's 1.0); turn it off where
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
    looks its proposals up through the linker. ``scorer``: what ``nlp.evaluate`` reports (``scoring.py``).
    """

    kb: Optional[str] = None
    encoder: Optional[str] = None
    query_encoder: Optional[str] = None
    top_k: int = 5
    threshold: Optional[float] = None
    ambiguous: str = "first"
    labels: List[str] = field(default_factory=list)
    spans_key: Optional[str] = None
    link_ents: bool = True
    cui_attr: str = "cui"
    candidates_attr: str = "cui_candidates"
    parts_attr: str = "cui_parts"
    split_composites: bool = True
    exact_names: bool = True
    fusion_weight: Optional[float] = None
    context_weight: Optional[float] = None
    consistency: float = 0.0
    batch_size: int = 256
    cache_size: int = 10000
    overlap: bool = True
    device: str = "auto"
    precision: str = "auto"
    scorer: Optional[Callable] = field(default=score_kb_ids, metadata={"config": SCORER_CONFIG})

    def validate(self) -> "LinkerSettings":
        """These settings, or a ``ValueError`` naming the first out of range."""
        if self.top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {self.top_k}")
        if self.ambiguous not in AMBIGUOUS_CHOICES:
            raise ValueError(f"ambiguous must be one of {AMBIGUOUS_CHOICES}, got {self.ambiguous!r}")
        if self.fusion_weight is not None and not 0.0 <= self.fusion_weight < 1.0:
            raise ValueError(f"fusion_weight must be in [0, 1) or None, got {self.fusion_weight}")
        if self.context_weight is not None and not 0.0 <= self.context_weight <= 1.0:
            raise ValueError(f"context_weight must be in [0, 1] or None, got {self.context_weight}")
        if not 0.0 <= self.consistency <= 1.0:
            raise ValueError(f"consistency must be in [0, 1] (0: off), got {self.consistency}")
        if len({self.cui_attr, self.candidates_attr, self.parts_attr}) < 3:
            raise ValueError("cui_attr, candidates_attr and parts_attr must differ")
        return self

    def with_overrides(self, **overrides: Any) -> "LinkerSettings":
        """A copy with ``overrides`` (field names; ``kb_path``/``encoder_path`` name ``kb``/``encoder``)."""
        return replace(self, **{INIT_ALIASES.get(k, k): v for k, v in overrides.items()})

    @classmethod
    def default_config(cls) -> Dict[str, Any]:
        """The factory's ``default_config`` (``config_defaults``)."""
        return config_defaults(cls)


def config_defaults(settings: type) -> Dict[str, Any]:
    """A settings dataclass as a factory's ``default_config``: each field's default, as a config holds
    it (a field's ``metadata["config"]`` where the default is a function, e.g. a scorer by its registered name)."""
    return {f.name: f.metadata.get("config", f.default_factory() if f.default is MISSING else f.default)  # type: ignore[misc]
            for f in fields(settings)}


def settings_signature(settings: type) -> Callable[[F], F]:
    """Give a factory ``f(nlp, name, **values)`` one parameter per field of the dataclass ``settings``,
    typed as the field, without a default (``default_config`` has them), as if it were written out:
    spaCy validates config values against the signature and type hints, and refuses unknown keys."""
    hints = get_type_hints(settings)

    def decorate(factory: F) -> F:
        own = inspect.signature(factory)
        named = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        required = [p for p in named if p.default is inspect.Parameter.empty]  # (nlp, name)
        params = required + [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints[f.name]) for f in fields(settings)]
        params += [p for p in named if p.default is not inspect.Parameter.empty]  # e.g. deprecated names, after the fields
        own_hints = {k: v for k, v in get_type_hints(factory).items() if k in own.parameters or k == "return"}
        factory.__signature__ = own.replace(parameters=params, return_annotation=own_hints.get("return", own.return_annotation))  # type: ignore[attr-defined]
        factory.__annotations__ = {**own_hints, **{f.name: hints[f.name] for f in fields(settings)}}
        return factory

    return decorate
