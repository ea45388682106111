"""Gold-span linking through the pipeline: docs with spans at the gold offsets, the spell-check
list outside the pipeline, and the linker's candidates read back as the metrics' rankings."""
from __future__ import annotations

import spacy

from spacy_sapbert.evaluation.datasets import Document, Mention
from spacy_sapbert.evaluation.gold_spans import (
    GOLD_SPANS_KEY,
    GoldDocStats,
    gold_doc,
    mention_key,
    ranking_of,
    spelling_fixed,
)
from spacy_sapbert.evaluation.metrics import concept_predictions, lenient_hit, strict_hit


def document(text: str, mentions) -> Document:
    doc = Document("7", text)
    for start, end, ids in mentions:
        doc.mentions.append(Mention("7", start, end, text[start:end].strip(), "Chemical", ids))
    return doc


def test_ranking_groups_the_concepts_of_one_ambiguous_name():
    cands = [
        ("MESH:D009103", "MS", 1.0, True),
        ("MESH:D008946", "MS", 1.0, True),
        ("MESH:D001943", "Breast Cancer", 0.7, False),
        ("MESH:X", "Breast Neoplasms", 0.7, False),  # same score, other name, not ambiguous
    ]
    ranking = ranking_of(cands)
    assert ranking == [("MESH:D009103", "MESH:D008946"), ("MESH:D001943",), ("MESH:X",)]
    gold = {"MESH:D009103"}
    assert lenient_hit([ranking], gold, 1) and not strict_hit([ranking], gold, 1)
    assert len(concept_predictions(ranking)) == 3


def test_tokens_are_split_at_gold_boundaries():
    text = "Blocking K(+)-channels with drug-X works."
    k = text.index("K")
    x = text.index("X")
    doc = gold_doc(spacy.blank("en"), document(text, [(k, k + 1, ("MESH:D011188",)), (x, x + 1, ())]), stats := GoldDocStats())
    assert [e.text for e in doc.ents] == ["K", "X"]
    assert doc.text == text and stats.tokens_split == 1 and stats.spans_expanded == 0  # "drug-X" was split already


def test_overlapping_gold_mentions_go_to_a_span_group():
    text = "breast and ovarian cancer"
    doc = gold_doc(spacy.blank("en"), document(text, [(0, 25, ("A", "B")), (11, 25, ("B",))]), stats := GoldDocStats())
    assert not doc.ents and [s.text for s in doc.spans[GOLD_SPANS_KEY]] == [text, "ovarian cancer"]
    assert stats.docs_with_overlaps == 1


def test_spelling_list_fixes_mention_words_and_moves_later_offsets():
    text = "A colorectal tumour, then hepatosplenomegally and tumour growth."
    a = text.index("colorectal")
    b = text.index("hepatosplenomegally")
    original = document(text, [(a, a + len("colorectal tumour"), ("X",)), (b, b + len("hepatosplenomegally"), ("Y",))])
    fixed, origin = spelling_fixed(original, {"tumour": "tumor", "hepatosplenomegally": "hepatosplenomegaly"})
    assert fixed.text == "A colorectal tumor, then hepatosplenomegaly and tumour growth."  # only mention words
    assert [m.text for m in fixed.mentions] == ["colorectal tumor", "hepatosplenomegaly"]
    assert [origin[mention_key(m)] for m in fixed.mentions] == [mention_key(m) for m in original.mentions]
    unchanged, same = spelling_fixed(original, {"absent": "x"})
    assert unchanged is original and all(k == v for k, v in same.items())


def test_gold_span_evaluation_expands_abbreviations_in_the_pipeline(tmp_path, tiny_bert_path):
    from spacy_sapbert.evaluation.runner import evaluate

    root = tmp_path / "benchmarks"
    (root / "medic").mkdir(parents=True)
    (root / "medic" / "medic_06Jul2012.txt").write_text("114500|D015179||Colorectal Neoplasms|Colorectal Cancer\n"
                                                        "D001943||Breast Neoplasms|Breast Cancer\n", encoding="utf8")
    (root / "medic" / "ncbi-spell-check.txt").write_text("", encoding="utf8")
    title, abstract = "Colorectal cancer (CRC).", "The CRC cases."
    text = f"{title} {abstract}"
    at = text.index("CRC", text.index("CRC") + 1)
    lines = f"1|t|{title}\n1|a|{abstract}\n1\t0\t17\tColorectal cancer\tSpecificDisease\tD015179\n1\t{at}\t{at + 3}\tCRC\tSpecificDisease\tD015179\n\n"
    (root / "ncbi-disease").mkdir()
    for split in ("test", "train", "develop"):
        (root / "ncbi-disease" / f"NCBI{split}set_corpus.txt").write_text(lines, encoding="utf8")
    kwargs = dict(data_dir=root, cache_dir=tmp_path / "cache")
    on = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", **kwargs)
    off = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", abbreviations=False, **kwargs)
    assert on["gold_spans"]["abbreviations_expanded"] == 1 and on["strict_acc@1"] == 100.0  # "CRC" → colorectal cancer
    assert off["gold_spans"]["abbreviations_expanded"] == 0 and "sapbert_abbreviations" not in off["pipeline"]
