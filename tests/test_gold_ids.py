"""Gold concept ids in user corpora: composite separators, unlinkable marks, and malformed ids
refused with file and line (issue 13, item 20, the reader part)."""
from __future__ import annotations

import pytest

from spacy_sapbert.evaluation.datasets import parse_gold_ids, read_concept_file, read_pubtator
from spacy_sapbert.records import InputError


@pytest.mark.parametrize(
    "raw,ids",
    [
        ("D001,D002", ("MESH:D001", "MESH:D002")),
        ("D001, OMIM:123 + C456|D001", ("MESH:D001", "OMIM:123", "MESH:C456")),
        ("-", ()),
        ("-1", ()),
        (" - ", ()),
        ("D002544|-1", ("MESH:D002544",)),
        ("HP:0001250", ("HP:0001250",)),
        ("", ()),
    ],
)
def test_composites_and_unlinkable_marks(raw, ids):
    assert parse_gold_ids(raw) == ids


@pytest.mark.parametrize("raw", ["D001|", "D001,,D002", "D001 D002", "D001;D002", "MESH:", "-2", "?", "MESH:-"])
def test_malformed_ids_are_refused(raw):
    with pytest.raises(InputError, match="malformed concept id"):
        parse_gold_ids(raw, "x.concept", 3)


def test_concept_file_reads_commas_and_dashes_and_names_the_line_of_a_bad_id(tmp_path):
    path = tmp_path / "test.concept"
    path.write_text("7||0|5||Disease||fever||D005334,D000001\n7||10|14||Disease||pain||-\n", encoding="utf8")
    fever, pain = read_concept_file(path)[0].mentions
    assert fever.ids == ("MESH:D005334", "MESH:D000001") and pain.is_nil
    path.write_text("7||0|5||Disease||fever||D005334\n7||10|14||Disease||pain||D001;D002\n", encoding="utf8")
    with pytest.raises(InputError) as err:
        read_concept_file(path)
    assert (err.value.path, err.value.line) == (str(path), 2) and "'D001;D002'" in str(err.value)


def test_pubtator_names_the_line_of_a_bad_id(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("42|t|Wilson disease.\n42|a|Text.\n42\t0\t6\tWilson\tDisease\tD006527|\n", encoding="utf8")
    with pytest.raises(InputError, match=r"corpus\.txt:3: malformed concept id ''"):
        read_pubtator(path)


def test_the_benchmark_corpora_still_parse():
    """Every id field in the bundled NCBI-disease and BC5CDR files is well formed."""
    from pathlib import Path

    from spacy_sapbert.evaluation.datasets import load_split

    root = Path(__file__).resolve().parents[1] / "assets" / "benchmarks"
    if not root.is_dir():
        pytest.skip("benchmark assets not fetched")
    counts = {name: len([m for d in load_split(name, "dev", root) for m in d.mentions]) for name in ("ncbi-disease", "bc5cdr-disease")}
    assert all(counts.values()), counts


def test_training_pairs_read_task_mentions_by_the_same_rule(tmp_path):
    from training.pairs import read_mentions

    path = tmp_path / "train.concept"
    path.write_text("7||0|5||Disease||fever||D005334,D000001\n7||10|14||Disease||pain||-\n", encoding="utf8")
    assert list(read_mentions(path)) == [("fever", ("MESH:D005334", "MESH:D000001")), ("pain", ())]
    path.write_text("7||0|5||Disease||fever||D005334 D000001\n", encoding="utf8")
    with pytest.raises(InputError, match=r"train\.concept:1: malformed concept id"):
        list(read_mentions(path))
