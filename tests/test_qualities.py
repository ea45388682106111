"""Quality words mined from a KB's names, and the link that keeps the quality its mention states."""
import numpy as np

from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.qualities import MIN_CONTRAST_PAIRS, QUALITY_MARGIN, QualityWords
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.search import Candidate, LinkingKB

ANALYTES = [f"analyte{i}" for i in range(MIN_CONTRAST_PAIRS)]


def records(n_contrasts: int = MIN_CONTRAST_PAIRS, extra=()):
    """Increased/decreased siblings for ``n_contrasts`` analytes; each decreased one also called "Low X
    level" and "Reduced X" (synonyms), each increased one "Elevated X" and "Raised X"; a ferritin pair as the HPO has it."""
    out = []
    for a in ANALYTES[:n_contrasts]:
        out.append(ConceptRecord(f"INC:{a}", f"Increased {a}", [f"Elevated {a}", f"Raised {a}"]))
        out.append(ConceptRecord(f"DEC:{a}", f"Decreased {a}", [f"Low {a}", f"Reduced {a}"]))
    out += [ConceptRecord("HP:INC", "Increased ferritin", ["Raised ferritin"]),
            ConceptRecord("HP:DEC", "Decreased serum ferritin", ["Low ferritin level"]),
            ConceptRecord("HP:IRON", "Low iron level")]
    return out + list(extra)


def mined(recs) -> QualityWords:
    kb = ConceptKB.from_records(recs)
    return QualityWords.from_names(kb.names, lambda i: kb.concepts_of_name(i).tolist())


def test_names_of_sibling_concepts_teach_contrasts_and_names_of_one_concept_synonyms():
    words = mined(records())
    assert "decreased" in words.contrasts["increased"] and "increased" in words.contrasts["decreased"]
    assert {"low", "reduced"} <= words.synonyms["decreased"] and "elevated" in words.synonyms["increased"]
    # a synonym takes its word's contrasts: "elevated" names no sibling of a "Decreased" name itself
    assert {"decreased", "low", "reduced"} <= words.contrasts["elevated"]
    assert "increased" not in words.contrasts.get("elevated", ())


def test_too_few_sibling_pairs_or_one_shared_concept_teach_no_contrast():
    assert "decreased" not in mined(records(MIN_CONTRAST_PAIRS - 1)).contrasts.get("increased", ())
    # the same two words also naming one concept: not opposites, whatever the sibling pairs say
    shared = ConceptRecord("X:1", "Increased analyte0 excretion", ["Decreased analyte0 excretion"])
    assert "decreased" not in mined(records(extra=[shared])).contrasts.get("increased", ())


def cands(*pairs):
    return [Candidate(f"C{i}", name, score, False) for i, (name, score) in enumerate(pairs)]


def agreeing(words: QualityWords, mention: str, ranked):
    from spacy_sapbert.normalize import STOPWORDS, WORD, content_keys, word_key

    said = [word_key(w) for w in WORD.findall(mention) if w not in STOPWORDS]
    out = words.prefer_agreeing(ranked, said, lambda c: content_keys(WORD.findall(c.name)), lambda c: c.score)
    return [c.name for c in out]


def test_a_candidate_keeping_the_mentions_quality_is_ranked_over_one_reversing_it():
    words = mined(records())
    ranked = cands(("Increased ferritin", 0.984), ("Low iron level", 0.975), ("Low ferritin level", 0.968))
    # "Low iron level" keeps the quality but not the ferritin: skipped
    assert agreeing(words, "decreased ferritin", ranked)[:2] == ["Low ferritin level", "Increased ferritin"]
    assert agreeing(words, "raised ferritin", cands(("Decreased serum ferritin", 0.95), ("Increased ferritin", 0.94)))[0] == "Increased ferritin"
    # further below than QUALITY_MARGIN: left as the encoder ranked them
    far = cands(("Increased ferritin", 0.984), ("Low ferritin level", 0.984 - QUALITY_MARGIN - 0.01))
    assert agreeing(words, "decreased ferritin", far)[0] == "Increased ferritin"
    # nothing reversed: a synonym of the mention's quality, or a mention that states none
    assert agreeing(words, "low ferritin", cands(("Decreased serum ferritin", 0.97), ("Increased ferritin", 0.96)))[0] == "Decreased serum ferritin"
    assert agreeing(words, "ferritin", ranked)[0] == "Increased ferritin"
    # no candidate keeps it: the one named by the mention's other words alone, the broader concept it states
    assert agreeing(words, "decreased ferritin", cands(("Increased ferritin", 0.984), ("Serum ferritin", 0.975), ("Ferritin", 0.97)))[0] == "Ferritin"
    # a synonym or the broader concept, whichever scores higher; the quality word itself before either
    assert agreeing(words, "decreased ferritin", cands(("Increased ferritin", 0.984), ("Ferritin", 0.975), ("Low ferritin level", 0.968)))[0] == "Ferritin"
    assert agreeing(words, "decreased ferritin", cands(("Increased ferritin", 0.984), ("Low ferritin level", 0.975), ("Ferritin", 0.968)))[0] == "Low ferritin level"
    assert agreeing(words, "decreased ferritin", cands(("Increased ferritin", 0.984), ("Ferritin", 0.975), ("Decreased serum ferritin", 0.96)))[0] == "Decreased serum ferritin"
    assert agreeing(words, "decreased ferritin", cands(("Increased ferritin", 0.984), ("Serum ferritin", 0.975)))[0] == "Increased ferritin"
    # only the mention's first word is its quality: "ferritin decreased" states none there
    assert agreeing(words, "ferritin decreased", ranked)[0] == "Increased ferritin"


def test_the_kb_ranks_by_quality_where_its_search_would_reverse_it():
    """Through ``LinkingKB.candidates``, as the linker searches: the query's vector is the name "Increased
    ferritin"'s, "Low ferritin level"'s is 0.96 from it, and the query says "decreased"."""
    linking, query = linking_kb(records(), "Increased ferritin", "Low ferritin level", 0.96)
    found = linking.candidates(query, top_k=3, queries=[linking.kb.normalize("decreased ferritin")])[0]
    assert [c.concept_id for c in found[:2]] == ["HP:DEC", "HP:INC"] and found[0].name == "Low ferritin level"
    # whatever top_k: the candidates within the margin are weighed, and top_k of them kept
    assert [c.concept_id for c in linking.candidates(query, top_k=1, queries=[linking.kb.normalize("decreased ferritin")])[0]] == ["HP:DEC"]
    # the same search for "raised ferritin" keeps the encoder's order
    found = linking.candidates(query, top_k=3, queries=[linking.kb.normalize("raised ferritin")])[0]
    assert found[0].concept_id == "HP:INC"
    # a clause states its quality last
    found = linking.candidates(query, top_k=3, queries=[linking.kb.normalize("ferritin was decreased")])[0]
    assert found[0].concept_id == "HP:DEC"


def linking_kb(recs, near: str, close: str, cosine: float):
    """The KB of ``recs`` over vectors where every name is far from ``near`` but ``close`` (at ``cosine``),
    and ``near``'s vector as a query."""
    from spacy_sapbert.index import VectorIndex

    kb = ConceptKB.from_records(recs)
    vectors = np.random.default_rng(0).normal(size=(kb.n_names, 16)).astype(np.float32)
    vectors[:, :2] = 0.0
    a, b = kb.row_of_name(kb.normalize(near)), kb.row_of_name(kb.normalize(close))
    vectors[a] = vectors[b] = 0.0
    vectors[a, 0] = 1.0
    vectors[b, :2] = [cosine, np.sqrt(1 - cosine**2)]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return LinkingKB(kb, VectorIndex.build(vectors, kind="flat"), {}), vectors[a : a + 1]


def test_a_broader_concept_named_with_a_synonym_of_the_mentions_quality_is_preferred():
    """``prefer_broader`` reads a quality's synonym as the word: "reduced muscle tone" states no more than
    *Hypotonia*'s "Low muscle tone", and less than its subtype "Severely decreased muscle tone"."""
    recs = records(extra=[ConceptRecord("HP:TONE", "Hypotonia", ["Low muscle tone"]),
                          ConceptRecord("HP:SEVERE", "Severely decreased muscle tone", parents=["HP:TONE"])])
    linking, query = linking_kb(recs, "Severely decreased muscle tone", "Low muscle tone", 0.98)
    found = linking.candidates(query, top_k=3, queries=[linking.kb.normalize("reduced muscle tone")])[0]
    assert [c.concept_id for c in found[:2]] == ["HP:TONE", "HP:SEVERE"]
    # a mention that says "severely" gets the subtype
    found = linking.candidates(query, top_k=3, queries=[linking.kb.normalize("severely reduced muscle tone")])[0]
    assert found[0].concept_id == "HP:SEVERE"


def test_a_head_shared_by_many_first_words_teaches_nothing():
    """Names that share all but their first word with more than ``MAX_GROUP_WORDS`` others ("<word>
    sulfate", MeSH's salts) are one head's, not one thing's qualities: their group is left out, so the
    pairs counted stay few on a KB of millions of names."""
    from spacy_sapbert.qualities import MAX_GROUP_WORDS

    # each analyte's group holds six first words (increased, elevated, raised, decreased, low, reduced)
    crowd = [ConceptRecord(f"S:{a}:{i}", f"Word{i} {a}") for a in ANALYTES for i in range(MAX_GROUP_WORDS - 6)]
    assert "decreased" in mined(records(extra=crowd)).contrasts["increased"]  # each group at the limit: counted
    crowd += [ConceptRecord(f"S:{a}:x", f"Extra {a}") for a in ANALYTES]
    assert "decreased" not in mined(records(extra=crowd)).contrasts.get("increased", ())  # one more: left out
