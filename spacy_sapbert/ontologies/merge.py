"""Merge concepts of several vocabularies into CUI-like clusters through shared cross-references.

The way UMLS puts MeSH, HPO and MONDO terms for one disease under one CUI, we join records
that share a key (a UMLS CUI, a MeSH id, an OMIM number), with union-find. Two guards keep
clusters honest: a key shared by several concepts *of one vocabulary* is a many-to-one
mapping (a broad MeSH heading), not a synonym, so it joins nothing for that vocabulary;
and a cluster never holds two concepts of the same vocabulary (a vocabulary's own concepts
are distinct by definition).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..records import ConceptRecord
from ._common import unique

#: how vocabularies spell the namespaces we merge on → one canonical spelling
NAMESPACE_ALIASES = {
    "UMLS": "UMLS", "UMLS_CUI": "UMLS", "CUI": "UMLS",
    "MESH": "MESH", "MSH": "MESH",
    "OMIM": "OMIM", "MIM": "OMIM", "OMIMPS": "OMIM",
}
DEFAULT_KEY_NAMESPACES = ("UMLS", "MESH", "OMIM")


def merge_key(ref: str, key_namespaces: Sequence[str] = DEFAULT_KEY_NAMESPACES) -> Optional[str]:
    """``"MSH:D012640"`` → ``"MESH:D012640"``, ``"UMLS_CUI:C0012634"`` → ``"UMLS:C0012634"``; None if not a key namespace."""
    prefix, sep, local = ref.partition(":")
    if not sep or not local.strip():
        return None
    namespace = NAMESPACE_ALIASES.get(prefix.strip().upper())
    if namespace is None or namespace not in key_namespaces:
        return None
    return f"{namespace}:{local.strip().upper()}"


def vocabulary_of(record: ConceptRecord) -> str:
    """The vocabulary a record comes from: its first source, else its id prefix."""
    if record.sources:
        return record.sources[0][0]
    return record.id.split(":", 1)[0] if ":" in record.id else ""


@dataclass
class MergeStats:
    """Counts before and after merging, per source vocabulary."""

    input_concepts: Dict[str, int] = field(default_factory=dict)
    input_names: Dict[str, int] = field(default_factory=dict)
    clusters: int = 0
    merged_clusters: int = 0
    largest_cluster: int = 0
    cluster_sizes: Dict[int, int] = field(default_factory=dict)
    ambiguous_keys_dropped: int = 0
    unions_refused: int = 0
    duplicate_ids_combined: int = 0

    def to_dict(self) -> dict:
        return {
            "input_concepts": dict(self.input_concepts),
            "input_names": dict(self.input_names),
            "input_concepts_total": sum(self.input_concepts.values()),
            "clusters": self.clusters,
            "merged_clusters": self.merged_clusters,
            "largest_cluster": self.largest_cluster,
            "cluster_sizes": {str(k): v for k, v in sorted(self.cluster_sizes.items())},
            "ambiguous_keys_dropped": self.ambiguous_keys_dropped,
            "unions_refused_same_vocabulary": self.unions_refused,
            "duplicate_ids_combined": self.duplicate_ids_combined,
        }


class _UnionFind:
    """Union-find whose roots remember their vocabularies, to refuse same-vocabulary unions."""

    def __init__(self, vocabularies: Sequence[str]):
        self.parent = list(range(len(vocabularies)))
        self.vocabs: List[Set[str]] = [{v} for v in vocabularies]

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def union(self, a: int, b: int) -> bool:
        """Join the clusters of ``a`` and ``b``; False (and nothing done) if they share a vocabulary."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if self.vocabs[ra] & self.vocabs[rb]:
            return False
        if ra > rb:  # the earlier record's root stays root: deterministic
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.vocabs[ra] |= self.vocabs[rb]
        self.vocabs[rb] = set()
        return True


def _record_keys(record: ConceptRecord, key_namespaces: Sequence[str]) -> List[str]:
    keys = [merge_key(record.id, key_namespaces)] + [merge_key(x, key_namespaces) for x in record.xrefs]
    return unique([k for k in keys if k])


def _combine(records: Sequence[ConceptRecord]) -> ConceptRecord:
    """One record from several: the first one's id, name and types lead; everything else is united."""
    head = records[0]
    names = [n for r in records for n in r.all_names]
    ids = [r.id for r in records[1:]]
    return ConceptRecord(
        id=head.id,
        name=head.name,
        synonyms=[n for n in unique(names) if n != head.name],
        types=unique([t for r in records for t in r.types]),
        xrefs=[x for x in unique(ids + [x for r in records for x in r.xrefs]) if x != head.id],
        sources=list(dict.fromkeys(s for r in records for s in r.sources)),
    )


def combine_same_ids(records: Iterable[ConceptRecord]) -> Tuple[List[ConceptRecord], int]:
    """Records sharing an id (a term one ontology imports from another) are one concept."""
    by_id: Dict[str, List[ConceptRecord]] = {}
    for record in records:
        by_id.setdefault(record.id, []).append(record)
    combined = [group[0] if len(group) == 1 else _combine(group) for group in by_id.values()]
    return combined, sum(len(g) - 1 for g in by_id.values())


def merge_by_xrefs(
    records: Iterable[ConceptRecord],
    key_namespaces: Sequence[str] = DEFAULT_KEY_NAMESPACES,
    priority: Sequence[str] = (),
) -> Tuple[List[ConceptRecord], MergeStats]:
    """Cluster ``records`` that share a key (``key_namespaces``) and return one record per cluster.

    Records with the same id are combined first (whatever their vocabulary).
    A cluster's id, name and types lead with its member from the vocabulary earliest in
    ``priority`` (then the earliest record); its synonyms are all members' names, its
    xrefs the other members' ids plus all members' xrefs, its sources all members' sources.
    """
    stats = MergeStats()
    records, stats.duplicate_ids_combined = combine_same_ids(records)
    vocabs = [vocabulary_of(r) for r in records]
    for rec, vocab in zip(records, vocabs):
        stats.input_concepts[vocab] = stats.input_concepts.get(vocab, 0) + 1
        stats.input_names[vocab] = stats.input_names.get(vocab, 0) + len(rec.all_names)
    members_of_key: Dict[str, List[int]] = {}
    for i, rec in enumerate(records):
        for key in _record_keys(rec, key_namespaces):
            members_of_key.setdefault(key, []).append(i)
    uf = _UnionFind(vocabs)
    for members in members_of_key.values():
        if len(members) == 1:
            continue
        per_vocab = Counter(vocabs[i] for i in members)
        usable = [i for i in members if per_vocab[vocabs[i]] == 1]
        stats.ambiguous_keys_dropped += len(members) > len(usable)
        for other in usable[1:]:
            stats.unions_refused += not uf.union(usable[0], other)
    clusters: Dict[int, List[int]] = {}
    for i in range(len(records)):
        clusters.setdefault(uf.find(i), []).append(i)
    rank = {v: n for n, v in enumerate(priority)}
    merged: List[ConceptRecord] = []
    for members in clusters.values():
        size = len(members)
        if size == 1:
            merged.append(records[members[0]])
        else:
            lead = min(members, key=lambda i: (rank.get(vocabs[i], len(rank)), i))
            merged.append(_combine([records[lead]] + [records[i] for i in members if i != lead]))
        stats.cluster_sizes[size] = stats.cluster_sizes.get(size, 0) + 1
        stats.largest_cluster = max(stats.largest_cluster, size)
    stats.clusters = len(merged)
    stats.merged_clusters = sum(v for k, v in stats.cluster_sizes.items() if k > 1)
    return merged, stats
