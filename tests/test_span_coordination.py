"""Proposals and coordinations (issue 46): no proposal ends inside a hyphenated word or holds a
coordinating word a KB name does not; each conjunct of a list is proposed with the shared head;
word variants propose a phrase whose words map onto a KB name's."""
from __future__ import annotations

import spacy

from spacy_sapbert.composites import split_mention
from spacy_sapbert.span_proposals import COORDINATORS, NameIndex, propose
from spacy_sapbert.variant_proposals import VariantMatcher
from spacy_sapbert.word_variants import VariantTable

NLP = spacy.blank("en")
HPO_LIKE = ["Depressed nasal bridge", "Broad nasal bridge", "Low-set ears", "Cleft lip", "Cleft palate",
            "Cleft lip and palate", "Palmar pits", "Plantar pits", "Branchial anomaly", "Renal anomaly", "Ear anomaly",
            "Preauricular pit", "Auricular pit", "Neoplasm", "Cancer", "Cortical cataract", "Cataract", "Small ears",
            "Posteriorly rotated ears", "Flat nasal bridge", "Memory loss", "Weight loss"]


def proposed(text, names=HPO_LIKE, **kw):
    doc = NLP(text)
    return {(doc[p.start : p.end].text, p.kind) for p in propose(doc, NameIndex(names), **kw)}


def texts(found):
    return {t for t, _ in found}


def test_a_coordination_with_a_hyphenated_conjunct_yields_no_phrase_cut_inside_it():
    found = texts(proposed("She has a broad nasal bridge and low-set ears."))
    assert "nasal bridge and low" not in found and "broad nasal bridge and low" not in found
    assert {"broad nasal bridge", "low-set ears"} <= found
    assert "nasal bridge" not in found  # an organ: a partial match keeps the name's first word ("Broad")
    assert "auricular pits" not in texts(proposed("bilateral pre-auricular pits"))  # starts inside "pre-auricular"
    assert "Cancer" not in texts(proposed("Breast-Cancer"))
    # the first part of a compound may be a mention by itself (GSC+ and NCBI-disease annotate it)
    assert "cancer" in texts(proposed("a cancer-predisposition syndrome"))
    assert "cleft palate" in texts(proposed("cleft palate-associated genes"))


def test_no_proposal_holds_a_coordinating_word_unless_a_kb_name_does():
    found = proposed("cleft lip or cleft palate")
    assert "lip or cleft" not in texts(found) and "cleft lip or cleft" not in texts(found)
    assert {"cleft lip", "cleft palate"} <= texts(found)
    assert ("cleft lip and palate", "exact") in proposed("cleft lip and palate")  # a KB name with "and"
    assert "cataract and cortical" not in texts(proposed("nuclear cataract and cortical opacities"))


def test_each_conjunct_is_proposed_with_the_shared_head():
    found = proposed("palmar and plantar pits")
    assert ("palmar and plantar pits", "coordinated") in found and ("plantar pits", "exact") in found
    found = proposed("branchial, ear and renal anomalies")
    assert {("branchial, ear and renal anomalies", "coordinated"), ("ear and renal anomalies", "coordinated"),
            ("renal anomalies", "exact")} <= found
    # a list's earlier item stands alone, and starts no hyphenated word
    names = ["Breast cancer", "Ovarian cancer", "Crouzon syndrome", "Pfeiffer syndrome", "Chotzen syndrome"]
    assert "cancer and breast/ovarian cancer" not in texts(proposed("breast cancer and breast/ovarian cancer", names))
    assert "breast/ovarian cancer" in texts(proposed("breast cancer and breast/ovarian cancer", names))
    found = texts(proposed("Saethre-Chotzen, Crouzon, and Pfeiffer syndromes", names))
    assert "Crouzon, and Pfeiffer syndromes" in found and "Chotzen, Crouzon, and Pfeiffer syndromes" not in found


def test_hyphenated_conjuncts_and_modifier_groups_are_coordinated():
    found = proposed("small and low-set ears")  # the proposal's first word is "low-set", not "low"
    assert ("small and low-set ears", "coordinated") in found
    # the conjunct in place of all the head's modifiers: "low-set [ears] and posteriorly rotated ears"
    assert ("low-set and posteriorly rotated ears", "coordinated") in proposed("low-set and posteriorly rotated ears")
    # commas alone join list items as often as adjectives: only one-word modifiers that name nothing alone coordinate
    assert ("small, low-set ears", "coordinated") in proposed("small, low-set ears")
    names = ["Broad nasal bridge", "Flat nasal bridge", "Memory loss", "Weight loss", "Impaired memory", "Ataxia",
             "Broad thumb", "Short thumb"]
    assert ("broad, flat nasal bridge", "coordinated") in proposed("a broad, flat nasal bridge", names)
    assert ("short, broad thumbs", "coordinated") in proposed("short, broad thumbs", names)
    for text in ("impaired memory, weight loss and ataxia", "ataxia, weight loss", "impaired memory, weight loss"):
        # "memory" ends an item ("impaired memory"); "ataxia" is a name alone
        assert not {t for t, kind in proposed(text, names) if kind == "coordinated" and "," in t}, text
    # a hyphenated name is a list's item, not a modifier
    names = ["Ataxia-telangiectasia", "Ataxia telangiectasia syndrome", "Li-Fraumeni syndrome"]
    assert not {t for t, kind in proposed("ataxia-telangiectasia and Li-Fraumeni syndrome", names) if kind == "coordinated"}
    # a conjunct that repeats the shared words ends a list's item
    names = ["Finger clinodactyly", "Fifth finger clinodactyly", "5th finger clinodactyly"]
    assert not {t for t, kind in proposed("5th finger clinodactyly and fifth finger clinodactyly", names) if kind == "coordinated"}


def test_a_hyphenated_word_the_kb_writes_closed_is_that_word():
    names = ["Upslanting palpebral fissure", "Preauricular pit", "Angiooedema", "End-stage renal disease", "Endstage",
             "Breast cancer"]
    found = texts(proposed("up-slanting palpebral fissures, bilateral pre-auricular pits and angio-oedema", names))
    assert {"up-slanting palpebral fissures", "pre-auricular pits", "angio-oedema"} <= found
    assert not {"angio", "up", "pre"} & found  # a mention never ends on the first part of such a word
    # a pair some name writes apart stays two words: "end-stage renal disease" is no "endstage renal disease"
    assert "end-stage renal disease" in texts(proposed("end-stage renal disease", names))
    assert "breast cancer" in texts(proposed("breast cancer-susceptibility genes", names))  # no closed word: ends before the hyphen


def test_a_conjunct_joins_the_shared_words_only_as_a_modifier_of_their_head():
    # "loss" + "vision" are the words of "Vision loss", but in "hearing loss or blurred vision" the
    # shared word "vision" is no head of that name: "loss or blurred vision" is not proposed
    names = ["Hearing loss", "Blurred vision", "Vision loss", "Loss of vision", "Breast cancer", "Ovarian cancer",
             "Abnormality of the kidney", "Abnormality of the liver", "Aplasia of the thymus", "Hypoplasia of the thymus",
             "Cancer", "Brain tumor", "Tumor"]
    found = texts(proposed("hearing loss or blurred vision", names))
    assert found == {"hearing loss", "blurred vision"}
    assert "loss, or blurred vision" not in texts(proposed("hearing loss, or blurred vision", names))
    assert "breast and ovarian cancer" in texts(proposed("breast and ovarian cancer", names))
    # the head is the name's word before its preposition ("Abnormality of the kidney")
    assert "liver and kidney abnormality" in texts(proposed("liver and kidney abnormality", names))
    # where the shared words modify the conjuncts, each conjunct is a head
    assert "aplasia or hypoplasia of the thymus" in texts(proposed("aplasia or hypoplasia of the thymus", names))
    # a conjunct that is a name by itself is a list's item, not a modifier ("breast [cancer and ovarian cancer]")
    assert "cancer and ovarian cancer" not in texts(proposed("breast cancer and ovarian cancer", names))
    assert "tumor, brain tumor" not in texts(proposed("solid tumor, brain tumor", names))


def test_no_proposal_starts_or_ends_on_a_coordinating_word():
    for text in ("broad nasal bridge and low-set ears", "cleft lip or cleft palate", "palmar and plantar pits",
                 "branchial, ear and renal anomalies"):
        doc = NLP(text)
        for p in propose(doc, NameIndex(HPO_LIKE)):
            assert doc[p.start].lower_ not in COORDINATORS and doc[p.end - 1].lower_ not in COORDINATORS, doc[p.start : p.end]


def test_word_variants_propose_a_phrase_whose_words_map_onto_a_kb_name():
    names = ["Abnormality of the skin", "Dysplastic patella"]
    table = VariantTable({"format": "spacy-sapbert-word-variants", "version": 1, "word_order": {}, "pairs": [
        {"words": ["cutaneous", "skin"], "kind": "substitution", "votes": 60},
        {"words": ["dysplasia", "dysplastic"], "kind": "derivation", "votes": 17},
        {"words": ["patella", "patellar"], "kind": "derivation", "votes": 9},
    ]})
    index = NameIndex(names)
    matcher = VariantMatcher(index.exact, index.vocab, table)
    index.vocab.update(matcher.extra_vocab)
    doc = NLP("cutaneous abnormalities and patellar dysplasia")
    found = {(doc[p.start : p.end].text, p.kind) for p in propose(doc, index, variants=matcher)}
    assert {("cutaneous abnormalities", "variant"), ("patellar dysplasia", "variant")} <= found
    assert not {t for t, k in proposed("cutaneous abnormalities and patellar dysplasia", names) if k == "variant"}  # off: none


def test_the_span_finder_proposes_variants_only_with_the_setting_and_saves_it(kb_folder, tiny_bert_path, tmp_path):
    from spacy_sapbert.pipelines import build_pipeline
    from spacy_sapbert.records import ConceptRecord
    from spacy_sapbert.word_variants import mine_word_variants, save_table

    table = tmp_path / "table.json"
    tiny = [ConceptRecord(f"C{i}", f"Renal {w}", [f"Kidney {w}"]) for i, w in enumerate(["cyst", "failure", "tumor"])]
    mined = mine_word_variants({"TINY": tiny}, min_votes=2, min_concepts=2)
    for pair in mined["pairs"]:
        pair["votes"] *= 10  # as many contexts as DEFAULT_OPTIONS asks of a substitution
    save_table(table, mined)
    kb = kb_folder([ConceptRecord("D:1", "Renal cyst"), ConceptRecord("D:2", "Anemia")])

    def nlp(**extra):
        return build_pipeline(kb, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config={"precision": "fp32"},
                              span_finder_config={"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0,
                                                  "min_variant_score": 0.0, **extra})

    text = "Two kidney cysts and anemia."
    assert [e.text for e in nlp()(text).ents] == ["anemia"]
    with_variants = nlp(word_variants=str(table))
    doc = with_variants(text)
    assert [e.text for e in doc.ents] == ["kidney cysts", "anemia"] and doc.ents[0].kb_id_ == "D:1"
    with_variants.to_disk(tmp_path / "pipeline")
    assert [e.text for e in spacy.load(tmp_path / "pipeline")(text).ents] == ["kidney cysts", "anemia"]


def test_a_proposal_does_not_end_on_a_word_that_ends_no_name_before_another_word():
    """Names match in any word order, so "carcinoma of the renal" has the words of "Renal carcinoma"; but
    "renal" ends no KB name, and before "pelvis" it cuts a noun phrase. Before punctuation such a
    reordering is a whole phrase ("proteinuria to the nephrotic range.")."""
    names = ["Renal carcinoma", "Carcinoma", "Hypertension", "Nephrotic range proteinuria", "Proteinuria"]
    found = texts(proposed("Invasive carcinoma of the renal pelvis.", names))
    assert "carcinoma of the renal" not in found and "carcinoma" in found
    assert "hypertension" in texts(proposed("Pulmonary hypertension associated with drugs.", names))
    assert "proteinuria to the nephrotic range" in texts(proposed("It showed proteinuria to the nephrotic range.", names))
    assert "renal carcinoma" in texts(proposed("A renal carcinoma was found.", names))
    names += ["Aspartoacylase deficiency", "ASPA deficiency"]  # a noun that ends no name, before "and": a whole phrase
    assert "deficiency of ASPA" in texts(proposed("It led to a deficiency of ASPA and to disease.", names))
    index = NameIndex(names)
    assert {"carcinoma", "hypertension", "proteinuria"} <= index.last_words and "renal" not in index.last_words
    # an inverted name's words after its first comma end no noun phrase
    names = ["Hypotonia, neonatal, generalized", "Neonatal hypotonia", "Hypertrophy, Left Ventricular", "Left ventricular hypertrophy"]
    index = NameIndex(names)
    assert "hypertrophy" in index.last_words and not {"neonatal", "generalized", "ventricular"} & index.last_words
    found = texts(proposed("Hypotonia in the neonatal period; hypertrophy of the left ventricular wall.", names))
    assert not {"Hypotonia in the neonatal", "hypertrophy of the left ventricular"} & found


def test_a_name_whose_last_word_is_coordinated_with_another_is_one_coordination():
    names = ["Hypopigmentation of the skin", "Hypopigmentation of hair", "Renal failure", "Anemia", "Abnormality of the hand",
             "Abnormality of the foot", "Finger syndactyly", "Toe syndactyly", "Metaphyseal flaring", "Metaphyseal irregularity"]
    found = proposed("Hypopigmentation of skin or hair; abnormalities of the hands and feet; renal failure and anemia; "
                     "metaphyseal flaring and irregularity.", names)
    assert {("Hypopigmentation of skin or hair", "coordinated"), ("abnormalities of the hands and feet", "coordinated"),
            ("metaphyseal flaring and irregularity", "coordinated")} <= found  # the head replaced too
    # the new word must make a name: "renal failure and anemia" is two names
    assert ("renal failure and anemia", "coordinated") not in found and {("renal failure", "exact"), ("anemia", "exact")} <= found
    # one word replaces the last one, and only after one coordinating word
    assert not {t for t, kind in proposed("syndactyly of fingers and feet and toes", names) if kind == "coordinated"}
    assert ("syndactyly of fingers and toes", "coordinated") in proposed("syndactyly of fingers and toes", names)
    assert ("syndactyly of fingers and/or toes", "coordinated") in proposed("syndactyly of fingers and/or toes", names)
    names += ["Renal hypoplasia", "Renal malformation", "Malformation of the kidney"]
    found = proposed("renal hypoplasia or malformations of the kidney", names)
    assert ("renal hypoplasia or malformations", "coordinated") not in found and ("malformations of the kidney", "exact") in found


def test_a_finding_stated_as_a_clause_is_proposed_whole_and_searched_reordered():
    names = ["Absent ankle reflexes", "Absent thumb", "Absent speech", "Reduced bone mineral density", "Reduced vision",
             "Reduced hearing", "Low-set ears", "Low weight", "Low vision", "Hitchhiker thumb", "Seizure", "Elevated creatine kinase",
             "Elevated lactate", "Elevated ferritin"]
    found = proposed("Ankle reflexes were absent. Bone mineral density is reduced. His ears are low-set. The thumb was absent "
                     "bilaterally.", names)
    assert {("Ankle reflexes were absent", "predicative"), ("Bone mineral density is reduced", "predicative"),
            ("ears are low-set", "predicative"), ("thumb was absent", "predicative")} <= found
    # a name's words exactly, with the subject a whole phrase and nothing after the quality word but the end of a clause
    for text in ("Seizures were absent.", "Hitch hiker thumb was absent.", "Ankle reflexes were not absent.",
                 "Reflexes were absent.", "The thumb was reduced.", "The thumb was absent speech."):
        assert not {t for t, kind in proposed(text, names) if kind == "predicative"}, text
    assert split_mention("ankle reflexes were absent") == ["absent ankle reflexes"]
    assert split_mention("ears are low-set") == ["low-set ears"]
    # an adverb between: proposed with it, searched without it
    assert ("Creatine kinase was markedly elevated", "predicative") in proposed("Creatine kinase was markedly elevated.", names)
    assert split_mention("creatine kinase was markedly elevated") == ["elevated creatine kinase"]
    assert split_mention("the reflexes") == ["the reflexes"]


def test_a_name_with_its_quality_written_as_a_synonym_is_proposed():
    """``synonyms`` (``QualityWords.synonyms``): "reduced vibration sense" is the KB's "Decreased vibration sense"."""
    names = ["Decreased vibration sense", "Poor growth", "Muscle rigidity", "Muscular dystrophy", "Reduced vision", "Reduced hearing",
             "Reduced bone mineral density"]  # as mined, a synonym is a KB word ("reduced": a quality of 3 names)
    synonyms = {"reduced": {"decreased", "poor"}, "decreased": {"reduced"}, "poor": {"reduced"}, "muscular": {"muscle"},
                "muscle": {"muscular"}}
    found = proposed("Reduced vibration sense in the feet and muscular rigidity.", names, synonyms=synonyms)
    assert {("Reduced vibration sense", "synonym"), ("muscular rigidity", "synonym")} <= found
    assert not {k for _, k in proposed("Reduced vibration sense in the feet and muscular rigidity.", names)} & {"synonym"}
    # in a clause the quality comes last
    assert ("Vibration sense was reduced", "predicative") in proposed("Vibration sense was reduced.", names, synonyms=synonyms)
    # a verb's object ("reduced the growth rate") and a lone quality word are no such name
    assert not {t for t, k in proposed("It reduced the growth rate. It was reduced.", names, synonyms=synonyms) if k == "synonym"}
    # the name itself is "exact", not a synonym's
    assert ("Decreased vibration sense", "exact") in proposed("Decreased vibration sense.", names, synonyms=synonyms)


def test_a_name_that_negates_its_words_is_not_their_name():
    """"No appetite" and "Growth without growth hormone" name the absence of what their other words say:
    "appetite" or "growth hormone" alone is no such name's words (the 2,292 abstracts had linked "appetite
    suppressants" to *Increased appetite*); "migraine without aura" is "Migraine without aura", not "Migraine with aura"."""
    names = ["No appetite", "Growth without growth hormone", "Migraine without aura", "Migraine with aura", "Poor appetite"]
    found = proposed("Appetite suppressants and growth hormone were given. She has migraine without aura and he migraine with aura.", names)
    assert not {t for t, _ in found} & {"Appetite", "growth hormone"}
    assert {("migraine without aura", "exact"), ("migraine with aura", "exact")} <= found
    index = NameIndex(names)
    doc = NLP("migraine without aura")
    assert index.match(frozenset(k for t in doc for k in index.token_keys(t.lower, doc.vocab.strings) or ())) == "exact"
    assert frozenset({"migraine", "aura"}) in index.exact and frozenset({"migraine", "without", "aura"}) in index.exact
