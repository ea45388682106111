"""The KB's on-disk tables: memory-mapped string tables (format 2), format-1 folders, scale."""
from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.strings import ListTable, StringTable

RECORDS = [
    R("D1", "Diabetes mellitus", ["diabetes", "DM"], types=["T047"], xrefs=["UMLS:C0011849", "MESH:D003920"]),
    R("D2", "Myocardial infarction", ["heart attack", "MI"]),
    R("D3", "Mitral insufficiency", ["MI", "mitral regurgitation"], types=["T047", "T190"]),
    R("X1", "Fièvre", ["pyrexie", "発熱", "лихорадка", "🤒 fever"], xrefs=["ÄÖ:1"]),
]


def _columns(kb: ConceptKB) -> dict:
    return {
        "concept_ids": list(kb.concept_ids),
        "concept_names": list(kb.concept_names),
        "concept_types": list(kb.concept_types),
        "concept_xrefs": list(kb.concept_xrefs),
        "names": list(kb.names),
        "display_names": list(kb.display_names),
        "name_offsets": np.asarray(kb.name_offsets).tolist(),
        "name_concepts": np.asarray(kb.name_concepts).tolist(),
        "lowercase": kb.lowercase,
    }


def _write_v1(kb: ConceptKB, path: Path) -> None:
    """A folder in the format-1 layout, as releases before format 2 wrote it."""
    path.mkdir(parents=True)
    with open(path / "concepts.jsonl", "w", encoding="utf8") as f:
        for cid, name, types, xrefs in zip(kb.concept_ids, kb.concept_names, kb.concept_types, kb.concept_xrefs):
            f.write(json.dumps({"id": cid, "name": name, "types": types, "xrefs": xrefs}, ensure_ascii=False) + "\n")
    (path / "names.txt").write_text("".join(n + "\n" for n in kb.names), encoding="utf8")
    (path / "display_names.txt").write_text("".join(n + "\n" for n in kb.display_names), encoding="utf8")
    np.save(path / "name_offsets.npy", kb.name_offsets)
    np.save(path / "name_concepts.npy", kb.name_concepts)
    meta = {"format": "spacy-sapbert-kb", "version": 1, "lowercase": True, "fingerprint": kb.fingerprint, **kb.stats()}
    (path / "kb.json").write_text(json.dumps(meta), encoding="utf8")


def test_round_trip_matches_the_in_memory_kb(tmp_path):
    kb = ConceptKB.from_records(RECORDS)
    kb.to_disk(tmp_path / "kb")
    assert json.loads((tmp_path / "kb" / "kb.json").read_text())["version"] == 2
    for mmap in (True, False):
        again = ConceptKB.from_disk(tmp_path / "kb", mmap=mmap)
        assert isinstance(again.names, StringTable) and isinstance(again.concept_xrefs, ListTable)
        assert _columns(again) == _columns(kb)
        assert again.fingerprint == kb.fingerprint and again.stats() == kb.stats()
        assert again.names == kb.names and kb.display_names == again.display_names
        assert again.concept_types[again.row_of_concept("D3")] == ["T047", "T190"]
        assert again.concept_xrefs[-1] == ["ÄÖ:1"] and again.concept_xrefs[1] == []
        assert again.row_of_name("発熱") == kb.row_of_name("発熱") is not None
        assert again.names_of_concept("X1") == kb.names_of_concept("X1")
        assert [r.to_dict() for r in again.records()] == [r.to_dict() for r in kb.records()]
        assert dict(zip(again.concept_ids, again.concept_xrefs)) == dict(zip(kb.concept_ids, kb.concept_xrefs))
    assert _columns(pickle.loads(pickle.dumps(again))) == _columns(kb)  # e.g. for spawned workers
    # saving a loaded KB copies its tables as they are
    ConceptKB.from_disk(tmp_path / "kb").to_disk(tmp_path / "copy")
    assert _columns(ConceptKB.from_disk(tmp_path / "copy")) == _columns(kb)


def test_parents_round_trip_and_give_the_ancestors(tmp_path):
    records = [R("A", "Heart murmur"), R("B", "Systolic heart murmur", parents=["A"]),
               R("C", "Late systolic murmur", parents=["B", "NOT-IN-KB"])]
    kb = ConceptKB.from_records(records)
    assert list(kb.concept_parents) == [[], ["A"], ["B"]]  # a parent outside the KB is dropped
    assert kb.ancestors("C") == ["B", "A"] and kb.ancestors("C", max_depth=1) == ["B"] and kb.ancestors("A") == []
    kb.to_disk(tmp_path / "kb")
    loaded = ConceptKB.from_disk(tmp_path / "kb")
    assert list(loaded.concept_parents) == [[], ["A"], ["B"]] and loaded.ancestors("C") == ["B", "A"]
    assert loaded.fingerprint == kb.fingerprint != ConceptKB.from_records([R(r.id, r.name) for r in records]).fingerprint
    assert [r.parents for r in loaded.records()] == [[], ["A"], ["B"]]
    flat = ConceptKB.from_records([R("A", "Heart murmur")])
    assert flat.concept_parents is None and flat.ancestors("A") == []
    flat.to_disk(tmp_path / "kb")  # saved over the folder: the hierarchy's files go
    assert ConceptKB.from_disk(tmp_path / "kb").concept_parents is None
    assert not list((tmp_path / "kb").glob("concept_parents*"))


def test_format_1_folders_still_load_and_save_as_format_2(tmp_path):
    kb = ConceptKB.from_records(RECORDS)
    _write_v1(kb, tmp_path / "v1")
    old = ConceptKB.from_disk(tmp_path / "v1")
    assert old.fingerprint == kb.fingerprint == json.loads((tmp_path / "v1" / "kb.json").read_text())["fingerprint"]
    assert _columns(old) == _columns(kb)
    old.to_disk(tmp_path / "v1")  # upgrades in place; the old text files go
    assert not (tmp_path / "v1" / "names.txt").exists() and not (tmp_path / "v1" / "concepts.jsonl").exists()
    assert ConceptKB.from_disk(tmp_path / "v1").fingerprint == kb.fingerprint


def test_string_table_indexing_slicing_and_iteration():
    strings = ["", "a", "héllo wörld", "発熱", "🤒", "x\x1fy", "", "last"]  # a separator inside a string too
    t = StringTable.from_strings(strings)
    assert len(t) == len(strings) and list(t) == strings and t == strings
    assert [t[i] for i in range(-len(strings), len(strings))] == strings + strings
    for s in (slice(None), slice(2, 5), slice(None, None, 3), slice(-3, None), slice(None, None, -2), slice(5, 2), slice(1, 100, 7)):
        assert t[s] == strings[s], s
    assert t[np.int32(3)] == "発熱" and "🤒" in t and t.index("last") == 7
    with pytest.raises(IndexError):
        t[len(strings)]
    with pytest.raises(IndexError):
        t[-len(strings) - 1]
    assert bytes(t.joined_bytes()) == "\x1f".join(strings).encode()
    empty = StringTable.from_strings([])
    assert len(empty) == 0 and list(empty) == [] and empty[:] == [] and bytes(empty.joined_bytes()) == b""


def test_iteration_crosses_chunks(monkeypatch):
    import spacy_sapbert.strings as strings_module

    monkeypatch.setattr(strings_module, "_CHUNK", 3)
    strings = [f"n{i}é" if i % 4 else f"s\x1f{i}" for i in range(20)]
    t = StringTable.from_strings(strings)
    assert list(t) == strings and t[4:17] == strings[4:17]
    rows = [[], ["a"], ["", "b\x1fc"], [], [], ["é", "f", "g"], ["h"], []]
    lt = ListTable.from_lists(rows)
    assert list(lt) == rows and lt == rows and lt[1:7] == rows[1:7] and lt[::-3] == rows[::-3]
    assert [lt[i] for i in range(-len(rows), len(rows))] == rows + rows
    assert list(ListTable.from_lists([])) == []


def test_find_hashes_the_table_as_one_string_is_hashed_and_answers_every_row(monkeypatch):
    import spacy_sapbert.strings as strings_module

    monkeypatch.setattr(strings_module, "_HASH_CHUNK", 3)  # strings hashed across several chunks
    strings = ["", "a", "héllo wörld", "発熱", "🤒 fever", "x\x1fy", "b", "ab", "ba", "last", ""][:-1] + ["z", ""]
    t = StringTable.from_strings(strings)
    hashes = strings_module.table_hashes(t._blob, t._starts)
    assert [int(h) for h in hashes] == [strings_module.string_hash(s.encode("utf8")) for s in strings]
    assert len(set(hashes.tolist())) == len(set(strings))  # "ab" / "ba", "" / "a": order and length count
    assert [t.find(s) for s in strings] == [strings.index(s) for s in strings]
    assert t.find("abc") is None and t.find("a ") is None
    assert StringTable.from_strings([]).find("") is None


def test_a_large_kb_looks_names_up_by_hash_without_a_dict(tmp_path, monkeypatch):
    import spacy_sapbert.kb as kb_module

    ConceptKB.from_records(RECORDS).to_disk(tmp_path / "kb")
    small, large = ConceptKB.from_disk(tmp_path / "kb"), ConceptKB.from_disk(tmp_path / "kb")
    queries = list(small.names) + ["Heart  Attack", "FIÈVRE", "no such name", ""]
    expected = [small.row_of_name(q) for q in queries]  # through a dict
    assert small._row_of_name is not None and expected[: small.n_names] == list(range(small.n_names)) and expected[-4:] == [list(small.names).index("heart attack"), list(small.names).index("fièvre"), None, None]
    monkeypatch.setattr(kb_module, "DICT_LOOKUP_NAMES", 3)  # the loaded KB has more names than this
    assert [large.row_of_name(q) for q in queries] == expected
    assert large._row_of_name is None


def test_empty_kb_round_trips(tmp_path):
    kb = ConceptKB.from_records([])
    kb.to_disk(tmp_path / "kb")
    again = ConceptKB.from_disk(tmp_path / "kb")
    assert len(again) == 0 and again.n_names == 0 and list(again.names) == [] and again.names[::2] == []
    assert again.fingerprint == kb.fingerprint and again.stats() == kb.stats()


def test_damaged_files_are_errors_naming_the_file(tmp_path):
    ConceptKB.from_records(RECORDS).to_disk(tmp_path / "kb")
    ConceptKB.from_records(RECORDS[:2]).to_disk(tmp_path / "other")
    blob = tmp_path / "kb" / "names.utf8.npy"
    good = blob.read_bytes()
    blob.write_bytes(good[:-5])  # truncated
    with pytest.raises(ValueError, match="names.utf8.npy"):
        ConceptKB.from_disk(tmp_path / "kb")
    blob.write_bytes((tmp_path / "other" / "names.utf8.npy").read_bytes())  # from another KB
    with pytest.raises(ValueError, match="names.utf8.npy / names.starts.npy"):
        ConceptKB.from_disk(tmp_path / "kb")
    blob.write_bytes(good)
    rows = tmp_path / "kb" / "concept_xrefs.rows.npy"
    rows.write_bytes((tmp_path / "other" / "concept_xrefs.rows.npy").read_bytes())  # rows of another KB
    with pytest.raises(ValueError, match="concept_xrefs.rows.npy / concept_xrefs.utf8.npy / concept_xrefs.starts.npy: the rows"):
        ConceptKB.from_disk(tmp_path / "kb")
    for name in ("concept_xrefs.utf8.npy", "concept_xrefs.starts.npy"):
        (tmp_path / "kb" / name).write_bytes((tmp_path / "other" / name).read_bytes())
    with pytest.raises(ValueError, match="concept_xrefs.utf8.npy / concept_xrefs.starts.npy / concept_xrefs.rows.npy has 2 rows"):
        ConceptKB.from_disk(tmp_path / "kb")


@pytest.mark.parametrize("bad", ["C1\x1fC2", "C1\nC2", "C1\rC2"])
def test_ids_with_separators_are_refused(bad):
    with pytest.raises(ValueError, match=r"concept record 2 .*C1"):
        ConceptKB.from_records([R("D1", "asthma"), R(bad, "fever")])


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096  # resident pages (statm counts in pages)


@pytest.mark.slow
def test_a_umls_sized_kb_loads_in_seconds(tmp_path):
    n_names, n_concepts = 2_000_000, 800_000
    names = [f"name {i} of concept {i % n_concepts}" for i in range(n_names)]
    offsets = np.arange(n_names + 1, dtype=np.int64)
    kb = ConceptKB(
        [f"C{c:07d}" for c in range(n_concepts)],
        [f"Concept {c}" for c in range(n_concepts)],
        [["T047"] if c % 3 == 0 else [] for c in range(n_concepts)],
        names,
        [n.title() for n in names],
        offsets,
        (np.arange(n_names) % n_concepts).astype(np.int32),
        concept_xrefs=[[f"MESH:D{c}"] if c % 2 else [] for c in range(n_concepts)],
    )
    expected = kb.fingerprint
    t0 = time.perf_counter()
    kb.to_disk(tmp_path / "kb")
    write_s = time.perf_counter() - t0
    del kb, names

    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    again = ConceptKB.from_disk(tmp_path / "kb")
    load_s = time.perf_counter() - t0
    load_mb = (_rss_bytes() - rss0) / 2**20
    t0 = time.perf_counter()
    fingerprint = again.fingerprint
    hash_s = time.perf_counter() - t0
    hash_mb = (_rss_bytes() - rss0) / 2**20
    t0 = time.perf_counter()
    lookups = [again.names[i] for i in range(0, n_names, 997)] + [again.concept_xrefs[c] for c in range(1, n_concepts, 997)]
    sample = again.names[::7][:3000]
    lookup_s = time.perf_counter() - t0
    print(
        f"\n{n_names} names / {n_concepts} concepts: to_disk {write_s:.2f}s; from_disk {load_s * 1000:.1f}ms "
        f"+{load_mb:.1f}MB RSS; fingerprint {hash_s:.2f}s (RSS then +{hash_mb:.1f}MB, file-backed pages); "
        f"{len(lookups)} lookups + a 3000-name slice {lookup_s * 1000:.1f}ms"
    )
    assert fingerprint == expected
    assert again.names[-1] == f"name {n_names - 1} of concept {(n_names - 1) % n_concepts}"
    assert sample[1] == "name 7 of concept 7" and len(sample) == 3000
    assert again.concept_xrefs[1] == ["MESH:D1"] and again.concept_types[1] == []
    assert load_s < 3.0 and load_mb < 300


def test_a_large_kb_saves_its_name_lookup_and_a_mismatched_one_is_refused(tmp_path, monkeypatch):
    import spacy_sapbert.kb as kb_module
    from spacy_sapbert.strings import lookup_files

    kb = ConceptKB.from_records(RECORDS)
    kb.to_disk(tmp_path / "small")
    assert not any(f.exists() for f in lookup_files(tmp_path / "small" / "names"))  # a dict answers a small KB
    monkeypatch.setattr(kb_module, "DICT_LOOKUP_NAMES", 3)
    kb.to_disk(tmp_path / "large")
    hashes, rows = lookup_files(tmp_path / "large" / "names")
    assert hashes.is_file() and rows.is_file()
    loaded = ConceptKB.from_disk(tmp_path / "large")
    assert loaded.names._sorted_hashes is not None  # read from the files, not computed
    assert [loaded.row_of_name(n) for n in kb.names] == list(range(kb.n_names))
    again = pickle.loads(pickle.dumps(loaded))  # an n_process worker maps the same files
    assert again.row_of_name(kb.names[-1]) == kb.n_names - 1 and again.names._lookup_stamps is not None
    np.save(rows, np.load(rows)[::-1].copy())  # rows of another build
    with pytest.raises(ValueError, match="names.hashes.npy: the name lookup does not belong"):
        ConceptKB.from_disk(tmp_path / "large")
    monkeypatch.setattr(kb_module, "DICT_LOOKUP_NAMES", 1_000_000)
    kb.to_disk(tmp_path / "large")  # saved again below the limit: the stale lookup goes
    assert not hashes.exists() and ConceptKB.from_disk(tmp_path / "large").row_of_name("heart attack") is not None
