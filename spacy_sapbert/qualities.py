"""Quality words ("increased", "decreased", "low", "absent") mined from a KB's names, and the check that
keeps a link from reversing the quality its mention states.

An encoder places "decreased ferritin" next to "Increased ferritin" (0.984, MiniLM) above "Low ferritin
level" (0.968): the two names differ in the one word that matters, and an embedding hardly sees it.
The KB says which words are such qualities and which are opposed: many names start with a quality
before the same words ("Increased serum ferritin", "Decreased serum ferritin"); where two such names
belong to different concepts the two qualities contrast, and where they name one concept they are
synonyms ("Elevated"/"Increased"). ``QualityWords.prefer_agreeing`` then ranks first, among candidates
scoring nearly as well, the one whose quality agrees with the mention's.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

import numpy as np

from .normalize import STOPWORDS, WORD, word_key

# Name pairs of different concepts (and none of one concept) that make two quality words a contrast.
MIN_CONTRAST_PAIRS = 10
# Name pairs of one concept that make two quality words synonyms.
MIN_SYNONYM_PAIRS = 3
# A group of names sharing all but their first word with more first words than this is a head's ("X
# antibody positivity", MeSH's "X sulfate"), not one thing's qualities: left out, so that the pairs stay few.
MAX_GROUP_WORDS = 64
# A candidate whose quality agrees with the mention's is ranked first if it scores at most this much
# below a first candidate that reverses it: the HPO name of a measured quality adds words the mention
# lacks ("Increased circulating IgE level" 0.882 against "Decreased IgE" 0.953 for "increased IgE").
QUALITY_MARGIN = 0.08

T = TypeVar("T")


class QualityWords:
    """Contrasting and synonymous quality words, as word keys (``normalize.word_key``)."""

    def __init__(self, contrasts: Iterable[Tuple[str, str]], synonyms: Iterable[Tuple[str, str]],
                 compatible: Iterable[Tuple[str, str]] = ()):
        """``contrasts`` and ``synonyms``: word pairs; a word contrasts also with what its synonyms
        contrast with ("raised", a synonym of "increased", with "decreased"), except the ``compatible``
        pairs (words that name one concept together somewhere)."""
        equal: Dict[str, Set[str]] = defaultdict(set)
        for a, b in synonyms:
            equal[a].add(b)
            equal[b].add(a)
        self.synonyms: Dict[str, Set[str]] = dict(equal)
        direct: Dict[str, Set[str]] = defaultdict(set)
        for a, b in contrasts:
            direct[a].add(b)
            direct[b].add(a)
        never = {pair for a, b in compatible for pair in ((a, b), (b, a))}
        self.contrasts: Dict[str, Set[str]] = {}
        for a in set(direct) | set(self.synonyms):
            opposed = direct.get(a, set()).union(*(direct.get(s, ()) for s in self.synonyms.get(a, ())))
            opposed = {b for b in opposed if b != a and b not in self.synonyms.get(a, ()) and (a, b) not in never}
            if opposed:
                self.contrasts[a] = opposed

    @classmethod
    def from_names(cls, names: Sequence[str], concepts_of: Callable[[int], Iterable[int]]) -> "QualityWords":
        """Mine them from a KB's normalised names (``ConceptKB.names``; ``concepts_of(i)``: the concept
        rows of name ``i``): names grouped by what follows their first word; two first words in a group
        contrast when their names' concepts differ in ``MIN_CONTRAST_PAIRS`` groups and never coincide,
        and are synonyms when they coincide in ``MIN_SYNONYM_PAIRS`` groups and in more than they differ
        ("Abnormal" and "Increased" name one concept a few times, different ones hundreds).

        Linear in the number of names, and in memory a hash per name: an array of the hashes of the
        names' rests, sorted, gives the runs of names that may share one (most share none), and each run
        is grouped and counted by itself, so a KB of millions of names never holds a dict entry per name.
        A group of more than ``MAX_GROUP_WORDS`` first words is left out."""
        hashes = np.fromiter((hash(name.partition(" ")[2]) for name in names), dtype=np.int64, count=len(names))
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        runs = (ends - starts >= 2) & (ordered[starts] != hash(""))  # a one-word name has no rest
        keys: Dict[str, Optional[str]] = {}

        def key(word: str) -> Optional[str]:
            """The word's key, None for a function word or what is not one word ("x-linked")."""
            if word not in keys:
                found = WORD.findall(word)
                keys[word] = word_key(found[0]) if len(found) == 1 and found[0] == word and word not in STOPWORDS else None
            return keys[word]

        apart: Dict[Tuple[str, str], int] = defaultdict(int)
        together: Dict[Tuple[str, str], int] = defaultdict(int)
        for start, end in zip(starts[runs].tolist(), ends[runs].tolist()):
            groups: Dict[str, Dict[str, Set[int]]] = defaultdict(lambda: defaultdict(set))  # (rests of one hash)
            for i in order[start:end].tolist():
                first, _, rest = names[i].partition(" ")
                k = key(first)
                if k is not None:
                    groups[rest][k].update(concepts_of(i))
            for firsts in groups.values():
                if not 2 <= len(firsts) <= MAX_GROUP_WORDS:
                    continue
                pairs = sorted(firsts.items())
                for j, (a, ca) in enumerate(pairs):
                    for b, cb in pairs[j + 1 :]:
                        if ca.isdisjoint(cb):
                            apart[a, b] += 1
                        else:
                            together[a, b] += 1
        return cls([pair for pair, n in apart.items() if n >= MIN_CONTRAST_PAIRS and not together.get(pair)],
                   [pair for pair, n in together.items() if n >= MIN_SYNONYM_PAIRS and n > apart.get(pair, 0)], together)

    def holds(self, words: FrozenSet[str], said: Iterable[str]) -> bool:
        """Does a name's ``words`` hold each of ``said``, itself or a synonym ("low muscle tone" holds
        "reduced muscle tone")?"""
        return all(w in words or not words.isdisjoint(self.synonyms.get(w, ())) for w in said)

    def reverses(self, quality: str, name: FrozenSet[str], said: FrozenSet[str]) -> bool:
        """Does a name (its content-word keys) reverse ``quality``, the first word of a mention whose words
        are ``said``: the name holds a word contrasting with it that the mention lacks, and neither it
        nor a synonym of it?"""
        return (quality not in name and bool((name & self.contrasts.get(quality, set())) - said)
                and name.isdisjoint(self.synonyms.get(quality, ())))

    def reverses_first(self, words: Sequence[str], name: FrozenSet[str]) -> bool:
        """Does a name reverse the quality a mention states first (``words``: its content-word keys, the
        quality first)?"""
        return bool(words) and words[0] in self.contrasts and self.reverses(words[0], name, frozenset(words))

    def prefer_agreeing(self, ranked: List[T], words: Sequence[str], words_of: Callable[[T], FrozenSet[str]],
                        score_of: Callable[[T], float]) -> List[T]:
        """``ranked`` with a candidate moved first where the first reverses the quality the mention states
        (its first content word; ``words``: its content-word keys in order). Among those within
        ``QUALITY_MARGIN`` of it that hold the mention's other words and reverse nothing: the first that
        states the quality word ("Upper limb muscle weakness" for "upper limb weakness"), else the first
        that states a synonym of it ("Low ferritin level" for "decreased ferritin") or nothing more than
        those other words (the broader concept the mention names: "segmental dystonia" is *Dystonia*, not
        *Generalized dystonia*), whichever scores higher; else ``ranked`` as it is. Only the first word (a clause's last: the caller puts it
        first): the qualities are mined from names' first words, where English puts them ("renal
        *disorders*" is no quality of "renal abnormalities")."""
        if len(ranked) < 2 or not self.reverses_first(words, words_of(ranked[0])):
            return ranked
        quality, said = words[0], frozenset(words)
        rest = said - {quality}
        chosen: Optional[int] = None
        for j, cand in enumerate(ranked[1:], 1):
            if score_of(ranked[0]) - score_of(cand) > QUALITY_MARGIN:
                break
            held = words_of(cand)
            if not rest <= held or self.reverses(quality, held, said):
                continue
            if quality in held or (chosen is None and self.holds(held, (quality,))):
                chosen = j  # it keeps the quality: the word itself, or a synonym scoring above the broader one
                break
            if chosen is None and held <= rest:
                chosen = j  # the broader concept: nothing more than the mention's other words
        return ranked if chosen is None else [ranked[chosen]] + ranked[:chosen] + ranked[chosen + 1 :]
