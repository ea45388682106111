"""Synonym-pair corpora and the order in which their pairs are batched.

A pair file has one ``concept||name1||name2`` line per pair (the authors' format). A
*batcher* turns the pairs into an epoch's *plan*: a list of arrays of pair indices, one array
per step. The plan is a plain array, so a checkpoint can store it and resume mid-epoch exactly.

A context file (optional, KRISSBERT-style) has one JSON line ``{"concept": ID, "text": SENTENCE}`` per
mention in context (``python -m training.pairs contexts``); each step then also pulls together the
sentences of a few concepts, drawn from the seed and the step alone, so a resumed run draws the same.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import torch

from spacy_sapbert.normalize import normalize_name
from spacy_sapbert.records import InputError

from .registry import registry

Plan = List[np.ndarray]


@dataclass
class PairSet:
    """Synonym pairs with integer labels (one label per concept)."""

    left: List[str]
    right: List[str]
    labels: np.ndarray
    concepts: List[str]

    def __len__(self) -> int:
        return len(self.left)

    def batch(self, indices: np.ndarray) -> Tuple[List[str], torch.Tensor]:
        """Both sides of the pairs as one list of names, and the labels duplicated to match."""
        names = [self.left[i] for i in indices] + [self.right[i] for i in indices]
        labels = torch.from_numpy(np.concatenate([self.labels[indices], self.labels[indices]]))
        return names, labels

    def pairs_by_concept(self) -> List[np.ndarray]:
        """For each label, the indices of its pairs."""
        order = np.argsort(self.labels, kind="stable")
        bounds = np.searchsorted(self.labels[order], np.arange(len(self.concepts) + 1))
        return [order[bounds[i] : bounds[i + 1]] for i in range(len(self.concepts))]


def make_pair_set(triples: Sequence[Tuple[str, str, str]], lowercase: bool = True) -> PairSet:
    """Pairs from (concept, name1, name2) triples; names normalised like the linker's queries."""
    index: Dict[str, int] = {}
    left, right, labels = [], [], []
    for concept, a, b in triples:
        labels.append(index.setdefault(concept, len(index)))
        left.append(normalize_name(a, lowercase))
        right.append(normalize_name(b, lowercase))
    return PairSet(left, right, np.asarray(labels, dtype=np.int64), list(index))


def read_pair_file(path: Union[str, Path], lowercase: bool = True) -> PairSet:
    """Read ``concept||name1||name2`` lines; blank lines are skipped, malformed ones are errors."""
    triples = []
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n\r")
            if not line.strip():
                continue
            parts = line.split("||")
            if len(parts) != 3 or not all(p.strip() for p in parts):
                raise InputError(path, lineno, "expected 'concept||name1||name2'")
            triples.append((parts[0].strip(), parts[1], parts[2]))
    if not triples:
        raise InputError(path, None, "no pairs in the file")
    return make_pair_set(triples, lowercase)


@dataclass
class ContextSet:
    """Mentions in context, grouped by concept; only concepts with two or more of them (a lone
    sentence has nothing to be pulled towards)."""

    concepts: List[str]
    texts: List[List[str]]

    def __len__(self) -> int:
        return len(self.concepts)

    def batch(self, rng: np.random.Generator, n_concepts: int, per_concept: int) -> Tuple[List[str], torch.Tensor]:
        """``per_concept`` sentences each of ``n_concepts`` concepts (fewer where there are fewer); the
        labels are the concepts' rows, the same on every rank."""
        texts: List[str] = []
        labels: List[int] = []
        for row in rng.choice(len(self.concepts), size=min(n_concepts, len(self.concepts)), replace=False):
            pool = self.texts[row]
            for j in rng.choice(len(pool), size=min(per_concept, len(pool)), replace=False):
                texts.append(pool[j])
                labels.append(int(row))
        return texts, torch.tensor(labels, dtype=torch.int64)


def read_context_file(path: Union[str, Path]) -> ContextSet:
    """Read ``{"concept": ID, "text": SENTENCE}`` lines; blank lines are skipped, malformed ones are errors."""
    by_concept: Dict[str, List[str]] = {}
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(path, lineno, f"not JSON ({e.msg})") from None
            if not isinstance(record, dict) or not all(isinstance(record.get(k), str) and record[k].strip() for k in ("concept", "text")):
                raise InputError(path, lineno, 'expected {"concept": ID, "text": SENTENCE} with two non-empty strings')
            by_concept.setdefault(record["concept"], []).append(record["text"])
    kept = {c: t for c, t in by_concept.items() if len(t) >= 2}
    if not kept:
        raise InputError(path, None, "no concept has two or more examples")
    return ContextSet(list(kept), list(kept.values()))


def cut_into_batches(order: np.ndarray, batch_size: int, min_batch: int = 1) -> Plan:
    """Consecutive slices of ``batch_size``; a last slice smaller than ``min_batch`` is dropped
    (data-parallel ranks each need at least one pair)."""
    plan = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if plan and len(plan[-1]) < min_batch:
        plan.pop()
    return plan


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The same (seed, epoch) gives the same order on every rank and after a resume."""
    return np.random.default_rng([seed, epoch])


class RandomBatches:
    """The authors' ``DataLoader(shuffle=True)``: a fresh permutation of all pairs each epoch."""

    def plan(self, pairs: PairSet, epoch: int, seed: int, batch_size: int, min_batch: int = 1, encoder=None) -> Plan:
        order = epoch_rng(seed, epoch).permutation(len(pairs))
        return cut_into_batches(order, batch_size, min_batch)


class ConfusableBatches:
    """Batches of neighbouring concepts, so the miner finds hard negatives in every batch.

    At the start of each epoch one name per concept is encoded with the *current* encoder,
    each concept's nearest concepts are looked up, and concepts are grouped with their
    neighbours. The epoch then runs in rounds: in each round every concept with pairs left
    gives one pair, groups in a random order, so a batch holds many distinct but confusable
    concepts. Every pair is still used exactly once per epoch.
    """

    def __init__(self, group_size: int = 8, neighbours: int = 16, encode_batch_size: int = 256):
        self.group_size = group_size
        self.neighbours = neighbours
        self.encode_batch_size = encode_batch_size

    def representative_names(self, pairs: PairSet) -> List[str]:
        first: Dict[int, str] = {}
        for label, name in zip(pairs.labels.tolist(), pairs.left):
            first.setdefault(label, name)
        return [first.get(i, pairs.concepts[i]) for i in range(len(pairs.concepts))]

    def neighbour_lists(self, pairs: PairSet, encoder) -> np.ndarray:
        import faiss

        vectors = encoder.encode(self.representative_names(pairs), batch_size=self.encode_batch_size)
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        k = min(self.neighbours + 1, len(vectors))
        _, rows = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
        return rows

    def groups(self, neighbours: np.ndarray, rng: np.random.Generator) -> List[List[int]]:
        used = np.zeros(len(neighbours), dtype=bool)
        groups = []
        for c in rng.permutation(len(neighbours)):
            if used[c]:
                continue
            group = [int(c)]
            used[c] = True
            for n in neighbours[c]:
                if len(group) >= self.group_size:
                    break
                if n >= 0 and not used[n]:
                    group.append(int(n))
                    used[n] = True
            groups.append(group)
        return groups

    def plan(self, pairs: PairSet, epoch: int, seed: int, batch_size: int, min_batch: int = 1, encoder=None) -> Plan:
        if encoder is None:
            raise ValueError("confusable batches need the encoder to find neighbouring concepts")
        rng = epoch_rng(seed, epoch)
        groups = self.groups(self.neighbour_lists(pairs, encoder), rng)
        queues = [rng.permutation(p) for p in pairs.pairs_by_concept()]
        order: List[int] = []
        for r in range(max((len(q) for q in queues), default=0)):
            for g in rng.permutation(len(groups)):
                order.extend(int(queues[c][r]) for c in groups[g] if r < len(queues[c]))
        return cut_into_batches(np.asarray(order, dtype=np.int64), batch_size, min_batch)


@registry.batchers("random.v1")
def random_batches() -> RandomBatches:
    return RandomBatches()


@registry.batchers("confusable.v1")
def confusable_batches(group_size: int = 8, neighbours: int = 16, encode_batch_size: int = 256) -> ConfusableBatches:
    return ConfusableBatches(group_size=group_size, neighbours=neighbours, encode_batch_size=encode_batch_size)


def plan_to_arrays(plan: Plan) -> Tuple[np.ndarray, np.ndarray]:
    """A plan as two flat arrays (indices, offsets), for safetensors."""
    offsets = np.cumsum([0] + [len(b) for b in plan]).astype(np.int64)
    flat = np.concatenate(plan).astype(np.int64) if plan else np.zeros(0, dtype=np.int64)
    return flat, offsets


def plan_from_arrays(flat: np.ndarray, offsets: np.ndarray) -> Plan:
    return [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def shard(batch: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """This rank's contiguous share of a global batch."""
    return np.array_split(batch, world_size)[rank]
