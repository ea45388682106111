"""Word variants mined from a tiny ontology: what is learned, what the vote threshold keeps out,
and the generated names a KB built with the table gets (marked, never displacing real names)."""
from __future__ import annotations

import json

import pytest

from spacy_sapbert import normalize
from spacy_sapbert.build import build_kb_folder
from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.normalize import name_words, word_key_fingerprint
from spacy_sapbert.records import ConceptRecord, InputError
from spacy_sapbert.word_variants import (
    GENERATED_FILE,
    SHIPPED_TABLE,
    TABLE_FILE,
    VariantTable,
    aligned_pairs,
    generated_names,
    load_table,
    mine_word_variants,
    save_table,
    variant_records,
)


def rec(cid, *names):
    return ConceptRecord(id=cid, name=names[0], synonyms=list(names[1:]))


# "renal"/"kidney" is shown in three contexts by three concepts; "ocular"/"throbbing" by one concept
# only (a name list, not a variant); "patellar"/"patella" by two concepts, as a derivation.
TINY = [
    rec("C1", "Renal cyst", "Kidney cyst"),
    rec("C2", "Renal failure", "Kidney failure"),
    rec("C3", "Renal tumour", "Kidney tumor", "Tumor of the kidney"),
    rec("C4", "Hypoplastic patella", "Patellar hypoplasia"),
    rec("C5", "Patellar dislocation", "Dislocated patella"),
    rec("C6", "Ocular headache", "Throbbing headache", "Ocular headaches", "Throbbing headaches"),
    rec("C7", "Abnormality of the rib", "Rib abnormality"),
    rec("C8", "Abnormality of the hand", "Hand abnormality"),
    rec("C9", "Abnormality of the foot", "Foot abnormality"),
]


def pairs_of(table):
    return {tuple(p["words"]): p for p in table["pairs"]}


def test_a_substitution_seen_in_enough_contexts_and_concepts_is_learned_and_counted():
    table = mine_word_variants({"TINY": TINY}, min_votes=3, min_concepts=2)
    found = pairs_of(table)
    assert found[("kidney", "renal")]["kind"] == "substitution"
    assert found[("kidney", "renal")]["votes"] == 3 and found[("kidney", "renal")]["concepts"] == 3
    assert found[("kidney", "renal")]["by_source"] == {"TINY": 3}
    assert table["sources"] == {"TINY": {"concepts": 9, "names": 21}}
    assert table["thresholds"]["min_votes"] == 3 and table["thresholds"]["min_concepts"] == 2
    assert set(table["word_order"]) == {"of"} and table["word_order"]["of"]["votes"] == 4


def test_the_vote_threshold_keeps_out_a_pair_too_few_contexts_or_concepts_show():
    strict = pairs_of(mine_word_variants({"TINY": TINY}, min_votes=4, min_concepts=2))
    assert ("kidney", "renal") not in strict  # three contexts only
    loose = pairs_of(mine_word_variants({"TINY": TINY}, min_votes=1, min_concepts=1))
    assert ("ocular", "throbbing") in loose  # one concept's list of names ...
    assert ("ocular", "throbbing") not in pairs_of(mine_word_variants({"TINY": TINY}, min_votes=1, min_concepts=2))  # ... is one witness


def test_derivations_are_aligned_by_shared_stem_even_when_two_words_differ():
    assert sorted(aligned_pairs(name_words("hypoplastic patella"), name_words("patellar hypoplasia"))) == [
        ("derivation", ("hypoplasia", "hypoplastic"), "patellar | patella"),
        ("derivation", ("patella", "patellar"), "hypoplastic | hypoplasia"),
    ]
    # one stem pair and one leftover pair: the leftover is a substitution
    assert ("substitution", ("kidney", "renal"), "hypoplastic | hypoplasia") in aligned_pairs(name_words("hypoplastic kidney"), name_words("renal hypoplasia"))
    # two leftovers cannot be aligned: nothing is voted
    assert aligned_pairs(name_words("skin tag"), name_words("acrochordon")) == []
    found = pairs_of(mine_word_variants({"TINY": TINY}, min_votes=2, min_concepts=2))
    assert found[("patella", "patellar")]["kind"] == "derivation"


def test_variant_names_use_the_table_and_the_word_order_it_allows():
    table = VariantTable(mine_word_variants({"TINY": TINY}, min_votes=2, min_concepts=2))
    assert "rib abnormality" in table.variants("Abnormality of the ribs", 5)
    assert "kidney cyst" in table.variants("Renal cysts", 5)
    assert table.variants("Seizure", 5) == []


def test_generated_names_never_repeat_or_displace_a_real_name():
    records = [rec("A", "Renal cyst"), rec("B", "Kidney cyst"), rec("C", "Renal failure")]
    table = VariantTable(mine_word_variants({"TINY": TINY}, min_votes=2, min_concepts=2))
    out, generated = variant_records(records, table, max_variants=3)
    assert generated == [["kidney failure", "C", "Renal failure"]]  # "kidney cyst" is B's real name
    assert out[0].all_names == ["Renal cyst"] and out[2].all_names == ["Renal failure", "kidney failure"]


def test_a_kb_built_with_variants_stores_the_table_and_marks_its_generated_names(tmp_path, tiny_encoder):
    table = mine_word_variants({"TINY": TINY}, min_votes=2, min_concepts=2)
    records = [rec("A", "Renal cyst"), rec("C", "Renal failure")]
    out = tmp_path / "kb"
    build_kb_folder(records, tiny_encoder, out, index_kind="flat", progress=False, word_variants=table,
                    variant_options={"max_variants": 2})
    kb = ConceptKB.from_disk(out)
    assert kb.row_of_name("kidney failure") is not None and kb.row_of_name("renal failure") is not None
    assert generated_names(out) == {"kidney cyst", "kidney failure"}
    assert json.loads((out / GENERATED_FILE).read_text())["options"] == {"max_variants": 2}
    assert load_table(out / TABLE_FILE)["pairs"] == table["pairs"]
    plain = tmp_path / "plain"
    build_kb_folder(records, tiny_encoder, plain, index_kind="flat", progress=False)
    assert ConceptKB.from_disk(plain).n_names == 2 and generated_names(plain) == set()
    assert not (plain / TABLE_FILE).exists()


def test_a_file_that_is_no_table_is_refused_with_its_name(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"pairs": []}')
    with pytest.raises(InputError, match="t.json: not a word-variant table"):
        load_table(path)
    save_table(path, mine_word_variants({"TINY": TINY}))
    assert load_table(path)["format"] == "spacy-sapbert-word-variants"


def test_a_table_mined_with_other_word_keys_is_refused(tmp_path, monkeypatch):
    """The pairs are word keys: a table mined before ``word_key`` changed would silently match less."""
    path = tmp_path / "t.json"
    table = mine_word_variants({"TINY": TINY})
    assert table["word_keys"] == word_key_fingerprint()
    save_table(path, {**table, "word_keys": "0" * 16})
    with pytest.raises(InputError, match="t.json: mined with other word keys .*mine it again"):
        load_table(path)
    monkeypatch.setitem(normalize._IRREGULAR_PLURALS, "teeth", "teeth")  # a rule changed after mining
    save_table(path, table)
    assert word_key_fingerprint() != table["word_keys"]
    with pytest.raises(InputError, match="mined with other word keys"):
        load_table(path)


def test_the_shipped_table_has_its_provenance():
    table = load_table(SHIPPED_TABLE)
    assert set(table["sources"]) >= {"HP", "MONDO", "DOID", "MESH-C"}
    assert table["thresholds"]["min_votes"] >= 2 and len(table["pairs"]) > 1000
    found = pairs_of(table)
    assert found[("cutaneous", "skin")]["kind"] == "substitution"
    assert found[("patella", "patellar")]["kind"] == "derivation"


def test_build_kb_word_variants_option_adds_marked_names_and_a_bad_table_is_one_line(tmp_path, tiny_bert_path):
    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    (tmp_path / "terms.tsv").write_text("concept_id\tcanonical_name\taliases\nC1\tRenal cyst\t\nC2\tRenal failure\tKidney failure\n",
                                        encoding="utf8")
    table = mine_word_variants({"TINY": TINY}, min_votes=2, min_concepts=2)
    for pair in table["pairs"]:
        pair["votes"] *= 10  # as seen in as many contexts as DEFAULT_OPTIONS asks of a substitution
    save_table(tmp_path / "table.json", table)
    args = ["build-kb", str(tmp_path / "terms.tsv"), str(tmp_path / "kb"), "--encoder", str(tiny_bert_path)]
    result = CliRunner().invoke(app, [*args, "--word-variants", str(tmp_path / "table.json"), "--max-variants", "1"])
    assert result.exit_code == 0, result.output
    assert generated_names(tmp_path / "kb") == {"kidney cyst"}  # "kidney failure" is a real name already
    assert ConceptKB.from_disk(tmp_path / "kb").n_names == 4
    (tmp_path / "bad.json").write_text("[]")
    bad = CliRunner().invoke(app, [*args, "--word-variants", str(tmp_path / "bad.json")])
    assert bad.exit_code != 0 and "bad.json: not a word-variant table" in bad.output and "Traceback" not in bad.output


def test_the_variant_matcher_maps_a_phrase_onto_a_kb_names_words():
    from spacy_sapbert.span_proposals import NameIndex
    from spacy_sapbert.variant_proposals import VariantMatcher

    index = NameIndex(["Abnormality of the skin", "Dysplastic patella", "Renal cyst", "Kidney"])
    table = {"format": "spacy-sapbert-word-variants", "version": 2, "word_order": {}, "pairs": [
        {"words": ["cutaneous", "skin"], "kind": "substitution", "votes": 60},
        {"words": ["dysplasia", "dysplastic"], "kind": "derivation", "votes": 17},
        {"words": ["patella", "patellar"], "kind": "derivation", "votes": 9},
        {"words": ["abnormal", "abnormality"], "kind": "derivation", "votes": 300},
    ]}
    matcher = VariantMatcher(index.exact, index.vocab, VariantTable(table))
    keys = lambda text: frozenset(name_words(text))  # noqa: E731
    assert matcher.match(keys("cutaneous abnormality"))  # one substitution
    assert matcher.match(keys("patellar dysplasia"))  # two derivations: the same stems
    assert matcher.match(keys("abnormal skin"))
    assert not matcher.match(keys("cutaneous cyst")) and not matcher.match(keys("patellar cyst"))
    assert "cutaneous" in matcher.extra_vocab and "skin" not in matcher.extra_vocab
    assert not VariantMatcher(index.exact, index.vocab, VariantTable(table, min_substitution_votes=100)).match(keys("cutaneous abnormality"))
