"""Ontology readers and annotate's input formats are registries: a toy reader and a toy input format,
registered here (outside the package), are used through ``build-kb --format toy`` and ``annotate
--input-format toy``; an unknown name lists the choices; listing the names imports no reader."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from typer.testing import CliRunner

from spacy_sapbert.cli import _guess_format, app
from spacy_sapbert.documents import (
    INPUT_FORMATS,
    InputDocument,
    guess_input_format,
    input_format_names,
    iter_documents,
    read_documents,
)
from spacy_sapbert.ontologies import READERS, read_concepts, reader_for, reader_names
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.registries import input_formats, names, ontology_readers
from spacy_sapbert.search import LinkingKB

ROOT = Path(__file__).resolve().parents[1]
# a toy ontology: "id = name; synonym; synonym" per line
TOY_ONTOLOGY = "HP:1 = Seizure; Convulsion; Fits\nHP:2 = Headache; Cephalgia\nHP:3 = Fever; Pyrexia\n"
# a toy corpus: "id :: text" per line, "#" lines are comments
TOY_CORPUS = "# two documents\nd1 :: Fits and pyrexia.\nd2 :: No cephalgia here.\n"


@ontology_readers.register("toy")
def read_toy_ontology(path: Path, lenient: bool = False) -> Iterator[ConceptRecord]:
    """``id = name; synonym; ...`` lines."""
    for line in Path(path).read_text(encoding="utf8").splitlines():
        concept_id, names_ = line.split(" = ", 1)
        name, *synonyms = names_.split("; ")
        yield ConceptRecord(concept_id, name, synonyms)


@input_formats.register("toy")
def read_toy_corpus(path: Path) -> Iterator[InputDocument]:
    """``id :: text`` lines; ``#`` lines skipped."""
    for n, line in enumerate(Path(path).read_text(encoding="utf8").splitlines(), 1):
        if not line.startswith("#"):
            doc_id, text = line.split(" :: ", 1)
            yield InputDocument(doc_id, text, n)


def test_the_built_in_names_are_registered_in_their_order_and_the_toys_after_them():
    assert reader_names() == [*READERS, "toy"] and names(ontology_readers) == sorted([*READERS, "toy"])
    assert input_format_names() == [*INPUT_FORMATS, "toy"]
    assert reader_for("toy") is read_toy_ontology
    assert reader_for("obo").__name__ == "read_obo"  # the function itself (its signature: on_duplicate), not the lazy entry


def test_listing_the_names_imports_no_reader():
    code = ("import sys, spacy_sapbert.cli; from spacy_sapbert.ontologies import reader_names; reader_names(); "
            "print(sorted(m for m in sys.modules if m.startswith('spacy_sapbert.ontologies.') and m != 'spacy_sapbert.ontologies._common'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_unknown_names_list_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"unknown concept format 'nope'; choose from obo, umls, .*indra-json, toy$"):
        reader_for("nope")
    (tmp_path / "notes.txt").write_text("x\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"input format must be auto or one of folder, text, tsv, jsonl, pubtator, bioc, toy, not 'nope'"):
        iter_documents(tmp_path / "notes.txt", "nope")
    with pytest.raises(ValueError, match=r"input format must be auto or one of folder, text, tsv, jsonl, pubtator, bioc, toy, not 'nope'"):
        next(read_documents(tmp_path / "notes.txt", "nope"))  # link --input: the same registry
    result = CliRunner().invoke(app, ["build-kb", str(tmp_path / "notes.txt"), str(tmp_path / "kb"), "--format", "nope"])
    assert result.exit_code == 1 and "unknown concept format 'nope'; choose from obo" in result.output, result.output
    result = CliRunner().invoke(app, ["annotate", str(tmp_path / "notes.txt"), str(tmp_path / "out"), "--input-format", "nope"])
    assert result.exit_code == 1 and "input format must be auto or one of folder, text" in result.output, result.output
    assert not (tmp_path / "kb").exists() and not (tmp_path / "out").exists()


def test_a_suffix_that_names_a_registered_format_picks_it(tmp_path):
    for name in ("terms.toy", "corpus.toy.gz"):
        (tmp_path / name).write_text("", encoding="utf8")
    assert _guess_format(tmp_path / "terms.toy") == "toy" and guess_input_format(tmp_path / "corpus.toy.gz") == "toy"
    assert _guess_format(tmp_path / "x.obo") == "obo" and guess_input_format(tmp_path / "x.jsonl") == "jsonl"
    (tmp_path / "x.bioc").write_text("one line\n", encoding="utf8")
    assert guess_input_format(tmp_path / "x.bioc") == "text"  # a built-in's name is no suffix rule: as before


def test_a_registered_reader_builds_a_kb_and_a_registered_format_is_annotated(tmp_path, tiny_bert_path):
    (tmp_path / "terms.toy").write_text(TOY_ONTOLOGY, encoding="utf8")
    assert [r.id for r in read_concepts(tmp_path / "terms.toy", "toy")] == ["HP:1", "HP:2", "HP:3"]
    kb = tmp_path / "kb"
    result = CliRunner().invoke(app, ["build-kb", str(tmp_path / "terms.toy"), str(kb), "--format", "toy", "--encoder", str(tiny_bert_path)])
    assert result.exit_code == 0, result.output
    assert sorted(LinkingKB.from_disk(kb).kb.concept_ids) == ["HP:1", "HP:2", "HP:3"]
    (tmp_path / "corpus.txt").write_text(TOY_CORPUS, encoding="utf8")
    assert [(d.id, d.text, d.line) for d in iter_documents(tmp_path / "corpus.txt", "toy")] == [
        ("d1", "Fits and pyrexia.", 2), ("d2", "No cephalgia here.", 3)]
    out = tmp_path / "out"
    args = ["annotate", str(tmp_path / "corpus.txt"), str(out), "--kb", str(kb), "--encoder", str(tiny_bert_path),
            "--detector", "ruler", "--input-format", "toy"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "manifest.json").read_text())["run"]["input_format"] == "toy"
    rows = [json.loads(line) for p in sorted(out.glob("part-*.jsonl")) for line in p.read_text(encoding="utf8").splitlines()]
    assert [r["id"] for r in rows] == ["d1", "d2"]
    assert [(s["text"], s["cui"]) for s in rows[0]["spans"]] == [("Fits", "HP:1"), ("pyrexia", "HP:3")]
    assert [(s["text"], s["cui"]) for s in rows[1]["spans"]] == [("cephalgia", "HP:2")]
    assert list(read_documents(tmp_path / "corpus.txt", "toy")) == [("Fits and pyrexia.", {"line": 2, "id": "d1"}),
                                                                    ("No cephalgia here.", {"line": 3, "id": "d2"})]
    result = CliRunner().invoke(app, ["link", "--input", str(tmp_path / "corpus.txt"), "--input-format", "toy", "--kb", str(kb),
                                      "--encoder", str(tiny_bert_path), "--detector", "ruler"])
    assert result.exit_code == 0, result.output
    linked = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["id"], [(s["text"], s["cui"]) for s in r["spans"]]) for r in linked] == [
        ("d1", [("Fits", "HP:1"), ("pyrexia", "HP:3")]), ("d2", [("cephalgia", "HP:2")])]
