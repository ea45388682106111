"""UMLS RRF reader on fixtures in the real column layout: filters, types, tradenames, bad input."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_sapbert.ontologies import read_concepts
from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.umls import MRCONSO_FIELDS, read_umls
from spacy_sapbert.records import InputError

META = Path(__file__).parent / "fixtures" / "ontologies" / "umls"


def by_id(records):
    return {r.id: r for r in records}


def test_umls_default_reads_english_unsuppressed_with_types_and_tradenames():
    recs = by_id(read_concepts(META, "umls"))
    assert set(recs) == {"C0011849", "C0020538", "C0027415", "C0700017"}  # the Spanish-only CUI has no English row
    dm = recs["C0011849"]
    assert dm.name == "Diabetes mellitus"  # the TS=P, STT=PF, ISPREF=Y atom, not the first row
    assert dm.synonyms == ["Diabetes Mellitus", "Mellitus, Diabetes", "Diabetes"]  # no FRE, no O/Y-suppressed rows
    assert dm.types == ["T047"]
    assert dm.sources == [("MSH", "D003920"), ("SNOMEDCT_US", "73211009")]
    assert recs["C0027415"].types == ["T109", "T121"]
    assert recs["C0027415"].synonyms == ["Aleve", "Aleve tablets"]  # has_tradename, both directions
    assert recs["C0700017"].synonyms == ["Aleve tablets", "Naproxen"]


def test_umls_filters():
    recs = by_id(read_umls(META / "MRCONSO.RRF", sabs=["MSH"], tradenames=False, semantic_types=False))
    assert set(recs) == {"C0011849", "C0020538", "C0027415"}
    assert recs["C0011849"].name == "Diabetes Mellitus" and recs["C0011849"].types == []
    only_mh = by_id(read_umls(META, ttys=["MH", "PT"], tradenames=False))
    assert only_mh["C0011849"].all_names == ["Diabetes mellitus", "Diabetes Mellitus"]
    no_et = by_id(read_umls(META, exclude_ttys=["ET", "PM"], tradenames=False))
    assert "Diabetes" not in no_et["C0011849"].all_names
    everything = by_id(read_umls(META, languages=None, exclude_suppress=(), tradenames=False))
    assert "C1234567" in everything
    assert {"Diabète", "Old diabetes term", "Suppressible diabetes"} <= set(everything["C0011849"].all_names)


def test_umls_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MRCONSO.RRF"):
        list(read_umls(tmp_path))


def _copy_meta(tmp_path, mrconso_text):
    folder = tmp_path / "META"
    shutil.copytree(META, folder)
    (folder / "MRCONSO.RRF").write_bytes(mrconso_text if isinstance(mrconso_text, bytes) else mrconso_text.encode("utf8"))
    return folder


GOOD = "C0000001|ENG|P|L1|PF|S1|Y|A1|||D1|MSH|MH|D1|First|0|N||\n"


@pytest.mark.parametrize(
    "second_row, line, problem",
    [
        ("C0000002|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2|Second|0|N|\n", 2, "expected 18 '|'-terminated fields"),
        ("C0000002|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2|Second|0|N||extra|\n", 2, "expected 18 '|'-terminated fields"),
        ("|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2|Second|0|N||\n", 2, "empty CUI"),
        ("C0000002|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2| |0|N||\n", 2, "empty STR for C0000002"),
        ("C0000000|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2|Earlier|0|N||\n", 2, "not sorted by CUI"),
    ],
)
def test_umls_bad_rows_name_file_line_problem(tmp_path, second_row, line, problem):
    folder = _copy_meta(tmp_path, GOOD + second_row)
    with pytest.raises(InputError) as info:
        list(read_umls(folder))
    assert info.value.path == str(folder / "MRCONSO.RRF") and info.value.line == line
    assert problem in info.value.problem


def test_umls_bad_encoding_and_lenient(tmp_path):
    bad = GOOD.encode() + "C0000002|ENG|P|L2|PF|S2|Y|A2|||D2|MSH|MH|D2|Caf\xe9|0|N||\n".encode("latin-1") + b"C0000003|short|\n"
    folder = _copy_meta(tmp_path, bad + GOOD.replace("C0000001", "C0000004").encode())
    with pytest.raises(InputError, match=r"MRCONSO.RRF:2: not valid UTF-8"):
        list(read_umls(folder))
    summary = ReadSummary()
    assert [r.id for r in read_umls(folder, lenient=True, summary=summary)] == ["C0000001", "C0000004"]
    assert summary.skipped == 2 and summary.records == 2


def test_unsorted_mrsty_is_an_error(tmp_path):
    folder = tmp_path / "META"
    shutil.copytree(META, folder)
    lines = (folder / "MRSTY.RRF").read_text().splitlines(keepends=True)
    (folder / "MRSTY.RRF").write_text("".join(reversed(lines)))
    with pytest.raises(InputError, match="MRSTY.RRF:2: not sorted by CUI"):
        list(read_umls(folder))


# ---------------------------------------------------------------- round trip
_str = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="|\x85"), min_size=1, max_size=15).filter(lambda s: s.strip() == s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(concepts=st.lists(st.lists(_str, min_size=1, max_size=5), min_size=1, max_size=6))
def test_umls_round_trip(tmp_path, concepts):
    rows = []
    for c, names in enumerate(concepts):
        for a, name in enumerate(names):
            fields = dict.fromkeys(MRCONSO_FIELDS, "")
            fields.update(CUI=f"C{c:07d}", LAT="ENG", TS="P" if a == 0 else "S", STT="PF", ISPREF="Y", AUI=f"A{c}{a}", SAB="TEST", TTY="PT", CODE=str(c), STR=name, SUPPRESS="N")
            rows.append("|".join(fields.values()) + "|\n")
    path = tmp_path / "MRCONSO.RRF"
    path.write_text("".join(rows), encoding="utf8")
    recs = list(read_umls(path))
    assert [r.id for r in recs] == [f"C{c:07d}" for c in range(len(concepts))]
    for rec, names in zip(recs, concepts):
        assert rec.all_names == list(dict.fromkeys(names))
        assert rec.sources == [("TEST", str(int(rec.id[1:])))]
