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


def test_link_reads_a_file_of_texts(tmp_path, tiny_bert_path):
    assert build(tmp_path, tiny_bert_path).exit_code == 0
    (tmp_path / "notes.txt").write_text("fever\nnothing here\nseizure and fever\n", encoding="utf8")
    out_file = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app, ["link", "--input", str(tmp_path / "notes.txt"), "--kb", str(tmp_path / "kb"), "-o", str(out_file)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [(r["line"], r["cui"]) for r in rows] == [(1, "HP:3"), (3, "HP:1"), (3, "HP:3")]


def test_bad_table_fails_with_file_and_line_and_writes_nothing(tmp_path, tiny_bert_path):
    bad = TABLE + "HP:4\t\tNo name here\n"
    result = build(tmp_path, tiny_bert_path, bad)
    assert result.exit_code != 0
    assert re.search(r"terms\.tsv:5", str(result.exception))
    assert not (tmp_path / "kb").exists()


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
