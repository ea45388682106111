"""The sapbert_abbreviations component: definitions in doc._.abbreviations, later uses as entities."""
from __future__ import annotations

import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_sapbert.abbreviations import (
    abbreviation_expander,
    find_abbreviation_definitions,
    find_abbreviations,
    introduced_short_forms,
    query_expander,
    query_text,
    register_doc_attribute,
)

TEXT = "Patients with diabetes mellitus (DM) were studied. Later, DM worsened, but DMX and DM2 did not."


def make_nlp(patterns, **config) -> spacy.Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(patterns)
    nlp.add_pipe("sapbert_abbreviations", config=config)
    return nlp


@pytest.fixture
def nlp() -> spacy.Language:
    return make_nlp([{"label": "DISEASE", "pattern": "diabetes mellitus"}])


def ents(doc: Doc):
    return [(e.text, e.label_, e.start_char) for e in doc.ents]


def test_short_forms_introduced_without_a_long_form_schwartz_hearst_can_align():
    text = "Myotonic dystrophy (DM) and diabetes mellitus (T2DM) were seen; DM (n = 3)."
    assert "DM" not in find_abbreviations(text)  # DM is Latin: dystrophia myotonica
    assert {"DM", "T2DM"} <= introduced_short_forms(text) and "HT" not in introduced_short_forms(text)


def test_definitions_carry_character_offsets():
    text = "We saw copper\ntoxicosis (CT) and HNPCC (hereditary non-polyposis colorectal cancer)."
    defs = find_abbreviation_definitions(text)
    assert [(d.short, d.long) for d in defs] == [
        ("CT", "copper toxicosis"),
        ("HNPCC", "hereditary non-polyposis colorectal cancer"),
    ]
    for d in defs:
        assert text[d.short_start : d.short_end] == d.short
        assert " ".join(text[d.long_start : d.long_end].split()) == d.long
    assert text[defs[0].long_start : defs[0].long_end] == "copper\ntoxicosis"  # offsets keep the line break
    assert find_abbreviations(text) == {d.short: d.long for d in defs}


def test_later_uses_of_a_short_form_become_entities(nlp):
    doc = nlp(TEXT)
    assert doc._.abbreviations == {"DM": "diabetes mellitus"}
    assert ents(doc) == [
        ("diabetes mellitus", "DISEASE", 14),
        ("DM", "DISEASE", 33),
        ("DM", "DISEASE", 58),
    ]  # DMX and DM2 are other tokens
    short = doc.ents[2]
    assert query_text(short) == "diabetes mellitus"
    assert query_text(doc.ents[0]) == "diabetes mellitus"


def test_long_form_is_added_when_only_the_short_form_was_detected():
    nlp = make_nlp([{"label": "DISEASE", "pattern": "DM"}])
    doc = nlp(TEXT)
    assert ents(doc) == [("diabetes mellitus", "DISEASE", 14), ("DM", "DISEASE", 33), ("DM", "DISEASE", 58)]


def test_existing_entities_are_kept_and_never_overlapped():
    nlp = make_nlp(
        [
            {"label": "DISEASE", "pattern": "diabetes mellitus"},
            {"label": "DISEASE", "pattern": "DM worsened"},
        ]
    )
    doc = nlp(TEXT)
    assert ents(doc) == [
        ("diabetes mellitus", "DISEASE", 14),
        ("DM", "DISEASE", 33),
        ("DM worsened", "DISEASE", 58),
    ]


def test_a_long_form_naming_something_else_gives_no_label():
    # the disease "von Hippel-Lindau" is inside the long form of a gene: later "VHL" is the gene
    nlp = make_nlp([{"label": "DISEASE", "pattern": [{"LOWER": "von"}, {"TEXT": "Hippel"}, {"TEXT": "-"}, {"TEXT": "Lindau"}]}])
    doc = nlp("The von Hippel-Lindau tumor suppressor gene (VHL) is mutated. VHL binds elongin.")
    assert doc._.abbreviations == {"VHL": "von Hippel-Lindau tumor suppressor gene"}
    assert [e.text for e in doc.ents] == ["von Hippel-Lindau"]


def test_switch_off_keeps_definitions_but_adds_no_entities():
    nlp = make_nlp([{"label": "DISEASE", "pattern": "diabetes mellitus"}], find_later_uses=False)
    doc = nlp(TEXT)
    assert doc._.abbreviations == {"DM": "diabetes mellitus"}
    assert [e.text for e in doc.ents] == ["diabetes mellitus"]
    with nlp.select_pipes(disable=["sapbert_abbreviations"]):
        doc = nlp(TEXT)
    assert doc._.abbreviations is None
    assert [e.text for e in doc.ents] == ["diabetes mellitus"]
    assert query_text(doc.ents[0]) == "diabetes mellitus"


def test_query_text_without_the_component_is_the_span_text():
    nlp = spacy.blank("en")
    doc = nlp("Later, DM worsened.")
    assert query_text(doc[2:3]) == "DM"


def test_one_expander_serves_every_mention_of_a_doc(nlp):
    expand = abbreviation_expander({"WD": "Wilson disease", "CT": "copper toxicosis"})
    assert [expand(m) for m in ("WD", "WD/CT", "CTs", "no short form")] == [
        "Wilson disease", "Wilson disease/copper toxicosis", "CTs", "no short form"]
    assert abbreviation_expander({})("WD") == "WD"
    doc = nlp(TEXT)
    assert query_expander(doc)("DM worsened") == "diabetes mellitus worsened"


def test_span_group_gets_later_uses_with_overlaps_allowed():
    nlp = make_nlp([{"label": "DISEASE", "pattern": "diabetes mellitus"}], spans_key="mentions")
    doc = nlp.make_doc(TEXT)
    doc.spans["mentions"] = [doc.char_span(14, 31, label="DISEASE"), doc.char_span(58, 69, label="DISEASE")]
    for _name, proc in nlp.pipeline:
        doc = proc(doc)
    assert sorted((s.text, s.label_) for s in doc.spans["mentions"]) == [
        ("DM", "DISEASE"),
        ("DM", "DISEASE"),
        ("DM worsened", "DISEASE"),
        ("diabetes mellitus", "DISEASE"),
    ]


def test_abbreviations_survive_to_bytes_and_docbin(nlp):
    doc = nlp(TEXT)
    copy = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert copy._.abbreviations == {"DM": "diabetes mellitus"}
    assert query_text(copy.ents[2]) == "diabetes mellitus"
    docbin = DocBin(store_user_data=True, docs=[doc])
    (restored,) = DocBin().from_bytes(docbin.to_bytes()).get_docs(nlp.vocab)
    assert restored._.abbreviations == {"DM": "diabetes mellitus"}
    assert ents(restored) == ents(doc)


def test_pipeline_saves_and_loads_with_its_config(nlp, tmp_path):
    nlp.remove_pipe("sapbert_abbreviations")
    nlp.add_pipe("sapbert_abbreviations", config={"find_later_uses": False})
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    assert loaded.pipe_names == ["entity_ruler", "sapbert_abbreviations"]
    assert loaded.config["components"]["sapbert_abbreviations"]["find_later_uses"] is False
    doc = loaded(TEXT)
    assert doc._.abbreviations == {"DM": "diabetes mellitus"}
    assert [e.text for e in doc.ents] == ["diabetes mellitus"]  # the config setting holds after loading


def test_an_attribute_owned_by_another_package_is_not_overwritten():
    Doc.set_extension("test_abbrs_foreign", default=[])
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_doc_attribute("test_abbrs_foreign")
        nlp = spacy.blank("en")
        with pytest.raises(ValueError, match="'attr' setting"):
            nlp.add_pipe("sapbert_abbreviations", config={"attr": "test_abbrs_foreign"})
    finally:
        Doc.remove_extension("test_abbrs_foreign")
    register_doc_attribute("abbreviations")
    register_doc_attribute("abbreviations")  # ours: idempotent
