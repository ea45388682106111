"""The command line, run as a user runs it (in-process through typer's runner)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from spacy_sapbert.cli import app

ROOT = Path(__file__).resolve().parents[1]
TABLE = (
    "concept_id\tcanonical_name\taliases\ttypes\n"
    "HP:1\tSeizure\tConvulsion|Fits\tT184\n"
    "HP:2\tHeadache\tCephalgia\tT184\n"
    "HP:3\tFever\tPyrexia\tT184\n"
)


def build(tmp_path: Path, tiny_bert_path: Path, table: str = TABLE, *extra: str):
    (tmp_path / "terms.tsv").write_text(table, encoding="utf8")
    args = ["build-kb", str(tmp_path / "terms.tsv"), str(tmp_path / "kb"), "--encoder", str(tiny_bert_path), *extra]
    return CliRunner().invoke(app, args)


def test_build_kb_link_and_info(tmp_path, tiny_bert_path):
    result = build(tmp_path, tiny_bert_path)
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "kb.partial").exists()  # resumable work folder cleaned up on success
    runner = CliRunner()
    out = runner.invoke(app, ["link", "Fits and pyrexia; no cephalgia.", "--kb", str(tmp_path / "kb"), "--top-k", "2"])
    assert out.exit_code == 0, out.output
    spans = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [(s["text"], s["cui"], s["name"]) for s in spans] == [
        ("Fits", "HP:1", "Seizure"),
        ("pyrexia", "HP:3", "Fever"),
        ("cephalgia", "HP:2", "Headache"),
    ]
    first = spans[0]
    assert {"start_char", "end_char", "label", "score", "ambiguous", "candidates"} <= set(first)
    assert (first["start_char"], first["end_char"]) == (0, 4) and len(first["candidates"]) == 2
    info = runner.invoke(app, ["info", str(tmp_path / "kb")])
    meta = json.loads(info.stdout)[str(tmp_path / "kb")]
    assert meta["stats"]["concepts"] == 3 and meta["encoder"]["pooling"] == "cls"
    assert meta["index"]["neighbours"] == meta["index"]["n"] == 7  # a small flat index keeps a neighbour table of all its names
    assert meta["index_here"].startswith("flat: 7 vectors") and meta["index_here"].endswith("; searched here in fp32")
    assert build(tmp_path, tiny_bert_path, TABLE, "--no-neighbours").exit_code == 0
    assert "neighbours" not in json.loads((tmp_path / "kb" / "index.json").read_text())


def last_line(result) -> str:
    """What a command printed last (progress bars of model loading may come before), checked to be
    its only error line: nothing of a traceback."""
    assert "Traceback" not in result.output and "──" not in result.output
    return result.output.strip().splitlines()[-1]


def link_file(tmp_path, name, content, *extra):
    (tmp_path / name).write_text(content, encoding="utf8")
    out_file = tmp_path / "out.jsonl"
    args = ["link", "--input", str(tmp_path / name), "--kb", str(tmp_path / "kb"), "-o", str(out_file), *extra]
    result = CliRunner().invoke(app, args)
    rows = [json.loads(line) for line in out_file.read_text().splitlines()] if out_file.exists() else None
    return result, rows


def test_link_reads_a_file_of_texts_one_record_per_line(tmp_path, tiny_bert_path):
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    result, rows = link_file(tmp_path, "notes.txt", "fever\nnothing here\n\nseizure and fever\n")
    assert result.exit_code == 0, result.output
    assert [(r["line"], [s["cui"] for s in r["spans"]]) for r in rows] == [
        (1, ["HP:3"]), (2, []), (3, []), (4, ["HP:1", "HP:3"])  # lines without a mention keep their record
    ]
    assert "id" not in rows[0]


def test_link_input_with_document_ids(tmp_path, tiny_bert_path):
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    result, rows = link_file(tmp_path, "notes.tsv", "n1\tfever\nn2\tnothing\n")
    assert result.exit_code == 0, result.output
    assert [(r["line"], r["id"], len(r["spans"])) for r in rows] == [(1, "n1", 1), (2, "n2", 0)]
    jsonl = '{"id": 7, "text": "seizure"}\n\n{"text": "pyrexia"}\n'
    result, rows = link_file(tmp_path, "notes.jsonl", jsonl)
    assert result.exit_code == 0, result.output
    assert [(r["line"], r.get("id"), r["spans"][0]["cui"]) for r in rows] == [(1, 7, "HP:1"), (3, None, "HP:3")]


def test_link_input_folder_links_each_file_as_one_document(tmp_path, tiny_bert_path):
    """A note is a file of many lines (its section titles on lines of their own): a folder of ``.txt``
    files gives a record per file, as ``annotate`` reads it; a file stays a document per line."""
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "b.txt").write_text("FAMILY HISTORY:\nseizure\n\nfever\n", encoding="utf8")
    (notes / "a.txt").write_text("nothing here\n", encoding="utf8")
    (notes / "skipped.md").write_text("fever\n", encoding="utf8")
    out_file = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["link", "--input", str(notes), "--kb", str(tmp_path / "kb"), "-o", str(out_file)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [(r["id"], "line" in r, [s["cui"] for s in r["spans"]]) for r in rows] == [("a", False, []), ("b", False, ["HP:1", "HP:3"])]
    assert [s["section"] for s in rows[1]["spans"]] == ["family_history", "family_history"]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["link", "--input", str(empty), "--kb", str(tmp_path / "kb")])
    assert result.exit_code == 1 and last_line(result) == f"{empty}: empty input: no documents to link"


def test_link_input_errors_name_the_line_in_one_line(tmp_path, tiny_bert_path):
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    result, rows = link_file(tmp_path, "notes.jsonl", '{"text": "fever"}\n{"text": 3}\n')
    assert result.exit_code == 1 and rows is None  # nothing half-written
    assert last_line(result) == f"{tmp_path / 'notes.jsonl'}:2: " + 'expected a JSON object with a "text" string (and optionally an "id")'
    result, _ = link_file(tmp_path, "notes.txt", "a\tfever\nno tab\n", "--input-format", "tsv")
    assert result.exit_code == 1 and "notes.txt:2: expected 'id<TAB>text'" in last_line(result)
    result, rows = link_file(tmp_path, "empty.txt", "")
    assert result.exit_code == 1 and rows is None
    assert last_line(result) == f"{tmp_path / 'empty.txt'}: empty input: no documents to link"


def test_link_text_or_first_batch_without_mentions(tmp_path, tiny_bert_path):
    """The linker has nothing to link, so nothing may need its KB before it is loaded."""
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    kb = str(tmp_path / "kb")
    for detector in ("ruler", "span_finder"):
        out = CliRunner().invoke(app, ["link", "the patient is fine", "--kb", kb, "--detector", detector])
        assert out.exit_code == 0, out.output
        assert [line for line in out.stdout.splitlines() if line.startswith("{")] == []
    result, rows = link_file(tmp_path, "notes.txt", "the patient is fine\nfever\n", "--batch-size", "1", "--detector", "ruler")
    assert result.exit_code == 0, result.output
    assert [len(r["spans"]) for r in rows] == [0, 1]


def test_bad_table_fails_with_one_line_naming_file_and_line_and_writes_nothing(tmp_path, tiny_bert_path):
    from spacy_sapbert.records import InputError

    bad = TABLE + "HP:4\t\tNo name here\n"
    result = build(tmp_path, tiny_bert_path, bad)
    assert result.exit_code == 1
    assert re.fullmatch(r"/.*/terms\.tsv:5: expected 4 tab-separated columns.*", last_line(result)) and "Traceback" not in result.output
    assert not (tmp_path / "kb").exists()
    verbose = CliRunner().invoke(app, ["--verbose", "build-kb", str(tmp_path / "terms.tsv"), str(tmp_path / "kb"), "--encoder", str(tiny_bert_path)])
    assert isinstance(verbose.exception, InputError)  # re-raised: typer prints its traceback
    missing = CliRunner().invoke(app, ["link", "fever", "--kb", str(tmp_path / "no_kb")])
    assert missing.exit_code == 1 and last_line(missing).startswith(f"error: {tmp_path / 'no_kb'}")


def test_build_kb_priors_pick_the_concept_of_an_ambiguous_name(tmp_path, tiny_bert_path):
    table = TABLE + "HP:4\tMultiple sclerosis\tMSD\tT047\nHP:5\tMitral stenosis\tMSD\tT047\n"
    (tmp_path / "priors.tsv").write_text("# counts in our notes\nHP:5\t12\n", encoding="utf8")
    assert build(tmp_path, tiny_bert_path, table, "--priors", str(tmp_path / "priors.tsv")).exit_code == 0
    out = CliRunner().invoke(app, ["link", "MSD", "--kb", str(tmp_path / "kb"), "--detector", "ruler"])
    span = json.loads(out.stdout.splitlines()[-1])
    assert span["cui"] == "HP:5" and span["ambiguous"]  # without the prior, record order: HP:4
    (tmp_path / "priors.tsv").write_text("HP:5\t12\nHP:9\t1\n", encoding="utf8")
    unknown = build(tmp_path, tiny_bert_path, table, "--priors", str(tmp_path / "priors.tsv"))
    assert unknown.exit_code == 1 and re.fullmatch(r"/.*/priors\.tsv:2: 'HP:9' is not a concept of .*", last_line(unknown))
    (tmp_path / "priors.tsv").write_text("HP:5 12\n", encoding="utf8")
    bad = build(tmp_path, tiny_bert_path, table, "--priors", str(tmp_path / "priors.tsv"))
    assert bad.exit_code == 1 and re.fullmatch(r"/.*/priors\.tsv:1: expected 'concept_id<TAB>weight'.*", last_line(bad))


def test_build_kb_extra_names_add_a_users_shorthand_to_the_sources_concepts(tmp_path, tiny_bert_path):
    (tmp_path / "extra.tsv").write_text("# our notes' shorthand\nHP:3\tFvr\nHP:1\tSzr\n", encoding="utf8")
    assert build(tmp_path, tiny_bert_path, TABLE, "--extra-names", str(tmp_path / "extra.tsv")).exit_code == 0
    from spacy_sapbert.kb import ConceptKB

    kb = ConceptKB.from_disk(tmp_path / "kb")
    assert kb.names_of_concept("HP:3") == ["Fever", "Pyrexia", "Fvr"] and "Szr" in kb.names_of_concept("HP:1")
    out = CliRunner().invoke(app, ["link", "Fvr and cough.", "--kb", str(tmp_path / "kb"), "--detector", "ruler"])
    assert [json.loads(line)["cui"] for line in out.stdout.splitlines() if line.startswith("{")] == ["HP:3"]
    assert build(tmp_path, tiny_bert_path).exit_code == 0  # the same source without them: built again, without them
    assert ConceptKB.from_disk(tmp_path / "kb").names_of_concept("HP:3") == ["Fever", "Pyrexia"]
    (tmp_path / "extra.tsv").write_text("HP:3\tFvr\nHP:9\tZzz\n", encoding="utf8")
    (tmp_path / "kb2").mkdir()
    unknown = CliRunner().invoke(app, ["build-kb", str(tmp_path / "terms.tsv"), str(tmp_path / "kb2" / "kb"), "--encoder",
                                       str(tiny_bert_path), "--extra-names", str(tmp_path / "extra.tsv")])
    assert unknown.exit_code == 1 and re.fullmatch(r"/.*/extra\.tsv:2: 'HP:9' is not a concept of the source", last_line(unknown))
    assert not (tmp_path / "kb2" / "kb").exists()  # nothing written
    (tmp_path / "extra.tsv").write_text("HP:3 Fvr\n", encoding="utf8")
    bad = build(tmp_path, tiny_bert_path, TABLE, "--extra-names", str(tmp_path / "extra.tsv"))
    assert bad.exit_code == 1 and re.fullmatch(r"/.*/extra\.tsv:1: expected 'concept_id<TAB>name'.*", last_line(bad))


def test_duplicate_ids_need_an_explicit_choice(tmp_path, tiny_bert_path):
    dup = TABLE + "HP:3\tFever\tHigh temperature\tT184\n"
    assert build(tmp_path, tiny_bert_path, dup).exit_code != 0
    result = build(tmp_path, tiny_bert_path, dup, "--on-duplicate", "merge")
    assert result.exit_code == 0, result.output
    out = CliRunner().invoke(app, ["link", "high temperature", "--kb", str(tmp_path / "kb")])
    assert json.loads(out.stdout.splitlines()[0])["cui"] == "HP:3"


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    commands = [line for block in blocks[:2] for line in block.splitlines() if line and not line.startswith("#")]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith(("#", "set ", "cd "))]
    assert commands[1] == ci[-1]
    assert "python -m spacy_sapbert demo" in commands[0]


def test_evaluate_command_writes_the_documented_fields(tmp_path):
    out = tmp_path / "ncbi.json"
    args = ["evaluate", "--dataset", "ncbi-disease", "--system", "exact", "--dictionary", "ontology", "--output", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    fields = ("n_queries", "dictionary_size", "lenient_acc@1", "lenient_acc@5", "strict_acc@1", "strict_acc@5")
    assert all(k in data for k in fields + ("ambiguous_top1_share", "mentions_per_s"))
    assert data["n_queries"] == 960
    assert data["strict_acc@1"] <= data["lenient_acc@1"] <= data["lenient_acc@5"]


def test_link_reads_standard_input(tmp_path, tiny_bert_path):
    """``link -`` and a bare ``link`` with input piped in link all of it as one text; ``--input -``
    reads documents from it; an empty standard input is an error, as an empty file is."""
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    kb = ["--kb", str(tmp_path / "kb")]
    for args in (["link", "-", *kb], ["link", *kb]):
        result = CliRunner().invoke(app, args, input="The patient had a seizure.\nNo fever.\n")
        assert result.exit_code == 0, result.output
        assert [json.loads(line)["cui"] for line in result.output.splitlines()] == ["HP:1", "HP:3"]
    result = CliRunner().invoke(app, ["link", "--input", "-", *kb], input="fever\nnothing here\nseizure\n")
    assert result.exit_code == 0, result.output
    assert [(r["line"], [s["cui"] for s in r["spans"]]) for r in map(json.loads, result.output.splitlines())] == [
        (1, ["HP:3"]), (2, []), (3, ["HP:1"])]
    result = CliRunner().invoke(app, ["link", "-", *kb], input="  \n")
    assert result.exit_code == 1 and last_line(result) == "<stdin>: empty input: no text to link"
    result = CliRunner().invoke(app, ["link", "--input", str(tmp_path / "missing.txt"), *kb])
    assert result.exit_code == 1 and last_line(result) == f"{tmp_path / 'missing.txt'}: no such file or folder"
    # TEXT that names a file is still text, with a note on stderr saying how to link the file
    (tmp_path / "note.txt").write_text("The patient had a seizure.\n")
    result = CliRunner().invoke(app, ["link", str(tmp_path / "note.txt"), *kb])
    assert result.exit_code == 0 and [line[:5] for line in result.output.splitlines()] == ["note:"]  # no record
    assert f"to link the file, use --input {tmp_path / 'note.txt'}" in result.output
    result = CliRunner().invoke(app, ["link", "seizure", *kb])
    assert "note:" not in result.output and json.loads(result.output)["cui"] == "HP:1"


def test_link_of_documents_freezes_the_loaded_pipeline_and_of_one_text_does_not(tmp_path, tiny_bert_path, monkeypatch):
    """``link --input`` runs one pipeline over many documents until it exits: like ``annotate``'s workers it moves
    the loaded pipeline out of the garbage collector's way (``shards.freeze_loaded``); one text is not worth it."""
    from spacy_sapbert import shards

    assert build(tmp_path, tiny_bert_path).exit_code == 0
    frozen = []
    monkeypatch.setattr(shards, "freeze_loaded", lambda nlp: frozen.append(nlp.pipe_names))
    kb = ["--kb", str(tmp_path / "kb")]
    result = CliRunner().invoke(app, ["link", "The patient had a seizure.", *kb])
    assert result.exit_code == 0, result.output
    assert frozen == []
    result = CliRunner().invoke(app, ["link", "--input", "-", *kb], input="fever\nseizure\n")
    assert result.exit_code == 0, result.output
    assert len(frozen) == 1 and "sapbert_linker" in frozen[0]
    assert [[s["cui"] for s in json.loads(line)["spans"]] for line in result.output.splitlines()] == [["HP:3"], ["HP:1"]]


def test_freeze_loaded_runs_the_pipeline_once_and_freezes_what_is_alive():
    import gc

    import spacy

    from spacy_sapbert.shards import freeze_loaded

    nlp = spacy.blank("en")
    seen = []  # the texts the pipeline ran on: "" once, which loads every component's data
    nlp.tokenizer = (lambda make: (lambda text: seen.append(text) or make(text)))(nlp.tokenizer)
    gc.unfreeze()
    try:
        freeze_loaded(nlp)
        assert seen == [""] and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # the test process keeps collecting its own garbage


def test_printed_candidates_are_by_score_and_cui_is_the_linkers_choice(tmp_path, tiny_bert_path):
    """A hierarchy can make the linker choose a broader concept that scores a little lower
    (``LinkingKB.prefer_broader``): the printed list is by score, ``cui`` says what was chosen."""
    from spacy_sapbert.pipelines import build_pipeline
    from spacy_sapbert.shards import linkers_of, span_records

    assert build(tmp_path, tiny_bert_path).exit_code == 0
    nlp = build_pipeline(tmp_path / "kb", "ruler", encoder=tiny_bert_path, linker_config={"precision": "fp32"})
    doc = nlp("fever")
    (span,) = doc.ents
    span._.cui = "HP:2"  # as prefer_broader ranks: the chosen broader concept first, a subtype above it
    span._.cui_candidates = [("HP:2", "Headache", 0.95, False), ("HP:3", "Fever", 0.97, False), ("HP:1", "Seizure", 0.5, False)]
    (record,) = span_records(doc, linkers_of(nlp))
    assert [c["cui"] for c in record["candidates"]] == ["HP:3", "HP:2", "HP:1"]
    assert (record["cui"], record["score"]) == ("HP:2", 0.95)
    # only a KB name as written shows 1.0; a name spelt another way scores just below and stays below
    span._.cui_candidates = [("HP:3", "Fever", 0.99999994, False), ("HP:2", "Headache", 1.0, False), ("HP:1", "Seizure", 0.99996, False)]
    span._.cui = "HP:3"
    (record,) = span_records(doc, linkers_of(nlp))
    assert record["score"] == 0.9999 and [c["score"] for c in record["candidates"]] == [1.0, 0.9999, 0.9999]
