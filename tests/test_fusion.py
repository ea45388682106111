"""Sparse + dense fusion: the character 3-gram TF-IDF scorer, the KB's fused candidates, the linker
setting and the weight stored in the KB."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB, store_fusion
from spacy_sapbert.sparse import CharTfidf

RECORDS = [
    R("D:1", "hypertension", ["high blood pressure"]),
    R("D:2", "hypotension", ["low blood pressure"]),
    R("D:3", "asthma", []),
    R("D:4", "migraine", ["hemicrania"]),
]


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder(RECORDS)


def test_tfidf_scores_are_cosines_of_the_names_vectors():
    names = ["hypertension", "hypotension", "asthma attack", "asthma"]
    tfidf = CharTfidf(names)
    rows = np.array([[0, 1, -1], [3, 2, 0]])
    scores = tfidf.pair_scores(["hypertension", "asthma"], rows)
    full = (tfidf.transform(["hypertension", "asthma"]) @ tfidf.names.T).toarray()
    assert scores[0, 0] == pytest.approx(1.0) and scores[1, 0] == pytest.approx(1.0)
    assert scores[0, 1] == pytest.approx(full[0, 1]) and 0 < scores[0, 1] < 1
    assert scores[0, 2] == 0.0  # no name
    assert scores[1, 1] == pytest.approx(full[1, 2])
    assert tfidf.rank(["asthma", "zzz"], 2) == [[3, 2], []]


def test_fusion_moves_the_candidate_that_shares_the_spelling_up(kb_path, tiny_encoder):
    kb = LinkingKB.from_disk(kb_path)
    query = ["hypertensoin"]  # a misspelling: a random tiny encoder does not know it
    vectors = tiny_encoder.encode(query)
    dense = kb.candidates(vectors, top_k=4, queries=query)[0]
    assert kb.candidates(vectors, top_k=4, queries=query, fusion_weight=0.0)[0] == dense
    fused = kb.candidates(vectors, top_k=4, queries=query, fusion_weight=0.9)[0]
    assert fused[0].concept_id == "D:1" and fused[0].name == "hypertension"
    by_concept = {c.concept_id: c.score for c in dense}
    sparse = kb.sparse.pair_scores(query, np.array([[kb.kb.row_of_name("hypertension")]]))[0, 0]
    assert fused[0].score == pytest.approx(0.1 * by_concept["D:1"] + 0.9 * sparse, abs=1e-6)
    with pytest.raises(ValueError, match="query strings"):
        kb.candidates(vectors, top_k=4, fusion_weight=0.5)


def linked(kb_path, tiny_bert_path, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "precision": "fp32", **config})
    doc = nlp.make_doc("hypertensoin today")
    doc.ents = [Span(doc, 0, 1, "D")]
    doc = nlp(doc)
    return doc.ents[0]._.cui_candidates, nlp.get_pipe("sapbert_linker")


def test_the_linker_uses_the_weight_stored_in_the_kb_unless_told_otherwise(kb_path, tiny_bert_path, tmp_path):
    off, linker = linked(kb_path, tiny_bert_path)
    assert linker.effective_fusion_weight == 0.0
    tuned = tmp_path / "kb"
    shutil.copytree(kb_path, tuned)
    store_fusion(tuned, {"weight": 0.9, "chosen_on": "a test"})
    on, linker = linked(tuned, tiny_bert_path)
    assert linker.effective_fusion_weight == 0.9 and on != off and on[0][0] == "D:1"
    assert linked(tuned, tiny_bert_path, fusion_weight=0.0)[0] == off  # switched off in one place
    assert linked(kb_path, tiny_bert_path, fusion_weight=0.9)[0] == on
    with pytest.raises(ValueError, match="fusion weight"):
        store_fusion(tuned, {"weight": 1.0})
    with pytest.raises(ValueError, match="fusion_weight"):
        linked(kb_path, tiny_bert_path, fusion_weight=1.5)
