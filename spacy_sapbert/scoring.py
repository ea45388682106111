"""The linker's scorer: concept-id precision, recall and F over the spans a linker links.

Registered as ``spacy_sapbert.kb_id_scorer.v1`` (the ``sapbert_linker`` factory's default ``scorer``), so
``nlp.evaluate`` reports ``kb_id_p``/``kb_id_r``/``kb_id_f`` and per-label scores.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from spacy.scorer import PRFScore
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import registry

# what ``nlp.evaluate`` weighs for a component that sets entities (the span finder, the transformer NER), as spaCy's NER does
ENTS_SCORE_WEIGHTS = {"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None}


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

