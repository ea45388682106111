"""``spacy project run preprocess-umls`` (issue 13, item 21): the private UMLS asset becomes the
paper's pre-training corpus; without it the command refuses in one line. Run through spaCy's
project runner on a copy of project.yml and the fixture META folder."""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from training.umls_concepts import write_umls_concepts

REPO = Path(__file__).resolve().parents[1]
META = REPO / "tests" / "fixtures" / "ontologies" / "umls"


def project_run(project: Path, monkeypatch) -> int:
    """``spacy project run preprocess-umls PROJECT`` (spaCy hands it to weasel's ``project_run``),
    in-process to save an interpreter start; the script's commands run as subprocesses."""
    from weasel.cli.run import project_run as run

    shutil.copy(REPO / "project.yml", project / "project.yml")
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the script runs python -m training.…
    try:
        run(project, "preprocess-umls")
    except SystemExit as e:  # a failing command exits with its return code
        return int(e.code or 0)
    return 0


def test_preprocess_umls_writes_the_concept_table_and_the_pairs(tmp_path, monkeypatch, capfd):
    shutil.copytree(META, tmp_path / "assets" / "umls" / "META")
    assert project_run(tmp_path, monkeypatch) == 0, capfd.readouterr()
    concepts = [json.loads(line) for line in (tmp_path / "corpus" / "umls.concepts.jsonl").read_text().splitlines()]
    assert [c["id"] for c in concepts] == ["C0011849", "C0020538", "C0027415", "C0700017"]  # English only
    diabetes = concepts[0]
    assert diabetes["name"] == "Diabetes mellitus" and "Old diabetes term" not in diabetes["synonyms"]  # obsolete atom left out
    pairs = [tuple(line.split("||")) for line in (tmp_path / "corpus" / "umls.pairs.txt").read_text().splitlines()]
    assert all(len(p) == 3 and p[1] == p[1].lower() and p[2] == p[2].lower() for p in pairs)  # lower-cased
    assert len(set(pairs)) == len(pairs) and all(p[1] != p[2] for p in pairs)  # "Diabetes Mellitus" = "Diabetes mellitus"
    assert max(Counter(p[0] for p in pairs).values()) <= 50
    assert set(p for p in pairs if p[0] == "C0011849") == {
        ("C0011849", "diabetes mellitus", "mellitus, diabetes"),
        ("C0011849", "diabetes mellitus", "diabetes"),
        ("C0011849", "mellitus, diabetes", "diabetes"),
    }
    assert ("C0027415", "naproxen", "aleve") in pairs  # tradenames, as in the paper


def test_preprocess_umls_without_the_asset_refuses_in_one_line(tmp_path, monkeypatch, capfd):
    assert project_run(tmp_path, monkeypatch) != 0
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "UMLS" in line]
    assert len(lines) == 1 and "assets/umls/META: no UMLS here" in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "corpus" / "umls.concepts.jsonl").exists()


def test_source_vocabularies_are_configurable(tmp_path):
    n = write_umls_concepts(META, tmp_path / "msh.jsonl", sabs=["MSH"], progress=False)
    ids = [json.loads(line)["id"] for line in (tmp_path / "msh.jsonl").read_text().splitlines()]
    assert n == 3 and ids == ["C0011849", "C0020538", "C0027415"]  # the RXNORM-only concept is out
