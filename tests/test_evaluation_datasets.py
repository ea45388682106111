"""Benchmark readers: PubTator corpus files and BioSyn ``.concept`` files, with their errors."""
from __future__ import annotations

import pytest

from spacy_sapbert.evaluation.datasets import parse_gold_ids, read_concept_file, read_pubtator
from spacy_sapbert.records import InputError

TITLE = "Wilson disease and copper."
ABSTRACT = "Breast and ovarian cancer occur (BOC)."


def pubtator(*annotations: str, pmid: str = "42") -> str:
    return f"{pmid}|t|{TITLE}\n{pmid}|a|{ABSTRACT}\n" + "".join(a + "\n" for a in annotations) + "\n"


def test_gold_ids_are_prefixed_and_composites_split():
    assert parse_gold_ids("D001|OMIM:123+C456") == ("MESH:D001", "OMIM:123", "MESH:C456")
    assert parse_gold_ids("613097") == ("OMIM:613097",)
    assert parse_gold_ids("-1") == ()
    assert parse_gold_ids("D001|-1") == ("MESH:D001",)


def test_pubtator_reader_checks_offsets_and_skips_relations_and_repeats(tmp_path):
    text = f"{TITLE} {ABSTRACT}"
    start = text.index("Breast")
    good = f"42\t{start}\t{start + 25}\tBreast and ovarian cancer\tCompositeMention\tD001943|D010051"
    path = tmp_path / "corpus.txt"
    path.write_text(pubtator("42\t0\t14\tWilson disease\tSpecificDisease\tD006527", good, "42\tCID\tD1\tD2") + pubtator(), encoding="utf8")
    (doc,) = read_pubtator(path)
    assert doc.text == text
    assert [m.text for m in doc.mentions] == ["Wilson disease", "Breast and ovarian cancer"]
    assert doc.mentions[1].ids == ("MESH:D001943", "MESH:D010051")


def test_pubtator_reader_names_file_and_line_of_a_shifted_mention(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(pubtator("42\t1\t15\tWilson disease\tSpecificDisease\tD006527"), encoding="utf8")
    with pytest.raises(InputError, match=r"corpus.txt:3: mention 'Wilson disease' does not match"):
        read_pubtator(path)


def test_pubtator_reader_rejects_short_annotation_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(pubtator("42\t0\t14\tWilson disease"), encoding="utf8")
    with pytest.raises(InputError, match=r":3: expected 6 tab-separated"):
        read_pubtator(path)


def test_concept_reader_groups_mentions_and_attaches_text(tmp_path):
    path = tmp_path / "test.concept"
    path.write_text(
        "7||0|5||Disease||fever||D005334\n7||10|14||Disease||pain||-1\n8||0|3||Chemical||ace||D000001|D000002\n",
        encoding="utf8",
    )
    docs = read_concept_file(path, {"7": "fever and pain", "8": "ace inhibitor"})
    assert [d.doc_id for d in docs] == ["7", "8"]
    assert docs[0].mentions[1].is_nil
    assert docs[1].text == "ace inhibitor"
    assert docs[1].mentions[0].ids == ("MESH:D000001", "MESH:D000002")


@pytest.mark.parametrize(
    "line, problem",
    [
        ("7||0|5||Disease||fever", "5 '||' fields"),
        ("7||0-5||Disease||fever||D005334", "span '0-5'"),
        ("7||0|5||Disease||fever||", "empty concept id"),
        ("9||0|5||Disease||fever||D005334", "no document text for 9"),
    ],
)
def test_concept_reader_errors_name_the_line(tmp_path, line, problem):
    path = tmp_path / "bad.concept"
    path.write_text("7||0|5||Disease||fever||D005334\n" + line + "\n", encoding="utf8")
    with pytest.raises(InputError, match=r"bad.concept:2: .*" + problem.replace("|", r"\|")):
        read_concept_file(path, {"7": "fever"})
