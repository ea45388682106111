"""MEDIC dictionary (the real 2012 file and bad lines) and CTD's TSV layouts."""
from __future__ import annotations

from pathlib import Path

import pytest

from spacy_sapbert.ontologies import read_concepts
from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.medic import read_medic_dictionary, read_medic_tsv
from spacy_sapbert.records import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "ontologies"
MEDIC_2012 = Path("/work/shared/data/medic/medic_06Jul2012.txt")


@pytest.mark.skipif(not MEDIC_2012.exists(), reason="shared benchmark data not present")
def test_real_medic_dictionary_counts_and_composite_ids():
    recs = list(read_concepts(MEDIC_2012, "medic"))
    assert len(recs) == 11915  # the count the data README gives
    assert len({r.id for r in recs}) == 11915
    composite = {r.id: r for r in recs}["MESH:C567755"]
    assert composite.xrefs == ["OMIM:613097"] and composite.name == "Tooth Agenesis, Selective, 6"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("D1||Fever\nD2|Pain\n", "no '||' separator"),
        ("D1||Fever\n||Pain\n", "empty concept id"),
        ("D1||Fever\nD2|| | \n", "concept MESH:D2 has no name"),
    ],
)
def test_medic_dictionary_bad_lines(tmp_path, text, problem):
    path = tmp_path / "dict.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=rf"dict.txt:2: {problem}"):
        list(read_medic_dictionary(path))
    summary = ReadSummary()
    assert [r.id for r in read_medic_dictionary(path, lenient=True, summary=summary)] == ["MESH:D1"]
    assert summary.skipped == 1


def test_ctd_diseases_tsv():
    recs = {r.id: r for r in read_concepts(FIXTURES / "CTD_diseases_mini.tsv", "medic-tsv")}
    assert list(recs) == ["MESH:D003920", "OMIM:613097"]
    dm = recs["MESH:D003920"]
    assert dm.synonyms == ["Diabetes", "Diabetes mellitus, NOS"]
    assert dm.xrefs == ["DO:DOID:9351"] and dm.types == ["C18.452.394.750", "C19.246"]
    assert recs["OMIM:613097"].synonyms == ["STHAG6"]


def test_ctd_chemicals_tsv():
    recs = {r.id: r for r in read_medic_tsv(FIXTURES / "CTD_chemicals_mini.tsv")}
    assert recs["MESH:D000082"].synonyms == ["Paracetamol", "Tylenol"]
    assert recs["MESH:D000082"].xrefs == ["CAS:103-90-2"]
    assert recs["MESH:C000002"].synonyms == [] and recs["MESH:C000002"].xrefs == []


@pytest.mark.parametrize(
    "row, problem",
    [
        ("Fever\tMESH:D1\t\t\t\t\t\t\n", "expected 9 tab-separated CTD columns, got 8"),
        ("\tMESH:D2\t\t\t\t\t\t\t\n", "concept MESH:D2 has an empty name"),
        ("Fever\t\t\t\t\t\t\t\t\n", "empty concept id"),
        ("Again\tMESH:D003920\t\t\t\t\t\t\t\n", "duplicate concept id MESH:D003920"),
    ],
)
def test_ctd_tsv_bad_rows(tmp_path, row, problem):
    path = tmp_path / "ctd.tsv"
    path.write_text((FIXTURES / "CTD_diseases_mini.tsv").read_text() + row)
    with pytest.raises(InputError) as info:
        list(read_medic_tsv(path))
    assert info.value.line == 7 and problem in info.value.problem
