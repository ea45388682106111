"""add_negation: negspacy's NegEx on the pipeline's entities, with sentence boundaries it needs."""
from __future__ import annotations

import subprocess
import sys

import spacy

from spacy_sapbert.negation import add_negation

PATTERNS = [
    {"label": "PHENOTYPE", "pattern": "hepatosplenomegaly"},
    {"label": "PHENOTYPE", "pattern": "fever"},
    {"label": "PHENOTYPE", "pattern": "headache"},
    {"label": "DRUG", "pattern": "aspirin"},
]


def make_nlp(**kwargs) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    add_negation(nlp, **kwargs)
    return nlp


def negated(doc):
    return [(e.text, e._.negex) for e in doc.ents]


def test_negated_and_affirmed_entities():
    nlp = make_nlp()
    assert nlp.pipe_names == ["entity_ruler", "negex_sentencizer", "negex"]
    assert negated(nlp("No evidence of hepatosplenomegaly.")) == [("hepatosplenomegaly", True)]
    # "but" ends the scope of "denies"
    assert negated(nlp("The patient denies fever but reports headache.")) == [("fever", True), ("headache", False)]
    # a negation does not cross a sentence boundary
    assert negated(nlp("No fever. She has headache.")) == [("fever", True), ("headache", False)]


def test_ent_types_limit_what_is_checked():
    nlp = make_nlp(ent_types=["PHENOTYPE"])
    doc = nlp("He denies fever and takes no aspirin.")
    assert negated(doc) == [("fever", True), ("aspirin", False)]


def test_no_sentencizer_when_sentences_are_already_set():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    add_negation(nlp)
    assert nlp.pipe_names == ["sentencizer", "entity_ruler", "negex"]
    assert negated(nlp("No fever.")) == [("fever", True)]


def test_position_before_another_component():
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    nlp.add_pipe("merge_entities")
    add_negation(nlp, before="merge_entities")
    assert nlp.pipe_names == ["entity_ruler", "negex_sentencizer", "negex", "merge_entities"]


def test_saved_pipeline_loads_in_a_fresh_process(tmp_path):
    make_nlp().to_disk(tmp_path / "pipe")
    # a fresh interpreter that never imports negspacy: the entry point must find "negex"
    code = (
        "import spacy, sys; nlp = spacy.load(sys.argv[1]); doc = nlp('No evidence of hepatosplenomegaly.');"
        "print(nlp.pipe_names, [e._.negex for e in doc.ents])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pipe")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['entity_ruler', 'negex_sentencizer', 'negex'] [True]"
