"""Word variants mined from the ontologies themselves, and the variant names they make.

An ontology gives a concept several names, and those names differ by single words in systematic
ways: "renal cyst" / "kidney cyst", "hypoplastic patella" / "patellar hypoplasia", "abnormality of
the ribs" / "rib anomaly". ``mine_word_variants`` counts, over the concepts of one or more
ontologies, the word pairs such name pairs align (after ``normalize_name`` and ``word_key``):

- a *substitution*: two names of a concept whose content words differ by one word each
  ("cutaneous" / "skin"); a pair is kept when it is seen in at least ``min_votes`` contexts;
- a *derivation*: the differing words share a stem ("patellar" / "patella", "hypoplastic" /
  "hypoplasia"), aligned one to one by their common prefix, so a name pair that differs in two
  words still votes ("hypoplastic patella" / "patellar hypoplasia");
- a *word order*: "HEAD of the MODIFIER" beside "MODIFIER HEAD" ("abnormality of the rib" / "rib
  abnormality"), counted per preposition; a preposition is used when ``min_votes`` contexts show it.

The table is plain JSON with its provenance (sources, their concept counts, thresholds) and is
stored with a KB built with it (``variant_records``: generated names are added under their
concept, marked, never replacing or duplicating a real name). Nothing here is fitted to a corpus.
"""
from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

from .fileio import read_json, write_json
from .normalize import STOPWORDS, name_words, word_key_fingerprint
from .records import ConceptRecord, InputError

TABLE_FORMAT = "spacy-sapbert-word-variants"
TABLE_VERSION = 2  # 2: records the word keys it was mined with (``word_keys``)
TABLE_FILE = "word_variants.json"  # in a KB folder built with variants: the table it used
GENERATED_FILE = "generated_names.json"  # in that folder: which names were generated, from which real name
SHIPPED_TABLE = Path(__file__).parent / "data" / "word_variants.json"
MIN_VOTES = 3
# ... and shown by at least this many concepts (one concept with many names is one witness).
MIN_CONCEPTS = 2
# Two words are forms of one stem when they share a prefix of at least this many characters that is
# at least ``MIN_STEM_SHARE`` of the shorter word ("patella"/"patellar"; not "hypertension"/"hypertrophy").
MIN_STEM_CHARS = 4
MIN_STEM_SHARE = 0.6
# ... and neither word goes on for more than this many characters after it: a derivation changes an
# ending ("patell-a"/"patell-ar"), a compound adds a word ("head"/"head-ache", "colo-n"/"colo-rectal").
MAX_SUFFIX_CHARS = 4
# Name pairs differing in more words than this are not aligned (they are paraphrases, not variants).
MAX_DIFFERING_WORDS = 3
# What a KB built "with variants" gets (chosen on GSC+ dev, benchmarks/word_variants.py): up to
# ``max_variants`` generated names per real name; substitutions seen in ``min_substitution_votes`` contexts.
DEFAULT_OPTIONS: Dict[str, int] = {"max_variants": 3, "min_substitution_votes": 10}
# The prepositions a word-order variant may drop ("abnormality of the rib" -> "rib abnormality").
ORDER_PREPOSITIONS = ("of", "in", "on", "to", "with")
ARTICLES = frozenset({"a", "an", "the"})
# Names are generated from, and as, names of at least this many content words.
MIN_CONTENT_WORDS = 2

Pair = Tuple[str, str]


def content_words(words: Sequence[str]) -> List[str]:
    return [w for w in words if w not in STOPWORDS]


def _usable(word: str) -> bool:
    return len(word) >= 3 and word.isalpha() and word not in STOPWORDS


def shared_stem(a: str, b: str) -> bool:
    """Do ``a`` and ``b`` look like two forms of one stem (a long enough common prefix)?"""
    n = len(_common_prefix(a, b))
    return (a != b and n >= MIN_STEM_CHARS and n >= MIN_STEM_SHARE * min(len(a), len(b))
            and max(len(a), len(b)) - n <= MAX_SUFFIX_CHARS)


def _common_prefix(a: str, b: str) -> str:
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return a[:i]


def aligned_pairs(a: Sequence[str], b: Sequence[str]) -> List[Tuple[str, Pair, str]]:
    """The word pairs two names of one concept align, each as (kind, sorted pair, context), the
    context being the other words of the two names ("cyst | cyst" for "renal cyst" / "kidney cyst").

    The content words both names have are set aside; what is left must pair off one to one, by
    shared stem (``derivation``), with at most one pair left over that shares none
    (``substitution``)."""
    ca = Counter(w for w in a if w not in STOPWORDS)
    cb = Counter(w for w in b if w not in STOPWORDS)
    only_a, only_b = list((ca - cb).elements()), list((cb - ca).elements())
    if not only_a or len(only_a) != len(only_b) or len(only_a) > MAX_DIFFERING_WORDS:
        return []
    if not all(_usable(w) for w in only_a + only_b):
        return []
    out: List[Tuple[str, Pair, str]] = []
    left_b = list(only_b)
    aligned: List[Tuple[str, str, str]] = []
    for wa in only_a:
        match = next((wb for wb in left_b if shared_stem(wa, wb)), None)
        if match is not None:
            left_b.remove(match)
            aligned.append(("derivation", wa, match))
    unmatched = [w for w in only_a if w not in {x for _, x, _ in aligned}]
    if len(unmatched) > 1:
        return []
    if unmatched:
        aligned.append(("substitution", unmatched[0], left_b[0]))
    for kind, wa, wb in aligned:
        sides = [" ".join(sorted((c - Counter([w])).elements())) for c, w in sorted(((ca, wa), (cb, wb)), key=lambda x: x[1])]
        context = " | ".join(sides)  # the side of the first word of the sorted pair first
        out.append((kind, tuple(sorted((wa, wb))), context))  # type: ignore[arg-type]
    return out


def order_preposition(a: Sequence[str], b: Sequence[str]) -> Optional[str]:
    """The preposition of ``a`` when ``a`` is "HEAD PREP [the] MODIFIER" and ``b`` is "MODIFIER
    HEAD" (the same content words, in that order), else None."""
    for i, w in enumerate(a):
        if w in ORDER_PREPOSITIONS and 0 < i:
            head, rest = list(a[:i]), [x for x in a[i + 1 :] if x not in ARTICLES]
            if rest and rest + head == list(b):
                return w
    return None


def mine_word_variants(
    sources: Mapping[str, Iterable[ConceptRecord]], min_votes: int = MIN_VOTES, min_concepts: int = MIN_CONCEPTS
) -> Dict[str, object]:
    """The word-variant table of ``sources`` (name → concept records).

    A pair's votes are the distinct contexts it was seen in (the words its two names share), so one
    concept copied into several ontologies ("pulseless disease" / "takayasu disease" in MONDO, MeSH
    and MEDIC) votes once, and "big ear" / "prominent ear" and "big nose" / "prominent nose" vote
    twice. Pairs with fewer than ``min_votes``, or shown by fewer than ``min_concepts`` concepts, are
    dropped (how many is recorded); ``concepts`` and ``by_source`` count the concepts that show a pair."""
    contexts: Dict[Tuple[str, Pair], Set[str]] = {}
    concepts: Dict[Tuple[str, Pair], Counter] = {}
    order_contexts: Dict[str, Set[str]] = {}
    order_concepts: Dict[str, Counter] = {}
    provenance: Dict[str, Dict[str, int]] = {}
    for source, records in sources.items():
        n_concepts = n_names = 0
        for record in records:
            n_concepts += 1
            names = [n for n in dict.fromkeys(tuple(name_words(n)) for n in record.all_names) if n]
            n_names += len(names)
            seen: Set[Tuple[str, Pair]] = set()
            seen_order: Set[str] = set()
            for a, b in itertools.combinations(names, 2):
                for kind, pair, context in aligned_pairs(a, b):
                    contexts.setdefault((kind, pair), set()).add(context)
                    seen.add((kind, pair))
                for x, y in ((a, b), (b, a)):
                    prep = order_preposition(x, y)
                    if prep:
                        order_contexts.setdefault(prep, set()).add(" ".join(y))
                        seen_order.add(prep)
            for key in seen:
                concepts.setdefault(key, Counter())[source] += 1
            for prep in seen_order:
                order_concepts.setdefault(prep, Counter())[source] += 1
        provenance[source] = {"concepts": n_concepts, "names": n_names}
    pairs = [
        {"words": list(pair), "kind": kind, "votes": len(ctx), "concepts": sum(concepts[kind, pair].values()),
         "by_source": dict(sorted(concepts[kind, pair].items())), "contexts": sorted(ctx)[:3]}
        for (kind, pair), ctx in contexts.items()
        if len(ctx) >= min_votes and sum(concepts[kind, pair].values()) >= min_concepts
    ]
    pairs.sort(key=lambda p: (-p["votes"], p["kind"], p["words"]))  # type: ignore[operator]
    order = {
        p: {"votes": len(ctx), "concepts": sum(order_concepts[p].values()), "by_source": dict(sorted(order_concepts[p].items()))}
        for p, ctx in sorted(order_contexts.items())
    }
    return {
        "format": TABLE_FORMAT,
        "version": TABLE_VERSION,
        "word_keys": word_key_fingerprint(),
        "sources": provenance,
        "thresholds": {"min_votes": min_votes, "min_concepts": min_concepts, "min_stem_chars": MIN_STEM_CHARS,
                       "min_stem_share": MIN_STEM_SHARE, "max_suffix_chars": MAX_SUFFIX_CHARS,
                       "max_differing_words": MAX_DIFFERING_WORDS},
        "candidates": {kind: sum(1 for k, _ in contexts if k == kind) for kind in ("substitution", "derivation")},
        "pairs": pairs,
        "word_order": {p: v for p, v in order.items() if v["votes"] >= min_votes and v["concepts"] >= min_concepts},
    }


def save_table(path: Union[str, Path], table: Mapping[str, object]) -> None:
    """Write the table as JSON, atomically."""
    write_json(Path(path), dict(table))


def load_table(path: Union[str, Path]) -> Dict[str, object]:
    """Read a table written by ``save_table``; another file is refused with one line naming it."""
    table = read_json(Path(path))
    if not isinstance(table, dict) or table.get("format") != TABLE_FORMAT:
        raise InputError(path, None, f"not a word-variant table (no \"format\": \"{TABLE_FORMAT}\")")
    if table.get("version") != TABLE_VERSION:
        raise InputError(path, None, f"word-variant table version {table.get('version')!r}; this version reads {TABLE_VERSION}")
    if table.get("word_keys") != word_key_fingerprint():
        # its pairs are word keys: made by other rules, some would never meet a word again
        raise InputError(path, None, f"mined with other word keys ({table.get('word_keys')!r}, these are {word_key_fingerprint()!r}): "
                                     "mine it again (python -m training.mine_word_variants)")
    return table


class VariantTable:
    """A loaded table as a lookup: each word's variants, most voted first."""

    def __init__(self, table: Mapping[str, object], min_votes: int = 0, min_substitution_votes: int = 0):
        """``min_votes``: the votes a pair needs beyond the table's own threshold;
        ``min_substitution_votes``: those a substitution needs (derivations are the safer kind)."""
        self.table = table
        self.alternatives: Dict[str, List[str]] = {}
        self.derived: Dict[str, str] = {}  # each word's most voted derivation
        for p in table["pairs"]:  # type: ignore[union-attr]
            if p["votes"] >= max(min_votes, min_substitution_votes if p["kind"] == "substitution" else 0):
                a, b = p["words"]
                self.alternatives.setdefault(a, []).append(b)
                self.alternatives.setdefault(b, []).append(a)
                if p["kind"] == "derivation":
                    self.derived.setdefault(a, b)
                    self.derived.setdefault(b, a)
        self.order_prepositions = frozenset(table.get("word_order", {}))  # type: ignore[arg-type]

    def stems(self) -> Dict[str, str]:
        """Each word with a derivation → one word of its class of derivations (the first in sorted
        order), so that "patellar dysplasia" and "dysplastic patella" get the same words."""
        parent: Dict[str, str] = {}

        def root(w: str) -> str:
            while parent.get(w, w) != w:
                w = parent[w]
            return w

        for a, b in self.derived.items():
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        return {w: root(w) for w in self.derived}

    def variants(self, name: str, max_variants: int) -> List[str]:
        """Up to ``max_variants`` generated forms of ``name`` (lower case, words as ``word_key`` has
        them): its words in the other order where the table allows ("rib abnormality"), every word
        with a derivation in its derived form where that changes two or more of a short name's
        ("dysplastic patella" -> "dysplasia patellar"), then one word replaced by a variant, the most
        voted first, in the name and in its reordered form."""
        words = name_words(name)
        if not words:
            return []
        forms = [words]
        reordered = self._reordered(words)
        if reordered:
            forms.append(reordered)
        out: List[str] = [" ".join(reordered)] if reordered else []
        derived = [self.derived.get(w, w) for w in words]
        if sum(a != b for a, b in zip(words, derived)) >= 2 and len(content_words(words)) <= 3:
            out.append(" ".join(derived))
        rank = 0
        while len(out) < max_variants:
            added = False
            for form in forms:
                for i, w in enumerate(form):
                    alts = self.alternatives.get(w, ())
                    if rank < len(alts):
                        added = True
                        out.append(" ".join(form[:i] + [alts[rank]] + form[i + 1 :]))
            if not added:
                break
            rank += 1
        return list(dict.fromkeys(out))[:max_variants]

    def _reordered(self, words: List[str]) -> Optional[List[str]]:
        """ "HEAD PREP [the] MODIFIER" as "MODIFIER HEAD" (one preposition, short parts), else None."""
        preps = [i for i, w in enumerate(words) if w in self.order_prepositions]
        if len(preps) != 1 or any(w in STOPWORDS for w in words if w not in self.order_prepositions and w not in ARTICLES):
            return None
        i = preps[0]
        head, rest = words[:i], [w for w in words[i + 1 :] if w not in ARTICLES]
        if not (1 <= len(head) <= 2 and 1 <= len(rest) <= 3):
            return None
        return rest + head


def variant_records(records: Iterable[ConceptRecord], table: VariantTable, max_variants: int = 3,
                    ) -> Tuple[List[ConceptRecord], List[List[str]]]:
    """``records`` with generated names appended to their synonyms, and the generated names as
    ``[name, concept id, the real name it came from]`` rows. A generated name with the words of a
    real name (of any concept) or of a name its concept already has is not added, and neither is
    one of fewer than ``MIN_CONTENT_WORDS`` content words, nor any from such a name: "Neuropathy"
    would give "disease", a name of nothing in particular."""
    records = list(records)
    real = {tuple(name_words(n)) for r in records for n in r.all_names}
    out: List[ConceptRecord] = []
    generated: List[List[str]] = []
    for r in records:
        have = {tuple(name_words(n)) for n in r.all_names}
        added: List[str] = []
        for n in r.all_names:
            if len(content_words(name_words(n))) < MIN_CONTENT_WORDS:
                continue
            for v in table.variants(n, max_variants):
                key = tuple(v.split())
                if key in real or key in have or len(content_words(key)) < MIN_CONTENT_WORDS:
                    continue
                have.add(key)
                added.append(v)
                generated.append([v, r.id, n])
        out.append(ConceptRecord(id=r.id, name=r.name, synonyms=[*r.synonyms, *added], types=list(r.types),
                                 xrefs=list(r.xrefs), sources=list(r.sources), parents=list(r.parents)))
    return out, generated


def with_variant_names(source: object, table: Mapping[str, object], options: Mapping[str, int],
                       ) -> Tuple[List[ConceptRecord], List[List[str]]]:
    """``variant_records`` of a build's source (concept records or a ``ConceptKB``), with
    ``options``: ``min_votes``, ``min_substitution_votes`` (``VariantTable``) and ``max_variants``."""
    records = source.records() if hasattr(source, "records") else source  # a ConceptKB gives its records back
    lookup = VariantTable(table, options.get("min_votes", 0), options.get("min_substitution_votes", 0))
    return variant_records(records, lookup, options.get("max_variants", 3))  # type: ignore[arg-type]


def write_variant_files(folder: Union[str, Path], table: Mapping[str, object], generated: List[List[str]],
                        options: Mapping[str, int]) -> None:
    """Store the table and the generated names in a KB folder (both JSON, written atomically)."""
    folder = Path(folder)
    save_table(folder / TABLE_FILE, table)
    write_json(folder / GENERATED_FILE, {"options": dict(options), "columns": ["name", "concept_id", "from_name"],
                                         "names": generated})


def generated_names(folder: Union[str, Path]) -> Set[str]:
    """The names of a KB folder that were generated (none if it was built without variants)."""
    path = Path(folder) / GENERATED_FILE
    return {row[0] for row in read_json(path)["names"]} if path.is_file() else set()
