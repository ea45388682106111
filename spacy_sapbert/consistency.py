"""The ``sapbert_doc_consistency`` component: a mention found once is found everywhere in the document.

An abstract names its drug or disease several times, and a tagger that reads each occurrence in its
own context misses some of them ("mannitol" found in the title, missed twice in the text). This
component, placed after a detector, labels every other occurrence of an entity's text (whole tokens,
case-insensitive, not overlapping an entity) with that entity's label; a text the detector gave
several labels gets the one it gave most often, and none on a tie.
"""
from __future__ import annotations

from collections import Counter
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import filter_spans


@Language.factory(
    "sapbert_doc_consistency",
    assigns=["doc.ents"],
    default_config={"min_chars": 3, "labels": []},
)
def make_doc_consistency(nlp: Language, name: str, min_chars: int, labels: List[str]) -> "DocConsistency":
    """``min_chars``: shorter entity texts are not spread ("L", "D"); ``labels``: the labels to
    spread (empty: all)."""
    return DocConsistency(name, min_chars=min_chars, labels=labels)


class DocConsistency:
    """Adds an entity at every other occurrence of an entity's text in the same doc."""

    def __init__(self, name: str = "sapbert_doc_consistency", *, min_chars: int = 3, labels: Sequence[str] = ()):
        self.name = name
        self.min_chars = min_chars
        self.labels = frozenset(labels)

    def spread(self, doc: Doc) -> List[Span]:
        """The new entities: occurrences of the doc's entity texts that are no entity yet."""
        votes: Dict[Tuple[str, ...], Counter] = {}
        for ent in doc.ents:
            if (not self.labels or ent.label_ in self.labels) and len(ent.text) >= self.min_chars:
                votes.setdefault(tuple(t.lower_ for t in ent), Counter())[ent.label] += 1
        chosen: Dict[Tuple[str, ...], int] = {}
        for words, counts in votes.items():
            (label, n), *rest = counts.most_common(2)
            if not rest or rest[0][1] < n:
                chosen[words] = label
        if not chosen:
            return []
        taken = {i for ent in doc.ents for i in range(ent.start, ent.end)}
        by_first: Dict[str, List[Tuple[str, ...]]] = {}
        for words in sorted(chosen, key=len, reverse=True):  # the longest text first at a position
            by_first.setdefault(words[0], []).append(words)
        lower = [t.lower_ for t in doc]
        found: List[Span] = []
        for i, word in enumerate(lower):
            for words in by_first.get(word, ()):
                end = i + len(words)
                if tuple(lower[i:end]) == words and not taken.intersection(range(i, end)):
                    found.append(Span(doc, i, end, label=chosen[words]))
                    break
        return filter_spans(found)

    def __call__(self, doc: Doc) -> Doc:
        new = self.spread(doc)
        if new:
            doc.ents = sorted(list(doc.ents) + new, key=lambda s: s.start)
        return doc

    def pipe(self, stream: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        for doc in stream:
            yield self(doc)
