"""Ready pipelines: a mention detector, abbreviations, negation and the linker, assembled in one place.

Every entry point (the default HPO pipeline, ``link --kb``, the evaluations) builds its pipeline here,
so what is measured is what users run.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

import spacy
from spacy.language import Language

from .tokenizer import TOKENIZER_CONFIG

PathLike = Union[str, os.PathLike]
DETECTORS = ("gold", "ruler", "span_finder", "ner", "ner+span_finder", "ner-trf", "ner-trf+span_finder")
SHIPPED_NER = Path(__file__).parent / "data" / "ner"
SHIPPED_NER_TRF = Path(__file__).parent / "data" / "ner_trf"
# the trained NER each NER detector loads unless ``ner_model`` names another
SHIPPED_NERS = {"ner": SHIPPED_NER, "ner-trf": SHIPPED_NER_TRF}
LINKER = "sapbert_linker"
# The span group of nested mentions (``build_pipeline(..., nested=...)``): found by the span finder,
# linked by the linker, while ``doc.ents`` keeps the longest of overlapping mentions.
NESTED_SPANS_KEY = "sapbert_nested"
# Ruler patterns shorter than this are dropped: two-letter names ("MS") match noise.
MIN_PATTERN_CHARS = 3


def kb_names(kb_path: PathLike) -> List[str]:
    """The KB's names as written (display forms), for an exact-name ruler."""
    from .kb import ConceptKB

    return list(ConceptKB.from_disk(kb_path).display_names)


def ner_detector(detector: str) -> Optional[str]:
    """The trained NER a detector starts with (``ner`` or ``ner-trf``), or None."""
    first = detector.split("+")[0]
    return first if first in SHIPPED_NERS else None


def load_ner(path: PathLike, exclude: Sequence[str] = ()) -> Language:
    """A trained NER folder as the pipelines run it: with their tokenizer (spaCy's, with a chunk
    cache for biomedical text), so that the NER alone and in a pipeline see the same tokens."""
    return spacy.load(path, exclude=list(exclude), config={"nlp": {"tokenizer": TOKENIZER_CONFIG}})


def add_ruler(nlp: Language, kb_path: PathLike, label: str) -> None:
    """An entity ruler over the KB's names (case-insensitive): finds exactly the names in the KB."""
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    names = [n for n in kb_names(kb_path) if len(n) >= MIN_PATTERN_CHARS]
    ruler.add_patterns([{"label": label, "pattern": name} for name in names])  # type: ignore[attr-defined]


def build_pipeline(
    kb: Union[PathLike, Mapping[str, PathLike], None] = None,
    detector: str = "span_finder",
    *,
    encoder: Optional[PathLike] = None,
    labels: Sequence[str] = (),
    label: Optional[str] = None,
    abbreviations: bool = True,
    negation: bool = False,
    linker_config: Optional[Dict[str, object]] = None,
    span_finder_config: Optional[Dict[str, object]] = None,
    ner_model: Optional[PathLike] = None,
    nested: Optional[str] = None,
) -> Language:
    """A pipeline that finds mentions with ``detector`` and links them against the KB folder ``kb``.

    ``detector``: ``gold`` (none: the caller sets ``doc.ents``), ``ruler`` (exact KB names),
    ``span_finder`` (encoder-scored KB-vocabulary n-grams), ``ner`` (the CNN NER shipped in the
    package, or ``ner_model``), ``ner-trf`` (the shipped transformer tagger, or ``ner_model``), or
    ``ner+span_finder`` / ``ner-trf+span_finder`` (the span finder adds what the NER missed).
    ``labels``: entity labels to link (empty: all); the ruler and span finder label their spans
    ``label`` (default: the first of ``labels``, else ``CONCEPT``). ``kb`` None: the embedded HPO KB.
    ``kb`` may also map entity labels to KB folders (``{"Disease": medic, "Chemical": mesh}``): one
    linker per label, named ``sapbert_linker_<label>``, for a detector that labels its spans (``ner``, ``ner-trf``).
    ``nested`` (``all``, ``coordinations`` or ``heads``, a span-finder detector only): the span finder also keeps
    nested mentions ("colitis" in "ulcerative colitis") in ``doc.spans["sapbert_nested"]``, which
    the linkers link too; ``doc.ents`` keeps the longest of overlapping ones.
    """
    if detector not in DETECTORS:
        raise ValueError(f"detector must be one of {DETECTORS}, got {detector!r}")
    if nested is not None and not detector.endswith("span_finder"):
        raise ValueError(f"nested mentions come from the span finder; detector {detector!r} has none")
    if isinstance(kb, Mapping):
        if detector not in ("ner", "ner-trf", "gold") or labels:
            raise ValueError("a KB per label needs a labelling detector ('ner', 'ner-trf' or 'gold') and no 'labels'")
        kbs = {f"{LINKER}_{lab.lower()}": (str(path), [lab]) for lab, path in kb.items()}
    else:
        kbs = {}
    if kb is None:
        from .hpo_kb import default_kb_path

        kb = default_kb_path(encoder)  # resolved here, so the linker's config names the folder
    span_label = label or (labels[0] if labels else "CONCEPT")
    ner = ner_detector(detector)
    if ner is not None:
        nlp = load_ner(ner_model or SHIPPED_NERS[ner], exclude=[LINKER])
    else:
        nlp = spacy.blank("en", config={"nlp": {"tokenizer": TOKENIZER_CONFIG}})  # spaCy's, with a chunk cache for biomedical text
    if detector == "ruler":
        add_ruler(nlp, kb, span_label)
    if detector.endswith("span_finder"):
        config: Dict[str, object] = {"linker": LINKER, "label": span_label}
        if nested is not None:
            config.update(resolve="all", spans_key=NESTED_SPANS_KEY, nested=nested)
        config.update(span_finder_config or {})
        nlp.add_pipe("sapbert_span_finder", config=config)
    if abbreviations:
        nlp.add_pipe("sapbert_abbreviations")
    if negation:
        from .negation import add_negation

        # with nested mentions, NegEx reads the span group (the entities are among its spans)
        add_negation(nlp, ent_types=list(labels) or None, span_keys=[NESTED_SPANS_KEY] if nested else None)
    for name, (kb_path, linked_labels) in (kbs or {LINKER: (str(kb), list(labels))}).items():
        config = {"kb": kb_path, "encoder": None if encoder is None else str(encoder), "labels": linked_labels}
        if detector.endswith("span_finder"):
            config["overlap"] = False  # the span finder looks its proposals up through the linker: they take turns on its cache
        if nested is not None:
            config["spans_key"] = NESTED_SPANS_KEY
        config.update(linker_config or {})
        nlp.add_pipe("sapbert_linker", name=name, config=config)
    return nlp
