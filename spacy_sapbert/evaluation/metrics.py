"""Lenient (the paper's) and strict (concept-level) accuracy over ranked dictionary names.

A system's output for one searched string is a ranking of dictionary *names*, best first; a
name is given as the concept ids it belongs to (several for an ambiguous name such as "ms").

* Lenient Acc@k, as SapBERT's ``evaluate_topk_acc``/``check_label``: a string is a hit when one
  of its top-k names has an id in the gold set; a query split into several strings (a composite
  mention) is a hit when every string is. An ambiguous name counts as soon as one of its
  concepts is gold.
* Strict Acc@k: names are turned into concept predictions (each name contributes the concepts
  no better name has given); an ambiguous prediction counts only if all its concepts are gold
  (the KRISSBERT rule). ``k`` counts predictions. A composite query needs every part to hit;
  like the lenient metric, a part may hit any of the query's gold ids (coverage is not required).

Queries without gold ids (NIL) are left out of every rate and counted as ``n_nil``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

Name = Sequence[str]  # the concept ids of one ranked name
Ranking = Sequence[Name]  # the names found for one searched string, best first
DEFAULT_KS = (1, 5)


def concept_matches(concept: str, gold: Set[str], aliases: Optional[Mapping[str, Collection[str]]]) -> bool:
    """A concept is gold when its id, or one of its alternative ids, is a gold id."""
    if concept in gold:
        return True
    return bool(aliases) and any(a in gold for a in aliases.get(concept, ()))


def lenient_hit(parts: Sequence[Ranking], gold: Set[str], k: int, aliases: Optional[Mapping[str, Collection[str]]] = None) -> bool:
    """Every searched string has, in its top-k names, a name with at least one gold concept."""
    return bool(parts) and all(any(any(concept_matches(c, gold, aliases) for c in name) for name in ranking[:k]) for ranking in parts)


def concept_predictions(ranking: Ranking) -> List[Tuple[str, ...]]:
    """Names → concept predictions: each name yields the concepts not yet predicted, as one
    prediction (ambiguous when it holds several); names adding nothing new are skipped."""
    seen: Set[str] = set()
    out: List[Tuple[str, ...]] = []
    for name in ranking:
        new = tuple(c for c in dict.fromkeys(name) if c not in seen)
        if new:
            seen.update(new)
            out.append(new)
    return out


def strict_hit(parts: Sequence[Ranking], gold: Set[str], k: int, aliases: Optional[Mapping[str, Collection[str]]] = None) -> bool:
    """Every searched string has, in its top-k concept predictions, one whose concepts are all gold."""
    return bool(parts) and all(
        any(all(concept_matches(c, gold, aliases) for c in pred) for pred in concept_predictions(ranking)[:k]) for ranking in parts
    )


@dataclass
class QueryScores:
    """Per-query outcomes; ``summarize`` turns them (or a subset) into rates."""

    lenient: Dict[int, np.ndarray]
    strict: Dict[int, np.ndarray]
    ambiguous_top1: np.ndarray
    nil: np.ndarray

    def __len__(self) -> int:
        return len(self.nil)


def score_queries(
    golds: Sequence[Collection[str]],
    rankings: Sequence[Sequence[Ranking]],
    aliases: Optional[Mapping[str, Collection[str]]] = None,
    ks: Sequence[int] = DEFAULT_KS,
) -> QueryScores:
    """Score each query: ``golds[i]`` its gold ids, ``rankings[i]`` one ranking per searched string."""
    if len(golds) != len(rankings):
        raise ValueError(f"{len(golds)} gold sets but {len(rankings)} rankings")
    n = len(golds)
    lenient = {k: np.zeros(n, bool) for k in ks}
    strict = {k: np.zeros(n, bool) for k in ks}
    ambiguous = np.zeros(n, bool)
    nil = np.zeros(n, bool)
    for i, (gold_ids, parts) in enumerate(zip(golds, rankings)):
        gold = set(gold_ids)
        if not gold:
            nil[i] = True
            continue
        ambiguous[i] = any(len(set(r[0])) > 1 for r in parts if len(r))
        for k in ks:
            lenient[k][i] = lenient_hit(parts, gold, k, aliases)
            strict[k][i] = strict_hit(parts, gold, k, aliases)
    return QueryScores(lenient, strict, ambiguous, nil)


def _percent(hits: np.ndarray, mask: np.ndarray) -> Optional[float]:
    n = int(mask.sum())
    return round(100.0 * float(hits[mask].sum()) / n, 2) if n else None


def summarize(scores: QueryScores, subset: Optional[np.ndarray] = None) -> Dict[str, object]:
    """Rates in percent over the non-NIL queries (of ``subset`` when given)."""
    mask = ~scores.nil if subset is None else (~scores.nil & subset)
    out: Dict[str, object] = {"n_queries": int(mask.sum())}
    for k in sorted(scores.lenient):
        out[f"lenient_acc@{k}"] = _percent(scores.lenient[k], mask)
    for k in sorted(scores.strict):
        out[f"strict_acc@{k}"] = _percent(scores.strict[k], mask)
    out["ambiguous_top1_share"] = _percent(scores.ambiguous_top1, mask)
    if subset is None:
        out["n_nil"] = int(scores.nil.sum())
    return out


@dataclass
class Hits:
    """One document's queries: how many a rate counts, and how many of them hit."""

    right: int = 0
    counted: int = 0


def accuracy(h: Hits) -> float:
    """A rate in percent (0 where nothing is counted)."""
    return 100.0 * h.right / h.counted if h.counted else 0.0


def hits_per_document(doc_ids: Sequence[str], hits: np.ndarray, nil: np.ndarray) -> List[Hits]:
    """Each document's ``Hits`` (in first-seen order) for one rate's per-query ``hits``, NIL queries
    left out as ``summarize`` leaves them out: what a bootstrap over documents resamples."""
    per_doc: Dict[str, Hits] = {}
    for doc_id, hit, is_nil in zip(doc_ids, hits.tolist(), nil.tolist()):
        h = per_doc.setdefault(doc_id, Hits())
        if not is_nil:
            h.counted += 1
            h.right += int(hit)
    return list(per_doc.values())

