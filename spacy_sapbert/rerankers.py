"""Re-ordering a batch's candidates after the search: by the mention's sentence, and within a document.

Both take and return the linker's per-batch result: per doc, per span, the linked parts
``(query, candidates)`` (one part, or a coordination's parts). They reorder candidates and never
change a score they did not compute.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from spacy.tokens import Span

from .context import ContextPrototypes, contested, mention_in_context, rerank
from .link_annotations import BatchLinks
from .search import Candidate


def rerank_in_context(spans: List[List[Span]], linked: BatchLinks, weight: float, prototypes: Optional[ContextPrototypes],
                      encode: Callable[[List[str]], np.ndarray]) -> BatchLinks:
    """With a context weight, the candidates near the top of each span (of every part) re-sorted by
    its sentence (``context.rerank``); the sentences of all spans with something to decide
    (``context.contested``) are encoded in one ``encode`` call, the others not at all."""
    if not weight:
        return linked
    pending = [(d, i, span) for d, (doc_spans, doc_linked) in enumerate(zip(spans, linked))
               for i, (span, parts) in enumerate(zip(doc_spans, doc_linked))
               if any(contested(cands, weight) > 1 for _, cands in parts)]
    if not pending:
        return linked
    assert prototypes is not None
    texts = {d: spans[d][0].doc.text for d, _, _ in pending}  # spaCy joins a doc's text anew at each call: once per doc
    vectors = encode([mention_in_context(texts[d], span.start_char, span.end_char) for d, _, span in pending])
    out = [list(doc_linked) for doc_linked in linked]
    for (d, i, _), vector in zip(pending, vectors):
        out[d][i] = [(query, rerank(cands, prototypes.similarities([c.concept_id for c in cands[:contested(cands, weight)]], vector),
                                    weight)) for query, cands in linked[d][i]]
    return out


def consistent_in_document(spans: Sequence[Sequence[Span]], linked: BatchLinks, consistency: float) -> BatchLinks:
    """With ``consistency``, each doc's mentions in text order: one whose query is an earlier
    confident mention's query or its last words, and whose own best match is no exact KB name,
    gets the earlier top candidate first (its other candidates follow, as many as before).
    Coordinations split into parts are left as they are."""
    if not consistency:
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
            if cands and cands[0].score >= consistency:
                words = query.split()
                for start in range(len(words)):
                    confident.setdefault(" ".join(words[start:]), cands[0])
        out.append(doc_out)
    return out
