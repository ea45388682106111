"""Pair corpora: §3.1 pre-training pairs (all pairs, ≤50 seeded), fine-tuning pairs, files and CLI."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from spacy_sapbert.records import ConceptRecord, InputError
from training.pairs import (
    PairStats,
    app,
    concept_names,
    finetuning_pairs,
    pair_at,
    pretraining_pairs,
    read_mentions,
    write_pairs,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ontologies"


@given(n=st.integers(2, 40), data=st.data())
def test_pair_at_matches_itertools_order(n, data):
    k = data.draw(st.integers(0, n * (n - 1) // 2 - 1))
    assert pair_at(k, n) == list(itertools.combinations(range(n), 2))[k]


def test_names_are_normalised_and_deduplicated():
    rec = ConceptRecord("C1", "Heart  Attack", ["heart attack", "MI", "Ｍｉ", ""])
    assert concept_names(rec) == ["heart attack", "mi"]
    assert concept_names(rec, lowercase=False) == ["Heart Attack", "heart attack", "MI", "Mi"]


def test_all_pairs_of_small_concepts_and_stats():
    records = [ConceptRecord("C1", "A", ["B", "C", "b"]), ConceptRecord("C2", "Solo"), ConceptRecord("C3", "x", ["y"])]
    stats = PairStats()
    pairs = list(pretraining_pairs(records, stats=stats))
    assert pairs == [("C1", "a", "b"), ("C1", "a", "c"), ("C1", "b", "c"), ("C3", "x", "y")]
    assert (stats.concepts, stats.names, stats.pairs, stats.concepts_with_one_name, stats.concepts_trimmed) == (3, 6, 4, 1, 0)


def test_large_concepts_trimmed_to_max_pairs_deterministically():
    big = ConceptRecord("C9", "n0", [f"n{i}" for i in range(1, 30)])  # 30 names, 435 pairs
    other = ConceptRecord("C8", "m0", [f"m{i}" for i in range(1, 12)])  # 66 pairs
    stats = PairStats()
    first = list(pretraining_pairs([big, other], max_pairs=50, seed=7, stats=stats))
    assert len(first) == 100 and stats.concepts_trimmed == 2
    big_pairs = [p for p in first if p[0] == "C9"]
    assert len(set(big_pairs)) == 50
    all_big = set(itertools.combinations([f"n{i}" for i in range(30)], 2))
    assert {(a, b) for _, a, b in big_pairs} <= all_big
    # the same seed gives the same pairs whatever the order of concepts; another seed differs
    assert list(pretraining_pairs([other, big], max_pairs=50, seed=7)) == first[50:] + first[:50]
    assert [p for p in pretraining_pairs([big], max_pairs=50, seed=8)] != big_pairs


def test_trimming_is_roughly_uniform():
    names = [f"n{i}" for i in range(12)]  # 66 pairs, keep 10
    counts = {p: 0 for p in itertools.combinations(names, 2)}
    for seed in range(400):
        for _, a, b in pretraining_pairs([ConceptRecord("C", names[0], names[1:])], max_pairs=10, seed=seed):
            counts[(a, b)] += 1
    expected = 400 * 10 / 66
    assert min(counts.values()) > expected * 0.5 and max(counts.values()) < expected * 1.5


def test_separator_in_names_or_ids():
    stats = PairStats()
    assert list(pretraining_pairs([ConceptRecord("C1", "a||b", ["c", "d"])], stats=stats)) == [("C1", "c", "d")]
    assert stats.names_dropped_with_separator == 1
    with pytest.raises(ValueError, match="cannot be written as a pair line"):
        list(pretraining_pairs([ConceptRecord("C||1", "a", ["b"])]))
    with pytest.raises(ValueError, match="max_pairs"):
        list(pretraining_pairs([], max_pairs=0))


def test_finetuning_pairs_with_composites_xrefs_and_unresolved():
    dictionary = [
        ConceptRecord("MESH:D1", "Heart attack", ["Myocardial infarction", "MI"]),
        ConceptRecord("MESH:C2", "Tooth agenesis", ["STHAG6"], xrefs=["OMIM:613097"]),
    ]
    mentions = [
        ("heart attacks", ["MESH:D1"]),
        ("Heart attacks", ["MESH:D1"]),  # same after normalisation: no repeated pairs
        ("MI", ["MESH:D1"]),  # equal to a dictionary name: that pair is skipped
        ("agenesis or infarction", ["MESH:D1", "OMIM:613097"]),  # composite, second id through an xref
        ("unknown thing", ["MESH:D999"]),
        ("not linkable", []),
    ]
    stats = PairStats()
    pairs = list(finetuning_pairs(mentions, dictionary, stats=stats))
    assert pairs == [
        ("MESH:D1", "heart attacks", "heart attack"),
        ("MESH:D1", "heart attacks", "myocardial infarction"),
        ("MESH:D1", "heart attacks", "mi"),
        ("MESH:D1", "mi", "heart attack"),
        ("MESH:D1", "mi", "myocardial infarction"),
        ("MESH:D1", "agenesis or infarction", "heart attack"),
        ("MESH:D1", "agenesis or infarction", "myocardial infarction"),
        ("MESH:D1", "agenesis or infarction", "mi"),
        ("MESH:C2", "agenesis or infarction", "tooth agenesis"),
        ("MESH:C2", "agenesis or infarction", "sthag6"),
    ]
    assert (stats.mentions, stats.mentions_unresolved, stats.pairs) == (6, 2, 10)
    assert len(list(finetuning_pairs(mentions, dictionary, use_xrefs=False))) == 8


def test_write_pairs_format_and_atomicity(tmp_path):
    path = tmp_path / "pairs.txt"
    assert write_pairs([("C1", "a", "b"), ("C2", "c", "d")], path) == 2
    assert path.read_text() == "C1||a||b\nC2||c||d\n"

    def broken():
        yield ("C3", "e", "f")
        raise RuntimeError("crash mid-way")

    with pytest.raises(RuntimeError):
        write_pairs(broken(), path)
    assert path.read_text() == "C1||a||b\nC2||c||d\n"  # the old file survives
    assert [p.name for p in tmp_path.iterdir()] == ["pairs.txt"]


def test_read_mentions_formats(tmp_path):
    concept = tmp_path / "train.concept"
    concept.write_text("123||0|5||Disease||heart attack||D009203\n123||9|20||Disease||tooth agenesis||D1|613097\n123||9|20||Chemical||x||-1\n")
    assert list(read_mentions(concept)) == [
        ("heart attack", ("MESH:D009203",)),
        ("tooth agenesis", ("MESH:D1", "OMIM:613097")),
        ("x", ()),
    ]
    tsv = tmp_path / "m.tsv"
    tsv.write_text("fever\tMESH:D005334+OMIM:1\nbad line\n")
    with pytest.raises(InputError, match=r"m.tsv:2: expected 'mention<TAB>ID'"):
        list(read_mentions(tsv, "tsv"))


def test_cli_pretrain_and_finetune(tmp_path):
    runner = CliRunner()
    out = tmp_path / "pairs.txt"
    result = runner.invoke(app, ["pretrain", str(FIXTURES / "mini.obo"), str(out), "--format", "obo", "--max-pairs", "2"])
    assert result.exit_code == 0, result.output
    lines = [line.split("||") for line in out.read_text().splitlines()]
    # Seizure has 4 names (6 pairs), biological_process 3 (3 pairs): both trimmed to 2
    assert [cid for cid, _, _ in lines] == ["HP:0001250"] * 2 + ["GO:0008150"] * 2
    seizure_names = ["seizure", "epileptic seizure", "seizures", "fits"]
    assert all((a, b) in itertools.combinations(seizure_names, 2) for _, a, b in lines[:2])
    stats = json.loads((tmp_path / "pairs.txt.stats.json").read_text())
    assert (stats["concepts"], stats["names"], stats["pairs"], stats["concepts_trimmed"]) == (2, 7, 4, 2)

    mentions = tmp_path / "train.tsv"
    mentions.write_text("fits\tHP:0001250\n")
    out2 = tmp_path / "ft.txt"
    result = runner.invoke(app, ["finetune", str(mentions), str(FIXTURES / "mini.obo"), str(out2), "--mentions-format", "tsv", "--dictionary-format", "obo", "--stats", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert out2.read_text().splitlines() == ["HP:0001250||fits||seizure", "HP:0001250||fits||epileptic seizure", "HP:0001250||fits||seizures"]
    assert json.loads((tmp_path / "s.json").read_text())["mentions"] == 1


def test_finetuning_mentions_from_a_pubtator_corpus():
    from training.pairs import read_mentions

    path = Path(__file__).parents[1] / "assets" / "benchmarks" / "ncbi-disease" / "NCBItestset_corpus.txt"
    mentions = list(read_mentions(path, "pubtator"))
    assert len(mentions) == 960
    assert all(ids and all(i.startswith(("MESH:", "OMIM:")) for i in ids) for _, ids in mentions)


def test_cli_contexts_writes_mentions_in_context_of_unambiguous_names(tmp_path):
    """``pairs contexts``: each name of one concept found verbatim in the texts gives its sentence, the
    mention in brackets (the linker's context rule); the trainer's reader groups them by concept."""
    from training.data import read_context_file

    texts = tmp_path / "texts.txt"
    texts.write_text("The child had a seizure at night. Today an epileptic seizure again.\n"
                     "Another seizure was seen. Nothing else happened.\n", encoding="utf8")
    out = tmp_path / "contexts.jsonl"
    result = CliRunner().invoke(app, ["contexts", str(FIXTURES / "mini.obo"), str(texts), "-o", str(out), "--format", "obo",
                                      "--texts-format", "text"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text(encoding="utf8").splitlines()]
    assert {"concept": "HP:0001250", "text": "The child had a [seizure] at night."} in records
    assert {"concept": "HP:0001250", "text": "Today an [epileptic seizure] again."} in records
    contexts = read_context_file(out)
    assert contexts.concepts == ["HP:0001250"] and len(contexts.texts[0]) == 3

    empty = tmp_path / "none.txt"
    empty.write_text("Nothing to see here.\n", encoding="utf8")
    result = CliRunner().invoke(app, ["contexts", str(FIXTURES / "mini.obo"), str(empty), "-o", str(tmp_path / "x.jsonl"),
                                      "--format", "obo", "--texts-format", "text"])
    assert result.exit_code != 0 and not (tmp_path / "x.jsonl").exists()  # an error, and no empty file
