"""Where a linker's answers live on a doc, and their documented types when read back.

Each linked span gets ``span._.<cui_attr>`` (the concept or None), ``span._.<candidates_attr>``
(``(concept_id, name, score, ambiguous)`` tuples) and ``span._.<parts_attr>`` (``(query, candidates)``
per linked part); an entity's tokens get ``ent_kb_id_``, and a span group's spans their ``kb_id``.
"""
from __future__ import annotations

from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Tuple

from spacy.tokens import Doc, Span, SpanGroup

from .search import Candidate

CandidateTuple = Tuple[str, str, float, bool]
PartTuple = Tuple[str, List[CandidateTuple]]
SpanLinks = List[Tuple[str, List[Candidate]]]  # one span's linked parts: (normalised query, candidates)
BatchLinks = List[List[SpanLinks]]  # per doc, per span


def as_candidates(value: Optional[Sequence[Sequence[Any]]]) -> Optional[List[CandidateTuple]]:
    """``span._.cui_candidates`` as documented: a list of ``(concept_id, name, score, ambiguous)``
    tuples. ``DocBin``, ``Doc.to_bytes`` and ``n_process`` store them as lists; read back, they are tuples again."""
    return None if value is None else [tuple(c) for c in value]  # type: ignore[misc]


def as_parts(value: Optional[Sequence[Sequence[Any]]]) -> Optional[List[PartTuple]]:
    """``span._.cui_parts``: a list of ``(query, candidates)`` tuples, candidates as in ``as_candidates``."""
    return None if value is None else [(str(q), as_candidates(c) or []) for q, c in value]


def ents_and_others(doc: Doc, link_ents: bool, labels: AbstractSet[str], spans_key: Optional[str]) -> Tuple[List[Span], List[Span]]:
    """The spans a linker links, in two parts: the entities (``link_ents``), and the spans of the group
    ``spans_key`` that are not also entities, each once, of ``labels`` (empty: all)."""
    ents: List[Span] = []
    if link_ents:
        ents = [e for e in doc.ents if not labels or e.label_ in labels]
    others: List[Span] = []
    if spans_key is not None and spans_key in doc.spans:
        seen = {(s.start, s.end, s.label) for s in ents}
        others = [s for s in doc.spans[spans_key]
                  if (not labels or s.label_ in labels) and (s.start, s.end, s.label) not in seen]
    return ents, others


def write_links(docs: Sequence[Doc], split: List[Tuple[List[Span], List[Span]]], linked_parts: BatchLinks,
                best: Callable[[Sequence[Candidate]], Optional[Candidate]], attrs: Tuple[str, str, str],
                spans_key: Optional[str]) -> None:
    """Store each doc's links: ``split`` holds its entities and its other spans (of the group ``spans_key``)
    in the order of ``linked_parts``; ``best`` picks the concept; ``attrs``: the cui, candidates and
    parts attribute names (registered with ``attributes.register_span_attribute``)."""
    # our attributes' own setters (``register_span_attribute``), without building a ``span._`` per value
    set_cui, set_candidates, set_parts = (Span.get_extension(a)[3] for a in attrs)
    for doc, (ents, others), doc_parts in zip(docs, split, linked_parts):
        linked: Dict[Tuple[int, int, int], str] = {}
        for span, parts in zip(ents + others, doc_parts):
            cands = parts[0][1]
            chosen = best(cands)
            # stored as tuples, which the getters return as lists: tuples of plain values drop out
            # of the garbage collector's passes, lists never do
            as_tuples = tuple([c.to_tuple() for c in cands])
            set_cui(span, chosen.concept_id if chosen else None)
            set_candidates(span, as_tuples)
            set_parts(span, tuple((query, as_tuples if pc is cands else tuple(c.to_tuple() for c in pc)) for query, pc in parts))
            if chosen is not None:
                linked[(span.start, span.end, span.label)] = chosen.concept_id
        for ent in ents:
            cui = linked.get((ent.start, ent.end, ent.label))
            if cui is not None:
                for token in ent:
                    token.ent_kb_id_ = cui
        if spans_key is not None and spans_key in doc.spans:
            # spans of a group are copies: rebuild the group to store the kb ids
            group = doc.spans[spans_key]
            doc.spans[spans_key] = SpanGroup(
                doc,
                name=spans_key,
                attrs=dict(group.attrs),
                spans=[
                    Span(doc, s.start, s.end, label=s.label, span_id=s.id, kb_id=linked.get((s.start, s.end, s.label), s.kb_id))
                    for s in group
                ],
            )
