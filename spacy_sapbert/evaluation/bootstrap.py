"""How far an end-to-end score could move with other documents: a bootstrap over documents.

A corpus like GSC+ dev holds 22 abstracts; one system's link F1 there, or the difference between two
systems', is a sample. Resampling the documents with replacement (the unit annotated together, so
that a document's mentions move together) and scoring each resample gives a percentile interval
for a score, and, scoring two systems on the same resamples, one for their difference (a paired
bootstrap: Efron & Tibshirani 1993; Koehn 2004 for NLP scores) and the share of resamples in which
the first scores higher.
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence

import numpy as np

from .end_to_end import Counts, prf

RESAMPLES = 2000
LEVEL = 0.95


def link_f1(c: Counts) -> float:
    """Span + concept F1 (``summarize_counts``' ``link_f1``, unrounded)."""
    return prf(c.link_right, c.link_predicted, c.link_right, c.link_gold)[2]


def _picks(n_docs: int, resamples: int, seed: int) -> np.ndarray:
    if n_docs < 2:
        raise ValueError(f"a bootstrap over documents needs at least 2 documents, got {n_docs}")
    return np.random.default_rng(seed).integers(0, n_docs, size=(resamples, n_docs))


def _interval(values: np.ndarray, level: float) -> Dict[str, float]:
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return {"low": round(float(low), 4), "high": round(float(high), 4)}


def score_interval(per_doc: Sequence[Counts], metric: Callable[[Counts], float] = link_f1, resamples: int = RESAMPLES,
                   level: float = LEVEL, seed: int = 0) -> Dict[str, float]:
    """The metric on all documents and its percentile interval over ``resamples`` resamples of them."""
    values = np.array([metric(Counts.total(per_doc[int(i)] for i in p)) for p in _picks(len(per_doc), resamples, seed)])
    return {"value": round(metric(Counts.total(per_doc)), 4), **_interval(values, level),
            "level": level, "resamples": resamples, "documents": len(per_doc)}


def paired_difference(first: Sequence[Counts], second: Sequence[Counts], metric: Callable[[Counts], float] = link_f1,
                      resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> Dict[str, float]:
    """``metric(first) - metric(second)`` for two systems' counts on the same documents (in the same
    order), its percentile interval over resamples of the documents, and the share of resamples in
    which the first scores higher."""
    if len(first) != len(second):
        raise ValueError(f"paired counts need the same documents: {len(first)} against {len(second)}")
    picks = _picks(len(first), resamples, seed)
    differences = np.array([metric(Counts.total(first[int(i)] for i in p)) - metric(Counts.total(second[int(i)] for i in p))
                            for p in picks])
    return {"difference": round(metric(Counts.total(first)) - metric(Counts.total(second)), 4),
            **_interval(differences, level), "first_higher": round(float(np.mean(differences > 0)), 4),
            "level": level, "resamples": resamples, "documents": len(first)}
