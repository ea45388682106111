"""Proposals through the ontology-mined word variants (``word_variants.py``): a phrase whose content
words map onto a KB name's ("cutaneous abnormalities" onto "abnormality of the skin", "patellar
dysplasia" onto "dysplastic patella"), for KBs built without generated names.

``VariantMatcher.match`` answers for a set of content-word keys that no KB name has: either the
words and a name's have the same derivation stems (``VariantTable.stems``), or one word replaced by
one of its variants gives a name's words. The span finder proposes such phrases as ``"variant"`` and lets the encoder decide
(``min_variant_score``), as it does for every proposal.
"""
from __future__ import annotations

from typing import Collection, Dict, FrozenSet, Iterable, List, Set

from .word_variants import VariantTable

# Variants of one word tried per proposal word, the most voted first (bounds the work per n-gram).
MAX_ALTERNATIVES = 5


class VariantMatcher:
    """The KB names' word sets, seen through a variant table."""

    def __init__(self, names: Collection[FrozenSet[str]], vocab: Collection[str], table: VariantTable,
                 max_alternatives: int = MAX_ALTERNATIVES):
        self.names = names
        self.stems = table.stems()
        self.alternatives: Dict[str, List[str]] = {}
        for word, alts in table.alternatives.items():
            kept = [a for a in alts if a in vocab][:max_alternatives]
            if kept:
                self.alternatives[word] = kept
        # words outside the KB's vocabulary that a variant brings into it ("cutaneous" for "skin")
        self.extra_vocab: Set[str] = (set(self.alternatives) | {w for w, s in self.stems.items() if s in vocab}) - set(vocab)
        self._stemmed_names = {self._stem(keys) for keys in names}

    def _stem(self, keys: Iterable[str]) -> FrozenSet[str]:
        return frozenset(self.stems.get(k, k) for k in keys)

    def match(self, keys: FrozenSet[str]) -> bool:
        """Do ``keys`` name a KB name through the table (see the module docstring)?"""
        if self._stem(keys) in self._stemmed_names:
            return True
        for k in keys:
            rest = keys - {k}
            for alt in self.alternatives.get(k, ()):
                if alt not in rest and rest | {alt} in self.names:
                    return True
        return False


def variant_matcher(names: Collection[FrozenSet[str]], vocab: Set[str], table: str, **options: int) -> VariantMatcher:
    """The matcher of a KB's name word sets and vocabulary (``span_proposals.NameIndex``'s ``exact``
    and ``vocab``) through ``table``: ``"shipped"`` (``word_variants.SHIPPED_TABLE``) or a table's
    path, with ``DEFAULT_OPTIONS``' vote thresholds. The words a variant brings are added to
    ``vocab``, so that a text may use them ("cutaneous" where the KB says "skin")."""
    from .word_variants import DEFAULT_OPTIONS, SHIPPED_TABLE, load_table

    settings = {**DEFAULT_OPTIONS, **options}
    lookup = VariantTable(load_table(SHIPPED_TABLE if table == "shipped" else table),
                          min_substitution_votes=settings["min_substitution_votes"])
    matcher = VariantMatcher(names, vocab, lookup)
    vocab.update(matcher.extra_vocab)
    return matcher
