"""`evaluate --test-file --dictionary-file`: a user's own annotated corpus and dictionary."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from spacy_sapbert.cli import app

PUBTATOR = (
    "1|t|Seizures and fever.\n"
    "1|a|The child had a headache.\n"
    "1\t0\t8\tSeizures\tDisease\tHP:1\n"
    "1\t13\t18\tfever\tDisease\tHP:3\n"
    "1\t36\t44\theadache\tDisease\tHP:2\n"
    "\n"
    "2|t|Pyrexia without convulsion.\n"
    "2|a|None.\n"
    "2\t0\t7\tPyrexia\tDisease\tHP:3\n"
    "2\t16\t26\tconvulsion\tDisease\tHP:1\n"
)
TABLE = "concept_id\tcanonical_name\taliases\ttypes\nHP:1\tSeizure\tConvulsion|Seizures\t\nHP:2\tHeadache\t\t\nHP:3\tFever\tPyrexia\t\n"


def test_evaluates_a_users_pubtator_corpus_against_a_users_dictionary(tmp_path, tiny_bert_path):
    (tmp_path / "test.txt").write_text(PUBTATOR, encoding="utf8")
    (tmp_path / "terms.tsv").write_text(TABLE, encoding="utf8")
    base = ["evaluate", "--test-file", str(tmp_path / "test.txt"), "--dictionary-file", str(tmp_path / "terms.tsv")]
    exact = CliRunner().invoke(app, base + ["--system", "exact", "--output", str(tmp_path / "exact.json")])
    assert exact.exit_code == 0, exact.output
    result = json.loads((tmp_path / "exact.json").read_text())
    assert result["dataset"] == "custom:test.txt" and result["preprocessing"]["queries"] == 5
    assert result["lenient_acc@1"] == 100.0  # every mention is a dictionary name
    encoder = CliRunner().invoke(
        app, base + ["--encoder", str(tiny_bert_path), "--precision", "fp32", "--output", str(tmp_path / "enc.json")]
    )
    assert encoder.exit_code == 0, encoder.output
    assert json.loads((tmp_path / "enc.json").read_text())["preprocessing"]["queries"] == 5


def test_a_concept_file_needs_its_texts_and_a_dictionary(tmp_path):
    (tmp_path / "test.concept").write_text("1||0|8||Disease||Seizures||HP:1\n", encoding="utf8")
    (tmp_path / "terms.tsv").write_text(TABLE, encoding="utf8")
    no_text = CliRunner().invoke(
        app, ["evaluate", "--test-file", str(tmp_path / "test.concept"), "--dictionary-file", str(tmp_path / "terms.tsv")]
    )
    assert no_text.exit_code != 0 and "--text-file" in no_text.output
    no_dictionary = CliRunner().invoke(app, ["evaluate", "--test-file", str(tmp_path / "test.concept")])
    assert no_dictionary.exit_code != 0 and "--dictionary-file" in no_dictionary.output
