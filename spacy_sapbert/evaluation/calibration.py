"""The linker's NIL threshold, chosen on dev mentions and stored in the KB folder.

With threshold 0.0 every mention gets its nearest concept, so a mention of something the KB does
not hold ("MS" against HPO) is linked with confidence to something else. The threshold is the
lowest top-candidate score at which the linker answers; below it ``_.cui`` stays empty.

How it is chosen (``METHOD``): the dev gold mentions go through the linker, and the threshold
maximises the F1 of its answers, counted as the linker's own scorer counts them (``kb_id_f``): an
answer with a gold concept is a true positive; a wrong answer a false positive and a false
negative; an abstention a false negative; an answer on a mention whose gold concept is not in the
KB a false positive. Among equally good thresholds the lowest is taken, placed halfway between two
observed scores.

Dev sets rarely hold mentions of concepts missing from the KB, so each in-KB mention also gives a
*leave-gold-out* case: the mention as if its gold concepts were not in the KB (the score of the
best candidate that is not gold). How often the linker abstains on those (``nil_abstention``) is
reported and plotted; with ``nil_weight`` > 0 an answer on one also counts as that fraction of a
false positive, trading more abstention for fewer confident answers about missing concepts.

``search.store_calibration`` writes the result into a KB folder's meta, ``LinkingKB.calibrated_threshold``
reads it, and the linker uses it when its ``threshold`` setting is None. The choosing lives here, with
the evaluation, because it runs the dev mentions through the evaluation's gold-span pipeline
(``gold_spans``); the runtime only writes and reads the stored record (``search``, ``hpo_kb``).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from ..search import store_calibration, store_context_weight, store_fusion

PathLike = Union[str, os.PathLike]
METHOD = (
    "max F1 of the linker's answers on dev gold mentions (right answer: TP; wrong answer: FP and FN; abstention: FN; "
    "answer on a mention whose gold concept is not in the KB: FP); leave-gold-out cases count as nil_weight of a FP"
)
CURVE_STEP = 0.01


@dataclass(frozen=True)
class Outcome:
    """One case: the linker's top score, whether it would answer at a low enough threshold
    (an ambiguous top name is never answered), whether that answer is gold, whether a gold
    concept is in the KB (False: a NIL case, right only when the linker abstains), and whether
    the case is a leave-gold-out simulation rather than a real dev mention."""

    score: float
    answerable: bool
    correct: bool
    in_kb: bool
    left_out: bool = False


def mention_outcomes(
    candidates: Sequence[Sequence[Any]],
    gold: Collection[str],
    in_kb: bool,
    aliases: Optional[Mapping[str, Collection[str]]] = None,
    ambiguous: str = "first",
    leave_gold_out: bool = True,
) -> List[Outcome]:
    """The cases one dev mention gives, from the linker's ``(concept_id, name, score, ambiguous)``
    candidates (best first) and its gold ids: the mention itself (a NIL case when no gold
    concept is in the KB, ``in_kb`` False) and, for an in-KB mention, its leave-gold-out case."""
    gold = set(gold)

    def is_gold(concept: str) -> bool:
        return concept in gold or bool(aliases) and any(a in gold for a in aliases.get(concept, ()))  # type: ignore[union-attr]

    def outcome(cands: Sequence[Sequence[Any]], case_in_kb: bool, left_out: bool) -> Outcome:
        if not cands:
            return Outcome(-math.inf, False, False, case_in_kb, left_out)
        cid, _, score, amb = cands[0][:4]
        answerable = not (amb and ambiguous == "none")
        return Outcome(float(score), answerable, answerable and case_in_kb and is_gold(cid), case_in_kb, left_out)

    out = [outcome(candidates, in_kb, False)]
    if in_kb and leave_gold_out:
        out.append(outcome([c for c in candidates if not is_gold(c[0])], False, True))
    return out


def _arrays(outcomes: Sequence[Outcome]):
    score = np.clip(np.array([o.score for o in outcomes], dtype=np.float64), -np.inf, 1.0)
    answerable = np.array([o.answerable for o in outcomes], dtype=bool) & np.isfinite(score)
    correct = np.array([o.correct for o in outcomes], dtype=bool)
    in_kb = np.array([o.in_kb for o in outcomes], dtype=bool)
    left_out = np.array([o.left_out for o in outcomes], dtype=bool)
    return score, answerable, correct, in_kb, left_out


def _f1(tp: np.ndarray, fp: np.ndarray, n_in: int) -> np.ndarray:
    """2TP / (2TP + FP + FN) with FN = n_in - TP (every in-KB case not answered right)."""
    denominator = tp + n_in + fp
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1e-12), 0.0)


def evaluate_threshold(outcomes: Sequence[Outcome], threshold: float, nil_weight: float = 0.0) -> Dict[str, float]:
    """What the linker does at ``threshold`` (answers when the top score is at least it), on the
    real dev mentions: ``f1`` (the objective; leave-gold-out answers weighted ``nil_weight``),
    ``precision`` (of its answers), ``abstention`` (share of in-KB mentions left unlinked),
    ``answered_right`` (share of in-KB mentions linked right), and ``nil_abstention`` (share of
    NIL cases, leave-gold-out ones included, left unlinked: the higher the better)."""
    score, answerable, correct, in_kb, left_out = _arrays(outcomes)
    answered = answerable & (score >= threshold)
    real = ~left_out
    n_in = int((in_kb & real).sum())
    tp = int((answered & correct & real).sum())
    fp_real = int((answered & ~correct & real).sum())
    fp_left_out = int((answered & left_out).sum())
    answered_in = int((answered & in_kb & real).sum())
    n_nil = int((~in_kb).sum())
    return {
        "threshold": round(float(threshold), 4),
        "f1": round(float(_f1(np.array(tp), np.array(fp_real + nil_weight * fp_left_out), n_in)), 4),
        "precision": round(tp / (tp + fp_real), 4) if tp + fp_real else 1.0,
        "abstention": round(1 - answered_in / n_in, 4) if n_in else 0.0,
        "answered_right": round(tp / n_in, 4) if n_in else 0.0,
        "nil_abstention": round(int((~answered & ~in_kb).sum()) / n_nil, 4) if n_nil else 0.0,
    }


def choose_threshold(outcomes: Sequence[Outcome], nil_weight: float = 0.0) -> float:
    """The threshold in [-1, 1] that maximises ``evaluate_threshold``'s F1 (see the module docstring)."""
    score, answerable, correct, in_kb, left_out = _arrays(outcomes)
    n_in = int((in_kb & ~left_out).sum())
    levels = np.unique(np.concatenate([[-1.0], np.maximum(score[answerable], -1.0)]))  # ascending
    # answering at level j = answering every answerable case scoring at least levels[j]
    at = np.searchsorted(levels, np.maximum(score[answerable], -1.0))
    tp_gain = (correct & ~left_out)[answerable].astype(float)
    fp_gain = np.where(left_out, nil_weight, (~correct).astype(float))[answerable]

    def at_or_above(gain: np.ndarray) -> np.ndarray:
        return np.bincount(at, weights=gain, minlength=len(levels))[::-1].cumsum()[::-1]

    f1 = _f1(at_or_above(tp_gain), at_or_above(fp_gain), n_in)
    best = int(np.argmax(np.round(f1, 12)))  # first (lowest) of the best
    if best == 0:
        return float(levels[0])
    low, high = float(levels[best - 1]), float(levels[best])
    mid = round((low + high) / 2, 4)
    return mid if low < mid <= high else high


def curve(outcomes: Sequence[Outcome], nil_weight: float = 0.0, start: float = 0.0, step: float = CURVE_STEP) -> List[Dict[str, float]]:
    """``evaluate_threshold`` on a grid from ``start`` to 1.0: the precision/abstention plot's data."""
    n = int(round((1.0 - start) / step))
    return [evaluate_threshold(outcomes, start + i * step, nil_weight) for i in range(n + 1)]


def calibrate(outcomes: Sequence[Outcome], dev: str, nil_weight: float = 0.0) -> Dict[str, Any]:
    """The calibration record stored in a KB's meta: the threshold and how it was chosen."""
    if not any(o.in_kb and not o.left_out for o in outcomes):
        raise ValueError(f"{dev}: no dev mention has a gold concept in the KB; nothing to calibrate on")
    threshold = choose_threshold(outcomes, nil_weight)
    return {
        "threshold": threshold,
        "method": METHOD,
        "nil_weight": nil_weight,
        "dev": dev,
        "cases": {
            "in_kb": sum(o.in_kb for o in outcomes),
            "nil": sum(not o.in_kb and not o.left_out for o in outcomes),
            "left_out": sum(o.left_out for o in outcomes),
        },
        "at_threshold": evaluate_threshold(outcomes, threshold, nil_weight),
        "at_zero": evaluate_threshold(outcomes, 0.0, nil_weight),
    }


def gold_concepts(kb) -> tuple:
    """The ids a gold annotation may use for the KB's concepts (their ids and alternative ids),
    and each concept's alternative ids."""
    aliases = kb.concept_aliases()
    known = set(kb.concept_ids) | {a for x in aliases.values() for a in x}
    return known, aliases


def linker_outcomes(nlp, documents: Iterable[Any], spelling: Optional[Mapping[str, str]] = None) -> List[Outcome]:
    """The cases of dev ``documents`` (``evaluation.datasets.Document``: text and gold mentions)
    linked by ``nlp``'s linker in ``nlp.pipe`` with the gold mentions as spans."""
    from .gold_spans import find_linker, link_gold_mentions

    documents = list(documents)
    linker = find_linker(nlp)
    links = link_gold_mentions(nlp, documents, spelling)
    known, aliases = gold_concepts(linker.linking_kb.kb)
    out: List[Outcome] = []
    for document in documents:
        for m in document.mentions:
            if not m.ids:
                continue  # unannotated: neither right nor wrong
            parts = links.parts.get((m.doc_id, m.start, m.end)) or [("", [])]
            out += mention_outcomes(parts[0][1], m.ids, any(g in known for g in m.ids), aliases, linker.ambiguous)
    return out


def calibrate_kb_folder(
    kb_folder: PathLike,
    documents: Iterable[Any],
    dev: str,
    *,
    label: str = "CONCEPT",
    encoder: Optional[PathLike] = None,
    spelling: Optional[Mapping[str, str]] = None,
    nil_weight: float = 0.0,
    store: bool = True,
    linker_config: Optional[Mapping[str, Any]] = None,
    fusion_weights: Sequence[float] = (),
    context_weights: Sequence[float] = (),
) -> Dict[str, Any]:
    """Choose the threshold for the KB folder on dev ``documents`` (gold spans through the shipped
    gold-span pipeline; ``spelling``: a typo list applied to the mention words first) and, with
    ``store``, write it into the folder's meta. Returns the record, plus its ``curve`` (not stored).

    ``fusion_weights``: first choose the linker's sparse + dense fusion weight among them, by the
    share of dev mentions whose top concept is gold (ties: the smaller weight; 0 = off), store it
    too (``search.store_fusion``) and choose the threshold at that weight (``fusion`` in the record).
    ``context_weights``: likewise the context reranking weight (the KB needs prototypes,
    ``build-context``; ``search.store_context_weight``), chosen after the fusion weight."""
    from ..pipelines import build_pipeline
    from .gold_spans import GOLD_SPANS_KEY

    documents = list(documents)

    def outcomes_at(settings: Mapping[str, Any]) -> List[Outcome]:
        config = {**(linker_config or {}), **settings, "spans_key": GOLD_SPANS_KEY}  # overlapping gold mentions go to this group
        nlp = build_pipeline(kb_folder, "gold", encoder=None if encoder is None else str(encoder), label=label, linker_config=config)
        return linker_outcomes(nlp, documents, spelling)

    chosen: Dict[str, Any] = {}  # the settings chosen so far, each tried at the ones before it
    records: Dict[str, Dict[str, Any]] = {}
    outcomes: Optional[List[Outcome]] = None
    for key, setting, weights in (("fusion", "fusion_weight", fusion_weights), ("context", "context_weight", context_weights)):
        if not weights:
            continue
        tried = {float(w): outcomes_at({**chosen, setting: float(w)}) for w in sorted(set(weights))}
        accuracy = {w: evaluate_threshold(found, -1.0)["answered_right"] for w, found in tried.items()}
        weight = max(accuracy, key=lambda w: (accuracy[w], -w))
        records[key] = {"weight": weight, "method": "the best share of dev mentions whose top concept is gold (ties: the smaller weight)",
                        "dev": dev, "top_concept_right_by_weight": {str(w): a for w, a in accuracy.items()}}
        chosen[setting], outcomes = weight, tried[weight]
    if outcomes is None:
        outcomes = outcomes_at({})
    record = calibrate(outcomes, dev, nil_weight)
    record.update(records)
    if store:
        if "fusion" in records:
            store_fusion(kb_folder, records["fusion"])
        if "context" in records:
            store_context_weight(kb_folder, records["context"])
        store_calibration(kb_folder, record)
    return {**record, "curve": curve(outcomes, nil_weight)}
