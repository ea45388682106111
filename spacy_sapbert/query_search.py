"""One batch of normalised queries searched in a KB: the linker's search behind its mention cache.

Most mentions are KB names, so with ``exact_names`` such a query, or one spelling a KB name another
way ("haematuria": ``ConceptKB.row_of_variant``), is searched with the vector the index stores for
that name instead of being encoded again (and answered from the KB's neighbour table where it has
one); the other queries are encoded in one batch, a British spelling also as its American one.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .encoder import SapEncoder
from .kb import ConceptKB
from .normalize import american_spelling
from .search import Candidate, LinkingKB


def top_score(cands: Sequence[Candidate]) -> float:
    """The best candidate's score; -inf without candidates."""
    return cands[0].score if cands else float("-inf")


def whole_or_parts(linked: List[Tuple[str, List[Candidate]]]) -> List[Tuple[str, List[Candidate]]]:
    """A mention's answer from its searches ``(query, candidates)``, the whole mention's first, then a
    coordination's parts (``composites.split_mention``): the parts when every part matches the KB
    better than the whole does, else the whole."""
    whole, parts = linked[0], linked[1:]
    if parts and all(p[1] for p in parts) and min(p[1][0].score for p in parts) > top_score(whole[1]):
        return parts
    return [whole]


def search_queries(linking_kb: LinkingKB, encoder: SapEncoder, queries: List[str], *, top_k: int, exact_names: bool,
                   fusion_weight: float, batch_size: int) -> List[List[Candidate]]:
    """Candidates of normalised queries, searched in one batch (``LinkingKB.candidates``). A British
    spelling that is no KB name ("t-cell leukaemia", ``american_alternatives``) is also searched as its
    American one, which an encoder trained mostly on American text places better, and the list with
    the better top score answers it. The scores of encoded queries pass through the encoder's
    ``score_calibration`` where it has one (a distilled query encoder's)."""
    american = american_alternatives(linking_kb.kb, queries)
    searched = list(queries) + sorted(set(american.values()) - set(queries))
    vectors, name_rows = query_vectors(linking_kb, encoder, searched, exact_names=exact_names, batch_size=batch_size)
    found = dict(zip(searched, linking_kb.candidates(vectors, top_k=top_k, queries=searched, fusion_weight=fusion_weight,
                                                     name_rows=name_rows, calibration=encoder.score_calibration)))
    return [found[american[q]] if q in american and top_score(found[american[q]]) > top_score(found[q]) else found[q]
            for q in queries]


def american_alternatives(kb: ConceptKB, queries: Sequence[str]) -> Dict[str, str]:
    """Query -> its American spelling, for the queries that spell it otherwise and are no KB name, as
    written or spelt another way (that name answers them), in a KB that lower-cases its names."""
    if not kb.lowercase:
        return {}
    out = {}
    for query in queries:
        us = kb.normalize(american_spelling(query))
        if us != query and kb.row_of_name(us) is None and kb.row_of_variant(query) is None:
            out[query] = us
    return out


def query_vectors(linking_kb: LinkingKB, encoder: SapEncoder, keys: Sequence[str], *, exact_names: bool,
                  batch_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """The search vectors of normalised queries: the encoder's, except that with ``exact_names``
    a query that is a KB name takes that name's vector from the index (no encoding: most
    mentions are KB names). Where the index keeps only codes, every query is encoded. Also each
    query's name row where it took that name's vector (-1 elsewhere): the KB's neighbour table
    then answers it without a search."""
    kb = linking_kb.kb
    rows: List[Optional[int]] = [kb.row_of_name(k) for k in keys] if exact_names else [None] * len(keys)
    rows = [kb.row_of_variant(k) if row is None and exact_names else row for k, row in zip(keys, rows)]
    named = [i for i, row in enumerate(rows) if row is not None]
    stored = linking_kb.index.stored_vectors([rows[i] for i in named]) if named else None
    if stored is None:
        named = []
    out = np.empty((len(keys), linking_kb.index.dim), dtype=np.float32)
    name_rows = np.full(len(keys), -1, dtype=np.int64)
    if named:
        out[named] = stored
        name_rows[named] = [rows[i] for i in named]
    rest = [i for i, row in enumerate(rows) if row is None or stored is None]
    if rest:
        out[rest] = encoder.encode([keys[i] for i in rest], batch_size=batch_size)
    return out, name_rows
