"""The built-in mention detectors, each a function registered in ``registries.detectors``.

A detector is called with the ``nlp`` that ``build_pipeline`` is assembling and a ``DetectorContext``
(the KB folder, the label for unlabelled spans, nested mentions, its settings), adds its components
and returns the ``nlp``. One that starts from a trained pipeline (the NERs) is given an empty one
and returns its own instead, so it comes first. A composite is a list of names, run in order
(``["ner", "span_finder"]``: the span finder adds what the NER missed); names joined by ``+``
(``"ner+span_finder"``, the form the CLI takes) name the same list.

A new detector is one module with a registered function, found by name like these::

    @detectors.register("my_detector")
    def my_detector(nlp: Language, context: DetectorContext) -> Language:
        nlp.add_pipe("my_component", config={"label": context.span_label("my_detector")})
        return nlp

(another package registers it on import, or through the ``spacy_sapbert_detectors`` entry point).
Nothing here imports spaCy until a detector runs: the CLI reads the names for its help.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from .registries import detectors, get, names

if TYPE_CHECKING:  # pragma: no cover
    from spacy.language import Language

PathLike = Union[str, os.PathLike]
# A detector: one registered name, a list of them (run in order), or names joined by "+".
DetectorSpec = Union[str, Sequence[str]]
COMPOSITE_JOIN = "+"
LINKER = "sapbert_linker"
# The span group of nested mentions (``build_pipeline(..., nested=...)``): found by the span finder,
# linked by the linker, while ``doc.ents`` keeps the longest of overlapping mentions.
NESTED_SPANS_KEY = "sapbert_nested"
SHIPPED_NER = Path(__file__).parent / "data" / "ner"
SHIPPED_NER_TRF = Path(__file__).parent / "data" / "ner_trf"
# the trained NER each NER detector loads unless ``ner_model`` names another
SHIPPED_NERS = {"ner": SHIPPED_NER, "ner-trf": SHIPPED_NER_TRF}
# Ruler patterns shorter than this are dropped: two-letter names ("MS") match noise.
MIN_PATTERN_CHARS = 3


@dataclass(frozen=True)
class DetectorContext:
    """What ``build_pipeline`` tells every detector: plain values, so a detector needs no other module.

    ``kb``: the KB folder (None where the pipeline links one KB per label). ``label``: the label a
    detector that does not label its spans gives them (None with one KB per label: then only a
    labelling detector fits). ``nested``: keep nested mentions too (``all``, ``coordinations`` or
    ``heads``; the span finder) in ``doc.spans[nested_key]``. ``configs``: settings by detector
    name. ``linker``: the name of the linker component a detector may search through.
    """

    kb: Optional[PathLike] = None
    label: Optional[str] = "CONCEPT"
    nested: Optional[str] = None
    ner_model: Optional[PathLike] = None
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    linker: str = LINKER
    nested_key: str = NESTED_SPANS_KEY

    def span_label(self, detector: str) -> str:
        """The label for ``detector``'s spans, or a ValueError where the KB is per label."""
        if self.label is None:
            raise ValueError(
                f"a KB per label needs a labelling detector ('ner', 'ner-trf' or 'gold') and no 'labels'; "
                f"{detector!r} gives all its spans one label"
            )
        return self.label

    def config(self, detector: str) -> Dict[str, Any]:
        """``detector``'s settings (a copy: empty when none were given)."""
        return dict(self.configs.get(detector) or {})


def registered_detectors() -> List[str]:
    """Every detector name: the built-ins and those registered by other packages, sorted."""
    return names(detectors)


def detector_help() -> str:
    """The detector choices as the CLI's help lists them."""
    return f"{', '.join(registered_detectors())}, or several joined by '{COMPOSITE_JOIN}' (ner+span_finder)"


def detector_names(detector: DetectorSpec) -> List[str]:
    """The registered detectors ``detector`` names, in order; a ValueError for an unknown one."""
    parts = detector.split(COMPOSITE_JOIN) if isinstance(detector, str) else list(detector)
    known = registered_detectors()
    unknown = [p for p in parts if p not in known] if parts else [detector]
    if unknown:
        raise ValueError(f"detector must be one of {known} (or a list of them), got {unknown[0]!r}")
    return parts


def check_detectors(detector: DetectorSpec, context: DetectorContext) -> List[str]:
    """``detector_names``, each detector's own ``check(context)`` run too (a missing trained model),
    so that a bad detector fails before anything is loaded or built."""
    parts = detector_names(detector)
    for name in parts:
        check = getattr(get(detectors, name), "check", None)
        if check is not None:
            check(context)
    return parts


def start_pipeline(detector: DetectorSpec, context: DetectorContext) -> "Language":
    """A pipeline with ``detector``'s components: an empty one, run through each detector in turn."""
    nlp = blank_pipeline()
    for name in check_detectors(detector, context):
        nlp = get(detectors, name)(nlp, context)
    return nlp


# ---------------------------------------------------------------------------- helpers of the built-ins
def blank_pipeline() -> "Language":
    """An empty English pipeline with spaCy's tokenizer and a chunk cache for biomedical text."""
    import spacy

    from .tokenizer import TOKENIZER_CONFIG

    return spacy.blank("en", config={"nlp": {"tokenizer": TOKENIZER_CONFIG}})


def load_ner(path: PathLike, exclude: Sequence[str] = ()) -> "Language":
    """A trained NER folder as the pipelines run it: with their tokenizer (spaCy's, with a chunk
    cache for biomedical text), so that the NER alone and in a pipeline see the same tokens."""
    import spacy

    from .tokenizer import TOKENIZER_CONFIG

    return spacy.load(path, exclude=list(exclude), config={"nlp": {"tokenizer": TOKENIZER_CONFIG}})


def kb_names(kb_path: PathLike) -> List[str]:
    """The KB's names as written (display forms), for an exact-name ruler."""
    from .kb import ConceptKB

    return list(ConceptKB.from_disk(kb_path).display_names)


def add_ruler(nlp: "Language", kb_path: PathLike, label: str) -> None:
    """An entity ruler over the KB's names (case-insensitive): finds exactly the names in the KB."""
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    names = [n for n in kb_names(kb_path) if len(n) >= MIN_PATTERN_CHARS]
    ruler.add_patterns([{"label": label, "pattern": name} for name in names])  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- the built-in detectors
@detectors.register("gold")
def gold(nlp: "Language", context: DetectorContext) -> "Language":
    """None: the caller sets ``doc.ents`` (gold spans, or its own detector's)."""
    return nlp


@detectors.register("ruler")
def ruler(nlp: "Language", context: DetectorContext) -> "Language":
    """Exact KB names (case-insensitive), labelled ``context.label``."""
    add_ruler(nlp, context.kb, context.span_label("ruler"))  # type: ignore[arg-type]
    return nlp


@detectors.register("span_finder")
def span_finder(nlp: "Language", context: DetectorContext) -> "Language":
    """Encoder-scored KB-vocabulary n-grams (``sapbert_span_finder``), searched through the linker;
    with ``context.nested``, nested mentions too in a span group the linker links."""
    config: Dict[str, Any] = {"linker": context.linker, "label": context.span_label("span_finder")}
    if context.nested is not None:
        config.update(resolve="all", spans_key=context.nested_key, nested=context.nested)
    config.update(context.config("span_finder"))
    nlp.add_pipe("sapbert_span_finder", config=config)
    return nlp


class TrainedNER:
    """A detector that starts from a trained NER pipeline: the one shipped in the package, or
    ``context.ner_model``. Its entities keep the labels the NER gives them."""

    def __init__(self, name: str, shipped: Path):
        self.name = name
        self.shipped = shipped

    def check(self, context: DetectorContext) -> None:
        """The shipped NER must be there (it is trained, not downloaded) unless another is named."""
        if context.ner_model is None and not self.shipped.exists():
            raise FileNotFoundError(
                f"no shipped NER pipeline at {self.shipped}: train it (spacy project run train-{self.name}) or pass ner_model"
            )

    def __call__(self, nlp: "Language", context: DetectorContext) -> "Language":
        if nlp.pipe_names:
            raise ValueError(f"the {self.name!r} detector starts from a trained pipeline: list it first, not after {nlp.pipe_names}")
        return load_ner(context.ner_model or self.shipped, exclude=[context.linker])


detectors.register("ner", func=TrainedNER("ner", SHIPPED_NER))  # the CNN
detectors.register("ner-trf", func=TrainedNER("ner-trf", SHIPPED_NER_TRF))  # the transformer tagger
