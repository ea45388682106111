"""Query preprocessing: Schwartz–Hearst abbreviations, composite splitting, cleaning, counts."""
from __future__ import annotations

import pytest

from spacy_sapbert.abbreviations import best_long_form, expand_abbreviations, find_abbreviations
from spacy_sapbert.composites import split_composite
from spacy_sapbert.evaluation.datasets import Document, Mention
from spacy_sapbert.evaluation.preprocess import (
    clean_text,
    load_spelling_fixes,
    preprocess_documents,
    select_gold_ids,
)
from spacy_sapbert.records import InputError


def test_abbreviation_detector_finds_long_forms_in_the_document():
    text = (
        "Mutations cause Wilson disease (WD). We studied copper toxicosis (CT) in dogs. "
        "Probes were mapped by fluorescence in situ hybridization (FISH). "
        "Patients (n = 12) were seen; 5 mg (2%) was given."
    )
    assert find_abbreviations(text) == {
        "WD": "Wilson disease",
        "CT": "copper toxicosis",
        "FISH": "fluorescence in situ hybridization",
    }


def test_abbreviation_detector_reverse_pattern_and_first_definition_wins():
    text = "Cases of HNPCC (hereditary non-polyposis colorectal cancer) were seen. Later, the CT (cardiac tumor) and CT (computed tomography)."
    found = find_abbreviations(text)
    assert found["HNPCC"] == "hereditary non-polyposis colorectal cancer"
    assert found["CT"] == "cardiac tumor"


def test_letters_out_of_order_are_not_an_abbreviation():
    # Schwartz–Hearst requires the short form's letters in order: "myotonic dystrophy (DM)" fails
    assert find_abbreviations("Myotonic dystrophy (DM) is common.") == {}
    assert best_long_form("DM", "Myotonic dystrophy") is None
    assert best_long_form("HD", "in patients with Huntington disease") == "Huntington disease"


def test_expansion_replaces_whole_tokens_only():
    abbrs = {"WD": "Wilson disease", "CT": "copper toxicosis", "AS": "Angelman syndrome"}
    assert expand_abbreviations("WD", abbrs) == "Wilson disease"
    assert expand_abbreviations("WD/CT", abbrs) == "Wilson disease/copper toxicosis"
    assert expand_abbreviations("atypical WD, severe", abbrs) == "atypical Wilson disease, severe"
    assert expand_abbreviations("WDX and CTs", abbrs) == "WDX and CTs"
    assert expand_abbreviations("as", abbrs) == "as"  # short forms are case-sensitive


def test_expansion_stops_on_self_referential_long_forms():
    assert expand_abbreviations("AT", {"AT": "AT deficiency"}) == "AT"
    assert expand_abbreviations("X1", {"X1": "Y2 disease", "Y2": "type 2"}) == "type 2 disease"


@pytest.mark.parametrize(
    "mention, n_ids, parts",
    [
        ("breast and ovarian cancer", 2, ["breast cancer", "ovarian cancer"]),
        ("retinal and the pineal tumours", 2, ["retinal tumours", "pineal tumours"]),
        (
            "sporadic breast, brain, prostate and kidney cancer",
            4,
            ["sporadic breast cancer", "brain cancer", "prostate cancer", "kidney cancer"],
        ),
        ("Saethre-Chotzen, Crouzon, and Pfeiffer syndromes", 3, ["Saethre-Chotzen syndromes", "Crouzon syndromes", "Pfeiffer syndromes"]),
        ("colorectal adenomas and/or carcinoma", 2, ["colorectal adenomas", "colorectal carcinoma"]),
        ("spinocerebellar ataxias 1 and 2", 2, ["spinocerebellar ataxias 1", "spinocerebellar ataxias 2"]),
        ("impairment of learning and memory", 2, ["impairment of learning", "impairment of memory"]),
        ("breast cancer and ovarian cancer", 2, ["breast cancer", "ovarian cancer"]),
        ("breast/ovarian cancer", 2, ["breast cancer", "ovarian cancer"]),
        ("hemorrhagic cystitis", 2, ["hemorrhagic", "cystitis"]),
        ("HITT", 2, ["HITT"]),  # cannot be split: kept whole with both ids
        ("breast and ovarian cancer", 3, ["breast and ovarian cancer"]),  # count mismatch: kept whole
        ("breast and ovarian cancer", 1, ["breast and ovarian cancer"]),
    ],
)
def test_composite_split(mention, n_ids, parts):
    assert split_composite(mention, n_ids) == parts


def test_mixed_mesh_and_omim_keeps_mesh():
    assert select_gold_ids(("OMIM:201400", "MESH:C535668")) == ("MESH:C535668",)
    assert select_gold_ids(("OMIM:1", "OMIM:2")) == ("OMIM:1", "OMIM:2")


def test_clean_text_lowercases_fixes_typos_and_drops_punctuation(tmp_path):
    path = tmp_path / "typos.txt"
    path.write_text("tumour||tumor\nhemmorhage||haemorrhage\n", encoding="utf8")
    fixes = load_spelling_fixes(path)
    assert clean_text("Non-Indian  Tumour (severe)", fixes) == "non indian tumor severe"
    assert clean_text("Wilms' tumour") == "wilms tumour"
    bad = tmp_path / "bad.txt"
    bad.write_text("tumour||tumor\njust a word\n", encoding="utf8")
    with pytest.raises(InputError, match=r"bad.txt:2"):
        load_spelling_fixes(bad)


def test_preprocess_documents_counts_every_step():
    text = "Hereditary breast and ovarian cancer (HBOC) and a NIL thing. HBOC again."
    doc = Document(
        "1",
        text,
        [
            Mention("1", 0, 35, "Hereditary breast and ovarian cancer", "Disease", ("MESH:D1", "MESH:D2")),
            Mention("1", 37, 41, "HBOC", "Disease", ("MESH:D3",)),
            Mention("1", 48, 57, "NIL thing", "Disease", ()),
            Mention("1", 59, 63, "HBOC", "Disease", ("MESH:D3",)),
        ],
    )
    queries, counts = preprocess_documents([doc])
    assert counts["mentions"] == 4
    assert counts["nil_dropped"] == 1
    assert counts["abbreviations_expanded"] == 2
    assert counts["composite_mentions"] == 1 and counts["composites_split"] == 1
    assert counts["queries"] == 3 == len(queries)
    assert queries[0].parts == ("hereditary breast cancer", "ovarian cancer")
    assert queries[1].parts == ("hereditary breast and ovarian cancer",)
    assert queries[1].gold == ("MESH:D3",)
