"""How far an evaluation score could move with other documents: a bootstrap over documents.

A corpus like GSC+ dev holds 22 abstracts; one system's link F1 there, or the difference between two
systems', is a sample. Resampling the documents with replacement (the unit annotated together, so
that a document's mentions move together) and scoring each resample gives a percentile interval
for a score, and, scoring two systems on the same resamples, one for their difference (a paired
bootstrap: Efron & Tibshirani 1993; Koehn 2004 for NLP scores) and the share of resamples in which
the first scores higher.

A document's counts are a dataclass of integers (``end_to_end.Counts`` end to end, ``metrics.Hits``
on gold spans); a resample's are summed as one numpy matrix product, so that thousands of resamples
of a test split cost well under a second.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Sequence, TypeVar

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95

C = TypeVar("C")


def _picks(n_docs: int, resamples: int, seed: int) -> np.ndarray:
    """How often each document is drawn in each resample (resamples × documents)."""
    if n_docs < 2:
        raise ValueError(f"a bootstrap over documents needs at least 2 documents, got {n_docs}")
    drawn = np.random.default_rng(seed).integers(0, n_docs, size=(resamples, n_docs))
    return np.stack([np.bincount(row, minlength=n_docs) for row in drawn])


def _with_all(weights: np.ndarray) -> np.ndarray:
    """``weights`` after a first row that takes every document once: the metric on the corpus itself."""
    return np.vstack([np.ones((1, weights.shape[1]), dtype=weights.dtype), weights])


def _resampled(per_doc: Sequence[C], weights: np.ndarray, metric: Callable[[C], float]) -> np.ndarray:
    """The metric of each resample: the documents' counts summed with the resample's weights."""
    kind = type(per_doc[0])
    names = [f.name for f in dataclasses.fields(kind)]  # type: ignore[arg-type]
    matrix = np.array([[getattr(c, n) for n in names] for c in per_doc], dtype=np.int64)
    sums = weights @ matrix
    return np.array([metric(kind(**dict(zip(names, row.tolist())))) for row in sums])


def _interval(values: np.ndarray, level: float) -> Dict[str, float]:
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return {"low": round(float(low), 4), "high": round(float(high), 4)}


def score_interval(per_doc: Sequence[C], metric: Callable[[C], float], resamples: int = RESAMPLES,
                   level: float = LEVEL, seed: int = 0) -> Dict[str, Any]:
    """The metric on all documents and its percentile interval over ``resamples`` resamples of them."""
    values = _resampled(per_doc, _with_all(_picks(len(per_doc), resamples, seed)), metric)
    return {"value": round(float(values[0]), 4), **_interval(values[1:], level), "level": level, "resamples": resamples,
            "documents": len(per_doc)}


def paired_difference(first: Sequence[C], second: Sequence[C], metric: Callable[[C], float], resamples: int = RESAMPLES,
                      level: float = LEVEL, seed: int = 0) -> Dict[str, Any]:
    """``metric(first) - metric(second)`` for two systems' counts on the same documents (in the same
    order), its percentile interval over resamples of the documents, and the share of resamples in
    which the first scores higher."""
    if len(first) != len(second):
        raise ValueError(f"paired counts need the same documents: {len(first)} against {len(second)}")
    weights = _with_all(_picks(len(first), resamples, seed))
    differences = _resampled(first, weights, metric) - _resampled(second, weights, metric)
    return {"difference": round(float(differences[0]), 4), **_interval(differences[1:], level),
            "first_higher": round(float(np.mean(differences[1:] > 0)), 4), "level": level, "resamples": resamples,
            "documents": len(first)}
