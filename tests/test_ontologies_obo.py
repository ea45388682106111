"""OBO reader: scopes, obsolete terms, xrefs, escapes, every bad-input path, round trip."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.obo import read_obo
from spacy_sapbert.records import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "ontologies"


def by_id(records):
    return {r.id: r for r in records}


def test_obo_reads_names_synonyms_xrefs_and_drops_obsolete():
    recs = by_id(read_obo(FIXTURES / "mini.obo"))
    assert set(recs) == {"HP:0001250", "GO:0008150"}  # obsolete HP:0000057 and the Typedef dropped
    seizure = recs["HP:0001250"]
    assert seizure.name == "Seizure"
    assert seizure.synonyms == ["Epileptic seizure", "Seizures", "Fits"]  # obsolete_synonym excluded
    assert seizure.xrefs == ["HP:0002279", "UMLS:C0036572", "MSH:D012640"]
    assert seizure.sources == [("HP", "HP:0001250")]
    assert seizure.parents == ["HP:0012638"]  # is_a, its "! name" comment dropped
    go = recs["GO:0008150"]
    assert go.name == "biological_process"  # trailing '! comment' removed
    assert go.types == ["biological_process"]
    assert go.synonyms == ["physiological process", 'a "quoted" name']  # legacy tags, escapes


@pytest.mark.parametrize(
    "scopes, expected",
    [
        (("EXACT",), ["Epileptic seizure", "Seizures"]),
        (("NARROW", "BROAD"), ["Convulsion", "Paroxysmal event"]),
        (("exact", "related", "narrow", "broad"), ["Epileptic seizure", "Seizures", "Fits", "Convulsion", "Paroxysmal event"]),
    ],
)
def test_obo_synonym_scopes_are_configurable(scopes, expected):
    assert by_id(read_obo(FIXTURES / "mini.obo", synonym_scopes=scopes))["HP:0001250"].synonyms == expected


def test_obo_unknown_scope_is_rejected():
    with pytest.raises(ValueError, match="unknown synonym scope"):
        list(read_obo(FIXTURES / "mini.obo", synonym_scopes=("EXACTLY",)))


@pytest.mark.parametrize(
    "fixture, line, problem",
    [
        ("bad_synonym.obo", 5, "bad synonym"),
        ("duplicate_id.obo", 5, "duplicate term id HP:1"),
        ("no_name.obo", 5, "term HP:2 has no name"),
        ("no_colon.obo", 4, "expected 'tag: value'"),
        ("latin1.obo", 3, "not valid UTF-8"),
    ],
)
def test_obo_bad_input_names_file_line_problem(fixture, line, problem):
    with pytest.raises(InputError) as info:
        list(read_obo(FIXTURES / fixture))
    assert info.value.line == line
    assert problem in info.value.problem
    assert str(info.value).startswith(f"{FIXTURES / fixture}:{line}: ")


def test_obo_lenient_skips_and_counts():
    summary = ReadSummary()
    recs = list(read_obo(FIXTURES / "bad_synonym.obo", lenient=True, summary=summary))
    assert [r.id for r in recs] == ["HP:1", "HP:3"]
    assert summary.skipped == 1 and summary.records == 2
    assert "bad synonym" in summary.problems[0]
    latin_summary = ReadSummary()
    latin = list(read_obo(FIXTURES / "latin1.obo", lenient=True, summary=latin_summary))
    # the undecodable name line is skipped, which leaves HP:1 without a name: skipped too
    assert [r.id for r in latin] == ["HP:2"] and latin_summary.skipped == 2
    assert "not valid UTF-8" in latin_summary.problems[0] and "has no name" in latin_summary.problems[1]


def test_obo_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.obo"):
        list(read_obo(tmp_path / "nope.obo"))


# ---------------------------------------------------------------- round trip
_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"), blacklist_characters="\x85"),
    min_size=1,
    max_size=30,
).filter(lambda s: s.strip() == s and s.strip())


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("!", "\\!").replace("{", "\\{")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.lists(st.tuples(_text, st.lists(_text, max_size=4)), min_size=1, max_size=6))
def test_obo_round_trip(tmp_path, terms):
    lines = ["format-version: 1.2", ""]
    for i, (name, syns) in enumerate(terms):
        lines += ["[Term]", f"id: X:{i:04d}", f"name: {_escape(name)}"]
        lines += [f'synonym: "{_escape(s)}" EXACT []' for s in syns]
        lines += [f"xref: UMLS:C{i:07d}", ""]
    path = tmp_path / "rt.obo"
    path.write_text("\n".join(lines), encoding="utf8")
    recs = list(read_obo(path, synonym_scopes=("EXACT",)))
    assert [r.id for r in recs] == [f"X:{i:04d}" for i in range(len(terms))]
    for rec, (name, syns) in zip(recs, terms):
        assert rec.name == name
        assert rec.synonyms == [s for s in dict.fromkeys(syns) if s != name]
        assert rec.xrefs == [f"UMLS:C{int(rec.id[2:]):07d}"]


def test_an_escaped_brace_is_text_not_a_trailing_modifier(tmp_path):
    """Found by the round trip: a name ending in ``\\{}`` lost its last characters as if they were ``{modifiers}``."""
    path = tmp_path / "brace.obo"
    path.write_text('[Term]\nid: X:1\nname: 0\\{}\nsynonym: "a" EXACT [] {source="x"}\n', encoding="utf8")
    (rec,) = read_obo(path, synonym_scopes=("EXACT",))
    assert (rec.name, rec.synonyms) == ("0{}", ["a"])
